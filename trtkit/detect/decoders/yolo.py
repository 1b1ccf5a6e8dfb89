"""``yolo``: centre-size boxes already in input pixels, then class scores, as ultralytics exports write them.

Two layouts, told apart by shape (the anchor axis is the long one): YOLOv8/v11 ``[N, 4 + C, A]`` (transposed,
no objectness, class scores already sigmoids) and YOLOv5 ``[N, A, 5 + C]`` (cx cy w h, objectness, class
scores; a class's score is objectness times class score, as v5's ``non_max_suppression`` multiplies them).
``objectness=true|false`` overrides the layout's default; ``activation=sigmoid`` applies a sigmoid to raw
scores (an export cut before its activations), default none (ultralytics' exports end in probabilities).

Box coding: ``coding=pixels`` (default: ultralytics' exports, cx cy w h in input pixels) or ``coding=grid``
(YOLOX exported without its decoding, as ddddocr's detector: raw x, y offsets and log w, log h per cell,
levels one after the other, each row by row; centre ``(xy + cell) * stride``, size ``exp(wh) * stride``).
Grid is read from the graph when the output concatenates a Conv's box columns with Sigmoid scores; its
``strides`` (default: the run of 8, 16, 32, 64 whose ceil grids at the input size add up to A) can be given.
"""

import numpy as np

from trtkit.detect.decoders.base import CANDIDATE_STRIDES, cell_centres, check_known, choice, clip_corners, fail, \
    flag, grid, ints, named, sigmoid, stride_runs

PARAMS = ("output", "objectness", "activation", "coding", "strides")


class Yolo(object):
    name = "yolo"
    summary = "ultralytics YOLO outputs: v8/v11 [N, 4 + C, A] or v5 [N, A, 5 + C] (cx cy w h in pixels)"

    def infer(self, outputs, input_hw, given):
        check_known(given, PARAMS, self.name)
        output = named(outputs, given["output"], "output") if "output" in given else outputs[0]
        if len(outputs) > 1 and "output" not in given:
            wide = [o for o in outputs if len(o.dims) == 3]
            if len(wide) != 1:
                raise fail("yolo reads one [N, 4 + C, A] or [N, A, 5 + C] output; the graph has {}".format(
                    ", ".join(repr(o) for o in outputs)), hint="pass --decoder-param output=NAME")
            output = wide[0]
        dims = output.dims
        if len(dims) != 3 or not all(isinstance(d, int) for d in dims[1:]):
            raise fail("yolo reads a [N, 4 + C, A] or [N, A, 5 + C] output with fixed sizes; {} is not".format(
                output), hint="export with a fixed input size, or pass --input-size")
        transposed = dims[1] < dims[2]  # v8: 84 rows of 8400 anchors
        columns, anchors = (dims[1], dims[2]) if transposed else (dims[2], dims[1])
        objectness = flag(given["objectness"], "objectness") if "objectness" in given else not transposed
        classes = columns - 4 - int(objectness)
        if classes < 1:
            raise fail("yolo: {} has {} columns per anchor, too few for a box{} and classes".format(
                output, columns, ", objectness" if objectness else ""))
        mixed = "Conv" in output.sources and "Sigmoid" in output.sources  # raw boxes beside sigmoid scores
        params = {"output": output.name, "transposed": transposed, "objectness": objectness,
                  "activation": choice(given.get("activation", "none"), "activation", ("none", "sigmoid")),
                  "num_classes": classes, "anchors": anchors,
                  "coding": choice(given.get("coding", "grid" if mixed else "pixels"), "coding", ("pixels", "grid"))}
        if params["coding"] == "grid":
            params["strides"] = self._strides(given, anchors, input_hw, output)
            if "activation" not in given and not output.sources & {"Sigmoid", "Softmax"}:
                params["activation"] = "sigmoid"  # YOLOX cut before its sigmoids
        return params

    def _strides(self, given, anchors, input_hw, output):
        strides = ints(given["strides"], "strides") if "strides" in given else \
            stride_runs(input_hw, CANDIDATE_STRIDES).get(anchors)
        count = sum(grid(input_hw[0], s) * grid(input_hw[1], s) for s in strides or [])
        if count != anchors:
            raise fail("anchor count {} of strides {} at {}x{} != rows {} of {}".format(
                count, ",".join(str(s) for s in strides or []), input_hw[0], input_hw[1], anchors, output),
                hint="pass --decoder-param strides=S,S,... (the levels' strides, in order)")
        return strides

    def _cells(self, params, input_hw):
        """([A, 2] cell corners in pixels, [A, 1] strides), level by level, each row by row."""
        cells = [cell_centres(input_hw, s, 0.0) for s in params["strides"]]
        strides = [np.full((len(c), 1), s, dtype=np.float64) for c, s in zip(cells, params["strides"])]
        return np.concatenate(cells), np.concatenate(strides)

    def postprocessing(self, params):
        """ultralytics' predict defaults: confidence 0.25, IoU 0.45 (v5) or 0.7 (v8), at most 300."""
        return {"score_thresh": 0.25, "nms_thresh": 0.45 if params["objectness"] else 0.7,
                "detections_per_img": 300, "topk_candidates": 1000, "class_agnostic": False}

    def background(self, params):
        return None

    def tail(self, tail, params, input_hw):
        rows = params["output"]
        if params["transposed"]:
            rows = tail.op("Transpose", [rows], perm=[0, 2, 1])
        centres, sizes = tail.columns(rows, 0, 2), tail.columns(rows, 2, 4)
        if params["coding"] == "grid":
            cells, strides = self._cells(params, input_hw)
            centres = tail.op("Add", [tail.op("Mul", [centres, tail.const(strides)]), tail.const(cells)])
            sizes = tail.op("Mul", [tail.op("Exp", [sizes]), tail.const(strides)])
        boxes = tail.centre_size_to_corners(centres, sizes)
        first = 5 if params["objectness"] else 4
        scores = tail.activation(tail.columns(rows, first, first + params["num_classes"]), params["activation"])
        if params["objectness"]:
            scores = tail.op("Mul", [scores, tail.activation(tail.columns(rows, 4, 5), params["activation"])])
        return tail.op("Concat", [tail.clip(boxes, input_hw), scores], axis=-1)

    def reference(self, arrays, params, input_hw):
        """numpy, from ultralytics' ``xywh2xyxy`` and v5's ``conf = obj_conf * cls_conf``; grid coding from
        YOLOX's ``decode_outputs`` (ddddocr's ``demo_postprocess``)."""
        rows = np.asarray(arrays[params["output"]], dtype=np.float64)
        if params["transposed"]:
            rows = rows.transpose(0, 2, 1)
        if params.get("coding") == "grid":
            cells, strides = self._cells(params, input_hw)
            rows = rows.copy()
            rows[..., :2] = (rows[..., :2] + cells / strides) * strides
            rows[..., 2:4] = np.exp(rows[..., 2:4]) * strides
        cx, cy, w, h = rows[..., 0], rows[..., 1], rows[..., 2], rows[..., 3]
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)
        first = 5 if params["objectness"] else 4
        scores = rows[..., first:first + params["num_classes"]]
        active = sigmoid if params["activation"] == "sigmoid" else (lambda x: x)
        scores = active(scores)
        if params["objectness"]:
            scores = scores * active(rows[..., 4:5])
        return np.concatenate([clip_corners(boxes, input_hw), scores], axis=-1)
