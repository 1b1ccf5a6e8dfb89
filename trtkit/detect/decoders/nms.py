"""``nms``: a graph that selects its own detections (an ONNX ``NonMaxSuppression`` inside: ultralytics'
``nms=True``, torchvision's and TensorFlow's exports, trtkit's own ``append_nms``), cut at the NMS's inputs.

Why cut rather than build the graph as it is: calibrating and quantizing a graph whose tail indexes, gathers
and pads would quantize what is no network (and TensorRT 8.2 and TensorRT-RTX cannot run NonMaxSuppression at
all). So ``cut`` keeps the network up to NonMaxSuppression's ``boxes`` ``[N, A, 4]`` and ``scores`` ``[N, C, A]``
and drops everything after; ``tail`` rebuilds trtkit's ``decoded`` ``[N, A, 4 + C]`` from them with weightless
FP32 ops (so ``qdq_place.float_tail`` keeps it float), and the NMS's own constant inputs become the head's
post-processing. The selection is then placed per backend as for trtkit's own detectors.

What is read from the graph (each can be given with ``--decoder-param``):

- ``center_point_box``: 1: boxes are cx cy w h; 0: two corners, in ``order`` ``yxyx`` (the ONNX specification's
  and TensorFlow's; the default for a channels-last input) or ``xyxy`` (what torch exporters and trtkit pass:
  NMS's IoU is the same either way; the default for a channels-first input);
- ``normalized``: boxes as fractions of the input (TensorFlow's), scaled by its width and height; read as
  true when every box value of a run on a zero image is within 0-1.5;
- ``iou_threshold``, ``score_threshold``, ``max_output_boxes_per_class``: NonMaxSuppression's constant inputs
  (absent: the specification's defaults, 0, no threshold, all boxes);
- ``class_agnostic``: true when the scores reach NMS through a ``ReduceMax`` over the classes (a best class per
  box): the class scores before it are read instead, and NMS runs across classes; false when the boxes are
  shifted apart by class (below), which makes the one NMS a per-class one;
- ``class_offset``, ``best_class``: a per-class NMS written as one NMS on boxes shifted by ``class index x a
  constant`` (ultralytics' ``nms=True``: ``class / C`` on boxes scaled by ``1 / imgsz / C``; its python NMS's and
  torchvision's ``batched_nms``'s ``class x max_wh``), seen as an ``Add`` whose other operand comes from an
  ``ArgMax``: the shifted tensor holds no boxes (every class but 0 lies off the image), so the cut
  reads the ``Add``'s box operand (``class_offset`` names the offset tensor) and NMS runs per class. When the
  scores are a best class per box (``ReduceMax``), ``best_class`` keeps in ``decoded`` only each box's best class
  score (the others 0), so a box is a candidate of its best class alone, as there;
- ``candidate_threshold``: the ``c`` of an exporter's own candidate filter between the network and the NMS (a
  per-image ``GatherND`` of ``NonZero(score > c)``, ultralytics' ``conf``; ``score >= c`` is read as the
  float32 just below ``c``; a constant scale of the boxes there, the boxes' ``/ imgsz / C``, changes no IoU):
  the cut reads the tensors before it, ``c`` becomes ``score_threshold`` (the larger of the two when NMS has its
  own);
- ``detections``: the detections per image (``tails.kept_count``): the smallest ``k`` of a ``TopK`` after the NMS
  (a best-K of the kept; tf2onnx's ``Min(count, max_total_size)``) or of a ``Slice`` from 0 to ``k`` of the kept
  rows (ultralytics' ``keep[:max_det]``), else
  ``max_output_boxes_per_class`` per class (once when class-agnostic or ``best_class``: NMS saw one score per
  box, its one "class" all of them). ``max_output_boxes_per_class`` is also the head's ``max_per_class`` (not
  when NMS saw one score per box): below ``detections`` (TensorFlow's ``combined_non_max_suppression`` with
  ``max_output_size_per_class < max_total_size``) each class keeps at most that many, as in the graph.

Boxes are not clipped: the graph's own NMS compared them as they are, and so does the host's.
"""

