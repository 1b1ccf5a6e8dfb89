"""TEMPORARY STAND-IN, to be replaced at merge by the numpy host post-processing written on another branch.

Only ``select_decoded`` is here, and only because the app (``trtkit.app.detector``) and its tests need the
selection before the real module is merged: it runs the torch reference (``models.detection.postprocess``) on
the ``decoded`` array, so it needs torch and decides exactly as the real module must. Nothing else of this file
may be depended on; the real ``select.py`` replaces it whole.
"""

import numpy as np

from trtkit.detect.records import Detections


def select_decoded(decoded, head, height, width):
    """One ``Detections`` per image of ``decoded`` ``[N, A, 4 + C]`` (boxes in the model input's pixels, best
    first; labels: the model's class indices) for an input of ``height`` x ``width``, selected as ``head``
    (a ``DetectionHead``) says. Stand-in: the torch reference, converted to and from numpy."""
    import torch
    from trtkit.detect.raw import split
    from trtkit.models.detection import postprocess as reference
    boxes, scores = split(decoded, head.num_classes)
    boxes = torch.from_numpy(np.ascontiguousarray(boxes, dtype=np.float32))
    scores = torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float32))
    params = head.postprocessing
    sizes = head.level_sizes(height, width)
    if not params.class_agnostic:
        found = reference.postprocess(boxes, scores, params, sizes)
        return [Detections(d["boxes"].numpy(), d["scores"].numpy(), d["labels"].numpy()) for d in found]
    from trtkit.models.detection.nms import nms
    reference._check_levels(boxes, params, sizes)
    result = []
    for image_boxes, image_scores in zip(boxes, scores):
        found = reference._per_level(image_boxes, image_scores, params, list(sizes)) if params.per_level else \
            reference._per_class(image_boxes, image_scores, params)
        kept_boxes, kept_scores, labels = (torch.cat(parts, dim=0) for parts in zip(*found))
        keep = nms(kept_boxes, kept_scores, params.nms_thresh)[:params.detections_per_img]
        result.append(Detections(kept_boxes[keep].numpy(), kept_scores[keep].numpy(), labels[keep].numpy()))
    return result
