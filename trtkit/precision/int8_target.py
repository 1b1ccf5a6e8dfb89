"""Which CPU a trtkit Q/DQ graph was made for, recorded in the graph itself, and the uint8 weights of a graph
made for a CPU without VNNI.

Why recorded in the ONNX: the runtimes (``backends.onnxruntime``, ``backends.openvino``) read it when they
load an artifact and warn, through ``trtkit.cpuinfo``, when it meets a CPU it was not made for (INT8 made for
VNNI saturates on AVX2); ``qdq.write_qdq`` writes it.
"""

import numpy as np

from trtkit.deps import require

INT8_TARGET_KEY = "trtkit.int8_target"  # metadata_props: {"encoding", "target", "weight_type"} as JSON


def weight_type_of(encoding, target):
    """``int8``, or ``uint8`` for a ``cpu`` graph made for a CPU without VNNI (``trtkit.cpuinfo``)."""
    from trtkit.cpuinfo import weight_type
    return weight_type(target) if encoding == "cpu" and target else "int8"


def shift_weights_to_uint8(model):
    """Rewrite every int8 weight of ``model`` (a DequantizeLinear reading an int8 initializer) as uint8 with
    zero point 128, in place: the same levels, so the same dequantized weights, but run by ONNX Runtime's U8U8
    kernels, which do not saturate on CPUs without VNNI. Not ONNX Runtime's quantizer's own
    ``weight_type=QUInt8``: its symmetric uint8 grid (scale amax/127.5) is another rounding of the weights, and
    measured on the zoo replicas it agreed less with FP32 than these levels do (benchmarks/emulated_cpu.py)."""
    numpy_helper = require("onnx.numpy_helper")
    onnx = require("onnx", "writing the INT8 ONNX")
    done = set()
    for _, weight, zero in weight_dequantizers(model, onnx.TensorProto.INT8):
        for tensor in (weight, zero):
            if tensor.name not in done:
                shifted = numpy_helper.to_array(tensor).astype(np.int16) + 128
                tensor.CopyFrom(numpy_helper.from_array(shifted.astype(np.uint8), tensor.name))
                done.add(tensor.name)


def weight_dequantizers(model, data_type):
    """(DequantizeLinear node, weight initializer, zero-point initializer) of every DequantizeLinear reading an
    initializer of ``data_type`` (an ``onnx.TensorProto`` type) with a zero point: the graph's quantized
    weights (and biases, for int32)."""
    inits = dict((i.name, i) for i in model.graph.initializer)
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or len(node.input) < 3 or node.input[0] not in inits:
            continue
        weight, zero = inits[node.input[0]], inits.get(node.input[2])
        if weight.data_type == data_type and zero is not None:
            yield node, weight, zero


def record_target(model, encoding, target):
    """Write into ``model``'s metadata the encoding, CPU target and weight type it was quantized for."""
    import json
    kind = weight_type_of(encoding, target)
    kept = [p for p in model.metadata_props if p.key != INT8_TARGET_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key = INT8_TARGET_KEY
    entry.value = json.dumps({"encoding": encoding, "target": target if encoding == "cpu" else "tensorrt",
                              "weight_type": kind}, sort_keys=True)


def int8_target(model):
    """The {"encoding", "target", "weight_type"} a trtkit Q/DQ graph records, or None."""
    import json
    for prop in model.metadata_props:
        if prop.key == INT8_TARGET_KEY:
            try:
                return json.loads(prop.value)
            except ValueError:
                return None
    return None
