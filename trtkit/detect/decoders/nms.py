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
- ``class_agnostic``: true when the scores reach NMS through a ``ReduceMax`` over the classes (ultralytics'
  best class per box): the class scores before it are read instead, and NMS runs across classes;
- ``detections``: the detections per image: the smallest constant ``k`` of a ``TopK`` after the NMS (a
  best-K of the kept), else ``max_output_boxes_per_class`` per class (once when class-agnostic).

Boxes are not clipped: the graph's own NMS compared them as they are, and so does the host's.
"""

import numpy as np

from trtkit.detect.decoders.base import check_known, choice, fail, flag

PARAMS = ("boxes", "scores", "center_point_box", "order", "normalized", "class_agnostic", "score_layout",
          "iou_threshold", "score_threshold", "max_output_boxes_per_class", "detections")
_THROUGH = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast")
NORMALIZED_SPAN = 1.5  # a zero image's boxes within this: fractions of the input


def _constant(model, name):
    """The value of ``name`` when it is an initializer or a Constant node's output, else None."""
    from onnx import numpy_helper
    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            for attribute in node.attribute:
                if attribute.name == "value":
                    return numpy_helper.to_array(attribute.t)
    return None


def find(model):
    """The graph's NonMaxSuppression nodes."""
    return [node for node in model.graph.node if node.op_type == "NonMaxSuppression"]


def _reduced_classes(model, scores):
    """(the per-class tensor, its class axis) when ``scores`` comes through reshapes from a ReduceMax over one
    axis (a best-class-per-box score), else None."""
    producers = dict((out, node) for node in model.graph.node for out in node.output)
    node = producers.get(scores)
    for _ in range(8):
        if node is None or node.op_type not in _THROUGH + ("ReduceMax",):
            return None
        if node.op_type == "ReduceMax":
            axes = [list(a.ints) for a in node.attribute if a.name == "axes"]
            if not axes and len(node.input) > 1 and node.input[1]:
                found = _constant(model, node.input[1])
                axes = [] if found is None else [[int(v) for v in np.asarray(found).reshape(-1)]]
            if len(axes) != 1 or len(axes[0]) != 1:
                return None
            return node.input[0], axes[0][0]
        node = producers.get(node.input[0])
    return None


def _after(model, start):
    """The smallest constant ``k`` of a TopK fed (directly or not) by ``start``, or None."""
    consumers = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    seen, stack, found = set(), [start], []
    while stack:
        name = stack.pop()
        for node in consumers.get(name, []):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type == "TopK" and len(node.input) > 1:
                k = _constant(model, node.input[1])
                if k is not None and np.asarray(k).size == 1:
                    found.append(int(np.asarray(k).reshape(-1)[0]))
            stack.extend(node.output)
    return min(found) if found else None


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
        nodes = find(model)
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
            value = _constant(model, name) if name else np.asarray(default)
            if value is None and key not in given:
                raise fail("NonMaxSuppression's {} '{}' is computed in the graph, not a constant".format(key, name),
                           hint="pass --decoder-param {}=VALUE".format(key))
            if value is not None and np.asarray(value).size:
                read[key] = np.asarray(value).reshape(-1)[0].item()
        reduced = _reduced_classes(model, nms.input[1])
        if reduced is not None:
            read["scores"], read["class_axis"] = reduced
            read["class_agnostic"] = True
        detections = _after(model, nms.output[0])
        if detections is not None:
            read["detections"] = detections
        outputs = [o.name for o in model.graph.output]
        boxes, scores = given.get("boxes", read["boxes"]), given.get("scores", read["scores"])
        removed = keep_outputs(model, [boxes, scores])
        read["dropped"] = {"outputs": outputs, "nodes": removed, "nms": nms.name or nms.output[0]}
        read.update(given)
        return read

    def infer(self, outputs, input_hw, given):
        """The parameters, from ``cut``'s reading (``given``) and the cut graph's two outputs' shapes."""
        boxes, scores = outputs[0], outputs[1]
        if len(boxes.dims) != 3 or boxes.dims[2] != 4 or not isinstance(boxes.dims[1], int):
            raise fail("NonMaxSuppression's boxes input {} is not [N, A, 4]: trtkit cannot place this NMS".format(
                boxes), hint="export the detector with NMS on [N, A, 4] boxes, or cut it before (--decoder yolo)")
        anchors = boxes.dims[1]
        if "class_axis" in given:  # the class scores before a ReduceMax: the class axis is the reduced one
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
        detections = int(given.get("detections") or min(per_class * (1 if agnostic else classes), anchors * classes))
        return {"boxes": boxes.name, "scores": scores.name, "score_layout": layout, "num_classes": int(classes),
                "anchors": anchors, "center_point_box": int(given.get("center_point_box", 0)),
                "order": choice(given.get("order", "xyxy"), "order", ("xyxy", "yxyx")), "normalized": normalized,
                "class_agnostic": agnostic, "iou_threshold": float(given.get("iou_threshold", 0.0)),
                "score_threshold": float(given.get("score_threshold") or 0.0),
                "max_output_boxes_per_class": per_class, "detections": detections,
                "dropped": given.get("dropped")}

    def postprocessing(self, params):
        """NonMaxSuppression's own: its thresholds, every box a candidate, the graph's detections per image."""
        return {"score_thresh": params["score_threshold"], "nms_thresh": params["iou_threshold"],
                "detections_per_img": params["detections"], "topk_candidates": params["anchors"],
                "class_agnostic": params["class_agnostic"]}

    def background(self, params):
        return None

    def _scale(self, params, input_hw):
        height, width = input_hw
        return [width, height, width, height] if params["normalized"] else None

    def tail(self, tail, params, input_hw):
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
        return tail.op("Concat", [corners, scores], axis=-1)

    def reference(self, arrays, params, input_hw):
        """numpy, from the ONNX specification's NonMaxSuppression inputs (``center_point_box``)."""
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
        return np.concatenate([corners, scores], -1)
