"""Precision variants of an FP32 ONNX graph: FP16 (``fp16``) and INT8 Q/DQ (``calibrate``/``qdq``).

Precision lives in the ONNX graph itself (FP16 tensors, Q/DQ nodes), so one
artifact builds on every TensorRT from 8.2 to 11 and TensorRT-RTX, and runs in
ONNX Runtime too.
"""

from trtkit.precision.types import REQUESTABLE as PRECISIONS  # noqa: F401  (the names a build can ask for)
