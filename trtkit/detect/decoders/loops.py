"""A selection written as loops and branches with no NonMaxSuppression node: TensorFlow's
``tf.image.non_max_suppression_padded`` (TF Model Garden's and the TF2 Object Detection API's exports), read by
the graph's structure so ``nms`` can cut before it.

What tf2onnx 1.16 writes for it (read in ``tests/tf_exports.py``'s ``padded`` export): the scores and boxes
reshaped to ``[B, A]`` and ``[B, A, 4]``, an ``If`` that filters by ``scores > score_threshold`` (a ``Greater``
on a constant in its branch), an ``If`` that sorts (a ``TopK`` and ``GatherND``), a ``Pad`` to whole tiles,
the suppression ``Loop`` whose carried values are the boxes, the IoU threshold (its one float constant), the
count and the maximum output size, then a ``TopK`` and ``Gather`` of the kept indices, whose ``k`` is the
detections per image; the export's outputs gather the network's boxes, scores and labels by those indices.

How the network's tensors are found: the selection is every ``Loop`` and ``If`` at the top level and all that
is computed from them; the float tensors it reads from outside (as inputs, or from inside its branches and
bodies) are walked up through pure reshapes and the image's ``x[0]`` to the network's own: the boxes are the
one ``[N, A, 4]`` tensor reached, the scores the class scores a ``ReduceMax`` takes each box's best of (NMS
across classes, as TensorFlow's is on one score per box) or an ``[N, A, 1]`` tensor (one class). Where the NMS's
own Loop and Ifs read one of a kind, that one is taken (an export may return other boxes of the kept, clipped
ones); two candidates of either kind otherwise are refused in one line naming them (``--decoder-param boxes=`` /
``scores=`` picks one).
"""

import numpy as np

from trtkit.detect.decoders import tails, topk
from trtkit.detect.decoders.base import fail

_PURE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")  # views of the same values in the same order
_COMPARE = ("Greater", "GreaterOrEqual")
_REDUCED = ("ReduceMax", "GlobalMaxPool")  # each box's best class score
HINT = ("name the network's outputs: --decoder nms --decoder-param boxes=NAME --decoder-param scores=NAME, and "
        "iou_threshold, score_threshold, detections (class_agnostic=true for one score per box)")


def _outer(graph):
    """The tensors a subgraph reads from the scope around it (its nested subgraphs' too)."""
    made = set(i.name for i in graph.input) | set(i.name for i in graph.initializer)
    used = set()
    for node in graph.node:
        made.update(node.output)
        used.update(i for i in node.input if i)
        for attribute in node.attribute:
            if attribute.HasField("g"):
                used.update(_outer(attribute.g))
    return used - made


def _reads(node):
    return [i for i in node.input if i] + sorted(set().union(*[_outer(a.g) for a in node.attribute
                                                                if a.HasField("g")] or [set()]))


def selection(model):
    """The top-level nodes of the selection: every ``Loop`` and ``If`` and what is computed from them."""
    consumers = {}
    for node in model.graph.node:
        for name in _reads(node):
            consumers.setdefault(name, []).append(node)
    found, stack = [], [n for n in model.graph.node if n.op_type in ("Loop", "If")]
    seen = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        for out in node.output:
            stack.extend(consumers.get(out, []))
    return found


def _chain(index, name):
    """``name`` and the tensors above it through pure reshapes and the image's ``x[0]``, nearest first."""
    chain = [name]
    for _ in range(32):
        node = index.producers.get(chain[-1])
        if node is None or not (node.op_type in _PURE or tails.takes_image(index, node)[0]):
            break
        chain.append(node.input[0])
    return chain


def _batch_boxes(chain, types):
    """The topmost ``[N, A, 4]`` tensor of a chain, or None."""
    found = [t for t in chain if (types.get(t) or (0, None))[1] is not None and len(types[t][1]) == 3 and
             types[t][1][2] == 4 and isinstance(types[t][1][1], int)]
    return found[-1] if found else None


def _class_scores(model, index, chain, types):
    """(the class scores ``[N, A, C]``, their class axis) that a chain's tensors take each box's best of (a
    ``ReduceMax``, or tf2onnx's ``GlobalMaxPool`` of a 3-D tensor), or an ``[N, A, 1]`` tensor of the chain made
    by no reduction (one class), else None."""
    for tensor in chain:
        node = index.producers.get(tensor)
        if node is not None and node.op_type in _REDUCED:  # a GlobalMaxPool's rank is checked there
            return tails.reduced_classes(model, tensor)
    single = [t for t in chain if (types.get(t) or (0, None))[1] is not None and len(types[t][1]) == 3 and
              types[t][1][2] == 1 and not (index.producers.get(t) is not None and
                                           index.producers[t].op_type.startswith(("Reduce", "Global", "ArgM")))]
    return (single[-1], -1) if single else None


def _entering(model, nodes):
    """[(tensor, whether a Loop or If reads it)]: the tensors the selection ``nodes`` read from the network (not
    constants, not its own); those the NMS's Loop and Ifs read are its inputs, the others (the outputs' gathers)
    what the export returns of the kept."""
    index = topk.Index(model)
    made = set(o for node in nodes for o in node.output)
    found = {}
    for node in nodes:
        for name in _reads(node):
            if name not in made and name not in index.constants and not index.shape_only(name):
                found[name] = found.get(name, False) or node.op_type in ("Loop", "If")
    return index, sorted(found.items())


