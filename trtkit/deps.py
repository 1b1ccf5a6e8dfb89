"""Lazy imports of heavy dependencies, each named with the pip extra that brings it.

``import trtkit`` must work where only numpy is installed (a fresh Jetson, a CI
image). Modules call ``require("torch")`` at the point of use instead of
importing at the top, so a missing package becomes one clear line.
"""

import importlib

from trtkit.errors import MissingDependency

# module name -> (pip package, trtkit extra that installs it)
_KNOWN = {
    "torch": ("torch", "torch"),
    "onnx": ("onnx", "onnx"),
    "onnxruntime": ("onnxruntime", "cpu"),
    "PIL": ("pillow", "cpu"),
    "sklearn": ("scikit-learn", "cpu"),
    "matplotlib": ("matplotlib", "bench"),
    "tensorrt": ("tensorrt", None),
    "tensorrt_rtx": ("tensorrt-rtx-cu12", "tensorrt-rtx"),
    "torch2trt": ("torch2trt", None),
    "pycuda": ("pycuda", None),
    "tritonclient": ("tritonclient", "triton"),
    "pytriton": ("nvidia-pytriton", "serve"),
    "openvino": ("openvino", "openvino"),
    "nncf": ("nncf", "openvino"),
    "pycocotools": ("pycocotools", "detection"),
    "faster_coco_eval": ("faster-coco-eval", None),  # optional, used first: the same COCO evaluation in C++
    "yaml": ("pyyaml", None),  # a data.yaml in a form trtkit's own reader leaves to it (data.boxes.names)
}

_HOW = {
    "torch": "install torch first (on Jetson: NVIDIA's JetPack wheel), e.g. 'pip install torch'",
    "tensorrt": "TensorRT comes with JetPack on Jetson and from NVIDIA's index or NGC images on desktop",
    "torch2trt": "torch2trt is not on PyPI: 'git clone https://github.com/NVIDIA-AI-IOT/torch2trt && cd torch2trt && python setup.py install'",
    "pycuda": "'pip install pycuda' (needs the CUDA toolkit)",
}


def install_hint(module):
    """The sentence telling a user how to get ``module``."""
    top = module.split(".")[0]
    if top in _HOW:
        return _HOW[top]
    package, extra = _KNOWN.get(top, (top, None))
    if extra:
        return "pip install 'trtkit[{}]' (or 'pip install {}')".format(extra, package)
    return "pip install {}".format(package)


def require(module, purpose=None):
    """Import ``module`` or raise MissingDependency naming how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = "{} needs {}".format(purpose, module) if purpose else "{} is not installed".format(module)
        raise MissingDependency("{} ({})".format(what, exc.__class__.__name__ if str(exc) == "" else exc),
                                hint=install_hint(module))


def available(module):
    """True when ``module`` imports; never raises."""
    try:
        importlib.import_module(module)
        return True
    except Exception:  # broken installs raise more than ImportError (e.g. missing CUDA libs)
        return False