import numpy as np

from trtkit.detect.decoders import tails, topk
from trtkit.detect.decoders.base import check_known, choice, fail, flag
from trtkit.errors import InputError
from trtkit.onnx.normalize import constant_value as _constant

PARAMS = ("boxes", "scores", "center_point_box", "order", "normalized", "class_agnostic", "best_class",
          "score_layout", "iou_threshold", "score_threshold", "max_output_boxes_per_class", "detections")
_THROUGH = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast")
NORMALIZED_SPAN = 1.5  # a zero image's boxes within this: fractions of the input
CLASS_INDEX_DEPTH = 10  # how far up an Add's operand an ArgMax makes it a class offset


def find(model):
    """The graph's NonMaxSuppression nodes."""
    return [node for node in model.graph.node if node.op_type == "NonMaxSuppression"]


def inside(model):
    """Whether the graph selects with a NonMaxSuppression: at its top level, or in a branch (torchvision's sits
    in an ``If`` that skips an empty candidate set)."""
    return bool(find(model) or topk.nested(model))


def _scalar(model, name):
    """A one-value constant's float, else None."""
    value = _constant(model, name) if name else None
    return None if value is None or np.asarray(value).size != 1 else float(np.asarray(value).reshape(-1)[0])


def _argmax_depth(producers, name):
    """How many nodes up from ``name`` the nearest ArgMax is (a class index), or None within
    ``CLASS_INDEX_DEPTH``."""
    frontier, seen = [name], set()
    for depth in range(CLASS_INDEX_DEPTH):
        step = []
        for tensor in frontier:
            node = producers.get(tensor)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type == "ArgMax":
                return depth
            step.extend(i for i in node.input if i)
        frontier = step
    return None


def _whole_slice(model, node, shapes):
    """Whether a Slice keeps its input whole (``boxes[:, :4]`` of ``[K, 4]`` boxes): starts 0, steps 1, ends at
    or past each sliced axis's known size."""
    if len(node.input) < 3:
        return False
    starts, ends = _constant(model, node.input[1]), _constant(model, node.input[2])
    axes = _constant(model, node.input[3]) if len(node.input) > 3 and node.input[3] else None
    steps = _constant(model, node.input[4]) if len(node.input) > 4 and node.input[4] else None
    dims = shapes().get(node.input[0])
    if starts is None or ends is None or dims is None or np.asarray(starts).any() or \
            (steps is not None and np.any(np.asarray(steps) != 1)):
        return False
    axes = range(len(np.asarray(ends).reshape(-1))) if axes is None else np.asarray(axes).reshape(-1)
    for axis, end in zip(axes, np.asarray(ends).reshape(-1)):
        size = dims[int(axis) % len(dims)] if dims else None
        if not isinstance(size, int) or size <= 0 or end < size:
            return False
    return True


def _shapes(model):
    """A function answering ``{tensor: [dims]}`` (ints where known) of ``model``'s inferred shapes, inferred once
    when first asked."""
    found = []

    def shapes():
        if not found:
            from onnx import shape_inference
            inferred = shape_inference.infer_shapes(model)
            dims = {}
            for info in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
                if info.type.tensor_type.HasField("shape"):
                    dims[info.name] = [d.dim_value if d.HasField("dim_value") else None
                                       for d in info.type.tensor_type.shape.dim]
            found.append(dims)
        return found[0]
    return shapes


