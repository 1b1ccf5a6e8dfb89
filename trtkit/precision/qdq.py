"""Write an INT8 Q/DQ ONNX from an FP32 ONNX and precomputed activation ranges.

One set of ranges, two encodings, because the two runtimes want different graphs:

* ``tensorrt``: symmetric INT8 activations (zero point 0, scale amax/127),
  symmetric per-channel INT8 weights, biases left in FP32 (TensorRT's parser
  rejects INT32 bias DequantizeLinear), Q/DQ where TensorRT's placement rules
  put it (``qdq_place``: Conv/Gemm/MatMul inputs, Add residuals, pooling
  inputs, Concat inputs sharing the output's scale). Written here with
  onnx.helper, so placement and scales are exactly the ones calibrated.
* ``cpu``: what ONNX Runtime runs fastest on x86: unsigned activations with a
  zero point (rmin..rmax), symmetric per-channel INT8 weights and INT32
  biases. Written by ONNX Runtime's own quantizer fed these ranges
  (``qdq_ort``: it knows which ops its CPU kernels fuse, and widens weight
  scales instead of clipping INT32 biases); ONNX Runtime versions that cannot
  take given ranges get trtkit's writer (``qdq_place.cpu_edges``).

Both need opset 13 (per-channel DequantizeLinear): an older graph is converted
here, on a copy (``onnx_normalize.upgrade_opset``); the FP32/FP16 variants keep
the original.
"""

import copy

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError
from trtkit.onnx.normalize import drop_unused_initializers
from trtkit.precision.qdq_graph import Graph
from trtkit.precision.int8_target import record_target as _record_target, shift_weights_to_uint8, \
    weight_type_of as _weight_type
from trtkit.precision.qdq_place import (activation_inputs, cpu_edges, depthwise_float, float_fed, head_tensors,
                                       tensorrt_edges, weight_of)

ENCODINGS = ("tensorrt", "cpu")
_MIN_SCALE = 1e-8
_SAME_RANGE = ("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Identity")


def check_encoding(encoding):
    if encoding not in ENCODINGS:
        raise InputError("unknown INT8 encoding '{}'".format(encoding), hint="use one of " + ", ".join(ENCODINGS))
    return encoding


# ------------------------------------------------------------------ scales

def symmetric_scale(amax):
    """INT8 scale of a symmetric range [-amax, amax] (TensorRT's amax / 127)."""
    return max(float(amax), _MIN_SCALE * 127.0) / 127.0


def asymmetric_params(rmin, rmax):
    """(scale, uint8 zero point) of [rmin, rmax], widened to include 0."""
    rmin = min(float(rmin), 0.0)
    rmax = max(float(rmax), 0.0)
    if rmax - rmin < _MIN_SCALE * 255.0:
        rmax = rmin + _MIN_SCALE * 255.0
    scale = (rmax - rmin) / 255.0
    zero_point = int(np.clip(np.round(-rmin / scale), 0, 255))
    return scale, zero_point


def cpu_range(entry):
    """The [rmin, rmax] of the ``cpu`` encoding: observed min/max clipped to the calibrated amax."""
    amax = entry["amax"]
    rmin = max(entry["min"], -amax)
    rmax = min(entry["max"], amax)
    return rmin, rmax


def quantize_weight(weight, axis):
    """Symmetric per-channel INT8 of ``weight`` along ``axis``: (int8 array, float32 scales)."""
    limit = 127
    moved = np.moveaxis(weight, axis, 0)
    amax = np.abs(moved.reshape(moved.shape[0], -1)).max(axis=1)
    scales = np.where(amax > 0, amax / float(limit), 1.0).astype(np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.round(weight / scales.reshape(shape)), -limit, limit).astype(np.int8)
    return q, scales


# ------------------------------------------------------------------ graph helpers

