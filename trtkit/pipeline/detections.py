"""Verifying a detector: its variants' detections against FP32's, and against the boxes when the data has them.

``DetectionComparison`` is the detection task's streamed comparison (``verify.Comparison`` per image,
``dense.DenseComparison`` per pixel): fed each batch's ``decoded`` outputs (the variant's and FP32's, ``[N, A,
4 + C]``) and the batch's ``BoxRecord`` per image (or None), it selects each image's detections with the host
post-processing (``trtkit.detect.select``, the reference every backend is compared with) and keeps:

- agreement with FP32's detections (``detect.agreement``): matched F1 at IoU 0.5 over the detections scoring
  at least ``AGREEMENT_SCORE`` (what an application shows), the mean IoU of the matched pairs and the mean score
  shift (INT8's squeezed confidences show there and nowhere else);
- with boxes: COCO mAP@[.5:.95] and mAP@.5 of the variant and of FP32 (``detect.metrics``, a maintained
  evaluator), from detections at the head's own low score threshold, as COCO evaluation requires, mapped back to
  each image's original pixels (``data.boxes.geometry``), where its boxes are.

The record keeps the generic names the gate, the table and the precision search read: ``top1_agreement`` is
the F1 agreement, ``accuracy`` / ``reference_accuracy`` the mAPs. A split on which FP32 detects nothing above
``AGREEMENT_SCORE`` has no agreement (None), so its gate fails: a check with nothing to check does not pass.

Memory: the agreement keeps counts; mAP keeps each image's best 100 detections (COCO's maxDets) and its
boxes until the end, a few kB per image (the evaluator needs every image at once).
"""

import numpy as np

from trtkit.detect.params import DISPLAY_SCORE as AGREEMENT_SCORE  # detections an application shows
from trtkit.errors import InputError, VerificationFailed

MAP_DETECTIONS = 100  # per image, as COCO's evaluation counts them (maxDets)


