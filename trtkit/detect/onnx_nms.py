"""The host's selection (``select``) as ONNX operators after a detector's ``decoded`` output, for runtimes that run
``NonMaxSuppression`` (ONNX Runtime, OpenVINO, TensorRT's ONNX parser).

``append_nms(model, head)`` returns the model with four outputs instead of ``decoded``: ``det_boxes`` ``[N, K, 4]``
float32 (x1 y1 x2 y2, the model input's pixels), ``det_scores`` ``[N, K]`` float32, ``det_labels`` ``[N, K]``
int64 and ``det_count`` ``[N]`` int64, K = ``detections_per_img``. Each image's first ``det_count`` rows are its
detections, best first; the rows after are padding: boxes and scores 0, labels -1 (never a class index, so a
reader that forgets ``det_count`` cannot mistake a padding row for class 0). ``nms_graph(head, ...)`` is the same
selection as a model of its own, whose input is the ``decoded`` tensor (a TensorRT host can run the network in
one engine and this after it). The batch stays dynamic; everything is float32.

The graph, step by step as ``select``:

1. candidates: ``TopK`` of ``topk_candidates`` per level (RetinaNet: a level's flattened (anchor, class) scores;
   the level sizes come from ``head.level_sizes`` of the input's static height and width, or, where they are
   dynamic (``--image-sizes``), from the input's shape in the graph at each run: ``graph_level_sizes``) or per
   class (SSD, over the anchors); a score outside its group's top-k is replaced by the lowest float32, so NMS's
   own score threshold drops it. The background class is never a candidate (its column is left out, or
   lowered per level);
2. ``NonMaxSuppression`` per class (one class of every (anchor, class) pair when ``class_agnostic``) with the
   head's score threshold and IoU threshold, at most ``per_class`` kept per class (K, unless the head caps a
   class below it: TensorFlow's ``max_output_size_per_class``; no more can reach the best K of the image);
3. the best K kept of each image: ``TopK`` over a dense ``[N, classes x anchors]`` of the kept scores.

Where it can differ from ``select`` (and so from torchvision), read from the ONNX specification and its
reference implementation (``onnx.reference``, ``op_non_max_suppression.py``), which ONNX Runtime follows:

- the spec's text says boxes scoring *less than* ``score_threshold`` are removed, but the reference keeps only
  scores strictly *above* it, as torch does; both compare float32 with float32. A runtime that follows the
  text would also keep a score exactly equal to the threshold;
- the reference suppresses a box whose IoU is strictly above ``iou_threshold``, computed in float32 and
  compared with the float32 threshold. torchvision's CPU kernel compares the float IoU with the threshold in
  double, so the graph is given the threshold rounded *down* to float32 (``select.float32_threshold``): then
  float32 ``iou > t'`` holds exactly when ``iou > t`` in double (0.55 stays 0.55's decision). OpenVINO's CPU
  plugin (2026.4, measured in the tests) drops a box at an IoU *equal* to the threshold (an IoU of exactly 0.5
  at 0.5); ``equal_suppresses=True`` gives it the next float32 up instead, and then it decides as torch;
- the IoU's arithmetic: the reference orders each box's corners (min / max) and skips pairs that do not
  intersect; for boxes with x1 <= x2 and y1 <= y2 (what a detector decodes) the float32 operations are the
  kernel's. But torchvision, up to 1,000 candidates per image, shifts each label's boxes by ``label x (max +
  1)`` before one NMS, and a shifted box's IoU can round one bit differently: an IoU within a float32 step of
  the threshold can be decided differently. OpenVINO's own kernel computes the IoU with its own operations;
- ties: equal scores are visited lowest anchor first by NMS (the reference sorts by score, then index) and the
  final ``TopK`` keeps the lower flattened (class, anchor) index first; ``select`` orders ties by candidate
  order and torch's order on ties is its unstable sort's, so with equal scores the three can order (and, where
  tied boxes overlap, keep) differently.

``tests/test_detect_onnx_nms.py`` runs the graph in ONNX Runtime and OpenVINO on random detectors' outputs
and compares with ``select``.
"""

import numpy as np

from trtkit.detect.raw import BOX_COLUMNS, OUTPUT_NAME
from trtkit.detect.select import float32_threshold
from trtkit.errors import InputError