def _fold_batchnorm(model):
    """Fold BatchNormalization into the Conv that feeds it, so weights are quantized as they are used."""
    numpy_helper = require("onnx.numpy_helper")
    g = Graph(model)
    removed = []
    for bn in list(model.graph.node):
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1:
            continue
        conv = g.producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or len(g.consumers.get(bn.input[0], [])) != 1:
            continue
        if bn.input[0] in g.outputs or not all(g.is_init(n) for n in list(bn.input[1:5]) + [conv.input[1]]):
            continue
        gamma, beta, mean, var = [g.array(n).astype(np.float64) for n in bn.input[1:5]]
        factor = gamma / np.sqrt(var + g.attr(bn, "epsilon", 1e-5))
        weight = g.array(conv.input[1]).astype(np.float64)
        bias = g.array(conv.input[2]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] else 0.0
        new_w = (weight * factor.reshape((-1,) + (1,) * (weight.ndim - 1))).astype(np.float32)
        new_b = ((bias - mean) * factor + beta).astype(np.float32)
        w_name, b_name = conv.input[1] + "_bnfolded", bn.output[0] + "_bias"
        model.graph.initializer.extend([numpy_helper.from_array(new_w, w_name),
                                        numpy_helper.from_array(new_b, b_name)])
        data = conv.input[0]
        del conv.input[:]
        conv.input.extend([data, w_name, b_name])
        conv.output[0] = bn.output[0]
        removed.append(bn)
    for node in removed:
        model.graph.node.remove(node)
    if removed:
        drop_unused_initializers(model)
    return len(removed)


# ------------------------------------------------------------------ writer

def prepared(model, copy=True):
    """The graph both the writer and ``quantizable_layers`` work on: opset >= 13, BatchNorm folded,
    every node named (layer names are how a mixed variant says which layers stay float). ``copy=False``:
    ``model`` itself is changed (a caller's own, loaded for this: no second copy of the weights)."""
    onnx = require("onnx", "writing the INT8 ONNX")
    from trtkit.onnx.normalize import upgrade_opset
    upgraded = upgrade_opset(model, 13, "the INT8 Q/DQ graph")  # a new graph when converted
    if upgraded is not model:
        model = upgraded
    elif copy:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    _fold_batchnorm(model)
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = "{}_{}".format(node.op_type, index)
    return model


def quantizable_layers(model, encoding, float_depthwise=False):
    """[(node name, op type)] of the layers ``write_qdq`` runs in INT8 (Conv/Gemm/MatMul with weights, the
    classifier layer included: its input and weights are INT8, its logits stay float), in graph order: what
    ``keep_float`` can name (``float_depthwise``, as ``write_qdq``'s: less those it keeps anyway)."""
    check_encoding(encoding)
    g = Graph(prepared(model))
    head = head_tensors(g)
    kept = set(_depthwise_kept(g, float_depthwise))
    return [(node.name, node.op_type) for node in g.graph.node
            if weight_of(g, node) is not None and not any(t in head for t in activation_inputs(g, node))
            and node.name not in kept]




def write_qdq(model, ranges, encoding, keep_float=(), target=None, float_depthwise=False, copy=True):
    """Return a new ModelProto: ``model`` (FP32) with Q/DQ for ``encoding`` from ``ranges``.

    ``ranges``: {tensor name: {"amax", "min", "max"}} from the calibration. ``keep_float``: names of
    layers (``quantizable_layers``) left in float: a mixed-precision graph. ``float_depthwise``: depthwise
    convs kept float with what feeds them (``qdq_place.depthwise_float``): True every one, else the names of
    those (``precision.depthwise.measure_depthwise``'s "kept": a detector's default, see ``tasks.detection``).
    ``target`` (``cpu`` encoding:
    ``vnni`` or ``avx2``, see ``trtkit.cpuinfo``) sets the weight type, uint8 without VNNI; it is recorded in
    the graph's metadata (``INT8_TARGET_KEY``) so a runner can tell a CPU it was not made for. ``copy=False``
    writes into ``model`` itself (a caller that loaded it for this).
    """
    written = _for_target(_write_qdq(model, ranges, encoding, keep_float, float_depthwise=float_depthwise,
                                     copy=copy), encoding, target)
    _record_target(written, encoding, target)
    return written


