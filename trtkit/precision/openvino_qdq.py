"""What trtkit's ``cpu`` Q/DQ graph becomes when it is built for OpenVINO.

The ``cpu`` graph is written for ONNX Runtime's INT8 kernels and runs on OpenVINO too, but two of its
choices cost OpenVINO speed that NNCF's INT8 of the same model does not lose:

- **uint8 weights** (a graph made for a CPU without VNNI): OpenVINO has no u8 x u8 convolution and runs every
  one in FP32. They become int8, 7-bit in the first layers (``int8_overflow``).
- **Q/DQ in front of a Mul or Add with a constant operand** (a GroupNorm's or a LayerNorm's affine, a
  decomposed hard-swish's ``x + 3`` and ``/ 6``, an input's normalisation): ONNX Runtime runs them as
  QLinearMul/QLinearAdd, but OpenVINO runs a FakeQuantize there on its own, which also stops it fusing the
  elementwise op into the convolution before it. They are removed (the op then computes in float, between the
  same quantized layers; nothing is quantized that was not before). Measured on the sample detector (20
  GroupNorms, 40 such pairs; 2 threads, AMD EPYC, AVX2, 4 interleaved rounds, batch 8): 725-845 -> 792-906
  img/s, NNCF's INT8 808-859.

The build's verification then runs the OpenVINO file itself, so what it changes is measured like any variant.
"""

from trtkit.precision.int8_target import int8_target

ELEMENTWISE = ("Mul", "Add", "Sub", "Div")


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


def drop_constant_elementwise(model):
    """Remove, in place, every activation Q -> DQ pair whose DQ outputs feed only elementwise ops with a
    constant operand (an initializer, a Constant, or the DQ of an initializer); returns how many."""
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
        if users and all(u.op_type in ELEMENTWISE and any(i in constants for i in u.input) for u in users):
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
