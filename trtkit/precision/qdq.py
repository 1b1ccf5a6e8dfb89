"""Write an INT8 Q/DQ ONNX from an FP32 ONNX and precomputed activation ranges.

One set of ranges, two encodings, because the two runtimes want different graphs:

* ``tensorrt``: symmetric INT8 activations (zero point 0, scale amax/127),
  symmetric per-channel INT8 weights, biases left in FP32 (TensorRT's parser
  rejects INT32 bias DequantizeLinear). Q/DQ sits where TensorRT fuses it: on
  the data input of every Conv/Gemm/MatMul and on the residual (non-Conv)
  input of Add, so the add fuses into the preceding convolution.
* ``cpu``: what ONNX Runtime runs fastest on x86: unsigned activations with a
  zero point (rmin..rmax), symmetric per-channel INT8 weights and INT32 biases,
  with Q/DQ on the inputs *and* outputs of Conv/Add/Gemm (after a following
  Relu, which ONNX Runtime then drops), so every node unit fuses into
  QLinearConv / QLinearAdd / QGemm.

The Q/DQ nodes are written here with onnx.helper (not onnxruntime.quantization,
which insists on computing its own ranges), so placement and scales are exactly
the ones calibrated.
"""

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError

ENCODINGS = ("tensorrt", "cpu")
_MIN_SCALE = 1e-8
_WEIGHT_OPS = ("Conv", "Gemm", "MatMul")


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
    moved = np.moveaxis(weight, axis, 0)
    amax = np.abs(moved.reshape(moved.shape[0], -1)).max(axis=1)
    scales = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.round(weight / scales.reshape(shape)), -127, 127).astype(np.int8)
    return q, scales


# ------------------------------------------------------------------ graph helpers

class _Graph(object):
    """Producer/consumer maps and initializers of one graph, kept in sync as nodes change."""

    def __init__(self, model):
        numpy_helper = require("onnx.numpy_helper")
        self.model = model
        self.graph = model.graph
        self.inits = dict((i.name, i) for i in self.graph.initializer)
        self.arrays = {}
        self._to_array = numpy_helper.to_array
        self.outputs = set(o.name for o in self.graph.output)
        self.refresh()

    def refresh(self):
        self.producer, self.consumers = {}, {}
        for node in self.graph.node:
            for out in node.output:
                self.producer[out] = node
            for inp in node.input:
                self.consumers.setdefault(inp, []).append(node)

    def array(self, name):
        if name not in self.arrays:
            self.arrays[name] = self._to_array(self.inits[name])
        return self.arrays[name]

    def is_init(self, name):
        return name in self.inits

    def attr(self, node, name, default):
        for a in node.attribute:
            if a.name == name:
                return a.i if a.type == 2 else (a.f if a.type == 1 else default)
        return default


def _fold_batchnorm(model):
    """Fold BatchNormalization into the Conv that feeds it, so weights are quantized as they are used."""
    numpy_helper = require("onnx.numpy_helper")
    g = _Graph(model)
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
        _drop_unused_initializers(model)
    return len(removed)


def _drop_unused_initializers(model):
    used = set()
    for node in model.graph.node:
        used.update(node.input)
    used.update(o.name for o in model.graph.output)
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


# ------------------------------------------------------------------ placement

def _activation_inputs(g, node):
    """The non-initializer inputs of ``node`` that carry activations Q/DQ may wrap."""
    if node.op_type in _WEIGHT_OPS:
        return [node.input[0]] if node.input and not g.is_init(node.input[0]) else []
    return [n for n in node.input if n and not g.is_init(n)]


def _after_relu(g, name):
    """``name``, or the output of the Relu that is its only consumer (quantize after the activation)."""
    users = g.consumers.get(name, [])
    if name not in g.outputs and len(users) == 1 and users[0].op_type == "Relu":
        return users[0].output[0]
    return name


def tensorrt_placement(g):
    """Tensors to wrap in Q/DQ for TensorRT: Conv/Gemm/MatMul data inputs, the residual input of Add."""
    chosen = []
    for node in g.graph.node:
        if node.op_type in _WEIGHT_OPS and _weight_name(g, node):
            chosen.extend(_activation_inputs(g, node))
        elif node.op_type == "Add" and len(_activation_inputs(g, node)) == 2:
            chosen.extend(tensorrt_placement_for(g, node))
    return list(dict.fromkeys(chosen))


def cpu_placement(g):
    """Tensors to wrap in Q/DQ for ONNX Runtime: inputs and (post-Relu) outputs of Conv/Gemm/MatMul/Add."""
    chosen = []
    for node in g.graph.node:
        if node.op_type in _WEIGHT_OPS and _weight_name(g, node) or node.op_type == "Add":
            inputs = _activation_inputs(g, node)
            if node.op_type == "Add" and len(inputs) != 2:
                continue
            chosen.extend(inputs)
            out = _after_relu(g, node.output[0])
            if out not in g.outputs:
                chosen.append(out)
    for node in g.graph.node:  # MaxPool between quantized tensors runs in uint8
        if node.op_type == "MaxPool" and node.input[0] in chosen and node.output[0] not in g.outputs:
            chosen.append(node.output[0])
    return list(dict.fromkeys(chosen))


def _weight_name(g, node):
    """The initializer weight of a Conv/Gemm/MatMul and the per-channel axis, or None."""
    if len(node.input) < 2 or not g.is_init(node.input[1]):
        return None
    if node.op_type == "Conv":
        return node.input[1], 0
    if node.op_type == "Gemm":
        if g.attr(node, "transA", 0):
            return None
        return node.input[1], 0 if g.attr(node, "transB", 0) else 1
    if g.array(node.input[1]).ndim != 2:  # MatMul: 2-D weights, output channels are the columns
        return None
    return node.input[1], 1


