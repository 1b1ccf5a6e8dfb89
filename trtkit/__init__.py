"""trtkit: make trained image classifiers fast on NVIDIA hardware without losing accuracy.

The package imports with numpy alone; torch, onnx, onnxruntime and TensorRT are
imported by the modules that need them (see ``trtkit.deps``).
"""

__version__ = "0.1.0"

from trtkit.errors import TrtkitError  # noqa: F401  (the one exception type users catch)
