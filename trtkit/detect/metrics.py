"""mAP of detections against ground-truth boxes, computed by a maintained COCO evaluator, streamed image by image.

``CocoMap`` is fed one image at a time (its boxes, classes and crowd / difficult flags, and the model's
``Detections`` in the same pixels) and ``result()`` runs COCO's evaluation once, on everything it was fed:
``faster_coco_eval`` when it imports (the same algorithm in C++), else ``pycocotools``; neither is
MissingDependency naming ``pip install 'trtkit[detection]'``. The matching, the 101-point interpolated
precision and the averaging are theirs: nothing of the evaluation is written here, only the translation into
COCO's format (class indices as category ids, x1 y1 x2 y2 as x y w h, sequential ids from 1: the evaluators
read a match id of 0 as "unmatched").

COCO's rules as both evaluators apply them (read in pycocotools' ``cocoeval.py`` and faster-coco-eval 1.8's
``core/cocoeval.py``), and what follows for trtkit's figures:

- the categories are the classes present in the ground truth or the detections; a class with no (unignored)
  ground truth anywhere in the split has an AP of -1, which the mean leaves out: its detections lower nothing
  (``class_ap`` shows it as None). A class that is in the ground truth but never detected has an AP of 0;
- images with no ground truth are evaluated too: their detections are false positives of their classes;
- crowd regions (``iscrowd``) are COCO's: a detection overlapping one (intersection over the detection's own
  area) is neither right nor wrong, however many do;
- VOC's difficult objects are ignored, as VOC's devkit ignores them. COCO's annotations have an ``ignore``
  field, but both evaluators overwrite it with ``iscrowd`` while preparing (``gt['ignore'] = 'iscrowd' in gt
  and gt['iscrowd']``), so the evaluator here is their own class with one step added after that preparation:
  annotations marked difficult get ``ignore = 1`` back (a test checks that it counts, in both). A detection
  matching a difficult object (ordinary IoU) is then neither right nor wrong; unlike VOC's devkit, a second
  detection of the same difficult object is a false positive (COCO's ignored objects match once);
- detections are evaluated at every score given (pass low-threshold detections: AP integrates over the
  scores), at most ``max_detections`` (100) per image, the best: the COCO challenge's limit per image
  (the evaluators cap at ``maxDets`` per image *and class*, which keeps more; capping per image here is the
  stricter rule and bounds memory). Memory is O(images x 100) for detections and O(boxes) for the ground
  truth, as numpy arrays until ``result()`` builds COCO's dicts.

A build's verification gives no interval for mAP: it is not a proportion of independent units, and an image
bootstrap runs the evaluation once per replicate (0.19 s for 400 images of 63 detections: ``map_interval``).
Where a comparison can pay for that, ``detect.map_interval`` bootstraps the difference of two mAPs measured on
the same images (``resampled``).
"""

import contextlib
import io

import numpy as np

from trtkit.data.boxes.coco import coco_bboxes
from trtkit.detect.records import Detections
from trtkit.deps import install_hint
from trtkit.errors import InputError, MissingDependency

MAX_DETECTIONS = 100  # per image, the COCO challenge's limit and its evaluation's largest maxDets
EVALUATORS = ("faster-coco-eval", "pycocotools")


