"""trtkit: make trained image classifiers fast on NVIDIA hardware without losing accuracy.

The package imports with numpy alone; torch, onnx, onnxruntime and TensorRT are
imported by the modules that need them (see ``trtkit.deps``).
"""

from trtkit._version import __version__  # noqa: F401

from trtkit.errors import TrtkitError  # noqa: F401  (the one exception type users catch)

from trtkit.api import BuildResult, build  # noqa: E402,F401  (light: heavy imports happen inside build())
from trtkit.app.classifier import Classifier  # noqa: E402,F401  (light: the runner is imported by load())
from trtkit.app.detector import Detector  # noqa: E402,F401
from trtkit.app.loader import load  # noqa: E402,F401
from trtkit.app.segmenter import Segmenter  # noqa: E402,F401