def write_qdq_of(model, ranges, encoding, tensors=(), layers=(), target=None):
    """The ``encoding`` Q/DQ graph of ``model`` with only the activations in ``tensors`` and the weights of the
    ``layers`` quantized, as the writer quantizes them: what they alone cost (``diagnose``). ``cpu``: trtkit's
    own placement, not ONNX Runtime's quantizer's; ``target`` as ``write_qdq``'s (uint8 weights for ``avx2``)."""
    return _for_target(_write_qdq(model, ranges, encoding, (), only=(set(tensors), set(layers))), encoding, target)


def _for_target(written, encoding, target):
    """``written`` with the weight type of the CPU ``target`` (uint8 without VNNI: ``int8_target``)."""
    if _weight_type(encoding, target) == "uint8":
        shift_weights_to_uint8(written)
    return written


ORT_QUANTIZER_DOC = "trtkit INT8 Q/DQ (cpu encoding, ONNX Runtime's quantizer)"


def by_ort_quantizer(model):
    """Whether ``write_qdq`` made ``model`` with ONNX Runtime's quantizer (the ``cpu`` encoding where that runs)
    rather than with trtkit's own placement."""
    return model.doc_string == ORT_QUANTIZER_DOC


def quantization_plan(model, encoding):
    """(graph, activations, weights) of the ``encoding`` Q/DQ graph of ``model``: the graph the writer works on
    (BatchNorm folded), its quantized activations [(tensor, range tensor, [consumer op types])] and the weights
    of the layers they feed [(layer, op, weight array, channel axis)] (``cpu``: trtkit's own placement)."""
    check_encoding(encoding)
    g = Graph(prepared(model))
    activations, weights = {}, {}
    for tensor, consumer, source in cpu_edges(g) if encoding == "cpu" else tensorrt_edges(g):
        users = [consumer] if consumer is not None else g.consumers.get(tensor, [])
        activations.setdefault((tensor, source), []).extend(u.op_type for u in users)
        for user in users:
            found = weight_of(g, user)
            if found and user.input[0] == tensor and user.name not in weights:
                weights[user.name] = (user.name, user.op_type, g.array(found[0]), found[1])
    return g.model, [(t, s, ops) for (t, s), ops in activations.items()], list(weights.values())


def _write_qdq(model, ranges, encoding, keep_float, only=None, float_depthwise=False, copy=True):
    check_encoding(encoding)
    model = prepared(model, copy)
    keep = _kept(model, keep_float, float_depthwise)
    if encoding == "cpu" and only is None:
        started = _cpu_job(model, ranges, keep)
        if started is not None:
            return _finish_cpu(started)
    g = Graph(model)
    edges = cpu_edges(g) if encoding == "cpu" else tensorrt_edges(g)
    if keep:  # kept layers read the float tensor: their weights then stay float too (see _quantize_weights)
        edges = [(t, user, src) for t, consumer, src in edges
                 for user in ([consumer] if consumer is not None else g.consumers.get(t, []))
                 if user.name not in keep]
    if only is not None:
        edges = [e for e in edges if e[0] in only[0]]
    _check_ranges(set(e[2] for e in edges), ranges)
    new_inits, head, after, qparams = _insert_qdq(g, edges, ranges, encoding)
    new_inits += _quantize_weights(g, encoding, qparams, head, None if only is None else only[1])
    ordered = list(head)
    for node in g.graph.node:
        ordered.append(node)
        ordered.extend(after.get(id(node), []))
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    model.graph.initializer.extend(new_inits)
    drop_unused_initializers(model)
    del model.graph.value_info[:]
    model.doc_string = "trtkit INT8 Q/DQ ({} encoding)".format(encoding)
    return model


def _kept(model, keep_float, float_depthwise):
    """The layers left in float: ``keep_float``, the depthwise convs kept, the weightless ops only they feed."""
    keep = set(keep_float)
    keep.update(_depthwise_kept(Graph(model), float_depthwise))
    if keep:  # and the weightless ops only float layers feed (see qdq_place.float_fed)
        keep |= float_fed(Graph(model), keep)
    return keep