OUTPUTS = ("det_boxes", "det_scores", "det_labels", "det_count")
MIN_OPSET = 11  # NonMaxSuppression's float inputs, ScatterND, GatherND, TopK's largest / sorted
PREFIX = "trtkit_nms/"
LOWEST = float(np.finfo(np.float32).min)  # a score that is never a candidate


class _Graph(object):
    """Nodes and constants under unique names (``PREFIX``), for one opset."""

    def __init__(self, opset, equal_suppresses=False):
        from onnx import helper
        self.helper, self.opset, self.equal_suppresses = helper, opset, bool(equal_suppresses)
        self.nodes, self.constants, self.count = [], [], 0
        self.taken = set()  # the graph's own names (a graph with an earlier selection's kept in it)

    def name(self, hint):
        self.count += 1
        while "{}{}_{}".format(PREFIX, hint, self.count) in self.taken:
            self.count += 1
        return "{}{}_{}".format(PREFIX, hint, self.count)

    def const(self, values, dtype, hint="const"):
        from onnx import numpy_helper
        name = self.name(hint)
        self.constants.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def op(self, op_type, inputs, outputs=1, name=None, **attributes):
        names = [name] if name else [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), names, name=self.name(op_type), **attributes))
        return names[0] if outputs == 1 else names

    def unsqueeze(self, value, axes):
        if self.opset >= 13:
            return self.op("Unsqueeze", [value, self.const(axes, np.int64, "axes")])
        return self.op("Unsqueeze", [value], axes=list(axes))

    def reduce_sum(self, value, axis, name):
        if self.opset >= 13:
            return self.op("ReduceSum", [value, self.const([axis], np.int64, "axes")], name=name, keepdims=0)
        return self.op("ReduceSum", [value], name=name, axes=[axis], keepdims=0)

    def dim(self, value, axis):
        """A tensor's size along ``axis``, as an int64 ``[1]``."""
        shape = self.op("Shape", [value])
        return self.op("Slice", [shape, self.const([axis], np.int64), self.const([axis + 1], np.int64)])

    def lowest_like(self, shape):
        from onnx import TensorProto
        return self.op("ConstantOfShape", [shape],
                       value=self.helper.make_tensor("lowest", TensorProto.FLOAT, [1], [LOWEST]))

    def top_k(self, values, k, axis):
        return self.op("TopK", [values, k], outputs=2, axis=axis, largest=1, sorted=1)

    def kept_top_k(self, values, k, axis):
        """``values`` with all but the best ``k`` along ``axis`` lowered (ties: the lowest indices kept)."""
        best, index = self.top_k(values, k, axis)
        return self.op("ScatterElements", [self.lowest_like(self.op("Shape", [values])), index, best], axis=axis)

    def min_int(self, value, limit):
        """``min(value, limit)`` of an int64 ``[1]`` (through float below opset 12, where Min takes no int64)."""
        if self.opset >= 12:
            return self.op("Min", [value, self.const([limit], np.int64)])
        least = self.op("Min", [self.op("Cast", [value], to=1), self.const([limit], np.float32)])
        return self.op("Cast", [least], to=7)

    def ceil_div(self, value, divisor):
        """``ceil(value / divisor)`` of a positive int64 ``[1]`` (ONNX's integer Div truncates)."""
        return self.op("Div", [self.op("Add", [value, self.const([divisor - 1], np.int64)]),
                               self.const([divisor], np.int64)])

    def slice(self, value, start, stop, axis):
        return self.op("Slice", [value, self.const([start], np.int64), self.const([stop], np.int64),
                                 self.const([axis], np.int64)])


