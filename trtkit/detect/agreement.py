"""How far a variant's detections agree with FP32's on the same images: verification without labels, streamed.

``DetectionAgreement`` is fed, per image, the variant's ``Detections`` and FP32's, both already cut at the
display score the caller chooses (what a user of the detector would see), and keeps counts and sums only.

Matching: per class, the variant's detections in order of score (best first) each take the unmatched FP32
box of the same class with the highest IoU, if that IoU is at least ``MATCH_IOU`` (0.5). Greedy by score is
COCO's own matching (``evaluateImg``: detections sorted by score claim the best still-free ground truth), so
a pair counted here is a pair mAP would count with FP32 as the ground truth; and it gives the confident
detections, the ones a user acts on, first claim. An optimal assignment (Hungarian) could pair a few more
boxes in crowded scenes, but its pairs would not be the ones any AP counts.

Figures (``result()``): ``f1`` = 2 x matched / (variant count + FP32 count), the share of all detections of
either model that have a partner (1.0: the same boxes and classes, within IoU 0.5); ``precision`` (matched /
variant's) and ``recall`` (matched / FP32's) against FP32; ``mean_iou`` of the matched pairs (how exactly
they sit); ``mean_score_shift`` = mean of variant score - FP32 score over matched pairs and
``max_abs_score_shift``: INT8's squeezed confidences show up here as a negative shift long before boxes are
lost, and a shift moves detections across the display threshold. ``image_agreement``: the share of images
whose detections all have a partner, both ways. ``f1`` is also written as ``top1_agreement``, the figure
the agreement gate reads.

When FP32 detected nothing on the whole split there is nothing to agree with: ``f1`` (and
``top1_agreement``) is None and ``empty_reference`` True, so the gate fails ("verified on nothing") rather
than passing a vacuous 1.0: lower the display threshold or use images with objects.

Intervals (95%): Wilson's for ``recall`` (over FP32's detections) and ``precision`` (over the variant's), as if
detections were independent; they are not quite (errors cluster in hard images), so these are somewhat narrow.
``f1``'s is the harmonic mean of the two lower bounds and of the two upper bounds. ``image_agreement``'s is
Wilson's over images, which are independent.
"""

import numpy as np

from trtkit.detect.records import Detections
from trtkit.errors import InputError

MATCH_IOU = 0.5


def box_iou(first, second):
    """(len(first), len(second)) IoU of x1 y1 x2 y2 boxes, as COCO computes it for boxes (areas w x h, no
    +1 pixel); where both boxes have no area (a box clipped onto the image's edge): 1 when they are the same
    box, else 0. Why 1: agreement asks whether a variant made the reference's detection, and a detector's
    degenerate box made by both is the same detection (without it a torchvision SSDlite export's FP32, equal to
    the bit, agreed 93% with itself: its 80 zero-area boxes never matched)."""
    first = np.asarray(first, dtype=np.float64).reshape(-1, 4)
    second = np.asarray(second, dtype=np.float64).reshape(-1, 4)
    low = np.maximum(first[:, None, :2], second[None, :, :2])
    high = np.minimum(first[:, None, 2:], second[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0.0, None), axis=2)
    area_first = np.prod(np.clip(first[:, 2:] - first[:, :2], 0.0, None), axis=1)
    area_second = np.prod(np.clip(second[:, 2:] - second[:, :2], 0.0, None), axis=1)
    union = area_first[:, None] + area_second[None, :] - inter
    same = np.all(first[:, None, :] == second[None, :, :], axis=2)
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), np.where(same, 1.0, 0.0))


