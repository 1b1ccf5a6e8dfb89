"""The host post-processing in numpy: a detector's boxes and scores to each image's ``Detections``.

It decides as ``trtkit.models.detection.postprocess`` (torch, which keeps torchvision's detections) does, so a
backend that hands back ``decoded`` gets torchvision's answer without torch:

1. candidates: scores above ``score_thresh`` (compared in float32, as torch compares a float32 tensor with a
   Python float), the best ``topk_candidates`` of each group: per level (every (anchor, class) pair of a
   feature map, RetinaNet) or per class (every anchor, SSD); the head's background class is never one;
2. greedy NMS within each label (across labels when ``class_agnostic``), visiting candidates best first: a
   kept box drops every later one whose IoU with it is *strictly* above ``nms_thresh``, the IoU computed in
   float32 with torchvision's CPU kernel's operations in its order and compared as that kernel compares it (a
   float overlap against a double threshold);
3. the best ``detections_per_img`` that NMS keeps, best first, at most ``per_class`` of one label (the head's
   ``max_per_class``, TensorFlow's ``combined_non_max_suppression``: each class's first kept boxes, then the best
   of all; torchvision has no such cap).

Where torch's choice is not defined, numpy's is stated instead. Equal scores: torch visits them in the order its
unstable ``sort(descending=True)`` and ``topk`` leave them (for more than 16 elements not the index order, and
it changes with the length), so with ties at a top-k cut or between overlapping boxes of one label the two can
keep different boxes. Here equal scores go in candidate order (levels or classes in order, then the flattened
(anchor, class) index, lowest first), on every run. With distinct scores the results are the same, boxes,
scores, labels and order (``tests/test_detect_select.py``).

How torchvision separates the labels matters at the last bit: up to 1,000 candidates (4,000 coordinates) its
``batched_nms`` shifts each label's boxes by ``label * (max + 1)`` and runs one NMS, whose float32 IoU of the
shifted boxes can round differently from the unshifted one; above that it runs one NMS per label on the boxes
as they are. Both are reproduced here.

Speed: the labels' NMS run side by side (padded ``[groups, positions]`` arrays), a block of positions at a
time; a block's kept boxes drop the later candidates they overlap, and only candidates still alive in some
group are compared again. Memory is O(candidates x block), never a candidates x candidates table.
"""

import numpy as np

from trtkit.detect.params import DetectionHead
from trtkit.detect.raw import split
from trtkit.detect.records import Detections
from trtkit.errors import InputError

SHIFT_LIMIT = 1000  # torchvision's batched_nms on the CPU shifts the labels' boxes up to 1,000 boxes (4,000 values)
BLOCK = 16  # candidates settled per group and round (memory: groups x BLOCK x candidates overlaps at most)


def select(boxes, scores, head, level_sizes=None):
    """One ``Detections`` per image of ``boxes`` ``[N, A, 4]`` (x1 y1 x2 y2) and ``scores`` ``[N, A, C]``
    (float32), selected as ``head`` (a ``DetectionHead``) says. ``level_sizes`` (anchors per feature map,
    ``head.level_sizes(H, W)`` of the input's size) is required when the candidates are per level: the A
    anchors cannot be split into levels without it (``select_decoded`` computes it)."""
    if not isinstance(head, DetectionHead):
        raise InputError("select needs a DetectionHead, got {}".format(type(head).__name__),
                         hint="DetectionHead.from_dict(manifest['model']['detection']) or export.detection_head(model)")
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    _check(boxes, scores, head, level_sizes)
    return [_select_image(image_boxes, image_scores, head, level_sizes)
            for image_boxes, image_scores in zip(boxes, scores)]


def select_decoded(decoded, head, height, width):
    """``select`` of a ``decoded`` ``[N, A, 4 + C]`` array (``raw``) from a ``height`` x ``width`` input; for a
    head decoded on the host by the user's function, its packed raw heads (``detect.host_decoder``)."""
    from trtkit.detect.host_decoder import decoded as host_decoded
    from trtkit.detect.raw import landmarks
    decoded = host_decoded(decoded, head, (height, width))
    boxes, scores = split(decoded, head.num_classes, head.landmarks)
    found = select(boxes, scores, head, head.level_sizes(height, width))
    if not head.landmarks:
        return found
    return [image.with_landmarks(points) for image, points in zip(found, landmarks(decoded, head.landmarks))]


