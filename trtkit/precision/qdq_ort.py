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
writer (``ort_cpu_job`` returns None).
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


class OrtQuantizerJob(object):
    """ONNX Runtime's quantizer's input, written to its own folder by ``ort_cpu_job``: ``run()`` quantizes it and
    returns the Q/DQ ModelProto, ``close()`` removes the folder. The FP32 model need not live while it runs
    (``precision.qdq_file``): its weights are in the folder, and with upb protobuf a model's memory is given
    back only when the whole model is dropped (clearing its initializers frees nothing)."""

    def __init__(self, folder, present, exclude, moved):
        self.folder = folder
        self.present = present
        self.exclude = exclude
        self.moved = moved

    def run(self):
        onnx = require("onnx", "writing the INT8 ONNX")
        quant = require("onnxruntime.quantization")
        calibrate = require("onnxruntime.quantization.calibrate")
        out = os.path.join(self.folder, "int8.onnx")
        logging.disable(logging.WARNING)  # "please pre-process the model": trtkit already did
        try:
            quant.quantize_static(
                os.path.join(self.folder, "fp32.onnx"), out, None, quant_format=quant.QuantFormat.QDQ,
                op_types_to_quantize=[op for op in CPU_OPS if op in self.present], per_channel=True,
                reduce_range=False, nodes_to_exclude=self.exclude,
                activation_type=quant.QuantType.QUInt8,
                weight_type=quant.QuantType.QInt8,
                calibrate_method=calibrate.CalibrationMethod.MinMax,
                calibration_cache_path=os.path.join(self.folder, "ranges.json"),
                extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
        finally:
            logging.disable(logging.NOTSET)
        written = onnx.load(out)
        for tensor in written.graph.initializer:  # onnx's reader of external data marks them all DEFAULT
            if tensor.name in self.moved and tensor.HasField("data_location") and not tensor.external_data and \
                    tensor.data_location == tensor.DEFAULT:
                tensor.ClearField("data_location")
        return written

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)


def ort_cpu_job(model, ranges, cpu_range, exclude=()):
    """The ``OrtQuantizerJob`` that makes the ``cpu`` Q/DQ ModelProto of ``model`` (opset >= 13, BatchNorm
    folded) from ``ranges``, or None when this ONNX Runtime cannot take precomputed ranges. ``cpu_range(entry)``
    -> (rmin, rmax); ``exclude``: nodes of ``model`` left in float (the classifier layer and what follows it).
    Weights are int8; ``qdq.write_qdq`` shifts them to uint8 for CPUs without VNNI
    (``int8_target.shift_weights_to_uint8``). The quantizer gets a path, not the model (given a model, it copied
    it twice more), and the model's big weights in a file of their own (``onnx.weights.save_split``), which it
    reads tensor by tensor (a whole file it reads as bytes, then parses)."""
    if not supported():
        return None
    for index, node in enumerate(model.graph.node):  # the quantizer excludes nodes by name
        if not node.name:
            node.name = "{}_{}".format(node.op_type, index)
    calibrate = require("onnxruntime.quantization.calibrate")
    from trtkit.onnx.weights import save_split
    data = {}
    for name, entry in ranges.items():
        rmin, rmax = cpu_range(entry)
        data[name] = (np.array(min(rmin, 0.0), dtype=np.float32), np.array(max(rmax, 0.0), dtype=np.float32))
    folder = tempfile.mkdtemp(prefix="trtkit-ortq-")
    try:
        calibrate.save_tensors_data(calibrate.TensorsData(calibrate.CalibrationMethod.MinMax, data),
                                    os.path.join(folder, "ranges.json"))
        moved = set(save_split(model, os.path.join(folder, "fp32.onnx")))
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return OrtQuantizerJob(folder, set(n.op_type for n in model.graph.node), [n.name for n in exclude], moved)
