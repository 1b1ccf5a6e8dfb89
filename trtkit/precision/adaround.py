"""Learned rounding of INT8 weights (AdaRound, Nagel et al. 2020, "Up or Down? Adaptive Rounding for Post-Training
Quantization"), written into the FP32 graph so that every Q/DQ writer reproduces it.

Rounding each weight to its nearest INT8 level minimises each weight's own error, not the layer's output error:
the errors of one output channel's weights add up over correlated inputs. AdaRound chooses, per weight, the
level below or above (``floor(w / s) + h``, ``h`` in {0, 1}) to minimise ``||W x - W~ x||^2`` over the layer's
inputs: ``h`` is relaxed to a rectified sigmoid of a free variable ``V`` (``ZETA``, ``GAMMA``), fitted with Adam
for ``ITERATIONS`` steps, with a regulariser ``1 - |2h - 1|^beta`` that pushes every ``h`` to 0 or 1 and whose
``beta`` is annealed from 20 (only near-decided weights feel it) to 2 after a warm-up without it (``WARMUP``);
at the end ``h`` is rounded. The loss is the paper's layer-wise one with the layer's *FP32* inputs, computed from
their second moments (``precision.adaround_inputs``): the rounding of one layer then depends neither on the
activation ranges nor on the other layers, so it is made once, before calibration, for every INT8 option and
encoding alike, and the ranges are calibrated on the graph as it will run. (The paper's "asymmetric" variant,
inputs from the already-quantized graph, also pays back upstream activation error; it needs the ranges and a
pass of the images per layer through the Q/DQ graph: ``adaround-q``, ``quantized`` below,
``precision.adaround_q`` for its moments.) The output activation is left out of the loss (linear), as a
layer's consumers differ (ReLU6, hard-swish, a residual Add).

The scales are the writer's (``qdq.quantize_weight``: symmetric per output channel, ``amax / 127``; ONNX
Runtime's quantizer computes the same in float64). The chosen integers ``q`` are realised by replacing each
weight by ``q * s`` in FP32: the writer then finds the same ``amax`` (the weights at +-127 are never moved, so
no channel's range shrinks) and rounds ``q * s / s`` back to ``q``. ``realised`` reads a written Q/DQ graph
back and counts the layers whose INT8 weights are the learned ones.

Guarded: a layer keeps its learned rounding only where its output error on held-out images (``check``) is
below nearest rounding's; the record has each layer's errors (relative to nearest on the fitted rows; under
``adaround-q`` nearest's given the same quantized inputs, an error that includes the inputs' own).
"""

import time

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError

RULES = ("nearest", "adaround", "adaround-q")  # adaround-q: on the INT8 graph's inputs (after calibration)
DEFAULT_RULE = "nearest"
IMAGES = 32          # calibration images whose layer inputs are sampled (the first ones)
ITERATIONS = 400     # Adam steps per layer
LEARNING_RATE = 0.03
REGULARISATION = 10.0  # weight of the rounding regulariser (mean over weights) against the output error (1: nearest's)
WARMUP = 0.2         # share of the steps without the regulariser
BETA = (20.0, 2.0)   # its exponent, annealed
ZETA, GAMMA = 1.1, -0.1
LIMIT = 127


def check_rule(rule):
    """``rule`` when it is one of ``RULES`` (None: ``nearest``), else an InputError naming them."""
    rule = DEFAULT_RULE if rule is None else str(rule).lower()
    if rule not in RULES:
        raise InputError("unknown --int8-rounding '{}'".format(rule), hint="use " + ", ".join(RULES))
    return rule


class Rounding(object):
    """The graph with learned weights (``model``: the writer's prepared FP32 graph, BatchNorm folded, each
    learned layer's weights ``q * s``), ``record`` (JSON-ready), ``chosen`` ({layer: int8 array, the weight's
    own layout}) and ``original`` ({layer: (weight initializer, its FP32 values)})."""

    def __init__(self, model, record, chosen, original):
        self.model = model
        self.record = record
        self.chosen = chosen
        self.original = original

    def without(self, model, layers):
        """A copy of ``model`` (this rounding's graph, or one made from it) with the FP32 weights of ``layers``
        back: a mixed graph's float layers keep their weights as trained."""
        undo = [name for name in layers if name in self.original]
        if not undo:
            return model
        onnx = require("onnx", "writing the INT8 ONNX")
        numpy_helper = require("onnx.numpy_helper")
        model = onnx.ModelProto.FromString(model.SerializeToString())
        inits = dict((i.name, i) for i in model.graph.initializer)
        for name in undo:
            weight, values = self.original[name]
            if weight in inits:
                inits[weight].CopyFrom(numpy_helper.from_array(values, weight))
        return model