def _cpu_job(model, ranges, keep):
    """(ONNX Runtime's quantizer's job for the prepared ``model``: ``qdq_ort.OrtQuantizerJob``, the logits it
    must leave float), or None where this ONNX Runtime cannot take given ranges. The job holds no reference
    to ``model``."""
    from trtkit.precision.qdq_ort import ort_cpu_job
    g = Graph(model)
    logits = head_tensors(g)
    head = [g.producer[t] for t in logits if t in g.producer and weight_of(g, g.producer[t]) is None]
    kept = [n for n in g.graph.node if n.name in keep]
    job = ort_cpu_job(model, _covered(ranges, model), cpu_range, exclude=head + kept)
    return None if job is None else (job, logits)


def _finish_cpu(started):
    """The ``cpu`` Q/DQ ModelProto of a ``_cpu_job``: the quantizer run, the logits' Q/DQ dropped."""
    job, logits = started
    try:
        written = job.run()
    finally:
        job.close()
    _drop_qdq_of(written, logits)
    written.doc_string = ORT_QUANTIZER_DOC
    return written


def _depthwise_kept(g, float_depthwise):
    if float_depthwise is True:
        return depthwise_float(g)
    return depthwise_float(g, set(float_depthwise)) if float_depthwise else []


def _drop_qdq_of(model, tensors):
    """Remove the Quantize/Dequantize pairs on ``tensors`` in ``model`` (in place): their consumers read the
    float tensor again. ONNX Runtime's static quantizer always quantizes the output of a layer it runs in
    INT8; the classifier layer runs in INT8 (its input and weights, as NNCF and TensorRT's quantization
    toolkits do) but its logits must stay float (``qdq_place.head_tensors``)."""
    tensors = set(tensors)
    quantized = dict((n.output[0], n.input[0]) for n in model.graph.node
                     if n.op_type == "QuantizeLinear" and n.input[0] in tensors)
    if not quantized:
        return
    dropped, renamed = set(), {}  # indices: protobuf hands out a new wrapper object per access, so no id()
    for index, node in enumerate(model.graph.node):
        if node.op_type == "QuantizeLinear" and node.output[0] in quantized:
            dropped.add(index)
        elif node.op_type == "DequantizeLinear" and node.input[0] in quantized:
            dropped.add(index)
            renamed[node.output[0]] = quantized[node.input[0]]
    if any(output.name in renamed for output in model.graph.output):
        raise ValueError("a graph output is a dequantized tensor: its Q/DQ cannot be dropped")
    kept = [copy.deepcopy(n) for index, n in enumerate(model.graph.node) if index not in dropped]
    for node in kept:
        for index, name in enumerate(node.input):
            if name in renamed:
                node.input[index] = renamed[name]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    drop_unused_initializers(model)


def _covered(ranges, model):
    """``ranges`` plus the tensors a shape-only op passes through unchanged (the opset converter adds some,
    e.g. around an old Softmax); InputError when a Conv/Gemm/MatMul input has no range. ONNX Runtime's
    quantizer leaves tensors without a range in float."""
    ranges = dict(ranges)
    for node in model.graph.node:
        if node.op_type in _SAME_RANGE and node.input and node.input[0] in ranges:
            for out in node.output:
                ranges.setdefault(out, ranges[node.input[0]])
    g = Graph(model)
    _check_ranges([t for n in g.graph.node if weight_of(g, n) for t in activation_inputs(g, n)], ranges)
    return ranges


def _check_ranges(names, ranges):
    missing = [t for t in names if t not in ranges]
    if missing:
        raise InputError("the calibration has no range for {} tensor(s) of the model (e.g. {})".format(
            len(missing), missing[0]), hint="calibrate this exact ONNX file again")


