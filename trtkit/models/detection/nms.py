"""Non-maximum suppression in plain PyTorch, deciding exactly as torchvision's CPU kernel for ``torchvision.ops.nms`` /
``batched_nms``.

Why hand-written: torchvision's NMS is a compiled operator (``torch.ops.torchvision.nms``), and torchvision does
not import where trtkit runs (a CPU-only torch without a matching torchvision here, JetPack wheels on a Nano).
trtkit's detectors must still give torchvision's detections for torchvision's checkpoints, so this NMS has to
keep the same boxes in the same order, ties and borderline overlaps included:

- candidates are visited in the order ``scores.sort(0, descending=True)`` gives, the call torchvision's kernel
  makes, so equal scores are visited as torchvision visits them;
- the overlap is computed in the boxes' dtype with the CPU kernel's operations in its order (areas
  ``(x2 - x1) * (y2 - y1)``, intersection clamped at 0, ``inter / (area_i + area_j - inter)``), and a box is
  dropped when it is *strictly* above the threshold compared in double precision, as torchvision's CPU kernel
  (``csrc/ops/cpu/nms_kernel.cpp``) compares a float overlap with its double threshold (0.55, SSDlite's, is
  above its float32 rounding: a float32 comparison would keep a box the CPU kernel drops); a NaN overlap (two
  empty boxes) drops nothing. torchvision's CUDA kernel takes the threshold as a float and compares in float,
  so on a GPU torchvision can keep a box whose float overlap rounds to exactly the threshold where trtkit (and
  torchvision on the CPU) drop it: trtkit decides as the CPU kernel on every device;
- ``batched_nms`` keeps classes apart as torchvision does for the same size of input: up to 4,000 box
  coordinates on the CPU (100,000 elsewhere) every class's boxes are shifted by ``class * (max coordinate + 1)``
  and suppressed together; above that each class is suppressed alone and the kept boxes sorted by score.

How: the candidates, in score order, are settled a block of ``BLOCK`` at a time. Within a block the survivors'
overlaps with each other (a block x block table) are resolved in order; the block's kept boxes then drop every
later candidate they overlap (a kept x remaining table), so a dropped candidate is never compared again. Memory
is O(K x BLOCK), and the work shrinks as boxes are dropped: 12,000 candidates take well under a second.
``tests/test_detection_nms.py`` checks it against a brute-force loop, against the K x K table it replaced and
against torchvision's ``batched_nms`` source.
"""

import numpy
import torch

BLOCK = 256  # candidates settled at a time (memory: a BLOCK x K table of overlaps at most)
CPU_COORDINATE_LIMIT = 4000  # torchvision: above this many box coordinates on the CPU, one NMS per class
DEVICE_COORDINATE_LIMIT = 100000  # the same on a GPU


def nms(boxes, scores, iou_threshold, block=BLOCK):
    """Indices (int64) of the ``boxes`` ([K, 4], x1 y1 x2 y2) kept by greedy NMS, highest score first: each
    kept box drops the later ones whose IoU with it is above ``iou_threshold``."""
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    order = scores.sort(0, descending=True)[1]
    coordinates = tuple(column.contiguous() for column in boxes[order].unbind(1))
    x1, y1, x2, y2 = coordinates
    areas = (x2 - x1) * (y2 - y1)
    alive = torch.ones(len(order), dtype=torch.bool, device=order.device)  # not dropped by a kept box yet
    kept = []
    for start in range(0, len(order), block):
        stop = min(start + block, len(order))
        members = torch.nonzero(alive[start:stop]).flatten() + start
        if members.numel() == 0:
            continue
        over = _overlapping(coordinates, areas, members, members, iou_threshold).cpu().numpy()
        dropped = numpy.zeros(len(members), dtype=bool)
        chosen = []
        for row in range(len(members)):
            if not dropped[row]:
                chosen.append(row)
                dropped[row + 1:] |= over[row, row + 1:]
        winners = members[torch.as_tensor(chosen, dtype=torch.int64, device=members.device)]
        kept.append(winners)
        later = torch.nonzero(alive[stop:]).flatten() + stop
        if later.numel():
            alive[later[_overlapping(coordinates, areas, winners, later, iou_threshold).any(0)]] = False
    return order[torch.cat(kept)]


def _overlapping(coordinates, areas, rows, columns, iou_threshold):
    """[R, C] booleans: the IoU of box ``rows[r]`` (the earlier, higher-scored) with box ``columns[c]`` above
    ``iou_threshold``, computed as the CPU kernel does (float overlap, double comparison)."""
    x1, y1, x2, y2 = coordinates
    width = (torch.min(x2[rows, None], x2[None, columns]) - torch.max(x1[rows, None], x1[None, columns])).clamp(min=0)
    height = (torch.min(y2[rows, None], y2[None, columns]) - torch.max(y1[rows, None], y1[None, columns])).clamp(min=0)
    inter = width * height
    overlap = inter / (areas[rows, None] + areas[None, columns] - inter)
    return overlap.double() > iou_threshold


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