def _check(boxes, scores, head, level_sizes):
    if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.ndim != 3 or scores.shape[:2] != boxes.shape[:2]:
        raise InputError("boxes [N, A, 4] and scores [N, A, C] expected; got {} and {}".format(
            list(boxes.shape), list(scores.shape)), hint="raw.split(decoded) gives both")
    if scores.shape[-1] != head.num_classes:
        raise InputError("the scores have {} classes, the head {}".format(scores.shape[-1], head.num_classes),
                         hint="the head is not this model's: use the head recorded with it")
    if not head.postprocessing.per_level:
        return
    if level_sizes is None:
        raise InputError("per-level candidates (RetinaNet) need the anchors per feature map",
                         hint="pass level_sizes=head.level_sizes(height, width), or use select_decoded")
    if sum(level_sizes) != boxes.shape[1]:
        raise InputError("level_sizes {} add up to {} anchors, the boxes have {}".format(
            list(level_sizes), sum(level_sizes), boxes.shape[1]),
            hint="use head.level_sizes(height, width) of the input that made these boxes")


def _best(values, limit, count):
    """Indices (ascending) of the ``values`` above ``limit`` (float32), the best ``count`` of them; at a tie on
    the cut the lowest indices."""
    above = np.flatnonzero(values > limit)
    if len(above) <= count:
        return above
    chosen = values[above]
    cut = np.partition(chosen, len(chosen) - count)[len(chosen) - count]  # the count-th best value
    better = chosen > cut
    ties = np.flatnonzero(chosen == cut)[:count - int(better.sum())]
    better[ties] = True
    return above[better]


def _best_rows(values, limit, count):
    """``_best`` of each row of ``values`` ``[R, A]`` at once, as booleans ``[R, A]``."""
    chosen = values > limit
    if values.shape[1] <= count or int(chosen.sum(1).max()) <= count:
        return chosen
    cut = -np.partition(-values, count - 1, axis=1)[:, count - 1:count]  # each row's count-th best value
    better = chosen & (values > cut)
    ties = chosen & (values == cut)
    room = count - better.sum(1, keepdims=True)
    return better | (ties & (np.cumsum(ties, axis=1) <= room))


