"""``dfl``: GFL's distance distributions (PP-PicoDet exported without post-processing, YOLOv8's raw heads).

Per anchor point the head gives class scores (``[N, A, C]``, ``[N, C, A]`` or a ``[N, C, H, W]`` map) and, for
each side (left, top, right, bottom), a distribution over ``0..R`` (``[N, A, 4 * (R + 1)]``, or transposed, or
a map). The distance to a side is the distribution's expectation (softmax, then the sum of ``k * p_k``: GFL's
"integral"), in units of the level's stride; the anchor point is the cell's centre ``(i + offset) * stride``.
Outputs may come per level (paired by anchor count) or concatenated (levels in stride order).

Read from the graph: ``reg_max`` (R, from the 4 * (R + 1) columns), the layout of each output (which axis is
the anchors: the one whose length is a grid's), the strides (each level's anchor count at the input size, or
the concatenated count as a run of ``8, 16, 32, 64``), the score activation (none when the scores come out of
a Sigmoid, else sigmoid). Each can be given (``--decoder-param``): ``strides``, ``reg_max``, ``offset``
(0.5), ``activation`` (none|sigmoid), ``boxes`` / ``scores`` (output names, comma-separated per level).
"""

import numpy as np

from trtkit.detect.decoders.base import CANDIDATE_STRIDES, cell_centres, check_known, choice, clip_corners, fail, \
    floats, grid, ints, named, sigmoid, softmax, stride_runs

PARAMS = ("strides", "reg_max", "offset", "activation", "boxes", "scores")
BOX_HINTS = ("box", "reg", "bbox", "dis", "loc")


def _view(output):
    """(layout, anchors, columns) of a 3-D ``[N, A, K]`` / ``[N, K, A]`` or 4-D ``[N, K, H, W]`` output, the
    3-D axis left open (None) where both could be the anchors."""
    dims = output.dims
    if len(dims) == 4 and all(isinstance(d, int) for d in dims[1:]):
        return [("map", dims[2] * dims[3], dims[1])]
    if len(dims) != 3 or not all(isinstance(d, int) for d in dims[1:]):
        raise fail("dfl reads [N, A, K], [N, K, A] or [N, K, H, W] outputs with fixed sizes; {} is not".format(output),
                   hint="export with a fixed input size, or pass --input-size")
    return [("rows", dims[1], dims[2]), ("columns", dims[2], dims[1])]


