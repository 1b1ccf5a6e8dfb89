"""The ``cpu`` INT8 encoding by ONNX Runtime's own quantizer, fed trtkit's calibrated ranges.

``onnxruntime.quantization.quantize_static`` places Q/DQ the way ONNX
Runtime's CPU kernels fuse it (QLinearConv, QGemm, QLinearAdd/Mul/Concat,
QLinearAveragePool/GlobalAveragePool, QLinearSigmoid, uint8 MaxPool, Relu/Clip
folded into the producer's range) and, where an INT32 bias would overflow,
widens that channel's weight scale instead of clipping the bias. Its ranges
come from trtkit's calibration (one pass of histograms, the method the user
chose): they are written as ONNX Runtime's own calibration cache
(``calibration_cache_path``, ``TensorsData``) so the quantizer runs no
calibration of its own.

Measured on ResNet18 224, batch 8, 2 threads (interleaved runs): 320 img/s,
the same as trtkit's hand-written ``cpu`` graph (321 img/s), with identical
top-1. ONNX Runtime versions without ``calibration_cache_path`` get trtkit's
writer (``ort_cpu_qdq`` returns None).
"""

import inspect
import logging
import os
import shutil
import tempfile

import numpy as np

from trtkit.deps import available, require

# quantized by ONNX Runtime: what its CPU provider runs in INT8 (HardSwish, HardSigmoid, LRN, Softmax stay float).
# The classifier layer and what follows it (Softmax, Flatten) stay float: see qdq_place.head_tensors.
CPU_OPS = ("Conv", "Gemm", "MatMul", "Add", "Mul", "Concat", "MaxPool", "AveragePool", "GlobalAveragePool",
           "Relu", "Clip", "Sigmoid", "Reshape", "Flatten", "Squeeze", "Transpose")


def supported():
    """True when this ONNX Runtime can quantize with precomputed ranges."""
    if not available("onnxruntime.quantization") or not available("onnxruntime.quantization.calibrate"):
        return False
    quant = require("onnxruntime.quantization")
    calibrate = require("onnxruntime.quantization.calibrate")
    try:
        params = inspect.signature(quant.quantize_static).parameters
    except (TypeError, ValueError):
        return False
    return ("calibration_cache_path" in params and hasattr(calibrate, "TensorsData")
            and hasattr(calibrate, "save_tensors_data"))


def ort_cpu_qdq(model, ranges, cpu_range, exclude=()):
    """The ``cpu`` Q/DQ ModelProto of ``model`` (opset >= 13, BatchNorm folded) from ``ranges``, or None
    when this ONNX Runtime cannot take precomputed ranges. ``cpu_range(entry)`` -> (rmin, rmax);
    ``exclude``: nodes of ``model`` left in float (the classifier layer and what follows it). Weights are
    int8; ``qdq.write_qdq`` shifts them to uint8 for CPUs without VNNI (``int8_target.shift_weights_to_uint8``).
    ``model`` is the writer's own copy: once written to the quantizer's file its initializers are dropped (the
    quantizer reads the file; given a model, it copied it twice more)."""
    if not supported():
        return None
    for index, node in enumerate(model.graph.node):  # the quantizer excludes nodes by name
        if not node.name:
            node.name = "{}_{}".format(node.op_type, index)
    onnx = require("onnx", "writing the INT8 ONNX")
    quant = require("onnxruntime.quantization")
    calibrate = require("onnxruntime.quantization.calibrate")
    from trtkit.onnx.weights import save_split
    data = {}
    for name, entry in ranges.items():
        rmin, rmax = cpu_range(entry)
        data[name] = (np.array(min(rmin, 0.0), dtype=np.float32), np.array(max(rmax, 0.0), dtype=np.float32))
    present = set(n.op_type for n in model.graph.node)
    folder = tempfile.mkdtemp(prefix="trtkit-ortq-")
    try:
        cache = os.path.join(folder, "ranges.json")
        calibrate.save_tensors_data(calibrate.TensorsData(calibrate.CalibrationMethod.MinMax, data), cache)
        out = os.path.join(folder, "int8.onnx")
        source = os.path.join(folder, "fp32.onnx")  # a path: given a model, the quantizer copies it twice more
        # its big weights in a file of their own, which the quantizer reads tensor by tensor (a whole file it
        # reads as bytes and then parses), out of the writer's own copy (qdq._prepared) as they are written
        moved = set(save_split(model, source, release=True))
        model.graph.ClearField("initializer")
        logging.disable(logging.WARNING)  # "please pre-process the model": trtkit already did
        try:
            quant.quantize_static(
                source, out, None, quant_format=quant.QuantFormat.QDQ,
                op_types_to_quantize=[op for op in CPU_OPS if op in present], per_channel=True, reduce_range=False,
                nodes_to_exclude=[n.name for n in exclude],
                activation_type=quant.QuantType.QUInt8,
                weight_type=quant.QuantType.QInt8,
                calibrate_method=calibrate.CalibrationMethod.MinMax, calibration_cache_path=cache,
                extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
        finally:
            logging.disable(logging.NOTSET)
        written = onnx.load(out)
        for tensor in written.graph.initializer:  # onnx's reader of external data marks them all DEFAULT
            if tensor.name in moved and tensor.HasField("data_location") and not tensor.external_data and \
                    tensor.data_location == tensor.DEFAULT:
                tensor.ClearField("data_location")
        return written
    finally:
        shutil.rmtree(folder, ignore_errors=True)