def _candidates(scores, head, level_sizes):
    """(anchor indices, scores, labels) of one image's candidates, in torch's order: the groups (levels or
    classes) one after the other, each best first (ties: lowest index first)."""
    params = head.postprocessing
    limit = np.float32(params.score_thresh)
    count = params.topk_candidates
    classes = scores.shape[-1]
    parts = []
    if params.per_level:
        for start, stop in _bounds(level_sizes):
            flat = scores[start:stop].reshape(-1)
            if head.background is not None:
                flat = flat.copy()
                flat[head.background::classes] = -np.inf
            index = _best(flat, limit, count)
            index = index[np.argsort(-flat[index], kind="stable")]
            parts.append((index // classes + start, flat[index], index % classes))
    else:
        classes = np.asarray(head.detection_classes(), dtype=np.int64)
        by_class = np.ascontiguousarray(scores.T[classes])  # [C', A]
        chosen = _best_rows(by_class, limit, count)
        rows, index = np.nonzero(chosen)  # class-major, anchors ascending
        values = by_class[rows, index]
        order = np.lexsort((-values, rows))  # each class's best first, ties in anchor order
        parts.append((index[order], values[order], classes[rows[order]]))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int64)
    anchors, values, labels = (np.concatenate(column) for column in zip(*parts))
    return anchors.astype(np.int64), values.astype(np.float32), labels.astype(np.int64)


def _bounds(sizes):
    sizes = np.asarray([int(size) for size in sizes], dtype=np.int64)
    stops = np.cumsum(sizes)
    return zip(stops - np.asarray(sizes), stops)


def _select_image(boxes, scores, head, level_sizes):
    params = head.postprocessing
    anchors, values, labels = _candidates(scores, head, level_sizes)
    found = boxes[anchors]
    order = np.argsort(-values, kind="stable")  # the visiting order: best first, ties in candidate order
    if params.class_agnostic:
        groups = np.zeros(len(values), np.int64)
    elif len(values) <= SHIFT_LIMIT:  # torchvision: the labels' boxes shifted apart, one NMS
        groups = np.zeros(len(values), np.int64)
        if len(values):
            found = found + (labels.astype(np.float32) * (found.max() + np.float32(1)))[:, None]
    else:
        groups = labels
    kept = nms_groups(found, order, groups, params.nms_thresh)
    best = order[kept[order]]
    if params.per_class < params.detections_per_img:
        best = best[_within_class(labels[best], params.per_class)]
    best = best[:params.detections_per_img]
    return Detections(boxes[anchors[best]], values[best], labels[best], anchors[best])


def _within_class(labels, cap):
    """Booleans: the ``labels`` (best first) that are among the first ``cap`` of their label."""
    if not len(labels):
        return np.zeros(0, dtype=bool)
    by_label = np.argsort(labels, kind="stable")
    sorted_labels = labels[by_label]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    rank = np.arange(len(labels)) - np.repeat(starts, np.diff(np.r_[starts, len(labels)]))
    within = np.empty(len(labels), dtype=bool)
    within[by_label] = rank < cap
    return within


def float32_threshold(threshold):
    """The float32 ``t`` such that, for every float32 ``x``, ``x > t`` exactly when ``x > threshold`` in double
    precision (torchvision's CPU kernel compares a float IoU with a double threshold): the threshold rounded
    down to float32."""
    rounded = np.float32(threshold)
    return np.nextafter(rounded, np.float32(-np.inf)) if float(rounded) > threshold else rounded


def nms_groups(boxes, order, groups, iou_threshold):
    """Booleans ``[K]``: the ``boxes`` ``[K, 4]`` that greedy NMS keeps within each of ``groups`` (``[K]``
    integers), each group visited in ``order`` (indices into the K, best first)."""
    kept = np.zeros(len(boxes), dtype=bool)
    if not len(boxes):
        return kept
    by_group = order[np.argsort(groups[order], kind="stable")]  # each group's members, in visiting order
    _, starts, sizes = np.unique(groups[by_group], return_index=True, return_counts=True)
    threshold = float32_threshold(iou_threshold)
    for chunk in _chunks(sizes):
        width = int(sizes[chunk].max())
        members = np.full((len(chunk), width), -1, dtype=np.int64)
        for row, group in enumerate(chunk):
            members[row, :sizes[group]] = by_group[starts[group]:starts[group] + sizes[group]]
        kept[_greedy(boxes, members, threshold)] = True
    return kept


def _chunks(sizes):
    """Groups (largest first) gathered so that a chunk's padded table is at most twice its members."""
    chunk, members = [], 0
    for group in np.argsort(-sizes, kind="stable"):
        if chunk and (len(chunk) + 1) * sizes[chunk[0]] > 2 * (members + sizes[group]):
            yield chunk
            chunk, members = [], 0
        chunk.append(group)
        members += sizes[group]
    if chunk:
        yield chunk


def _greedy(boxes, members, threshold, block=BLOCK):
    """Greedy NMS of each row of ``members`` (``[G, M]`` indices into ``boxes`` in visiting order, -1 padding)
    side by side; the indices kept. Each round settles the first ``block`` candidates still alive in every
    group (within the block in order), drops the later ones that their kept boxes overlap, and packs the
    survivors to the left, so a dropped candidate is never compared again."""
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    padding = np.full((1, 5), np.nan, np.float32)  # index -1: a NaN box, overlapping nothing
    table = np.concatenate([np.concatenate([boxes, areas[:, None]], 1), padding]).T.copy()
    kept = []
    while members.shape[1]:
        rows, later = members[:, :block], members[:, block:]
        over = _overlapping(table, members, rows.shape[1], threshold)  # [G, R, M]
        settled = rows >= 0
        for position in range(rows.shape[1]):
            dropping = settled[:, position]
            if dropping.any():
                settled[:, position + 1:] &= ~(over[:, position, position + 1:rows.shape[1]] & dropping[:, None])
        kept.append(rows[settled])
        alive = (later >= 0) & ~(over[:, :, rows.shape[1]:] & settled[:, :, None]).any(1)
        members = _packed(later, alive)
    return np.concatenate(kept) if kept else np.zeros(0, np.int64)


def _packed(members, alive):
    """``members`` with only the ``alive`` ones, each row's in its order and to the left (-1 padding), without
    the rows or columns that hold none."""
    counts = alive.sum(1)
    members = members[counts > 0]
    alive = alive[counts > 0]
    if not len(members):
        return np.zeros((0, 0), np.int64)
    order = np.argsort(~alive, axis=1, kind="stable")[:, :int(counts.max())]
    return np.where(np.take_along_axis(alive, order, 1), np.take_along_axis(members, order, 1), -1)


def _overlapping(table, members, count, threshold):
    """``[G, R, M]`` booleans: the IoU of box ``members[g, r]`` (``r`` < ``count``) with box ``members[g, m]``
    above ``threshold`` (float32, ``float32_threshold``), in the CPU kernel's float32 operations (a NaN IoU,
    padding's or two empty boxes', is above nothing)."""
    x1, y1, x2, y2, areas = (values[members] for values in table)
    shape = (members.shape[0], count, members.shape[1])
    width, other = np.empty(shape, np.float32), np.empty(shape, np.float32)
    np.minimum(x2[:, :count, None], x2[:, None], out=width)
    width -= np.maximum(x1[:, :count, None], x1[:, None], out=other)
    np.maximum(width, np.float32(0), out=width)
    height = np.minimum(y2[:, :count, None], y2[:, None])
    height -= np.maximum(y1[:, :count, None], y1[:, None], out=other)
    np.maximum(height, np.float32(0), out=height)
    inter = np.multiply(width, height, out=width)
    np.add(areas[:, :count, None], areas[:, None], out=other)
    other -= inter
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(inter, other, out=other)
    return other > threshold