class CocoMap(object):
    """COCO's mAP of a stream of images: ``update`` per image, ``result()`` at the end (the module's docstring
    says which rules apply). ``evaluator``: 'faster-coco-eval', 'pycocotools' or None (the first that
    imports); ``num_classes``: the length of ``class_ap`` (default: up to the largest class seen)."""

    def __init__(self, evaluator=None, max_detections=MAX_DETECTIONS, num_classes=None):
        if evaluator is not None and evaluator not in EVALUATORS:
            raise InputError("unknown COCO evaluator '{}'".format(evaluator), hint=" or ".join(EVALUATORS))
        self.evaluator = evaluator
        self.max_detections = int(max_detections)
        self.num_classes = num_classes
        self._keys = set()
        self.keys = []         # the images' keys in the order given: two maps fed alike are paired by it
        self._truth = []       # per image: (boxes float32 [M, 4], labels int64 [M], iscrowd, difficult)
        self._detections = []  # per image: (boxes float32 [D, 4], scores float32 [D], labels int64 [D]), D <= cap

    def update(self, image_key, boxes, labels, detections, iscrowd=None, difficult=None):
        """Add one image: ``boxes`` float (M, 4) x1 y1 x2 y2 and ``labels`` int (M,) of its ground truth,
        ``detections`` (``Detections``) in the same pixels, ``iscrowd`` / ``difficult`` bool (M,) flags.
        ``image_key``: anything hashable naming the image; an image given twice is an error (it would count
        twice)."""
        if image_key in self._keys:
            raise InputError("image {!r} was given twice to the mAP evaluation".format(image_key),
                             hint="give each image once")
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        count = len(boxes)
        flags = [np.zeros(count, bool) if f is None else np.asarray(f, dtype=bool).reshape(-1)
                 for f in (iscrowd, difficult)]
        if len(labels) != count or any(len(f) != count for f in flags):
            raise InputError("image {!r}: {} boxes, {} labels, {} crowd and {} difficult flags".format(
                image_key, count, len(labels), len(flags[0]), len(flags[1])))
        if not isinstance(detections, Detections):
            raise InputError("image {!r}: detections must be a trtkit.detect.Detections, not {}".format(
                image_key, type(detections).__name__))
        if (labels < 0).any() or (detections.labels < 0).any():
            raise InputError("image {!r}: a negative class index".format(image_key))
        self._keys.add(image_key)
        self.keys.append(image_key)
        self._truth.append((boxes, labels, flags[0], flags[1]))
        best = np.argsort(-detections.scores, kind="mergesort")[:self.max_detections]
        self._detections.append((detections.boxes[best], detections.scores[best], detections.labels[best]))

    def update_record(self, record, detections):
        """Add one ``data.boxes.BoxRecord`` (its image id the key, its crowd and difficult flags) and the
        detections of its image, in the original image's pixels as the record's boxes are."""
        self.update(record.image_id, record.boxes, record.labels, detections, record.iscrowd, record.difficult)

    def result(self):
        """{"map" (AP@[.5:.95]), "map50", "map75" (None without ground truth to find), "class_ap" (AP@[.5:.95]
        per class index, None for a class with none), "images", "ground_truth_boxes", "ignored_boxes",
        "detections", "max_detections", "evaluator" ('faster-coco-eval 1.8.0')}."""
        name, coco_class, eval_class, version = _evaluator(self.evaluator)
        truth, results, classes = self._coco_format()
        record = {"images": len(self._truth), "ground_truth_boxes": len(truth["annotations"]),
                  "ignored_boxes": sum(int(a["ignore"]) for a in truth["annotations"]),
                  "detections": len(results), "max_detections": self.max_detections,
                  "evaluator": "{} {}".format(name, version), "map": None, "map50": None, "map75": None,
                  "class_ap": [None] * self._class_count(classes)}
        if not classes:
            return record
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # both print their progress and summary table
            evaluation = _evaluate(coco_class, eval_class, truth, results)
        stats = [float(v) for v in evaluation.stats[:3]]
        record["map"], record["map50"], record["map75"] = [v if v >= 0 else None for v in stats]
        # precision [iou thresholds, recall points, categories, area ranges, max detections]: area 'all', 100
        precision = np.asarray(evaluation.eval["precision"])[:, :, :, 0, -1]
        for index, category in enumerate(sorted(classes)):
            values = precision[:, :, index]
            values = values[values > -1]
            record["class_ap"][category] = float(values.mean()) if values.size else None
        return record

    def resampled(self, positions):
        """A new ``CocoMap`` of the images at ``positions`` (indices into the order they were given; a position
        given twice is an image counted twice, as a bootstrap's resample draws it), with the same evaluator and
        caps. The arrays are shared, not copied."""
        copy = CocoMap(self.evaluator, self.max_detections, self.num_classes)
        for number, position in enumerate(positions):
            copy._keys.add(number)
            copy.keys.append(number)
            copy._truth.append(self._truth[position])
            copy._detections.append(self._detections[position])
        return copy

    def __len__(self):
        return len(self.keys)

    def _class_count(self, classes):
        largest = max(classes) + 1 if classes else 0
        return max(int(self.num_classes or 0), largest)

    def _coco_format(self):
        """(ground truth dataset dict, results list, set of class indices): COCO's in-memory format."""
        images, annotations, results, classes = [], [], [], set()
        for image_id, ((boxes, labels, crowd, difficult), (d_boxes, scores, d_labels)) in enumerate(
                zip(self._truth, self._detections), 1):
            images.append({"id": image_id})
            for box, label, is_crowd, is_difficult in zip(coco_bboxes(boxes), labels, crowd, difficult):
                classes.add(int(label))
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(label),
                                    "bbox": box, "area": box[2] * box[3], "iscrowd": int(is_crowd),
                                    "difficult": int(is_difficult), "ignore": int(is_crowd or is_difficult)})
            for box, score, label in zip(coco_bboxes(d_boxes), scores, d_labels):
                classes.add(int(label))
                results.append({"id": len(results) + 1, "image_id": image_id, "category_id": int(label),
                                "bbox": box, "area": box[2] * box[3], "score": float(score), "iscrowd": 0})
        categories = [{"id": c, "name": str(c)} for c in sorted(classes)]
        return {"images": images, "annotations": annotations, "categories": categories}, results, classes