def learn_rounding(model, images, layers=None, iterations=ITERATIONS, seed=0, progress=True, quantized=None):
    """The ``Rounding`` of ``model`` (FP32 ModelProto) from ``images`` (NCHW float32; the first ``IMAGES``
    are used): every Conv (2-D), Gemm and MatMul with its own constant weights, or only those named in
    ``layers`` (the writer's INT8 layers). ``quantized`` (``adaround-q``): a function writing the Q/DQ graph of
    a (prepared) FP32 ModelProto with the calibrated ranges; each layer then learns on the inputs that graph
    gives it, the earlier layers on their learned integers (``precision.adaround_q``), one layer at a time."""
    from trtkit import log
    from trtkit.precision import adaround_inputs
    from trtkit.precision.qdq import Graph, prepared as prepared_graph
    started = time.time()
    prepared = prepared_graph(model)
    g = Graph(prepared)
    specs, skipped = _layers(g, layers)
    images = np.ascontiguousarray(images[:IMAGES], dtype=np.float32)
    if quantized is None:
        inputs = adaround_inputs.collect(prepared, specs, images, seed=seed)
    else:  # the FP32 graph as trained, beside the one whose weights are rounded layer by layer
        from trtkit.precision.adaround_q import layer_moments
        fp32 = require("onnx", "AdaRound").ModelProto.FromString(prepared.SerializeToString())
    numpy_helper = require("onnx.numpy_helper")
    rows, chosen, original = [], {}, {}
    label = "AdaRound" + (" (quantized inputs)" if quantized is not None else "")
    with log.Progress(label, total=len(specs), unit="layer", shown=progress) as bar:
        for index, (name, (tensor, spec)) in enumerate(specs.items()):
            node = _node(g, name)
            weight_name, axis = _weight(g, node)
            weight = g.array(weight_name).astype(np.float32)
            moments = inputs[name] if quantized is None else layer_moments(
                fp32, prepared, name, tensor, spec, quantized, images, seed=seed + index)
            q, scales, row = _learn_layer(weight, axis, spec, moments, iterations, seed)
            row["layer"] = name
            rows.append(row)
            if row["kept"]:
                shape = [1] * weight.ndim
                shape[axis] = -1
                on_grid = (q.astype(np.float32) * scales.reshape(shape)).astype(np.float32)
                g.inits[weight_name].CopyFrom(numpy_helper.from_array(on_grid, weight_name))
                chosen[name] = q
                original[name] = (weight_name, weight)
            bar.update(postfix="{}: error {:.2f}x nearest's".format(name if len(name) < 40 else "..." + name[-37:],
                                                                      row["check_error"]))
    kept = [r for r in rows if r["kept"]]
    record = {"rule": "adaround" if quantized is None else "adaround-q", "images": int(len(images)),
              "iterations": int(iterations), "inputs": "fp32" if quantized is None else "int8 graph's",
              "layers": len(kept), "candidates": len(rows), "skipped": skipped,
              "weights_changed": int(sum(r["changed"] for r in kept)),
              "of_weights": int(sum(r["weights"] for r in rows)),
              "mean_check_error": round(float(np.mean([r["check_error"] for r in rows])), 4) if rows else None,
              "seconds": round(time.time() - started, 2), "rows": rows}
    return Rounding(prepared, record, chosen, original)