def _unwind(model, name, boxes):
    """(the tensor, what was passed) up from NonMaxSuppression's ``boxes`` (``boxes`` true) or ``scores`` input
    ``name`` through what an exporter puts between its network and one NMS: reshapes; a per-image candidate
    filter (``GatherND`` of ``NonZero(x > c)``: ``candidate_threshold`` c) and the image's ``Gather`` (index 0 on
    axis 0); for boxes, a constant positive scale (no IoU changes), a whole ``Slice`` and a class offset (an
    ``Add`` with an operand nearer an ``ArgMax``: ``class_offset``, the box operand followed). The tensor answered
    is the one just above the last filter, image ``Gather`` or offset passed (``name`` when none): the walk goes
    on through reshapes and scales only to find one, since above the exporter's last step they are the
    network's own (a Transpose to ``[N, A, 4]``, a scale to pixels)."""
    producers = dict((out, node) for node in model.graph.node for out in node.output)
    shapes, passed, found = _shapes(model), {}, name

    def filtered(indices):  # an exporter's candidate filter's threshold (x > c, or x >= c), or None
        return topk.filter_threshold(producers, lambda tensor: _scalar(model, tensor), indices)
    for _ in range(64):
        node = producers.get(name)
        if node is None:
            break
        op, inputs = node.op_type, list(node.input)
        if op in _THROUGH:
            name = inputs[0]
        elif op == "GatherND" and len(inputs) == 2 and filtered(inputs[1]) is not None:
            passed["candidate_threshold"] = filtered(inputs[1])
            name = found = inputs[0]
        elif op == "Gather" and _scalar(model, inputs[1]) == 0 and np.asarray(_constant(model, inputs[1])).ndim == 0 \
                and next((a.i for a in node.attribute if a.name == "axis"), 0) == 0:
            name = found = inputs[0]  # image 0 of a per-image loop (a batch-1 export); the cut keeps every image
        elif not boxes:
            break
        elif op == "Mul" and len(inputs) == 2 and any((_scalar(model, i) or 0) > 0 for i in inputs):
            name = inputs[1] if (_scalar(model, inputs[0]) or 0) > 0 else inputs[0]
        elif op == "Div" and len(inputs) == 2 and (_scalar(model, inputs[1]) or 0) > 0:
            name = inputs[0]
        elif op == "Slice" and _whole_slice(model, node, shapes):
            name = inputs[0]
        elif op == "Add" and len(inputs) == 2 and "class_offset" not in passed:
            depths = [_argmax_depth(producers, i) for i in inputs]
            if depths[0] is None and depths[1] is None or depths[0] == depths[1]:
                break
            offset = 0 if depths[1] is None or (depths[0] is not None and depths[0] < depths[1]) else 1
            passed["class_offset"] = inputs[offset]
            name = found = inputs[1 - offset]
        else:
            break
    return found, passed


