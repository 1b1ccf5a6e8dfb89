"""Post-processing: from decoded boxes and per-class scores to each image's detections, as torchvision selects.

This is the part of a detector that stays out of the exported network (it can run on the host): the network
ends at ``Detector.decoded`` (boxes ``[N, A, 4]`` in input pixels, scores ``[N, A, C]`` after the sigmoid or
softmax), and ``postprocess`` makes torchvision's list of ``{"boxes", "scores", "labels"}`` from it:

1. candidates: scores above ``score_thresh``, at most ``topk_candidates`` of the best of them
   - per level (RetinaNet: ``level_sizes`` anchors per feature map, every (anchor, class) pair of the level
     competing; a candidate's label is its class index);
   - or per class (SSD: each class but the background, class 0, over all anchors);
   the background class (``background``) is never a candidate, in either mode;
2. ``batched_nms`` (``models.detection.nms``) within each label at ``nms_thresh`` (``nms`` across labels when
   ``class_agnostic``);
3. the best ``detections_per_img`` of what NMS keeps, highest score first.

``trtkit.detect.select`` is the same selection in numpy (the host's, with no torch); ``tests/test_detect_select.py``
holds the two to the same detections.
"""

import torch

from trtkit.errors import InputError
from trtkit.detect.params import DetectionHead, PostProcessing  # noqa: F401  (the records, owned by trtkit.detect)
from trtkit.models.detection.nms import batched_nms, nms

TORCHVISION = "torchvision"  # background as torchvision's heads have it: class 0 per class (SSD), none per level


def _best(scores, limit):
    """(scores above the threshold, their flat indices), the best ``limit`` of them, best first."""
    above = torch.nonzero(scores > limit[0]).flatten()
    best, order = scores[above].topk(min(limit[1], above.numel()))
    return best, above[order]


def _per_level(boxes, scores, params, level_sizes, background):
    classes = scores.shape[-1]
    found = []
    limit = (params.score_thresh, params.topk_candidates)
    if background is not None:  # never a candidate: below any threshold
        scores = scores.clone()
        scores[:, background] = -float("inf")
    for level_boxes, level_scores in zip(boxes.split(level_sizes), scores.split(level_sizes)):
        best, index = _best(level_scores.flatten(), limit)
        found.append((level_boxes[torch.div(index, classes, rounding_mode="floor")], best, index % classes))
    return found


def _per_class(boxes, scores, params, background):
    found = []
    limit = (params.score_thresh, params.topk_candidates)
    for label in (c for c in range(scores.shape[-1]) if c != background):
        best, index = _best(scores[:, label], limit)
        found.append((boxes[index], best, torch.full_like(best, label, dtype=torch.int64)))
    return found


def _check_levels(boxes, params, level_sizes):
    if not params.per_level:
        return
    if level_sizes is None:
        raise InputError("per-level post-processing (RetinaNet) needs the anchors per feature map",
                         hint="pass level_sizes=model.level_sizes(height, width) of the input's size")
    if sum(level_sizes) != boxes.shape[1]:
        raise InputError("level_sizes {} add up to {} anchors, the boxes have {}".format(
            list(level_sizes), sum(level_sizes), boxes.shape[1]),
            hint="use model.level_sizes(height, width) of the input that made these boxes")


def postprocess(boxes, scores, params, level_sizes=None, background=TORCHVISION):
    """One ``{"boxes": [D, 4], "scores": [D], "labels": [D] int64}`` per image of ``boxes`` ([N, A, 4]) and
    ``scores`` ([N, A, C]). ``params``: a ``PostProcessing``, or a ``DetectionHead`` (its post-processing and
    background). ``level_sizes``: anchors per feature map (``Detector.level_sizes(H, W)`` of the input's size),
    required for per-level candidates (RetinaNet): without them the A anchors cannot be split into levels, and
    one top-k over all of them would pick other candidates than torchvision, so that raises. ``background``: the
    class that is never a detection, or None; by default torchvision's (0 per class, none per level), a head's
    own when ``params`` is a head."""
    if isinstance(params, DetectionHead):
        params, background = params.postprocessing, params.background
    elif background == TORCHVISION:
        background = None if params.per_level else 0
    _check_levels(boxes, params, level_sizes)
    detections = []
    for image_boxes, image_scores in zip(boxes, scores):
        found = _per_level(image_boxes, image_scores, params, list(level_sizes), background) if params.per_level \
            else _per_class(image_boxes, image_scores, params, background)
        kept_boxes, kept_scores, labels = (torch.cat(parts, dim=0) for parts in zip(*found))
        if params.class_agnostic:  # one NMS over every label: a place keeps its best box, whatever its class
            keep = nms(kept_boxes, kept_scores, params.nms_thresh)
        else:
            keep = batched_nms(kept_boxes, kept_scores, labels, params.nms_thresh)
        keep = keep[:params.detections_per_img]
        detections.append({"boxes": kept_boxes[keep], "scores": kept_scores[keep], "labels": labels[keep]})
    return detections
