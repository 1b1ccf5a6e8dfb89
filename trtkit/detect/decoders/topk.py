"""A graph whose NMS runs on top-k candidates (torchvision's exported detectors), cut at the head's raw outputs.

torchvision's RetinaNet and SSDs select before their one NonMaxSuppression: per group (RetinaNet: each feature
map, every (anchor, class) pair of it; the SSDs: each class but the background) the scores above
``score_thresh`` (a ``GatherND`` of ``NonZero(score > c)``), the best ``topk_candidates`` of them (a ``TopK``
whose k is ``min(count, k)``), the candidates' boxes decoded (RetinaNet decodes only those; the SSDs all
anchors), all groups concatenated, the labels (``index % C`` or the class) spread apart as ``label x (max + 1)``
and one NMS (inside an ``If`` that skips an empty set), then ``keep[:detections_per_img]``. NonMaxSuppression's
inputs there are a few hundred candidates, not ``[N, A, 4]`` boxes, so ``nms``'s own cut cannot read them; the
cut is instead where the selection starts, read by graph structure:

- the scores: walking up from each candidate ``TopK`` through the filter, reshapes, the activation (``Sigmoid``,
  or ``Softmax`` over the classes), the image's ``Gather`` (index 0, axis 0), a level's ``Slice`` or a class's
  ``Gather`` (a constant on axis 1) to the tensor these started from: the head's class logits ``[N, A, C]``;
  the groups are levels when a ``Slice`` was passed, classes when a class ``Gather`` was (the class no top-k
  reads is the background); ``score_threshold`` is the filter's ``c``, ``topk_candidates`` the constant of the
  ``TopK``'s k;
- the boxes: the one ``[N, A, 4]`` tensor upstream of NonMaxSuppression's boxes that is computed from the image
  (the head's box regression), and the ``[A, 4]`` one computed from shapes only (the anchors, x1 y1 x2 y2: a
  fixed-size export's constant, read by one run); the box coder's weights are the constant divisors of the codes'
  columns (``Div`` of a ``Slice`` starting at 0-3 in steps of 4) and its clamp the ``Clip`` (or ``Min``) after
  the size columns' divisions;
- ``iou_threshold`` is the NMS's, ``detections`` the ``Slice`` after it.

The tail then decodes every anchor as torchvision's ``BoxCoder.decode_single`` does (the same float32 steps, so
the kept candidates' boxes are the graph's), clips them to the input, applies the activation, and the host
selects per level or per class with these parameters (``detect.select``, torchvision's order and ties).
A graph that resizes its image inside (a transform whose ``min_size`` is not the input's size) is refused: the
boxes would be in the resized image's pixels.
"""

import numpy as np

from trtkit.detect.decoders.base import fail

CHAIN = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "Transpose")
SELECTION = "topk_candidates"


def all_nodes(nodes):
    """``nodes`` and, after each, the nodes of its subgraphs (an ``If``'s branches), depth first."""
    for node in nodes:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                for inner in all_nodes(attribute.g.node):
                    yield inner


class Index(object):
    """The graph's producers (subgraphs' nodes too: an NMS inside an ``If`` reads the outer tensors), its
    constants and which tensors are computed from shapes and constants alone."""

    def __init__(self, model):
        from onnx import numpy_helper
        self.model = model
        self.producers, self.constants, self.nodes = {}, {}, []
        for init in model.graph.initializer:
            self.constants[init.name] = numpy_helper.to_array(init)
        for node in all_nodes(model.graph.node):
            self.nodes.append(node)
            for out in node.output:
                self.producers[out] = node
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        self.constants[node.output[0]] = numpy_helper.to_array(attribute.t)
        self._shape_only = {}

    def scalar(self, name):
        value = self.constants.get(name)
        return None if value is None or np.asarray(value).size != 1 else np.asarray(value).reshape(-1)[0].item()

    def shape_only(self, name):
        """Whether ``name`` is computed from constants and tensors' shapes only (the same for any image)."""
        if name in self._shape_only:
            return self._shape_only[name]
        stack, order = [name], []
        while stack:  # iterative: graphs are deep
            tensor = stack.pop()
            if tensor in self._shape_only:
                continue
            node = self.producers.get(tensor)
            if node is None:
                self._shape_only[tensor] = tensor in self.constants
                continue
            if node.op_type in ("Shape", "Constant"):
                self._shape_only[tensor] = True
                continue
            pending = [i for i in node.input if i and i not in self._shape_only]
            if pending:
                stack.append(tensor)
                stack.extend(pending)
                order.append(tensor)
                if len(order) > 200000:
                    break
                continue
            self._shape_only[tensor] = all(self._shape_only[i] for i in node.input if i)
        return self._shape_only.get(name, False)

    def ancestors(self, name, through_shapes=False):
        """The tensors upstream of ``name`` (not through a ``Shape``'s input unless ``through_shapes``)."""
        seen, stack = set(), [name]
        while stack:
            tensor = stack.pop()
            node = self.producers.get(tensor)
            if node is None or (node.op_type == "Shape" and not through_shapes):
                continue
            for i in node.input:
                if i and i not in seen:
                    seen.add(i)
                    stack.append(i)
        return seen