# ------------------------------------------------------------------ writer

def write_qdq(model, ranges, encoding):
    """Return a new ModelProto: ``model`` (FP32) with Q/DQ for ``encoding`` from ``ranges``.

    ``ranges``: {tensor name: {"amax", "min", "max"}} from the calibration.
    """
    onnx = require("onnx", "writing the INT8 ONNX")
    numpy_helper = require("onnx.numpy_helper")
    helper = onnx.helper
    check_encoding(encoding)
    from trtkit.onnx_tools import opset_of
    if opset_of(model) < 13:
        raise InputError("the INT8 Q/DQ graph needs ONNX opset >= 13; this model has {}".format(opset_of(model)),
                         hint="export the FP32 ONNX with opset 13 or newer")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    _fold_batchnorm(model)
    g = _Graph(model)
    placement = cpu_placement(g) if encoding == "cpu" else tensorrt_placement(g)
    missing = [t for t in placement if t not in ranges]
    if missing:
        raise InputError("the calibration has no range for {} tensor(s) of the model (e.g. {})".format(
            len(missing), missing[0]), hint="calibrate this exact ONNX file again")

    new_inits, head, after = [], [], {}
    qparams = {}
    for name in placement:
        if encoding == "cpu":
            scale, zp = asymmetric_params(*cpu_range(ranges[name]))
            zp_tensor = numpy_helper.from_array(np.array(zp, dtype=np.uint8), name + "_zero_point")
        else:
            scale, zp = symmetric_scale(ranges[name]["amax"]), 0
            zp_tensor = numpy_helper.from_array(np.array(0, dtype=np.int8), name + "_zero_point")
        qparams[name] = scale
        new_inits += [numpy_helper.from_array(np.array(scale, dtype=np.float32), name + "_scale"), zp_tensor]
        nodes = [helper.make_node("QuantizeLinear", [name, name + "_scale", name + "_zero_point"],
                                  [name + "_quantized"], name=name + "_QuantizeLinear"),
                 helper.make_node("DequantizeLinear", [name + "_quantized", name + "_scale", name + "_zero_point"],
                                  [name + "_dequantized"], name=name + "_DequantizeLinear")]
        producer = g.producer.get(name)
        if producer is None:
            head.extend(nodes)
        else:
            after.setdefault(id(producer), []).extend(nodes)
        for user in g.consumers.get(name, []):
            if encoding == "tensorrt" and user.op_type not in _WEIGHT_OPS + ("Add",):
                continue  # TensorRT: only the consumers Q/DQ was placed for
            if encoding == "tensorrt" and user.op_type == "Add" and name not in tensorrt_placement_for(g, user):
                continue
            for i, inp in enumerate(user.input):
                if inp == name:
                    user.input[i] = name + "_dequantized"

    quantized_weights = set()
    for node in g.graph.node:
        if node.op_type not in _WEIGHT_OPS:
            continue
        found = _weight_name(g, node)
        data = node.input[0]
        if found is None or not data.endswith("_dequantized"):
            continue
        w_name, axis = found
        weight = g.array(w_name).astype(np.float32)
        q, scales = quantize_weight(weight, axis)
        key = w_name + ("" if w_name not in quantized_weights else "_" + node.name)
        if w_name not in quantized_weights:
            new_inits += [numpy_helper.from_array(q, key + "_quantized"),
                          numpy_helper.from_array(scales, key + "_scale"),
                          numpy_helper.from_array(np.zeros(scales.shape, dtype=np.int8), key + "_zero_point")]
            head.append(helper.make_node("DequantizeLinear", [key + "_quantized", key + "_scale", key + "_zero_point"],
                                         [key + "_dequantized"], name=key + "_DequantizeLinear", axis=axis))
            quantized_weights.add(w_name)
        node.input[1] = key + "_dequantized"
        if encoding == "cpu" and len(node.input) > 2 and node.input[2] and g.is_init(node.input[2]):
            bias_name = node.input[2]
            bias = g.array(bias_name).astype(np.float64)
            act_scale = qparams[data[:-len("_dequantized")]]
            b_scales = (act_scale * scales.astype(np.float64)).astype(np.float32)
            if bias.ndim != 1 or bias.shape[0] != b_scales.shape[0]:
                continue
            qb = np.clip(np.round(bias / b_scales), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
            bkey = bias_name + "_" + (node.name or node.output[0])
            new_inits += [numpy_helper.from_array(qb, bkey + "_quantized"),
                          numpy_helper.from_array(b_scales, bkey + "_scale"),
                          numpy_helper.from_array(np.zeros(qb.shape, dtype=np.int32), bkey + "_zero_point")]
            head.append(helper.make_node("DequantizeLinear", [bkey + "_quantized", bkey + "_scale",
                                                              bkey + "_zero_point"],
                                         [bkey + "_dequantized"], name=bkey + "_DequantizeLinear", axis=0))
            node.input[2] = bkey + "_dequantized"

    ordered = list(head)
    for node in g.graph.node:
        ordered.append(node)
        ordered.extend(after.get(id(node), []))
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    model.graph.initializer.extend(new_inits)
    _drop_unused_initializers(model)
    del model.graph.value_info[:]
    model.doc_string = "trtkit INT8 Q/DQ ({} encoding)".format(encoding)
    return model


def tensorrt_placement_for(g, add_node):
    """The input(s) of one Add that the ``tensorrt`` placement wraps."""
    inputs = [n for n in add_node.input]
    from_conv = [g.producer.get(n) is not None and g.producer[n].op_type == "Conv" for n in inputs]
    if from_conv[0] and not from_conv[1]:
        return [inputs[1]]
    if from_conv[1] and not from_conv[0]:
        return [inputs[0]]
    return [inputs[1]]