def _candidates(graph, scores, head, level_sizes):
    """``[N, C', A]`` scores of the detection classes, every score not a candidate lowered."""
    params, classes = head.postprocessing, head.detection_classes()
    count = head.num_classes
    if params.per_level:
        if head.background is not None:
            background = np.zeros(count, dtype=bool)
            background[head.background] = True
            scores = graph.op("Where", [graph.const(background, bool), graph.const([LOWEST], np.float32), scores])
        levels, start = [], 0
        for size in level_sizes:
            if isinstance(size, str):  # a graph value: computed from the input's height and width
                first = start if isinstance(start, str) else graph.const([start], np.int64)
                stop = graph.op("Add", [first, size])
                part = graph.op("Slice", [scores, first, stop, graph.const([1], np.int64)])
                k = graph.min_int(graph.op("Mul", [size, graph.const([count], np.int64)]), params.topk_candidates)
            else:
                stop = start + size
                part = graph.slice(scores, start, stop, 1)
                k = graph.const([min(params.topk_candidates, size * count)], np.int64, "k")
            kept = graph.kept_top_k(graph.op("Reshape", [part, graph.const([0, -1], np.int64)]), k, 1)
            levels.append(graph.op("Reshape", [kept, graph.const([0, -1, count], np.int64)]))
            start = stop
        scores = graph.op("Concat", levels, axis=1) if len(levels) > 1 else levels[0]
    if len(classes) < count:
        scores = graph.op("Gather", [scores, graph.const(classes, np.int64, "classes")], axis=2)
    by_class = graph.op("Transpose", [scores], perm=[0, 2, 1])
    if params.per_level:
        return by_class
    anchors = graph.op("Cast", [graph.dim(by_class, 2)], to=1)  # min(top-k, A): Min takes int64 from opset 12
    k = graph.op("Cast", [graph.op("Min", [anchors, graph.const([params.topk_candidates], np.float32)])], to=7)
    return graph.kept_top_k(by_class, k, 2)


def iou_threshold(threshold, equal_suppresses=False):
    """The float32 threshold to give NonMaxSuppression so that it drops a box exactly when torchvision's CPU
    kernel does (float32 IoU strictly above the double ``threshold``): ``threshold`` rounded down to float32 for
    a runtime that suppresses above it (the ONNX reference, ONNX Runtime), the next float32 up for one that
    suppresses at equality too (``equal_suppresses``: OpenVINO's CPU plugin, measured with 2026.4)."""
    rounded = float32_threshold(threshold)
    return np.nextafter(rounded, np.float32(np.inf)) if equal_suppresses else rounded


def _suppressed(graph, boxes, scores, head):
    """(selected ``[M, 3]`` (image, class position, anchor), their scores ``[M]``) kept by NMS."""
    params = head.postprocessing
    limits = [graph.const([params.per_class], np.int64, "max_per_class"),
              graph.const([iou_threshold(params.nms_thresh, graph.equal_suppresses)], np.float32, "iou_threshold"),
              graph.const([params.score_thresh], np.float32, "score_threshold")]
    if not params.class_agnostic:
        selected = graph.op("NonMaxSuppression", [boxes, scores] + limits, center_point_box=0)
        return selected, graph.op("GatherND", [scores, selected])
    # one class of every (anchor, class) pair: boxes [N, A x C', 4] (each anchor's box C' times), scores [N, 1, A x C']
    classes = len(head.detection_classes())
    pairs = graph.op("Reshape", [graph.op("Transpose", [scores], perm=[0, 2, 1]), graph.const([0, 1, -1], np.int64)])
    shape = graph.op("Concat", [graph.dim(boxes, 0), graph.dim(boxes, 1), graph.const([classes, 4], np.int64)], axis=0)
    repeated = graph.op("Reshape", [graph.op("Expand", [graph.unsqueeze(boxes, [2]), shape]),
                                    graph.const([0, -1, 4], np.int64)])
    selected = graph.op("NonMaxSuppression", [repeated, pairs] + limits, center_point_box=0)
    kept = graph.op("GatherND", [pairs, selected])
    image, pair = graph.slice(selected, 0, 1, 1), graph.slice(selected, 2, 3, 1)
    width = graph.const([classes], np.int64)
    triple = graph.op("Concat", [image, graph.op("Mod", [pair, width]), graph.op("Div", [pair, width])], axis=1)
    return triple, kept


