"""FP16 ONNX: FP16 weights and compute, FP32 inputs and outputs.

Keeping the I/O in FP32 means callers feed the same arrays to every variant
(and TensorRT strongly typed builds take the graph's types as they are). Ops
that lose accuracy or are unsupported in FP16 (reductions of many values,
Softmax, shape arithmetic) stay FP32, with Casts inserted around them.
"""

import os
import sys
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


CHUNK = 1 << 22  # values converted at a time (16 MB of FP32)


class _ChunkedTensors(object):
    """``with _ChunkedTensors(module):`` the converter ``module``'s ``convert_tensor_float_to_float16`` converts a
    big tensor's raw data ``CHUNK`` values at a time, with the converter's own ``convert_np_to_float16`` (which
    works value by value: the same bytes). Why: on a whole tensor it holds several temporaries of its size (a
    VGG19 classifier's 411 MB weight took the FP16 step to 2.1 GB); the converter reaches the function by its
    module's name, so it is swapped there for the block and put back after."""

    def __init__(self, module):
        self.module = module
        self.original = module.convert_tensor_float_to_float16

    def __enter__(self):
        self.module.convert_tensor_float_to_float16 = self.convert
        return self

    def __exit__(self, *exc):
        self.module.convert_tensor_float_to_float16 = self.original
        return False

    def convert(self, tensor, min_positive_val=5.96e-08, max_finite_val=65504.0):
        onnx = require("onnx")
        if (not isinstance(tensor, onnx.TensorProto) or tensor.data_type != onnx.TensorProto.FLOAT
                or tensor.float_data or len(tensor.raw_data) <= 4 * CHUNK):
            return self.original(tensor, min_positive_val, max_finite_val)
        import numpy as np
        values = np.frombuffer(tensor.raw_data, dtype="float32")
        half = np.empty(values.shape, dtype=np.float16)
        for start in range(0, values.size, CHUNK):
            half[start:start + CHUNK] = self.module.convert_np_to_float16(values[start:start + CHUNK],
                                                                           min_positive_val, max_finite_val)
        del values
        tensor.data_type = onnx.TensorProto.FLOAT16
        tensor.raw_data = half.tobytes()
        return tensor


def convert_fp16(src, dst):
    """Write the FP16 variant of ``src`` to ``dst`` (atomically). Returns the list of ops kept FP32.

    The converter's shape inference runs on the file (``infer_shapes_path``, as the converter does for a path)
    and the converter then changes that one model in place: given a model in memory, its inference held
    five copies of the FP32 weights beside the caller's (a VGG19's FP16 variant peaked at 3.5 GB)."""
    onnx = require("onnx", "making the FP16 ONNX")
    convert, block_list = _converter()
    module = sys.modules[convert.__module__]
    handle, inferred = tempfile.mkstemp(prefix=".shapes.", suffix=".onnx", dir=os.path.dirname(os.path.abspath(dst)))
    os.close(handle)
    try:
        onnx.shape_inference.infer_shapes_path(src, inferred)
        model = onnx.load(inferred)
    finally:
        os.remove(inferred)
    present = set(node.op_type for node in model.graph.node)
    blocked = sorted(set(block_list + KEEP_FP32_OPS) & present)
    with _ChunkedTensors(module):
        converted = convert(model, keep_io_types=True, op_block_list=block_list + KEEP_FP32_OPS,
                            node_block_list=tail_nodes(model), disable_shape_infer=True)
    del model
    sort_nodes(converted)  # the converter appends its input Casts after their readers
    from trtkit.onnx.write import save
    with atomic_path(dst) as tmp:
        save(converted, tmp)
    return blocked
