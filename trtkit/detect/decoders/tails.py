"""Selection tails besides one plain NonMaxSuppression, as exporters (tf2onnx above all) write them: what is
read after an NMS, how a batch-1 export takes its image, a top-K with no NMS, and a selection written as a loop.

Why apart from ``nms``: these are readings of the graph around the selection, shared by ``nms``'s cut and by
the ``topk`` family, and ``nms`` holds the cut itself. What tf2onnx 1.16 writes, read in its exports of a Keras
detector (``tests/tf_exports.py``):

- ``tf.image.combined_non_max_suppression``: one per-class NonMaxSuppression on ``[N, A, 4]`` boxes (the
  ``[N, A, 1, 4]`` squeezed) and ``[N, C, A]`` scores, then a ``TopK`` whose k is ``Min(max_total_size,
  max_output_size_per_class x C)`` and a Pad/Gather tail to ``max_total_size`` rows and ``valid_detections``:
  ``kept_count`` reads that k through the ``Min`` (``topk.constant_k``);
- ``tf.image.non_max_suppression`` of one image (``boxes[0]``): ``Slice`` 0:1 on the batch axis and
  ``Squeeze``, so ``image_source`` walks through them to the batch's tensor;
- ``tf.image.non_max_suppression_padded``: TensorFlow's tiled NMS written in Python ops, a ``Loop`` (while
  loop) and no NonMaxSuppression node (``loop_selection``): ``loops`` reads the network's boxes and scores
  entering it and its thresholds by the graph's structure;
- ``tf.math.top_k`` over an image's flattened ``[A x C]`` scores, then a gather of the boxes by ``index //
  C``, no NMS (CenterNet/DETR-style): the ``topk`` family (``best_k``) cuts before the TopK, and the selection
  is the K best (box, class) pairs: NMS at IoU 1 (nothing suppressed), no score threshold, K detections.
"""

import numpy as np

from trtkit.detect.decoders import topk
from trtkit.onnx.normalize import constant_value

_FLAT = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast")


