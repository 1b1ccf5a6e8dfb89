"""The element type of every tensor of a graph, read without touching its weights.

Calibration keeps statistics of float activations only, and the Q/DQ placement must not take an integer shape
computation (``Gather(Shape(x)) + 1`` in a graph exported with a dynamic batch) for an activation; both ask
here. ONNX's shape inference runs on ``weights.light_copy`` (the graph without its weights' bytes), so a big
model is not copied whole for it.
"""

from trtkit.deps import require

FLOAT = 1  # onnx.TensorProto.FLOAT
FLOAT_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _inferred(model):
    """``model``'s graph with ONNX's inferred value_info (on the weightless copy), or the model itself when
    inference fails."""
    onnx = require("onnx", "reading the ONNX graph's types")
    from trtkit.onnx.weights import light_copy
    try:
        return onnx.shape_inference.infer_shapes(light_copy(model))
    except Exception:
        return model


def shapes(model):
    """{tensor: (elem type, [dims] with None where unknown, or None without a shape)} of ``model``'s inputs,
    outputs and inferred values."""
    inferred = _inferred(model)
    found = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        kind = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in kind.shape.dim] \
            if kind.HasField("shape") else None
        found[info.name] = (kind.elem_type, dims)
    return found


def elem_types(model):
    """{tensor: ONNX elem type} of ``model``'s inputs, outputs and inferred values (the model's own value_info
    where inference fails), its initializers and its Constant nodes' outputs."""
    inferred = _inferred(model)
    types = dict((i.name, i.data_type) for i in model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.HasField("t"):
                    types[node.output[0]] = attribute.t.data_type
    for info in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        types[info.name] = info.type.tensor_type.elem_type
    return types