class Nms(object):
    name = "nms"
    summary = "a graph with NonMaxSuppression inside, cut at its boxes and scores (the selection read from it)"

    def cut(self, model, given):
        """``model`` (in place) ending at its NMS's boxes and class scores instead of its selection; returns
        ``given`` over what was read from the graph (the family's parameters) and ``dropped``: the outputs
        and the node count the cut removed. One ``InputError`` line when there is no NMS to cut at."""
        from trtkit.onnx.load import keep_outputs
        from trtkit.onnx.layout import is_nhwc
        check_known(given, PARAMS, self.name)
        held = topk.nested(model)
        if len(held) == 1:  # NMS on top-k candidates (torchvision's): cut where its selection starts
            try:
                found = topk.read(model, held[0][0], given)
            except InputError:
                if held[0][0] is not held[0][1]:  # in a branch: the NMS's own inputs cannot be cut at either
                    raise
                found = None  # at the top level: a top-k the plain cut reads through (trtkit's append_nms)
            if found is not None:
                return self._cut_candidates(model, held[0], found, given)
        nodes = find(model)
        if not nodes and len(held) > 1:
            raise fail("--decoder nms: the graph's {} NonMaxSuppression nodes sit in branches (an If each: one per "
                       "image of a batch-{} export?); trtkit cuts at one".format(len(held), len(held)),
                       hint="export the detector with one image ([1, 3, H, W])")
        if not nodes and held:
            raise fail("--decoder nms: the graph's NonMaxSuppression sits in a branch (an If) and no top-k "
                       "candidates feed it: trtkit cannot cut there", hint="pass --decoder yolo|priors|dfl or your "
                       "own --decoder module:function for the graph's raw outputs")
        if not nodes and tails.loop_selection(model):  # TensorFlow's non_max_suppression_padded: read by structure
            from trtkit.detect.decoders import loops
            return self._cut_named(model, dict(loops.read(model, given), **given))
        if not nodes and "boxes" in given and "scores" in given:  # the user's reading: cut at the tensors named
            return self._cut_named(model, given)
        if not nodes:
            raise fail("--decoder nms: the graph has no NonMaxSuppression node to cut at",
                       hint="pass --decoder dfl|priors|yolo for a graph that ends in raw heads")
        if len(set((n.input[0], n.input[1]) for n in nodes)) > 1:
            raise fail("--decoder nms: the graph has {} NonMaxSuppression nodes on different boxes and scores; "
                       "trtkit cuts at one".format(len(nodes)), hint="export the detector with one NMS")
        nms = nodes[0]
        read = {"boxes": nms.input[0], "scores": nms.input[1], "class_agnostic": False}
        read["center_point_box"] = int(next((a.i for a in nms.attribute if a.name == "center_point_box"), 0))
        read["order"] = "yxyx" if is_nhwc(model) else "xyxy"  # TensorFlow's corners for its channels-last graphs
        for index, key, default in ((2, "max_output_boxes_per_class", 0), (3, "iou_threshold", 0.0),
                                    (4, "score_threshold", None)):
            name = nms.input[index] if len(nms.input) > index else ""
            value = _constant(model, name) if name else default
            if value is None and name and key not in given:
                raise fail("NonMaxSuppression's {} '{}' is computed in the graph, not a constant".format(key, name),
                           hint="pass --decoder-param {}=VALUE".format(key))
            if value is not None and np.asarray(value).size:  # an absent score_threshold: none
                read[key] = np.asarray(value).reshape(-1)[0].item()
        boxes, passed = _unwind(model, nms.input[0], boxes=True)
        scores, filtered = _unwind(model, nms.input[1], boxes=False)
        passed.update(filtered)
        if passed:  # only an exporter's offset or filter is looked through: else the NMS's inputs as they are
            read["boxes"], read["scores"] = boxes, scores
            read["class_offset"] = passed.get("class_offset")
        if passed.get("candidate_threshold") is not None:
            read["candidate_threshold"] = passed["candidate_threshold"]
            read["score_threshold"] = max(read.get("score_threshold") or 0.0, passed["candidate_threshold"])
        reduced = tails.reduced_classes(model, read["scores"])
        if reduced is not None:
            read["scores"], read["class_axis"] = reduced
            read["class_agnostic"] = "class_offset" not in passed  # shifted apart by class: NMS per class
            read["best_class"] = "class_offset" in passed
        detections = tails.kept_count(model, nms.output[0])
        if detections is not None:
            read["detections"] = detections
        outputs = [o.name for o in model.graph.output]
        boxes, scores = given.get("boxes", read["boxes"]), given.get("scores", read["scores"])
        removed = keep_outputs(model, [boxes, scores])
        read["dropped"] = {"outputs": outputs, "nodes": removed, "nms": nms.name or nms.output[0]}
        read.update(given)
        return read

    def _cut_named(self, model, given):
        """``cut`` at the boxes and scores named (by the user, or read by ``loops`` around a selection in a Loop)."""
        from trtkit.onnx.layout import is_nhwc
        from trtkit.onnx.load import keep_outputs
        read = {"center_point_box": 0, "order": "yxyx" if is_nhwc(model) else "xyxy", "class_agnostic": False,
                "class_axis": -1}  # scores [N, A, C] as a network writes them (NMS's own [N, C, A]: score_layout)
        made = set(o for node in model.graph.node for o in node.output)
        for key in ("boxes", "scores"):
            if given[key] not in made:
                raise fail("--decoder-param {}={}: the graph has no such tensor".format(key, given[key]))
        outputs = [o.name for o in model.graph.output]
        removed = keep_outputs(model, [given["boxes"], given["scores"]])
        read["dropped"] = {"outputs": outputs, "nodes": removed, "nms": given.pop("loop", None)}
        read.update(given)
        return read

    def _cut_candidates(self, model, held, read, given):
        """``cut`` of a graph whose NMS runs on top-k candidates (``topk``): at the head's class logits and box
        regression; the NMS's IoU threshold and the detections after it (``keep[:k]``) read here."""
        from trtkit.onnx.load import keep_outputs
        nms, holder = held
        iou = topk.Index(model).scalar(nms.input[3]) if len(nms.input) > 3 and nms.input[3] else 0.0
        read["iou_threshold"] = topk.single(iou or 0.0)
        detections = tails.kept_count(model, holder.output[0])
        if detections is None:
            raise fail("no constant number of detections per image (a Slice or TopK) follows the graph's NMS",
                       hint="pass --max-detections N")
        read["detections"] = detections
        outputs = [o.name for o in model.graph.output]
        removed = keep_outputs(model, [read["boxes"], read["scores"]])
        read["dropped"] = {"outputs": outputs, "nodes": removed, "nms": nms.name or nms.output[0]}
        read.update(given)
        return read

    def infer(self, outputs, input_hw, given):
        """The parameters, from ``cut``'s reading (``given``) and the cut graph's two outputs' shapes."""
        if given.get("selection") == topk.SELECTION:
            return topk.infer(outputs, input_hw, given)
        boxes, scores = outputs[0], outputs[1]
        if len(boxes.dims) != 3 or boxes.dims[2] != 4 or not isinstance(boxes.dims[1], int):
            raise fail("NonMaxSuppression's boxes input {} is not [N, A, 4]: trtkit cannot place this NMS".format(
                boxes), hint="export the detector with NMS on [N, A, 4] boxes, or cut it before (--decoder yolo)")
        anchors = boxes.dims[1]
        if given.get("class_axis") == "auto":  # ``topk``'s flattened scores: the axis that is not the anchors'
            dims = scores.dims
            flipped = len(dims) == 3 and dims[2] == anchors and dims[1] != anchors
            layout = "classes_first" if flipped else "anchors_first"
        elif "class_axis" in given:  # the class scores before a ReduceMax: the class axis is the reduced one
            axis = given["class_axis"] % max(1, len(scores.dims))
            layout = "classes_first" if axis == 1 else "anchors_first"
        else:
            layout = "classes_first"  # NonMaxSuppression's own [N, C, A]
        layout = choice(given.get("score_layout", layout), "score_layout", ("classes_first", "anchors_first"))
        dims = scores.dims if len(scores.dims) == 3 else [None, None, None]
        classes, rows = (dims[1], dims[2]) if layout == "classes_first" else (dims[2], dims[1])
        if rows != anchors or not isinstance(classes, int):
            raise fail("NonMaxSuppression's scores {} do not hold C classes for the {} boxes of {}".format(
                scores, anchors, boxes), hint="trtkit cannot place this NMS: export it on [N, C, A] scores")
        normalized = flag(given["normalized"], "normalized") if "normalized" in given else \
            boxes.span is not None and boxes.span <= NORMALIZED_SPAN and min(input_hw) > 2 * NORMALIZED_SPAN
        agnostic = flag(given.get("class_agnostic", False), "class_agnostic")
        per_class = int(given.get("max_output_boxes_per_class", 0)) or anchors
        single = agnostic or flag(given.get("best_class", False), "best_class")  # NMS saw one score per box
        detections = int(given.get("detections") or min(per_class * (1 if single else classes), anchors * classes))
        return {"boxes": boxes.name, "scores": scores.name, "score_layout": layout, "num_classes": int(classes),
                "anchors": anchors, "center_point_box": int(given.get("center_point_box", 0)),
                "order": choice(given.get("order", "xyxy"), "order", ("xyxy", "yxyx")), "normalized": normalized,
                "class_agnostic": agnostic, "best_class": flag(given.get("best_class", False), "best_class"),
                "class_offset": given.get("class_offset"), "candidate_threshold": given.get("candidate_threshold"),
                "iou_threshold": float(given.get("iou_threshold", 0.0)),
                "score_threshold": float(given.get("score_threshold") or 0.0),
                "max_output_boxes_per_class": per_class, "detections": detections,
                "dropped": given.get("dropped")}

    def postprocessing(self, params):
        """NonMaxSuppression's own: its thresholds, every box a candidate, the graph's detections per image."""
        if params.get("selection") == topk.SELECTION:
            return topk.postprocessing(params)
        single = params["class_agnostic"] or params.get("best_class")  # one NMS class: the total caps it
        return {"score_thresh": params["score_threshold"], "nms_thresh": params["iou_threshold"],
                "detections_per_img": params["detections"], "topk_candidates": params["anchors"],
                "class_agnostic": params["class_agnostic"],
                "max_per_class": None if single else params.get("max_output_boxes_per_class")}

    def background(self, params):
        return params.get("background")

    def _scale(self, params, input_hw):
        height, width = input_hw
        return [width, height, width, height] if params["normalized"] else None

    def tail(self, tail, params, input_hw):
        if params.get("selection") == topk.SELECTION:
            return topk.tail(tail, params, input_hw)
        boxes, scale = params["boxes"], self._scale(params, input_hw)
        if params["center_point_box"]:
            corners = tail.centre_size_to_corners(tail.columns(boxes, 0, 2), tail.columns(boxes, 2, 4))
        else:
            if params["order"] == "yxyx":
                boxes = tail.op("Gather", [boxes, tail.const([1, 0, 3, 2], np.int64, "xyxy")], axis=-1)
            first, second = tail.columns(boxes, 0, 2), tail.columns(boxes, 2, 4)  # any diagonal pair
            corners = tail.op("Concat", [tail.op("Min", [first, second]), tail.op("Max", [first, second])], axis=-1)
        if scale:
            corners = tail.op("Mul", [corners, tail.const(scale)])
        scores = params["scores"]
        if params["score_layout"] == "classes_first":
            scores = tail.op("Transpose", [scores], perm=[0, 2, 1])
        if params.get("best_class"):  # each box's best class score alone: scores x (scores == their max)
            best = tail.op("ReduceMax", [scores, tail.const([-1], np.int64, "axes")], keepdims=1) \
                if tail.opset >= 18 else tail.op("ReduceMax", [scores], axes=[-1], keepdims=1)
            scores = tail.op("Mul", [scores, tail.op("Cast", [tail.op("Equal", [scores, best])], to=1)])
        return tail.op("Concat", [corners, scores], axis=-1)

    def reference(self, arrays, params, input_hw):
        """numpy, from the ONNX specification's NonMaxSuppression inputs (``center_point_box``)."""
        if params.get("selection") == topk.SELECTION:
            return topk.reference(arrays, params, input_hw)
        boxes = np.asarray(arrays[params["boxes"]], dtype=np.float64)
        if params["center_point_box"]:
            centre, size = boxes[..., :2], boxes[..., 2:]
            corners = np.concatenate([centre - size / 2, centre + size / 2], -1)
        else:
            if params["order"] == "yxyx":
                boxes = boxes[..., [1, 0, 3, 2]]
            corners = np.concatenate([np.minimum(boxes[..., :2], boxes[..., 2:]),
                                      np.maximum(boxes[..., :2], boxes[..., 2:])], -1)
        scale = self._scale(params, input_hw)
        if scale:
            corners = corners * np.asarray(scale, dtype=np.float64)
        scores = np.asarray(arrays[params["scores"]], dtype=np.float64)
        if params["score_layout"] == "classes_first":
            scores = scores.transpose(0, 2, 1)
        if params.get("best_class"):
            scores = scores * (scores == scores.max(axis=-1, keepdims=True))
        return np.concatenate([corners, scores], -1)
