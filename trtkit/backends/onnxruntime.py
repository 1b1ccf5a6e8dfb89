"""ONNX Runtime: the embedded default. CPU everywhere; CUDA when that provider exists.

The artifact *is* the ONNX file, so ``build`` copies the precision variant and
records the providers the runner will use. INT8 uses the ``cpu`` Q/DQ
encoding (unsigned activations, quantized bias), ONNX Runtime's fastest on x86.
"""

import os
import shutil

import numpy as np

from trtkit.backends.base import Backend, Runner, TensorSpec
from trtkit.deps import available, require
from trtkit.errors import InputError
from trtkit.fileio import atomic_path

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def default_providers():
    ort = require("onnxruntime", "the ONNX Runtime backend")
    found = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in found] or found


class OnnxRuntimeRunner(Runner):
    backend = "onnxruntime"

    def __init__(self, path, providers=None, threads=None):
        super(OnnxRuntimeRunner, self).__init__(path)
        self.providers = providers
        self.threads = threads
        self.session = None

    def _activate(self):
        ort = require("onnxruntime", "the ONNX Runtime backend")
        if not os.path.isfile(self.path):
            raise InputError("model not found: {}".format(self.path))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if self.threads:
            options.intra_op_num_threads = int(self.threads)
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(self.path, sess_options=options,
                                                providers=self.providers or default_providers())
        except Exception as exc:
            text = str(exc).strip().splitlines()
            raise InputError("ONNX Runtime cannot load {}: {}".format(self.path, text[0][:300] if text else exc),
                             hint="check the file is a complete ONNX model")
        self._inputs = [TensorSpec(i.name, i.shape, _ORT_TYPES.get(i.type, i.type)) for i in self.session.get_inputs()]
        self._outputs = [TensorSpec(o.name, o.shape, _ORT_TYPES.get(o.type, o.type)) for o in self.session.get_outputs()]

    def _deactivate(self):
        self.session = None

    def inputs(self):
        if not self.active:
            self.activate()
        return self._inputs

    def outputs(self):
        if not self.active:
            self.activate()
        return self._outputs

    def _infer(self, batch):
        spec = self._inputs[0]
        feed = {spec.name: np.ascontiguousarray(batch, dtype=spec.dtype if spec.dtype != "float16" else np.float16)}
        names = [o.name for o in self._outputs]
        values = self.session.run(names, feed)
        return dict((n, v.astype(np.float32) if v.dtype == np.float16 else v) for n, v in zip(names, values))


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    int8_encoding = "cpu"
    artifact_suffix = ".onnx"

    def availability(self):
        if not available("onnxruntime"):
            return False, "onnxruntime is not installed (pip install 'trtkit[cpu]')"
        providers = default_providers()
        where = "CUDA" if "CUDAExecutionProvider" in providers else "CPU"
        return True, "ONNX Runtime on {}".format(where)

    def build(self, onnx_path, precision, out_path, inputs=None, calibration=None):
        if os.path.abspath(onnx_path) != os.path.abspath(out_path):
            with atomic_path(out_path) as tmp:
                shutil.copyfile(onnx_path, tmp)
        ort = require("onnxruntime")
        return {"providers": default_providers(), "onnxruntime_version": ort.__version__}

    def runner(self, artifact_path, options=None):
        options = options or {}
        return OnnxRuntimeRunner(artifact_path, providers=options.get("providers"), threads=options.get("threads"))