class Dfl(object):
    name = "dfl"
    summary = "GFL/DFL distance distributions: class scores and 4 * (R + 1) box columns per anchor point"

    def infer(self, outputs, input_hw, given):
        check_known(given, PARAMS, self.name)
        strides = ints(given["strides"], "strides") if "strides" in given else None
        runs = stride_runs(input_hw, strides or CANDIDATE_STRIDES)
        views = {}
        for output in outputs:
            options = [v for v in _view(output) if v[0] == "map" or v[1] in runs]
            if len(options) == 2:  # both axes are grid lengths: the anchors are the longer one
                options = [max(options, key=lambda v: v[1])]
            if options:
                views[output.name] = options[0]
        missing = [o for o in outputs if o.name not in views]
        if strides and missing:
            raise fail("anchor count {} of strides {} at {}x{} != rows {} of '{}'".format(
                sum(grid(input_hw[0], s) * grid(input_hw[1], s) for s in strides), ",".join(map(str, strides)),
                input_hw[0], input_hw[1], max(missing[0].dims[1:]), missing[0].name),
                hint="pass the strides of its levels, in order")
        reg_max = ints(given["reg_max"], "reg_max")[0] if "reg_max" in given else None
        if "boxes" in given:
            boxes = [named(outputs, n, "boxes") for n in str(given["boxes"]).split(",")]
            scores = [named(outputs, n, "scores") for n in str(given.get("scores", "")).split(",") if n] or \
                [o for o in outputs if o.name in views and o not in boxes]
        else:
            boxes, scores = self._split(outputs, views, reg_max)
        for output in boxes + scores:
            if output.name not in views:
                raise fail("dfl: no axis of {} is an anchor count of strides {} at {}x{}".format(
                    output, ",".join(str(s) for s in strides or CANDIDATE_STRIDES), input_hw[0], input_hw[1]),
                    hint="pass --decoder-param strides=... (or --input-size: the size it was exported at)")
        columns = set(views[o.name][2] for o in boxes)
        if len(columns) != 1 or next(iter(columns)) % 4:
            raise fail("dfl: box outputs {} do not share one 4 * (R + 1) column count".format(boxes))
        found_reg_max = next(iter(columns)) // 4 - 1
        if reg_max is not None and reg_max != found_reg_max:
            raise fail("dfl: reg_max {} needs {} box columns, {} has {}".format(
                reg_max, 4 * (reg_max + 1), boxes[0], 4 * (found_reg_max + 1)))
        classes = set(views[o.name][2] for o in scores)
        if len(scores) != len(boxes) or len(classes) != 1:
            raise fail("dfl: {} box output(s) and score outputs {}: expected one score output per box output, "
                       "all with the same classes".format(len(boxes), scores),
                       hint="pass --decoder-param boxes=NAME[,NAME...] scores=NAME[,NAME...]")
        levels = self._levels(boxes, scores, views, input_hw, strides, runs)
        activations = set(o.activation for o in scores)
        default = "none" if activations == {"Sigmoid"} else "sigmoid"
        return {"levels": levels, "reg_max": found_reg_max, "num_classes": next(iter(classes)),
                "offset": floats(given.get("offset", 0.5), "offset", 1)[0],
                "activation": choice(given.get("activation", default), "activation", ("none", "sigmoid"))}

    def _split(self, outputs, views, reg_max):
        """(box outputs, score outputs): boxes have 4 * (R + 1) columns (R = ``reg_max`` when given); where a
        pair could go either way, a name that says box (``reg``, ``bbox``, ``dis``, ``loc``) decides."""
        usable = [o for o in outputs if o.name in views]
        def boxy(o):
            cols = views[o.name][2]
            return cols % 4 == 0 and cols >= 8 and (reg_max is None or cols == 4 * (reg_max + 1))
        boxes = [o for o in usable if boxy(o)]
        scores = [o for o in usable if not boxy(o)]
        if len(boxes) > len(scores):  # scores with 4 * k columns too: a name that says box decides
            hinted = [o for o in boxes if any(h in o.name.lower() for h in BOX_HINTS)]
            if not hinted or len(hinted) * 2 != len(usable):
                raise fail("dfl: two candidate box outputs '{}' and '{}': pass --decoder-param boxes=NAME".format(
                    boxes[0].name, boxes[1].name))
            boxes, scores = hinted, [o for o in usable if o not in hinted]
        if not boxes:
            raise fail("dfl: no output has 4 * (R + 1) box columns ({})".format(
                ", ".join(repr(o) for o in outputs)), hint="pass --decoder-param boxes=NAME reg_max=R")
        return boxes, scores

    def _levels(self, boxes, scores, views, input_hw, strides, runs):
        """[{"stride", "boxes", "scores", "box_layout", "score_layout"}, ...] in stride order."""
        if len(boxes) == 1:
            anchors = views[boxes[0].name][1]
            level_strides = strides if strides else runs.get(anchors)
            count = sum(grid(input_hw[0], s) * grid(input_hw[1], s) for s in level_strides or [])
            if views[scores[0].name][1] != anchors or count != anchors:
                raise fail("anchor count {} of strides {} at {}x{} != rows {} of '{}' ({} of '{}')".format(
                    count, ",".join(str(s) for s in level_strides or []), input_hw[0], input_hw[1], anchors,
                    boxes[0].name, views[scores[0].name][1], scores[0].name),
                    hint="pass --decoder-param strides=S,S,...")
            return [{"strides": list(level_strides), "boxes": boxes[0].name, "scores": scores[0].name,
                     "box_layout": views[boxes[0].name][0], "score_layout": views[scores[0].name][0]}]
        by_count = dict((views[o.name][1], o) for o in scores)
        levels = []
        for index, box in enumerate(boxes):
            anchors = views[box.name][1]
            stride = strides[index] if strides and len(strides) == len(boxes) else \
                (runs.get(anchors) or [None])[0] if len(runs.get(anchors) or []) == 1 else None
            if stride is None or grid(input_hw[0], stride) * grid(input_hw[1], stride) != anchors:
                raise fail("dfl: {} anchors of '{}' are no stride's grid at {}x{}".format(
                    anchors, box.name, input_hw[0], input_hw[1]), hint="pass --decoder-param strides=S,S,...")
            score = by_count.get(anchors)
            if score is None:
                raise fail("dfl: no score output has the {} anchors of '{}'".format(anchors, box.name))
            levels.append({"strides": [stride], "boxes": box.name, "scores": score.name,
                           "box_layout": views[box.name][0], "score_layout": views[score.name][0]})
        return sorted(levels, key=lambda level: level["strides"][0])

    def postprocessing(self, params):
        """PP-PicoDet's defaults (score 0.025 -> 0.05 here, IoU 0.6, 100 per image)."""
        return {"score_thresh": 0.05, "nms_thresh": 0.6, "detections_per_img": 100, "topk_candidates": 1000,
                "class_agnostic": False}

    def background(self, params):
        return None

    def _points(self, params, input_hw):
        """([A, 2] anchor points in pixels, [A] strides), level by level."""
        points, strides = [], []
        for level in params["levels"]:
            for stride in level["strides"]:
                centres = cell_centres(input_hw, stride, params["offset"])
                points.append(centres)
                strides.append(np.full(len(centres), stride, dtype=np.float64))
        return np.concatenate(points), np.concatenate(strides)

    def tail(self, tail, params, input_hw):
        bins = params["reg_max"] + 1
        distances, scores = [], []
        for level in params["levels"]:
            rows = _rows(tail, level["boxes"], level["box_layout"])
            spread = tail.op("Softmax", [tail.reshape(rows, [0, -1, 4, bins])], axis=3)
            weighted = tail.op("Mul", [spread, tail.const(np.arange(bins))])
            distances.append(tail.reduce_sum(weighted, 3))
            scores.append(_rows(tail, level["scores"], level["score_layout"]))
        join = (lambda parts: parts[0] if len(parts) == 1 else tail.op("Concat", parts, axis=1))
        points, strides = self._points(params, input_hw)
        signed = tail.op("Mul", [join(distances), tail.const(strides[:, None] * np.array([-1, -1, 1, 1]))])
        corners = tail.op("Add", [signed, tail.const(np.concatenate([points, points], axis=1))])
        scores = tail.activation(join(scores), params["activation"])
        return tail.op("Concat", [tail.clip(corners, input_hw), scores], axis=-1)

    def reference(self, arrays, params, input_hw):
        """numpy, from GFL's ``Integral`` and ``distance2bbox``: x1 = px - l * s, y1 = py - t * s, ..."""
        bins = params["reg_max"] + 1
        distances, scores = [], []
        for level in params["levels"]:
            raw = _rows_np(arrays[level["boxes"]], level["box_layout"])
            spread = softmax(raw.reshape(raw.shape[0], raw.shape[1], 4, bins), axis=-1)
            distances.append((spread * np.arange(bins)).sum(-1))
            scores.append(_rows_np(arrays[level["scores"]], level["score_layout"]))
        points, strides = self._points(params, input_hw)
        ltrb = np.concatenate(distances, axis=1) * strides[None, :, None]
        boxes = np.concatenate([points - ltrb[..., :2], points + ltrb[..., 2:]], axis=-1)
        scores = np.concatenate(scores, axis=1)
        if params["activation"] == "sigmoid":
            scores = sigmoid(scores)
        return np.concatenate([clip_corners(boxes, input_hw), scores], axis=-1)


def _rows(tail, name, layout):
    """An output as ``[N, A, K]``."""
    if layout == "map":
        return tail.op("Transpose", [tail.reshape(name, [0, 0, -1])], perm=[0, 2, 1])
    return tail.op("Transpose", [name], perm=[0, 2, 1]) if layout == "columns" else name


def _rows_np(array, layout):
    array = np.asarray(array, dtype=np.float64)
    if layout == "map":
        return array.reshape(array.shape[0], array.shape[1], -1).transpose(0, 2, 1)
    return array.transpose(0, 2, 1) if layout == "columns" else array