def filter_threshold(producers, scalar, name):
    """The ``c`` of ``NonZero(x > c)`` that the GatherND indices ``name`` come from through reshapes (an
    exporter's ``x[x > c]``), or None; for ``x >= c``, the float32 just below ``c`` (``x > that`` exactly when
    ``x >= c``, for float32 scores). ``scalar(name)``: a constant's value or None."""
    node = producers.get(name)
    for _ in range(8):
        if node is None:
            return None
        if node.op_type == "NonZero":
            compare = producers.get(node.input[0])
            if compare is None or compare.op_type not in ("Greater", "GreaterOrEqual"):
                return None
            value = scalar(compare.input[1])
            if value is None or compare.op_type == "Greater":
                return value
            return float(np.nextafter(np.float32(value), np.float32(-np.inf)))
        if node.op_type not in CHAIN:
            return None
        node = producers.get(node.input[0])
    return None


def constant_k(index, name, depth=0):
    """The constant ``k`` of a TopK's k input (``min(count, k)`` as torchvision writes it), or None."""
    value = index.scalar(name)
    if value is not None or depth > 6:
        return value
    node = index.producers.get(name)
    if node is None or node.op_type not in CHAIN + ("ReduceMin", "Min", "Concat"):
        return None
    inputs = node.input[:1 if node.op_type in CHAIN else None]
    found = [v for v in (constant_k(index, i, depth + 1) for i in inputs if i)
             if v is not None]
    return min(found) if found else None


def _axis(index, node):
    """The axis a Split or Slice cuts (a Slice's first constant axis; absent, 0), or None when not constant."""
    if node.op_type == "Split":
        return next((a.i for a in node.attribute if a.name == "axis"), 0)
    if len(node.input) > 3 and node.input[3]:
        axes = index.constants.get(node.input[3])
        return None if axes is None else int(np.asarray(axes).reshape(-1)[0])
    return 0


def _walk_scores(index, name):
    """From a TopK's data input up to the tensor its selection started from: {cut, activation, axis,
    threshold, group ("level"/"class"), label, slice (the level's Slice node)}."""
    found = {"cut": None, "activation": "none", "threshold": None, "group": None, "label": None, "slice": None}
    for _ in range(48):
        node = index.producers.get(name)
        if node is None:
            break
        op = node.op_type
        if op == "GatherND" and filter_threshold(index.producers, index.scalar, node.input[1]) is not None:
            found["threshold"] = filter_threshold(index.producers, index.scalar, node.input[1])
        elif op in ("Sigmoid", "Softmax"):
            found["activation"] = op.lower()
            found["axis"] = next((a.i for a in node.attribute if a.name == "axis"), -1)
            found["cut"] = node.input[0]
        elif op in ("Slice", "Split"):
            if _axis(index, node) != 0:  # along the anchors: a level's (axis 0: the batch's images)
                found["group"], found["slice"] = "level", node
            found["cut"] = node.input[0]
        elif op == "Gather" and index.scalar(node.input[1]) is not None and \
                np.asarray(index.constants[node.input[1]]).ndim == 0:
            if next((a.i for a in node.attribute if a.name == "axis"), 0) != 0:
                found["group"], found["label"] = "class", int(index.scalar(node.input[1]))
            found["cut"] = node.input[0]
        elif op not in CHAIN:
            break
        name = node.input[0]
    return found