def realised(qdq_model, rounding):
    """(layers of ``rounding.chosen`` whose INT8 weights in ``qdq_model`` (a written Q/DQ graph) are exactly
    the learned integers, ["layer: why" for the others]): the weight's DequantizeLinear input minus its zero
    point, the layer found by its node name. A layer can differ in a few channels where ONNX Runtime's
    quantizer widened the weight scale so that the INT32 bias fits (channels whose weights are tiny beside
    their bias: their integers are ~0 whichever rounding); a layer a writer left in float has none."""
    numpy_helper = require("onnx.numpy_helper")
    inits = dict((i.name, i) for i in qdq_model.graph.initializer)
    producer = dict((out, n) for n in qdq_model.graph.node for out in n.output)
    nodes = dict((n.name, n) for n in qdq_model.graph.node)
    same, other = 0, []
    for name, q in rounding.chosen.items():
        node = nodes.get(name)
        dq = producer.get(node.input[1]) if node is not None and len(node.input) > 1 else None
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
            other.append("{}: float".format(name))
            continue
        stored = numpy_helper.to_array(inits[dq.input[0]]).astype(np.int32)
        zero = numpy_helper.to_array(inits[dq.input[2]]).astype(np.int32) if len(dq.input) > 2 else 0
        axis = ([a.i for a in dq.attribute if a.name == "axis"] or [1])[0]
        if np.ndim(zero):
            shape = [1] * stored.ndim
            shape[axis] = -1
            zero = zero.reshape(shape)
        stored = stored - zero
        if stored.shape != q.shape:
            other.append("{}: shape {}".format(name, list(stored.shape)))
        elif not np.array_equal(stored, q.astype(np.int32)):
            moved = np.moveaxis(stored != q, axis % q.ndim, 0).reshape(q.shape[axis % q.ndim], -1).any(axis=1)
            other.append("{}: {} of {} channels".format(name, int(moved.sum()), moved.size))
        else:
            same += 1
    return same, other


# ------------------------------------------------------------------ the layers

def _layers(g, wanted):
    """({layer: (input tensor, spec)} in graph order, [layers left at nearest: why])."""
    from trtkit.precision.adaround_inputs import MATRIX_BYTES, ConvSpec, RowSpec, matrix_bytes
    uses = {}
    for node in g.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    specs, skipped = {}, []
    for node in g.graph.node:
        found = _weight(g, node)
        if found is None or (wanted is not None and node.name not in wanted):
            continue
        weight = g.array(found[0])
        if uses.get(found[0], 0) != 1 or g.is_init(node.input[0]):
            skipped.append("{}: shared weights".format(node.name))
        elif node.op_type == "Conv" and weight.ndim != 4:
            skipped.append("{}: {}-D conv".format(node.name, weight.ndim - 2))
        else:
            spec = ConvSpec(node, weight.shape, g.attr) if node.op_type == "Conv" else \
                RowSpec(weight.shape[0] if found[1] == 1 else weight.shape[1])
            need = matrix_bytes(spec)
            if need > MATRIX_BYTES:  # its fit and check matrices alone would pass the budget (a VGG's fc6: 9.4 GiB)
                skipped.append("{}: {} weights per output, statistics of {} MiB".format(
                    node.name, spec.k, need >> 20))
            else:
                specs[node.name] = (node.input[0], spec)
    return specs, skipped


def _weight(g, node):
    from trtkit.precision.qdq_place import weight_of
    return weight_of(g, node)


def _node(g, name):
    for node in g.graph.node:
        if node.name == name:
            return node
    raise KeyError(name)