class DetectionComparison(object):
    """The streamed comparison of a detector (module docstring). ``head``: the ``detect.params.DetectionHead``;
    ``contract``: the model's ``InputContract`` (boxes go back to the images' pixels by it); ``labels``: per
    model class index, the data's class index it is (-1: not a class of the data), or None without boxes."""

    def __init__(self, head, contract, labels=None, kind=None):
        from trtkit.detect.agreement import DetectionAgreement
        self.head = head
        self.contract = contract
        self.labels = labels
        self.kind = kind
        self.images = 0
        self.agreement = DetectionAgreement()
        self.variant_map = self.reference_map = None
        if labels is not None:
            from trtkit.detect.metrics import CocoMap
            self.variant_map, self.reference_map = CocoMap(), CocoMap()
        self.mapped_images = 0
        self.max_diff = 0.0
        self.sum_diff = 0.0
        self.elements = 0

    def update(self, outputs, reference, records=None):
        outputs = np.asarray(outputs, dtype=np.float32)
        reference = np.asarray(reference, dtype=np.float32)
        if outputs.shape != reference.shape:
            raise VerificationFailed("the variant's output shape {} differs from the FP32 reference's {}".format(
                outputs.shape, reference.shape), hint="the artifact was not built from this model: rebuild it")
        diff = np.abs(outputs - reference)
        if diff.size:
            self.max_diff = max(self.max_diff, float(diff.max()))
            self.sum_diff += float(diff.sum(dtype=np.float64))
            self.elements += int(diff.size)
        self.update_detections(self.select(outputs), self.select(reference), records)

    def select(self, decoded):
        """Each image's detections of a ``decoded`` batch, by the head (the host reference, ``detect.select``)."""
        from trtkit.detect.select import select_decoded
        return select_decoded(decoded, self.head, self.contract.height, self.contract.width)

    def update_detections(self, got, expected, records=None):
        """Add images whose detections are already selected: the variant's and FP32's, one per image."""
        for position, (variant, fp32) in enumerate(zip(got, expected)):
            self.agreement.update(variant.above(AGREEMENT_SCORE), fp32.above(AGREEMENT_SCORE))
            if self.labels is not None and records is not None:
                self._score(records[position], variant, fp32)
        self.images += len(got)

    def _score(self, record, variant, fp32):
        """Add one image to both mAPs: detections in the data's classes, in the image's pixels."""
        from trtkit.data.boxes.geometry import boxes_to_original
        from trtkit.data.preprocess import placement
        from trtkit.detect.records import Detections
        placed = placement(record.size, self.contract)
        for accumulator, found in ((self.variant_map, variant), (self.reference_map, fp32)):
            classes = self.labels[found.labels] if len(found) else found.labels
            keep = classes >= 0
            boxes = boxes_to_original(found.boxes[keep], record.size, placed) if keep.any() else \
                np.zeros((0, 4), np.float32)
            accumulator.update(self.mapped_images, record.boxes, record.labels,
                               Detections(boxes, found.scores[keep], classes[keep]), record.iscrowd,
                               record.difficult)
        self.mapped_images += 1  # the key: an image's position (COCO ids may repeat across a folder's sets)

    def result(self):
        agreement = self.agreement.result()
        record = {"images": self.images, "task": "detection", "decision": self.kind or "probabilities", "metric": "map",
                  "max_abs_diff": self.max_diff, "mean_abs_diff": self.sum_diff / self.elements if self.elements
                  else 0.0, "accuracy": None, "reference_accuracy": None, "agreement_score": AGREEMENT_SCORE,
                  "postprocessing": self.head.postprocessing.to_dict()}
        for key in ("precision", "recall", "mean_iou", "mean_score_shift", "max_abs_score_shift",
                    "image_agreement", "images_with_reference", "empty_reference", "match_iou"):
            record["agreement_" + key] = agreement.get(key)
        record["counts"] = agreement.get("counts")
        record["f1_agreement"] = record["top1_agreement"] = agreement.get("f1")
        intervals = {}
        if agreement.get("intervals"):
            intervals.update(agreement["intervals"])
            if "f1" in intervals:
                intervals["top1_agreement"] = intervals["f1"]
        if self.variant_map is not None and self.mapped_images:
            mine, theirs = self.variant_map.result(), self.reference_map.result()
            record.update(map=mine["map"], map50=mine["map50"], map75=mine["map75"], reference_map=theirs["map"],
                          reference_map50=theirs["map50"], accuracy=mine["map"], reference_accuracy=theirs["map"],
                          class_ap=mine["class_ap"], evaluator=mine.get("evaluator"),
                          ground_truth_boxes=mine.get("ground_truth_boxes"), map_detections=mine.get("detections"))
        if intervals:
            record["intervals"] = intervals
        return record


def data_labels(head, model_names, selection):
    """Per model class index, the data's class index (-1: none), or None when ``selection`` has no boxes.

    By name when both sides name their classes (a torchvision COCO model's 91 names against COCO's 80
    categories; case and ``_``/space aside); else a model of as many classes as COCO's largest category id
    reads category ids (torchvision's COCO convention: label = category id); else index for index, after the
    background class when the head has one (an SSD trained on K classes has K + 1 outputs)."""
    if selection is None or selection.holds != "boxes":
        return None
    box_set = selection.annotations.box_set
    data_names = list(box_set.class_names)
    mapping = np.full(head.num_classes, -1, dtype=np.int64)
    detectable = head.detection_classes()
    if model_names is not None and len(model_names) == head.num_classes:
        key = dict((_name_key(name), index) for index, name in enumerate(data_names))
        for index in detectable:
            mapping[index] = key.get(_name_key(model_names[index]), -1)
        if (mapping >= 0).any():
            return mapping
        raise InputError("none of the model's class names ({}...) is a class of the data ({}...)".format(
            ", ".join(str(n) for n in model_names[:4]), ", ".join(data_names[:4])),
            hint="give data with this model's classes, or names that match them")
    ids = box_set.category_ids
    if ids is not None and max(ids) < head.num_classes and len(ids) < len(detectable):
        for index, category in enumerate(ids):
            mapping[category] = index
        return mapping
    offset = 0 if head.background is None else head.background + 1
    if len(data_names) + offset > head.num_classes:
        raise InputError("the data has {} classes, the detector {}{}".format(
            len(data_names), head.num_classes, " (class {} its background)".format(head.background)
            if head.background is not None else ""), hint="verify it on data with its classes")
    for index in range(len(data_names)):
        mapping[index + offset] = index
    return mapping


def _name_key(name):
    return str(name).strip().lower().replace("_", " ")