def _run(model, names):
    """{name: value} of ``names`` on a zero image and on a noise image (ONNX Runtime), as two dicts."""
    from onnx import helper
    from trtkit.deps import require
    from trtkit.onnx.normalize import probe_image
    ort = require("onnxruntime", "reading a detector's selection")
    probe = type(model)()
    probe.CopyFrom(model)
    present = set(o.name for o in probe.graph.output)
    probe.graph.output.extend([helper.make_empty_tensor_value_info(n) for n in names if n not in present])
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs()]
    return [dict(zip(wanted, session.run(None, dict([probe_image(probe, noise)])))) for noise in (False, True)]


def _coder(index, names):
    """(weights [4], clamp) of the box coder whose nodes are among ``names``' producers, or (None, None)."""
    weights, divided = {}, {}
    for name in names:
        node = index.producers.get(name)
        if node is None or node.op_type != "Div" or index.scalar(node.input[1]) is None:
            continue
        source = index.producers.get(node.input[0])
        if source is None or source.op_type != "Slice" or len(source.input) < 5:
            continue
        start, step = index.scalar(source.input[1]), index.scalar(source.input[4])
        if step == 4 and start in (0, 1, 2, 3):
            weights[int(start)] = float(index.scalar(node.input[1]))
            divided[node.output[0]] = int(start)
    clamp = None
    for node in index.nodes:
        if node.op_type in ("Clip", "Min") and divided.get(node.input[0]) in (2, 3):
            bound = node.input[2] if node.op_type == "Clip" and len(node.input) > 2 else \
                node.input[1] if node.op_type == "Min" else ""
            clamp = index.scalar(bound) if bound else None
    if sorted(weights) != [0, 1, 2, 3]:
        return None, None
    return [weights[i] for i in range(4)], clamp


def _resized_inside(index, first, image):
    """((H, W), (H', W')) of a ``Resize`` of the image itself (its channels and size) inside the graph that
    changes its size, or None."""
    for node in index.nodes:
        if node.op_type == "Resize" and node.output[0] in first and node.input[0] in first:
            before, after = first[node.input[0]].shape, first[node.output[0]].shape
            if tuple(before[-3:]) == tuple(image[-3:]) and tuple(before[-2:]) != tuple(after[-2:]):
                return tuple(before[-2:]), tuple(after[-2:])
    return None


def nested(model):
    """[(NonMaxSuppression node, the top-level node holding it: itself, or the If whose branch has it)]."""
    return [(inner, node) for node in model.graph.node for inner in all_nodes([node])
            if inner.op_type == "NonMaxSuppression"]