def _best(graph, boxes, scores, selected, kept, head):
    """The four outputs: the best K kept per image, padded."""
    params, classes = head.postprocessing, head.detection_classes()
    limit = params.detections_per_img
    dense = graph.op("ScatterND", [graph.lowest_like(graph.op("Shape", [scores])), selected, kept])
    flat = graph.op("Reshape", [dense, graph.const([0, -1], np.int64)])  # [N, C' x A], class-major
    batch = graph.dim(boxes, 0)
    padding = graph.lowest_like(graph.op("Concat", [batch, graph.const([limit], np.int64)], axis=0))
    best, index = graph.top_k(graph.op("Concat", [flat, padding], axis=1), graph.const([limit], np.int64, "k"), 1)
    valid = graph.op("Greater", [best, graph.const([LOWEST], np.float32)])
    index = graph.op("Where", [valid, index, graph.const([0], np.int64)])
    anchors = graph.dim(boxes, 1)
    anchor, position = graph.op("Mod", [index, anchors]), graph.op("Div", [index, anchors])
    labels = graph.op("Gather", [graph.const(classes, np.int64, "classes"), position], axis=0)
    graph.op("Where", [valid, labels, graph.const([-1], np.int64)], name="det_labels")
    graph.op("Where", [valid, best, graph.const([0.0], np.float32)], name="det_scores")
    first = graph.op("Mul", [graph.unsqueeze(graph.op("Range", [graph.const(0, np.int64), graph.op(
        "Squeeze", [batch], axes=[0]) if graph.opset < 13 else graph.op("Squeeze", [batch, graph.const(
            [0], np.int64)]), graph.const(1, np.int64)]), [1]), anchors])  # each image's first row, [N, 1]
    rows = graph.op("Gather", [graph.op("Reshape", [boxes, graph.const([-1, 4], np.int64)]),
                               graph.op("Add", [first, anchor])], axis=0)  # [N, K, 4]
    graph.op("Where", [graph.unsqueeze(valid, [2]), rows, graph.const([0.0], np.float32)], name="det_boxes")
    graph.reduce_sum(graph.op("Cast", [valid], to=7), 1, "det_count")


def _nodes(graph, decoded, head, level_sizes):
    boxes = graph.slice(decoded, 0, BOX_COLUMNS, 2)
    scores = graph.slice(decoded, BOX_COLUMNS, BOX_COLUMNS + head.num_classes, 2)
    candidates = _candidates(graph, scores, head, level_sizes)
    selected, kept = _suppressed(graph, boxes, candidates, head)
    _best(graph, boxes, candidates, selected, kept, head)


def _outputs(helper, head):
    from onnx import TensorProto
    limit = head.postprocessing.detections_per_img
    return [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["N", limit, 4]),
            helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, ["N", limit]),
            helper.make_tensor_value_info("det_labels", TensorProto.INT64, ["N", limit]),
            helper.make_tensor_value_info("det_count", TensorProto.INT64, ["N"])]


def graph_level_sizes(graph, image, head):
    """``head.level_sizes`` as graph values (int64 ``[1]`` each) of the NCHW ``image`` input's own height and
    width: a model with dynamic H and W (``--image-sizes``) splits its anchors at the size it runs at, not at
    the size it was built at. The same arithmetic: pad to ``size_divisible``, then each stride's grid rounded
    up."""
    step = head.size_divisible
    padded = [graph.op("Mul", [graph.ceil_div(graph.dim(image, axis), step), graph.const([step], np.int64)])
              for axis in (2, 3)]
    return [graph.op("Mul", [graph.op("Mul", [graph.ceil_div(padded[0], stride), graph.ceil_div(padded[1], stride)]),
                             graph.const([count], np.int64)]) for stride, count in head.levels]


def _level_sizes(head, height, width, anchors, way_out, graph=None, image=None):
    """The anchors per level: numbers at a given or fixed size; graph values of ``image``'s shape (with
    ``graph``) when its H and W are dynamic."""
    if not head.postprocessing.per_level:
        return None
    if (not height or not width) and graph is not None and image is not None:
        return graph_level_sizes(graph, image, head)
    if not height or not width:
        raise InputError("per-level candidates (RetinaNet) need the input's height and width, and the graph's "
                         "are not fixed", hint=way_out)
    sizes = head.level_sizes(int(height), int(width))
    if anchors and sum(sizes) != anchors:
        raise InputError("the head's levels give {} anchors at {}x{}, the output has {}".format(
            sum(sizes), height, width, anchors), hint="give the input size the model was exported at")
    return sizes


def nms_graph(head, num_anchors=None, height=None, width=None, opset=13, equal_suppresses=False):
    """A model whose input is ``decoded`` ``[N, A, 4 + C]`` and whose outputs are ``OUTPUTS``: the selection
    alone. ``num_anchors`` (A) may be None (dynamic) for per-class heads; per-level heads need the input's
    ``height`` and ``width`` (the anchors of each level). ``equal_suppresses``: see ``iou_threshold``."""
    from onnx import TensorProto, checker, helper
    sizes = _level_sizes(head, height, width, num_anchors, "give nms_graph(head, num_anchors, height, width)")
    graph = _Graph(max(MIN_OPSET, int(opset)), equal_suppresses)
    _nodes(graph, OUTPUT_NAME, head, sizes)
    decoded = helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [
        "N", int(num_anchors) if num_anchors else (sum(sizes) if sizes else "A"), BOX_COLUMNS + head.num_classes])
    model = helper.make_model(helper.make_graph(graph.nodes, "trtkit_nms", [decoded], _outputs(helper, head),
                                                graph.constants),
                              opset_imports=[helper.make_opsetid("", graph.opset)], producer_name="trtkit")
    checker.check_model(model)
    return model


