"""TensorRT engines: one builder and one runner for TensorRT 8.2 (Jetson Nano) ... 11.x and TensorRT-RTX.

``api`` bridges the TensorRT versions by feature tests, ``builder`` turns an
ONNX variant into ``<name>.<precision>.engine`` plus a ``.json`` sidecar,
``runner`` loads it after checking the sidecar, ``torch2trt_path`` converts a
PyTorch model directly. Nothing here imports tensorrt at module level.
"""

from trtkit.backends.tensorrt.backend import TensorRTBackend, TensorRTRTXBackend  # noqa: F401