def _evaluate(coco_class, eval_class, truth, results):
    """Run COCO's bbox evaluation of ``results`` against ``truth`` (dicts); returns the evaluator object."""
    ground = _coco(coco_class, truth)
    detected = _coco(coco_class, {"images": truth["images"], "categories": truth["categories"],
                                  "annotations": results})
    evaluation = _with_difficult_ignored(eval_class)(ground, detected, "bbox")
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return evaluation


def _coco(coco_class, dataset):
    """A COCO API object over an in-memory dataset (the results too: ``loadRes`` fails on an empty list in
    pycocotools, and what it adds for boxes, ids, area and iscrowd, is already there)."""
    coco = coco_class()
    coco.dataset = dataset
    coco.createIndex()
    return coco


def _with_difficult_ignored(eval_class):
    """``eval_class`` with annotations marked ``difficult`` ignored again after its ``_prepare`` has set every
    ``ignore`` from ``iscrowd`` (the module's docstring). Both evaluators read the flag from the annotation
    dicts after ``_prepare``: pycocotools in ``evaluateImg``, faster-coco-eval when its C++ side reads the
    referenced dicts in ``evaluate``."""

    class DifficultIgnored(eval_class):
        def _prepare(self):
            super(DifficultIgnored, self)._prepare()
            for annotation in self.cocoGt.anns.values():
                if annotation.get("difficult"):
                    annotation["ignore"] = 1

    return DifficultIgnored


def _evaluator(wanted):
    """(name, COCO class, COCOeval class, version) of ``wanted`` (or the first of ``EVALUATORS`` that imports);
    MissingDependency when none does."""
    for name in EVALUATORS if wanted is None else (wanted,):
        try:
            if name == "faster-coco-eval":
                import faster_coco_eval
                from faster_coco_eval import COCO, COCOeval_faster
                return name, COCO, COCOeval_faster, faster_coco_eval.__version__
            from pycocotools.coco import COCO
            from pycocotools.cocoeval import COCOeval
        except ImportError:
            continue
        from trtkit.bench.device import _dist_version  # pycocotools has no __version__: its distribution's
        return name, COCO, COCOeval, _dist_version("pycocotools") or "unknown"
    raise MissingDependency("mAP needs a COCO evaluator: {} {} installed".format(
        wanted or "neither faster-coco-eval nor pycocotools", "is not" if wanted else "is"),
        hint=install_hint("pycocotools"))