def _insert_qdq(g, edges, ranges, encoding):
    """One Quantize/Dequantize pair per (tensor, range tensor); the edges' consumers read its output."""
    numpy_helper = require("onnx.numpy_helper")
    helper = require("onnx.helper")
    groups = {}
    for tensor, consumer, source in edges:
        groups.setdefault((tensor, source), []).append(consumer)
    new_inits, head, after, qparams = [], [], {}, {}
    for (tensor, source), consumers in groups.items():
        name = tensor if source == tensor else "{}_as_{}".format(tensor, source)
        if encoding == "cpu":
            scale, zp = asymmetric_params(*cpu_range(ranges[source]))
            zp_tensor = numpy_helper.from_array(np.array(zp, dtype=np.uint8), name + "_zero_point")
        else:
            scale = symmetric_scale(ranges[source]["amax"])
            zp_tensor = numpy_helper.from_array(np.array(0, dtype=np.int8), name + "_zero_point")
        qparams[name] = scale
        new_inits += [numpy_helper.from_array(np.array(scale, dtype=np.float32), name + "_scale"), zp_tensor]
        nodes = [helper.make_node("QuantizeLinear", [tensor, name + "_scale", name + "_zero_point"],
                                  [name + "_quantized"], name=name + "_QuantizeLinear"),
                 helper.make_node("DequantizeLinear", [name + "_quantized", name + "_scale", name + "_zero_point"],
                                  [name + "_dequantized"], name=name + "_DequantizeLinear")]
        producer = g.producer.get(tensor)
        if producer is None:
            head.extend(nodes)
        else:
            after.setdefault(id(producer), []).extend(nodes)
        users = g.consumers.get(tensor, []) if None in consumers else consumers
        for user in users:
            for i, inp in enumerate(user.input):
                if inp == tensor:
                    user.input[i] = name + "_dequantized"
    return new_inits, head, after, qparams


def _quantize_weights(g, encoding, qparams, head, layers=None):
    """Per-channel INT8 weights of every Conv/Gemm/MatMul whose data input is quantized, or of the named
    ``layers`` (and, for ``cpu``, INT32 biases at activation scale x weight scale)."""
    numpy_helper = require("onnx.numpy_helper")
    helper = require("onnx.helper")
    new_inits, quantized_weights = [], set()
    for node in g.graph.node:
        found = weight_of(g, node)
        data = node.input[0] if node.input else ""
        if found is None or (node.name not in layers if layers is not None else not data.endswith("_dequantized")):
            continue
        w_name, axis = found
        weight = g.array(w_name).astype(np.float32)
        q, scales = quantize_weight(weight, axis)
        key = w_name
        if w_name not in quantized_weights:
            new_inits += [numpy_helper.from_array(q, key + "_quantized"),
                          numpy_helper.from_array(scales, key + "_scale"),
                          numpy_helper.from_array(np.zeros(scales.shape, dtype=np.int8), key + "_zero_point")]
            head.append(helper.make_node("DequantizeLinear", [key + "_quantized", key + "_scale", key + "_zero_point"],
                                         [key + "_dequantized"], name=key + "_DequantizeLinear", axis=axis))
            quantized_weights.add(w_name)
        node.input[1] = key + "_dequantized"
        if encoding == "cpu" and len(node.input) > 2 and node.input[2] and g.is_init(node.input[2]) and \
                data.endswith("_dequantized"):
            new_inits += _int32_bias(g, node, qparams[data[:-len("_dequantized")]], scales, head)
    return new_inits


def _int32_bias(g, node, act_scale, scales, head):
    numpy_helper = require("onnx.numpy_helper")
    helper = require("onnx.helper")
    bias_name = node.input[2]
    bias = g.array(bias_name).astype(np.float64)
    b_scales = (act_scale * scales.astype(np.float64)).astype(np.float32)
    if bias.ndim != 1 or bias.shape[0] != b_scales.shape[0]:
        return []
    qb = np.clip(np.round(bias / b_scales), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    bkey = bias_name + "_" + (node.name or node.output[0])
    head.append(helper.make_node("DequantizeLinear", [bkey + "_quantized", bkey + "_scale", bkey + "_zero_point"],
                                 [bkey + "_dequantized"], name=bkey + "_DequantizeLinear", axis=0))
    node.input[2] = bkey + "_dequantized"
    return [numpy_helper.from_array(qb, bkey + "_quantized"), numpy_helper.from_array(b_scales, bkey + "_scale"),
            numpy_helper.from_array(np.zeros(qb.shape, dtype=np.int32), bkey + "_zero_point")]
