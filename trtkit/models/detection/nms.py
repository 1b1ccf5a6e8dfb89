"""Non-maximum suppression in plain PyTorch, deciding exactly as ``torchvision.ops.nms`` / ``batched_nms``.

Why hand-written: torchvision's NMS is a compiled operator (``torch.ops.torchvision.nms``), and torchvision does
not import where trtkit runs (a CPU-only torch without a matching torchvision here, JetPack wheels on a Nano).
trtkit's detectors must still give torchvision's detections for torchvision's checkpoints, so this NMS has to
keep the same boxes in the same order, ties and borderline overlaps included:

- candidates are visited in the order ``scores.sort(0, descending=True)`` gives, the call torchvision's kernel
  makes, so equal scores are visited as torchvision visits them;
- the overlap is computed in the boxes' dtype with the kernel's operations in the kernel's order (areas
  ``(x2 - x1) * (y2 - y1)``, intersection clamped at 0, ``inter / (area_i + area_j - inter)``), and a box is
  dropped when it is *strictly* above the threshold compared in double precision, as the kernel compares a
  float overlap with its double threshold (0.55, SSDlite's, is above its float32 rounding: a float32
  comparison would keep a box torchvision drops); a NaN overlap (two empty boxes) drops nothing;
- ``batched_nms`` keeps classes apart as torchvision does for the same size of input: up to 4,000 box
  coordinates on the CPU (100,000 elsewhere) every class's boxes are shifted by ``class * (max coordinate + 1)``
  and suppressed together; above that each class is suppressed alone and the kept boxes sorted by score.

The overlaps are computed at once (a K x K table of booleans, a thousand rows of floats at a time), then one pass
in score order keeps a box unless a kept one dropped it: a few thousand candidates take milliseconds (detectors
cap them with ``topk_candidates``). ``tests/test_detection_nms.py`` checks it against a brute-force reference and
against torchvision's ``batched_nms`` source.
"""

import numpy
import torch

ROWS_AT_ONCE = 1024  # overlaps are computed this many candidates at a time (a K x K boolean table in all)
CPU_COORDINATE_LIMIT = 4000  # torchvision: above this many box coordinates on the CPU, one NMS per class
DEVICE_COORDINATE_LIMIT = 100000  # the same on a GPU


def nms(boxes, scores, iou_threshold):
    """Indices (int64) of the ``boxes`` ([K, 4], x1 y1 x2 y2) kept by greedy NMS, highest score first: each
    kept box drops the later ones whose IoU with it is above ``iou_threshold``."""
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    order = scores.sort(0, descending=True)[1]
    over = _overlapping(boxes[order], iou_threshold)
    dropped = numpy.zeros(len(over), dtype=bool)
    kept = []
    for index in range(len(over)):
        if not dropped[index]:
            kept.append(index)
            dropped |= over[index]
    return order[torch.as_tensor(kept, dtype=torch.int64, device=order.device)]


def _overlapping(boxes, iou_threshold, rows=ROWS_AT_ONCE):
    """[K, K] numpy booleans: box i's IoU with box j above ``iou_threshold`` (computed ``rows`` at a time)."""
    x1, y1, x2, y2 = (boxes[:, column].contiguous() for column in range(4))
    areas = (x2 - x1) * (y2 - y1)
    parts = []
    for start in range(0, len(boxes), rows):
        part = slice(start, start + rows)
        width = (torch.min(x2[part, None], x2[None, :]) - torch.max(x1[part, None], x1[None, :])).clamp(min=0)
        height = (torch.min(y2[part, None], y2[None, :]) - torch.max(y1[part, None], y1[None, :])).clamp(min=0)
        inter = width * height
        overlap = inter / (areas[part, None] + areas[None, :] - inter)
        parts.append((overlap.double() > iou_threshold).cpu().numpy())
    return numpy.concatenate(parts)


def batched_nms(boxes, scores, classes, iou_threshold):
    """``nms`` within each class (``classes``: [K] integers): indices kept, highest score first."""
    limit = CPU_COORDINATE_LIMIT if boxes.device.type == "cpu" else DEVICE_COORDINATE_LIMIT
    if boxes.numel() > limit:
        return _nms_per_class(boxes, scores, classes, iou_threshold)
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    shift = classes.to(boxes) * (boxes.max() + 1)  # far enough apart that no two classes overlap
    return nms(boxes + shift[:, None], scores, iou_threshold)


def _nms_per_class(boxes, scores, classes, iou_threshold):
    kept = torch.zeros_like(scores, dtype=torch.bool)
    for value in torch.unique(classes):
        members = torch.nonzero(classes == value).flatten()
        kept[members[nms(boxes[members], scores[members], iou_threshold)]] = True
    survivors = torch.nonzero(kept).flatten()
    return survivors[scores[survivors].sort(descending=True)[1]]