def _grouped(array, axis, spec):
    """A weight-shaped ``array`` as groups x out-channels-per-group x K (the rows' layout)."""
    moved = np.moveaxis(array, axis, 0)
    if moved.ndim == 2 and axis == 1:  # Gemm(transB=0)/MatMul: (K, N) -> (N, K)
        moved = array.T
    return moved.reshape(spec.groups, moved.shape[0] // spec.groups, -1)


def _ungrouped(grouped, weight, axis):
    """``grouped`` back in ``weight``'s layout (the inverse of ``_grouped``)."""
    if weight.ndim == 2 and axis == 1:
        return grouped.reshape(weight.shape[1], weight.shape[0]).T
    moved_shape = np.moveaxis(weight, axis, 0).shape
    return np.moveaxis(grouped.reshape(moved_shape), 0, axis)


def _learn_layer(weight, axis, spec, inputs, iterations, seed):
    """(int8 weights in ``weight``'s layout, the writer's scales, the layer's row) for one layer."""
    from trtkit.precision.qdq import quantize_weight
    nearest, scales = quantize_weight(weight, axis)
    shape = [1] * weight.ndim
    shape[axis] = -1
    ratio = weight / scales.reshape(shape)  # exactly the writer's division
    w, r, q0 = (_grouped(a, axis, spec) for a in (weight, ratio, nearest.astype(np.float32)))
    s = _grouped(np.broadcast_to(scales.reshape(shape), weight.shape), axis, spec)
    learned = _optimise(w.astype(np.float64), s.astype(np.float64), r.astype(np.float64), q0.astype(np.float64),
                        inputs.fit, iterations, seed)
    errors = [_error(w, s, q, h) for q in (q0, learned) for h in (inputs.fit, inputs.check)]
    fit = errors[2] / max(errors[0], 1e-30)
    check = errors[3] / max(errors[1], 1e-30)
    kept = bool(errors[3] < errors[1])
    q = _ungrouped(learned, weight, axis).astype(np.int8) if kept else nearest
    row = {"weights": int(weight.size), "changed": int((q != nearest).sum()), "kept": kept,
           "fit_error": round(float(fit), 4), "check_error": round(float(check), 4), "rows": list(inputs.rows)}
    return q, scales, row


def _moments(gram):
    """(E[x x^T], E[x x~^T], E[x~ x~^T]): a layer's moments, the same matrix thrice for FP32 inputs."""
    return tuple(gram) if isinstance(gram, (tuple, list)) else (gram, gram, gram)


def _error(w, s, q, gram):
    """The mean squared output error of weights ``q * s`` summed over groups: ``trace(D H D^T)`` for FP32
    inputs (``gram`` H), else ``||W x - W~ x~||^2`` from the three moments (``_moments``)."""
    ff, fq, qq = _moments(gram)
    w, wq = w.astype(np.float64), q.astype(np.float64) * s
    if ff is fq and fq is qq:
        d = w - wq
        return float((d * np.matmul(d, ff)).sum())
    return float((w * np.matmul(w, ff)).sum() - 2.0 * (np.matmul(w, fq) * wq).sum()
                 + (wq * np.matmul(wq, qq)).sum())


def _optimise(w, s, ratio, nearest, gram, iterations, seed):
    """The learned integers (groups x out x K, float) of weights ``w`` with scales ``s`` (both the same
    layout), ``ratio = w / s`` and the nearest integers, for the input moments ``gram`` (groups x K x K)."""
    # never moved: the range's ends (a channel's +-127, whose scale the writer recomputes from them) and
    # anything nearest already clips
    fixed = np.abs(nearest) >= LIMIT
    reference = _error(w, s, nearest, gram)
    if not reference > 0.0 or fixed.all():
        return nearest
    torch = require("torch", "AdaRound (--int8-rounding adaround)")
    torch.manual_seed(seed)
    floor = np.floor(ratio)
    rest = np.clip(ratio - floor, 0.0, 1.0)
    v0 = -np.log((ZETA - GAMMA) / (rest - GAMMA) - 1.0)
    ff, fq, qq = _moments(gram)
    symmetric = ff is fq and fq is qq
    t = dict((k, torch.from_numpy(np.ascontiguousarray(a))) for k, a in
             (("w", w), ("s", s), ("floor", floor), ("nearest", nearest), ("gram", qq),
              ("free", (~fixed).astype(np.float64))))
    if not symmetric:  # ||W x - W~ x~||^2 = c - 2 <W E[x x~^T], W~> + <W~, W~ E[x~ x~^T]>
        t["cross"] = torch.from_numpy(np.matmul(w, fq))
        t["constant"] = float((w * np.matmul(w, ff)).sum())
    v = torch.nn.Parameter(torch.from_numpy(v0))
    free = t["free"]
    count = max(float(free.sum().item()), 1.0)
    optimiser = torch.optim.Adam([v], lr=LEARNING_RATE)
    warm = int(WARMUP * iterations)

    def soft():
        h = torch.clamp(torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)
        return h, free * (t["floor"] + h) + (1.0 - free) * t["nearest"]

    for step in range(iterations):
        optimiser.zero_grad()
        h, q = soft()
        if symmetric:
            d = t["w"] - q * t["s"]
            loss = (d * torch.matmul(d, t["gram"])).sum() / reference
        else:
            wq = q * t["s"]
            loss = (t["constant"] - 2.0 * (t["cross"] * wq).sum()
                    + (wq * torch.matmul(wq, t["gram"])).sum()) / reference
        if step >= warm:
            progress = (step - warm) / float(max(iterations - warm, 1))
            beta = BETA[0] + (BETA[1] - BETA[0]) * progress
            loss = loss + REGULARISATION * ((1.0 - torch.abs(2.0 * h - 1.0) ** beta) * free).sum() / count
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        h, _ = soft()
        hard = (h >= 0.5).double()
        learned = free * (t["floor"] + hard) + (1.0 - free) * t["nearest"]
    return np.clip(learned.numpy(), -LIMIT, LIMIT)