def greedy_match(variant, reference, threshold=MATCH_IOU):
    """[(variant index, reference index, IoU)] of ``variant`` and ``reference`` (``Detections``) matched per
    class, the variant's best-scored first each taking the free reference box of its class with the highest
    IoU >= ``threshold`` (the module's docstring says why)."""
    pairs = []
    for label in np.intersect1d(variant.labels, reference.labels):
        mine = np.flatnonzero(variant.labels == label)
        theirs = np.flatnonzero(reference.labels == label)
        mine = mine[np.argsort(-variant.scores[mine], kind="mergesort")]
        ious = box_iou(variant.boxes[mine], reference.boxes[theirs])
        free = np.ones(len(theirs), dtype=bool)
        for row, index in enumerate(mine):
            candidates = np.where(free & (ious[row] >= threshold), ious[row], -1.0)
            best = int(np.argmax(candidates))
            if candidates[best] < 0:
                continue
            free[best] = False
            pairs.append((int(index), int(theirs[best]), float(ious[row, best])))
    return pairs


class DetectionAgreement(object):
    """The variant's detections against FP32's, streamed: ``update(variant, reference)`` per image (both
    ``Detections`` above the same display score, in the same pixels), ``result()`` at the end."""

    def __init__(self, threshold=MATCH_IOU):
        self.threshold = float(threshold)
        self.images = 0
        self.images_with_reference = 0  # images on which FP32 detected anything
        self.images_agreeing = 0        # images whose detections all have a partner, both ways
        self.variant_count = 0
        self.reference_count = 0
        self.matched = 0
        self.sum_iou = 0.0
        self.sum_shift = 0.0
        self.max_abs_shift = 0.0

    def update(self, variant, reference):
        for name, value in (("variant", variant), ("reference", reference)):
            if not isinstance(value, Detections):
                raise InputError("the {} detections must be a trtkit.detect.Detections, not {}".format(
                    name, type(value).__name__))
        pairs = greedy_match(variant, reference, self.threshold)
        self.images += 1
        self.images_with_reference += int(len(reference) > 0)
        self.images_agreeing += int(len(pairs) == len(variant) == len(reference))
        self.variant_count += len(variant)
        self.reference_count += len(reference)
        self.matched += len(pairs)
        for mine, theirs, iou in pairs:
            shift = float(variant.scores[mine]) - float(reference.scores[theirs])
            self.sum_iou += iou
            self.sum_shift += shift
            self.max_abs_shift = max(self.max_abs_shift, abs(shift))

    def result(self):
        from trtkit.intervals import CONFIDENCE, rounded, wilson
        matched, found, expected = self.matched, self.variant_count, self.reference_count
        empty = expected == 0
        f1 = None if empty else 2.0 * matched / float(found + expected)
        record = {
            "images": self.images, "metric": "f1", "match_iou": self.threshold,
            "f1": f1, "top1_agreement": f1, "empty_reference": empty,
            "precision": matched / float(found) if found else None,
            "recall": None if empty else matched / float(expected),
            "mean_iou": self.sum_iou / matched if matched else None,
            "mean_score_shift": self.sum_shift / matched if matched else None,
            "max_abs_score_shift": self.max_abs_shift if matched else None,
            "image_agreement": self.images_agreeing / float(self.images) if self.images else None,
            "images_with_reference": self.images_with_reference,
            "counts": {"matched": matched, "variant_detections": found, "reference_detections": expected,
                       "images_agreeing": self.images_agreeing},
        }
        if empty:
            record["status_detail"] = "FP32 detected nothing above the display score: nothing to agree with"
        if not self.images:
            return record
        precision, recall = wilson(matched, found), wilson(matched, expected)
        bounds = precision or (0.0, 1.0)  # the variant found nothing: its precision could be anything
        intervals = {"confidence": CONFIDENCE, "precision": rounded(precision), "recall": rounded(recall),
                     "image_agreement": rounded(wilson(self.images_agreeing, self.images)),
                     "method": "wilson: recall over FP32's detections, precision over the variant's, "
                               "image_agreement over images; f1: harmonic means of their bounds"}
        if recall is not None:
            intervals["f1"] = intervals["top1_agreement"] = rounded(
                (_harmonic(bounds[0], recall[0]), _harmonic(bounds[1], recall[1])))
        record["intervals"] = intervals
        return record


def _harmonic(first, second):
    return 2.0 * first * second / (first + second) if first + second > 0 else 0.0