def _opset(model):
    return max([entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")] or [0])


def _static(dim):
    return int(dim.dim_value) if dim.HasField("dim_value") and dim.dim_value > 0 else None


def selects_in_graph(output_names):
    """Whether a model with these outputs selects its detections itself (it has ``OUTPUTS``)."""
    return set(OUTPUTS) <= set(output_names)


def graph_detections(outputs):
    """One ``Detections`` per image of a run's ``OUTPUTS`` ({name: array}): the first ``det_count`` rows of each
    (the rest is padding), in the model input's pixels."""
    from trtkit.detect.records import Detections
    found = []
    for index, count in enumerate(np.asarray(outputs["det_count"]).reshape(-1)):
        count = int(count)
        found.append(Detections(outputs["det_boxes"][index][:count], outputs["det_scores"][index][:count],
                                outputs["det_labels"][index][:count]))
    return found


def append_nms(model_proto, head, output_name=OUTPUT_NAME, height=None, width=None, equal_suppresses=False,
               keep_decoded=False):
    """A copy of ``model_proto`` whose outputs are ``OUTPUTS`` (the module's docstring), computed from its
    ``output_name`` output (``[N, A, 4 + C]``) as ``select`` selects. ``height`` / ``width``: the one input
    size to select at where the graph's image input does not fix it; None: a per-level head takes each run's
    own from the image input's shape (``graph_level_sizes``). A model below opset 11 is
    converted to 11 (NonMaxSuppression's inputs); at 11 or above its opset is kept. ``equal_suppresses``: True
    for a runtime whose NMS drops a box at an IoU equal to its threshold (OpenVINO; ``iou_threshold``).
    ``keep_decoded``: ``decoded`` stays the first output, before ``OUTPUTS`` (a build verifies every variant on
    it with the host's selection, and checks the graph's selection against that on the same run)."""
    import onnx
    from onnx import helper
    model = onnx.ModelProto()
    model.CopyFrom(model_proto)
    names = [output.name for output in model.graph.output]
    if output_name not in names:
        raise InputError("the model has no output '{}' (it has {})".format(output_name, names),
                         hint="give output_name= the detector's decoded output")
    if _opset(model) < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as error:  # the converter raises its own types
            raise InputError("the model is at opset {} and could not be converted to {}: {}".format(
                _opset(model), MIN_OPSET, error), hint="export it again at opset 11 or later")
    output = model.graph.output[names.index(output_name)]
    dims = list(output.type.tensor_type.shape.dim)
    if len(dims) == 3 and _static(dims[2]) not in (None, BOX_COLUMNS + head.num_classes):
        raise InputError("output '{}' has {} columns, the head's {} classes need {}".format(
            output_name, _static(dims[2]), head.num_classes, BOX_COLUMNS + head.num_classes),
            hint="the head is not this model's")
    initializers = set(init.name for init in model.graph.initializer)
    images = [value for value in model.graph.input if value.name not in initializers]
    image_dims = list(images[0].type.tensor_type.shape.dim) if images else []
    if height is None and len(image_dims) == 4:
        height, width = _static(image_dims[2]), _static(image_dims[3])
    graph = _Graph(_opset(model), equal_suppresses)
    graph.taken.update(name for node in model.graph.node for name in list(node.output) + [node.name])
    graph.taken.update(init.name for init in model.graph.initializer)
    sizes = _level_sizes(head, height, width, _static(dims[1]) if len(dims) == 3 else None,
                         "export the model at a fixed input size, or give append_nms(..., height=H, width=W) "
                         "of the size it will run at", graph, images[0].name if len(image_dims) == 4 else None)
    _nodes(graph, output_name, head, sizes)
    model.graph.node.extend(graph.nodes)
    model.graph.initializer.extend(graph.constants)
    kept = [value for value in model.graph.output if keep_decoded and value.name == output_name]
    del model.graph.output[:]
    model.graph.output.extend(kept + list(_outputs(helper, head)))
    onnx.checker.check_model(model)
    return model