def _ints(index, name):
    value = index.constants.get(name) if name else None
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def takes_image(index, node):
    """(whether ``node`` takes image 0 of the batch, whether it drops the batch axis): a ``Slice`` 0:1 of axis
    0, a ``Squeeze`` of axis 0, or a ``Gather`` of index 0 on axis 0 (a scalar index: the axis dropped)."""
    if node.op_type == "Slice" and len(node.input) > 3:
        steps = _ints(index, node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
        return (_ints(index, node.input[1]), _ints(index, node.input[2]), _ints(index, node.input[3]),
                steps) == ([0], [1], [0], [1]), False
    if node.op_type == "Squeeze":
        axes = _ints(index, node.input[1]) if len(node.input) > 1 else \
            next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
        return axes == [0], True
    if node.op_type == "Gather" and next((a.i for a in node.attribute if a.name == "axis"), 0) == 0:
        value = index.constants.get(node.input[1])
        return value is not None and np.asarray(value).ndim == 0 and int(value) == 0, True
    return False, False


def image_source(index, name):
    """(the batch's tensor, whether the batch axis was dropped) that ``name`` takes image 0 of, through the
    ``Slice`` and ``Squeeze`` (or ``Gather`` 0) a batch-1 export writes for ``x[0]``; (``name``, False) else."""
    node, dropped, found = index.producers.get(name), False, name
    for _ in range(4):
        if node is None:
            break
        took, drops = takes_image(index, node)
        if not took:
            break
        dropped, found = dropped or drops, node.input[0]
        node = index.producers.get(found)
    return found, dropped


def kept_count(model, start):
    """The detections per image after an NMS whose selected indices are ``start``: the smallest k of a
    ``TopK`` fed by them (a constant, or ``Min(count, k)`` as tf2onnx writes ``max_total_size``) or end of a
    ``Slice`` from 0 of their rows (``keep[:k]``; a Slice of the index columns is no count), or None."""
    index = topk.Index(model)
    consumers = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    seen, stack, found = set(), [start], []
    while stack:
        for node in consumers.get(stack.pop(), []):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type == "TopK" and len(node.input) > 1:
                k = topk.constant_k(index, node.input[1])
                if k is not None:
                    found.append(int(k))
            if node.op_type == "Slice" and len(node.input) > 2:  # keep[:k] (opset 10's Slice: inputs)
                starts, ends = _ints(index, node.input[1]), _ints(index, node.input[2])
                axes = _ints(index, node.input[3]) if len(node.input) > 3 and node.input[3] else [0]
                steps = _ints(index, node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
                if starts == [0] and ends is not None and len(ends) == 1 and axes == [0] and steps == [1] and \
                        0 < ends[0] < 2 ** 31:
                    found.append(ends[0])
            if node.op_type != "Shape":  # a count of the kept (num_detections) slices no rows
                stack.extend(node.output)
    return min(found) if found else None


def reduced_classes(model, scores):
    """(the per-class tensor, its class axis) when ``scores`` comes through reshapes from a ReduceMax over one
    axis (a best-class-per-box score), else None. tf2onnx writes ``reduce_max(scores, -1)`` of a batch's
    ``[N, A, C]`` as a ``GlobalMaxPool`` (over axis 2 of a 3-D tensor: taken for one only when its input is
    3-D by shape inference; a 4-D map's pooling is not a best class)."""
    producers = dict((out, node) for node in model.graph.node for out in node.output)
    node = producers.get(scores)
    for _ in range(8):
        if node is None or node.op_type not in _FLAT + ("Transpose", "ReduceMax", "GlobalMaxPool"):
            return None
        if node.op_type == "GlobalMaxPool":
            from trtkit.onnx.types import shapes
            dims = (shapes(model).get(node.input[0]) or (0, None))[1]
            return (node.input[0], 2) if dims is not None and len(dims) == 3 else None
        if node.op_type == "ReduceMax":
            axes = [list(a.ints) for a in node.attribute if a.name == "axes"]
            if not axes and len(node.input) > 1 and node.input[1]:
                found = constant_value(model, node.input[1])
                axes = [] if found is None else [[int(v) for v in np.asarray(found).reshape(-1)]]
            if len(axes) != 1 or len(axes[0]) != 1:
                return None
            source, dropped = image_source(topk.Index(model), node.input[0])  # x[0] of a batch-1 export
            return source, axes[0][0] + (1 if dropped and axes[0][0] >= 0 else 0)
        node = producers.get(node.input[0])
    return None


def loop_selection(model):
    """The top-level ``Loop`` nodes of a graph with no NonMaxSuppression anywhere (TensorFlow's
    ``non_max_suppression_padded``, a while loop in tf2onnx's export), or []."""
    if topk.nested(model):
        return []
    return _loops(model)


def _loops(model):
    return [n for n in model.graph.node if n.op_type == "Loop"]


def top_level_topks(model):
    return [n for n in model.graph.node if n.op_type == "TopK"]


def best_k(model):
    """Whether the graph keeps its best K detections by a ``TopK`` and has no NMS or loop (the ``topk``
    family's graphs)."""
    return bool(top_level_topks(model)) and not topk.nested(model) and not _loops(model)


def flat_scores(index, name):
    """The tensor a TopK's data ``name`` flattens (through reshapes and the image's ``x[0]``; not through a
    Transpose: the tensor's own order is the flat order, anchor-major ``[N, A, C]`` or class-major ``[N, C, A]``,
    which ``bestk`` leaves to the boxes' count), or None when something else is passed."""
    for _ in range(16):
        node = index.producers.get(name)
        if node is None or node.op_type not in _FLAT + ("Slice", "Gather"):
            return name
        if node.op_type in ("Slice", "Gather") and not takes_image(index, node)[0]:
            return None
        name = node.input[0]
    return None


def gathered_boxes(index, node):
    """The tensor whose rows a ``Gather`` (or ``GatherND``) takes by indices computed from the TopK's
    (``index // C``), through the image's ``x[0]``: the boxes; None unless exactly one."""
    flat = flat_scores(index, node.input[0])
    found = set()
    for other in index.nodes:
        if other.op_type in ("Gather", "GatherND") and len(other.input) > 1 and \
                node.output[1] in index.ancestors(other.input[1]) | {other.input[1]}:
            found.add(image_source(index, other.input[0])[0])
    found.discard(flat)
    return found.pop() if len(found) == 1 else None