def read(model, nms, given):
    """What ``cut`` needs of a graph whose NMS ``nms`` runs on top-k candidates, or None when no candidate
    ``TopK`` feeds its scores (``nms``'s own cut then applies)."""
    index = Index(model)
    upstream = index.ancestors(nms.input[1])
    topks = [n for n in index.nodes if n.op_type == "TopK" and any(o in upstream for o in n.output)]
    if not topks:
        return None
    walks = [dict(_walk_scores(index, n.input[0]), k=constant_k(index, n.input[1]) if len(n.input) > 1 else None)
             for n in topks]
    for key in ("cut", "activation", "threshold", "group", "k"):
        values = set(str(w[key]) for w in walks)
        if len(values) != 1 or "None" in values and key in ("cut", "group", "k"):
            raise fail("the NMS's {} candidate TopKs do not read one score tensor alike ({}: {})".format(
                len(topks), key, ", ".join(sorted(values))),
                hint="pass --decoder yolo|priors|dfl|module:function for the graph's raw outputs")
    scores = walks[0]["cut"]
    outer = set(o for node in model.graph.node if node.op_type != "Constant" for o in node.output)
    box_side = [n for n in index.ancestors(nms.input[0]) if n in outer]
    slices = [w["slice"] for w in walks if w["slice"] is not None]
    extra = [scores] + box_side + [s.output[0] for s in slices] + [s.input[1] for s in slices if len(s.input) > 1]
    extra += [o for n in model.graph.node if n.op_type == "Resize" for o in (n.input[0], n.output[0])]
    first, second = _run(model, sorted(set(extra)))
    logits = first[scores]
    from trtkit.onnx.normalize import dims_of, graph_inputs
    image = dims_of(graph_inputs(model)[0])
    resized = _resized_inside(index, first, image)
    if resized is not None:
        raise fail("the graph resizes its image from {}x{} to {}x{} before the network (torchvision's transform "
                   "min_size/max_size): its boxes are in the resized image's pixels".format(
                       resized[0][0], resized[0][1], resized[1][0], resized[1][1]),
                   hint="export with the transform's min_size and max_size equal to the input's size")
    if walks[0]["activation"] == "softmax" and walks[0].get("axis") not in (-1, logits.ndim - 1):
        raise fail("the candidates' Softmax is over axis {} of '{}' {}, not its classes".format(
            walks[0].get("axis"), scores, list(logits.shape)), hint="pass your own --decoder module:function")
    if logits.ndim != 3:
        raise fail("the candidates' scores come from '{}' {}, not [N, A, C]".format(scores, list(logits.shape)))
    anchors_count, classes = logits.shape[1], logits.shape[2]
    regression = [n for n in box_side if n in first and first[n].shape == (logits.shape[0], anchors_count, 4)
                  and not index.shape_only(n)]
    regression = [n for n in regression if not any(o in index.ancestors(n) for o in regression if o != n)]  # first
    anchors = [n for n in box_side if n in first and first[n].shape == (anchors_count, 4) and index.shape_only(n)
               and np.array_equal(first[n], second[n])]
    anchors = [n for n in anchors if not any(n in index.ancestors(o) for o in anchors if o != n)]  # the last form
    if len(regression) != 1 or not anchors:
        raise fail("the NMS's candidates are not decoded from one [N, {0}, 4] box regression and [{0}, 4] anchors "
                   "(found {1} and {2})".format(anchors_count, len(regression), len(anchors)),
                   hint="pass --decoder priors with the anchors, or your own --decoder module:function")
    weights, clamp = _coder(index, index.ancestors(nms.input[0]))
    if weights is None:
        raise fail("the box coder's weights (constant divisors of the codes' columns) are not in the graph",
                   hint="pass --decoder priors --decoder-param anchors=FILE.npy --decoder-param variances=V,V,V,V")
    found = {"selection": SELECTION, "boxes": regression[0], "scores": scores, "num_classes": int(classes),
            "anchors": int(anchors_count), "_anchors": first[anchors[0]].astype(np.float32),
            "weights": weights, "clamp": clamp, "activation": walks[0]["activation"],
            "score_threshold": single(walks[0]["threshold"] or 0.0), "topk_candidates": int(walks[0]["k"]),
            "per_level": walks[0]["group"] == "level"}
    if found["per_level"]:
        starts = [int(np.asarray(first[s.input[1]]).reshape(-1)[0]) if s.op_type == "Slice" else 0 for s in slices]
        found["level_sizes"] = [int(first[s.output[0]].shape[1]) for _, s in sorted(zip(starts, slices),
                                                                                   key=lambda p: p[0])]
    else:
        labels = set(w["label"] for w in walks)
        missing = [c for c in range(classes) if c not in labels]
        found["background"] = missing[0] if len(missing) == 1 else None
    return found


def single(value):
    """A float32 constant as the shortest decimal that is the same float32 (0.05, not 0.05000000074505806)."""
    return float(str(np.float32(value)))


