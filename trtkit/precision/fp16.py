"""FP16 ONNX: FP16 weights and compute, FP32 inputs and outputs.

Keeping the I/O in FP32 means callers feed the same arrays to every variant
(and TensorRT strongly typed builds take the graph's types as they are). Ops
that lose accuracy or are unsupported in FP16 (reductions of many values,
Softmax, shape arithmetic) stay FP32, with Casts inserted around them.
"""

import os
import tempfile

from trtkit.deps import available, require
from trtkit.errors import MissingDependency
from trtkit.fileio import atomic_path
from trtkit.onnx.normalize import sort_nodes

# Beyond the converter's own block list (ML ops, TopK, Range...): numerically fragile ops, and the Q/DQ of a
# model that comes already quantized (a TFLite model with int8 weights through tf2onnx): before opset 19 their
# scales must be float32, and ONNX Runtime refuses the whole graph when the converter makes them float16.
KEEP_FP32_OPS = ["Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceL2", "LayerNormalization",
                 "Pow", "Sqrt", "Exp", "Log", "Resize", "Upsample",
                 "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"]


def _converter():
    if available("onnxruntime.transformers.float16"):
        module = require("onnxruntime.transformers.float16")
        return module.convert_float_to_float16, list(getattr(module, "DEFAULT_OP_BLOCK_LIST", []))
    if available("onnxconverter_common.float16"):
        module = require("onnxconverter_common.float16")
        return module.convert_float_to_float16, list(getattr(module, "DEFAULT_OP_BLOCK_LIST", []))
    raise MissingDependency("making the FP16 ONNX needs onnxruntime or onnxconverter-common",
                            hint="pip install 'trtkit[cpu]'")


def layers_to_fp16(model, layers):
    """A copy of ``model`` (a ModelProto) in which only the nodes named in ``layers`` compute in FP16.

    For mixed INT8 on TensorRT: the layers kept out of INT8 run in FP16 rather than FP32 (TensorRT's
    strongly typed networks take each layer's precision from the graph). Every other node, the Q/DQ pairs
    and the quantized layers among them, stays as it is, so TensorRT still fuses each DequantizeLinear into
    its layer; Casts go around the FP16 layers. Numerically fragile ops stay FP32 as in ``convert_fp16``.
    """
    convert, block_list = _converter()
    wanted = set(layers)
    others = [node.name for node in model.graph.node if node.name not in wanted]
    converted = convert(model, keep_io_types=True, op_block_list=block_list + KEEP_FP32_OPS, node_block_list=others)
    sort_nodes(converted)
    return converted


def tail_nodes(model):
    """Names of the weightless nodes after the last layers with weights (``qdq_place.float_tail``): a
    detector's box decoding and score activation, a classifier's logits after its last layer. They stay FP32
    (FP16 boxes of an 800-pixel input step by half a pixel, and FP16 scores tie). Unnamed ones get names."""
    from trtkit.precision.qdq_place import WEIGHT_OPS, float_tail

    class _Nodes(object):
        graph = model.graph
    tail = float_tail(_Nodes)
    names = []
    for index, node in enumerate(model.graph.node):
        if node.op_type in WEIGHT_OPS or not node.output or not all(out in tail for out in node.output if out):
            continue
        if not node.name:
            node.name = "{}_tail_{}".format(node.op_type, index)
        names.append(node.name)
    return names


def convert_fp16(src, dst):
    """Write the FP16 variant of ``src`` to ``dst`` (atomically). Returns the list of ops kept FP32.

    The converter's shape inference runs on the file (``infer_shapes_path``, as the converter does for a path)
    and the converter then changes that one model in place: given a model in memory, its inference held
    five copies of the FP32 weights beside the caller's (a VGG19's FP16 variant peaked at 3.5 GB)."""
    onnx = require("onnx", "making the FP16 ONNX")
    convert, block_list = _converter()
    handle, inferred = tempfile.mkstemp(prefix=".shapes.", suffix=".onnx", dir=os.path.dirname(os.path.abspath(dst)))
    os.close(handle)
    try:
        onnx.shape_inference.infer_shapes_path(src, inferred)
        model = onnx.load(inferred)
    finally:
        os.remove(inferred)
    present = set(node.op_type for node in model.graph.node)
    blocked = sorted(set(block_list + KEEP_FP32_OPS) & present)
    converted = convert(model, keep_io_types=True, op_block_list=block_list + KEEP_FP32_OPS,
                        node_block_list=tail_nodes(model), disable_shape_infer=True)
    del model
    sort_nodes(converted)  # the converter appends its input Casts after their readers
    with atomic_path(dst) as tmp:
        onnx.save(converted, tmp)
    return blocked