def _narrowed(found):
    """The names of ``[(name, read by the NMS)]``: the one the NMS reads when there is one, else all."""
    own = sorted(set(name for name, by_nms in found if by_nms))
    return own if len(own) == 1 else sorted(set(name for name, _ in found))


def _score_threshold(model, index, nodes, scores):
    """The constant ``c`` of the selection's ``scores > c`` (in a branch or at the top), for ``x >= c`` the
    float32 just below it; None when the selection has no such comparison (TensorFlow's default, no filter)."""
    found = set()
    for node in topk.all_nodes(nodes):
        if node.op_type in _COMPARE and len(node.input) == 2 and node.input[0] in scores:
            value = index.scalar(node.input[1])
            if value is None:  # a branch's own constant
                value = _local_scalar(nodes, node.input[1])
            if value is not None:
                found.add(topk.single(value) if node.op_type == "Greater" else
                          float(np.nextafter(np.float32(value), np.float32(-np.inf))))
    return found


def _local_scalar(nodes, name):
    """A one-value constant defined inside one of the selection's branches or bodies, else None."""
    from onnx import numpy_helper
    for node in topk.all_nodes(nodes):
        for attribute in node.attribute:
            if attribute.HasField("g"):
                for init in attribute.g.initializer:
                    if init.name == name:
                        value = numpy_helper.to_array(init)
                        return value.reshape(-1)[0].item() if value.size == 1 else None
        if node.op_type == "Constant" and node.output[0] == name:
            value = numpy_helper.to_array(node.attribute[0].t)
            return value.reshape(-1)[0].item() if value.size == 1 else None
    return None


def read(model, given):
    """What ``nms``'s cut needs of a graph selecting in a ``Loop``: boxes, scores (and their class axis),
    class-agnostic, and the thresholds and detections read from the selection unless ``given``."""
    loops = tails.loop_selection(model)
    nodes = selection(model)
    index, entering = _entering(model, nodes)
    from trtkit.onnx.types import shapes
    types = shapes(model)
    boxes, scores = [], []
    for name, by_nms in entering:
        if (types.get(name) or (0, None))[0] != 1:  # float32 only: labels, masks and counts are not read
            continue
        chain = _chain(index, name)
        classes = _class_scores(model, index, chain, types)
        if classes is not None:
            scores.append((classes, chain, by_nms))
            continue
        found = _batch_boxes(chain, types)
        if found is not None:
            boxes.append((found, by_nms))
    what = "--decoder nms: the graph selects in a Loop ('{}': a while loop, as tf2onnx writes TensorFlow's " \
        "non_max_suppression_padded) and has no NonMaxSuppression node".format(loops[0].name or loops[0].output[0])
    box_names = _narrowed(boxes)
    score_names = _narrowed([(found[0], by_nms) for found, _, by_nms in scores])
    if "boxes" not in given and len(box_names) != 1 or "scores" not in given and len(score_names) != 1:
        if not box_names or not score_names:
            raise fail(what + ": trtkit finds no [N, A, 4] boxes and per-box scores entering it (boxes: {}; "
                       "scores: {})".format(", ".join(box_names) or "none", ", ".join(score_names) or "none"),
                       hint=HINT)
        raise fail(what + ": more than one network tensor enters it (boxes: {}; scores: {})".format(
            ", ".join(box_names), ", ".join(score_names)),
            hint="pick them: --decoder-param boxes=NAME --decoder-param scores=NAME")
    read = {"boxes": given.get("boxes", box_names[0] if box_names else None)}
    if "scores" in given:
        read.update(scores=given["scores"], class_axis=-1)
    else:
        read["scores"], read["class_axis"] = next(found for found, _, _ in scores if found[0] == score_names[0])
        read["class_agnostic"] = True  # one score per box (the best class's), as TensorFlow's NMS takes
    picked = read["scores"]
    per_box = set(t for (found, chain, _) in scores if found[0] == picked or "scores" in given for t in chain)
    thresholds = _score_threshold(model, index, nodes, per_box)
    if len(thresholds) > 1 and "score_threshold" not in given:
        raise fail(what + ": its score thresholds {} differ".format(sorted(thresholds)),
                   hint="pass --decoder-param score_threshold=VALUE")
    # no comparison: TensorFlow's default (-inf, no filter), which a score above 0 (a probability) passes too
    read["score_threshold"] = thresholds.pop() if len(thresholds) == 1 else 0.0
    ious = set(index.scalar(i) for loop in loops for i in loop.input[2:]
               if i in index.constants and np.asarray(index.constants[i]).dtype.kind == "f" and
               np.asarray(index.constants[i]).size == 1)
    if len(ious) == 1:
        read["iou_threshold"] = topk.single(ious.pop())
    elif "iou_threshold" not in given:
        raise fail(what + ": trtkit reads no one IoU threshold among its Loop's constants ({})".format(
            sorted(ious) or "none"), hint="pass --decoder-param iou_threshold=VALUE")
    counts = [c for c in (tails.kept_count(model, out) for loop in loops for out in loop.output) if c]
    if counts:
        read["detections"] = min(counts)
    elif "detections" not in given:
        raise fail(what + ": no constant number of detections per image (a TopK or Slice) follows it",
                   hint="pass --decoder-param detections=N")
    read["loop"] = loops[0].name or loops[0].output[0]
    return read