def levels(params, input_hw):
    """(``[(stride, anchors per location)]``, size_divisible) of per-level candidates, read from the anchors'
    centres per level and checked against the level sizes; one line when they do not fit a grid."""
    from trtkit.detect.params import DetectionHead, PostProcessing
    anchors, found, start = params["_anchors"], [], 0
    for size in params["level_sizes"]:
        part = anchors[start:start + size]
        start += size
        xs = np.unique(np.round((part[:, 0] + part[:, 2]) / 2.0, 3))
        ys = np.unique(np.round((part[:, 1] + part[:, 3]) / 2.0, 3))
        stride = int(round(float(np.median(np.diff(xs))))) if len(xs) > 1 else \
            int(round(float(np.median(np.diff(ys))))) if len(ys) > 1 else max(input_hw)
        found.append((max(1, stride), max(1, size // max(1, len(xs) * len(ys)))))
    post = PostProcessing(0.5, 0.5, 1, 1, per_level=True)
    for divisible in sorted(set([1, 32, 64, 128] + [s for s, _ in found])):
        head = DetectionHead(params["num_classes"], post, levels=found, size_divisible=divisible)
        if head.level_sizes(*input_hw) == list(params["level_sizes"]):
            return found, divisible
    raise fail("the levels' anchors {} do not lay out on grids of a {}x{} input (strides {})".format(
        params["level_sizes"], input_hw[0], input_hw[1], [s for s, _ in found]),
        hint="pass your own --decoder module:function")


def infer(outputs, input_hw, given):
    """The parameters from ``read``'s (``given``) and the cut graph's outputs (boxes, scores)."""
    params = dict((k, v) for k, v in given.items() if k != "dropped")
    params["dropped"] = given.get("dropped")
    if params["per_level"]:
        found, divisible = levels(params, input_hw)
        params["level_anchors"] = [list(level) for level in found]
        params["size_divisible"] = divisible
    return params


def postprocessing(params):
    return {"score_thresh": params["score_threshold"], "nms_thresh": params["iou_threshold"],
            "detections_per_img": params["detections"], "topk_candidates": params["topk_candidates"],
            "class_agnostic": False, "per_level": params["per_level"]}


def _terms(params):
    """(widths and heights [A, 2], centres [A, 2]) of the anchors, in float32 as torchvision's coder computes
    them (``x2 - x1``, then ``x1 + 0.5 * w``)."""
    anchors = np.asarray(params["_anchors"], np.float32)
    sizes = anchors[:, 2:] - anchors[:, :2]
    return sizes, anchors[:, :2] + np.float32(0.5) * sizes


def tail(tail, params, input_hw):
    sizes, centres = _terms(params)
    codes = tail.op("Div", [params["boxes"], tail.const(params["weights"])])
    shift, size = tail.columns(codes, 0, 2), tail.columns(codes, 2, 4)
    if params.get("clamp") is not None:
        size = tail.op("Min", [size, tail.const([params["clamp"]])])
    centre = tail.op("Add", [tail.op("Mul", [shift, tail.const(sizes)]), tail.const(centres)])
    half = tail.op("Mul", [tail.const([0.5]), tail.op("Mul", [tail.op("Exp", [size]), tail.const(sizes)])])
    corners = tail.op("Concat", [tail.op("Sub", [centre, half]), tail.op("Add", [centre, half])], axis=-1)
    scores = tail.activation(params["scores"], params["activation"], axis=-1)
    return tail.op("Concat", [tail.clip(corners, input_hw), scores], axis=-1)


def reference(arrays, params, input_hw):
    """numpy, float32: torchvision's ``BoxCoder.decode_single`` of every anchor, clipped, and the scores."""
    from trtkit.detect.decoders.base import clip_corners, sigmoid, softmax
    sizes, centres = _terms(params)
    codes = np.asarray(arrays[params["boxes"]], np.float32) / np.asarray(params["weights"], np.float32)
    size = codes[..., 2:] if params.get("clamp") is None else np.minimum(codes[..., 2:], np.float32(params["clamp"]))
    centre = codes[..., :2] * sizes + centres
    half = np.float32(0.5) * (np.exp(size) * sizes)
    corners = clip_corners(np.concatenate([centre - half, centre + half], -1), input_hw)
    logits = np.asarray(arrays[params["scores"]], np.float32)
    scores = sigmoid(logits) if params["activation"] == "sigmoid" else \
        softmax(logits, -1) if params["activation"] == "softmax" else logits
    return np.concatenate([corners, scores.astype(np.float32)], -1)
