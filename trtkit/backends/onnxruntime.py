"""ONNX Runtime: the embedded default. CPU everywhere; CUDA when that provider exists.

The artifact *is* the ONNX file, so ``build`` copies the precision variant;
the manifest records the providers the runner really used (``describe``). INT8 uses the ``cpu`` Q/DQ
encoding (unsigned activations, quantized bias), ONNX Runtime's fastest on x86.

The runner's ``device`` comes from ``session.get_providers()`` after the
session is made: asking for CUDA does not mean getting it (a session falls
back to CPU when the CUDA provider cannot load). Every label (the manifest's
``ran_on``, bench rows' ``device``, the backend line) comes from the providers in
use; a GPU provider asked for and not in use is a warning, and with ``strict``
(``trtkit build --strict``) a ProviderUnavailable error: one line, exit code 5.
Staged I/O uses ONNX Runtime's I/O binding, so on CUDA a staged batch stays on the GPU.
"""

import os
import shutil

import numpy as np

from trtkit.backends.base import Backend, Runner, TensorSpec
from trtkit import log
from trtkit.deps import available, require
from trtkit.errors import InputError, TrtkitError, first_line
from trtkit.fileio import atomic_path

GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider")
_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


class ProviderUnavailable(TrtkitError):
    """A GPU execution provider was asked for and ONNX Runtime runs without it (``strict``). Not a
    DeviceUnavailable: a build records those as "built, not run" and goes on; this one stops it."""

    exit_code = 5


def missing_gpu_providers(requested, in_use):
    """The GPU providers in ``requested`` (names, or (name, options) pairs) that are not in ``in_use``."""
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in (requested or [])]
    return [p for p in names if p in GPU_PROVIDERS and p not in in_use]


def default_providers():
    ort = require("onnxruntime", "the ONNX Runtime backend")
    found = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in found] or found


class OnnxRuntimeRunner(Runner):
    backend = "onnxruntime"

    def __init__(self, path, providers=None, threads=None, strict=False):
        super(OnnxRuntimeRunner, self).__init__(path)
        self.providers = providers  # asked for; None: default_providers()
        self.strict = bool(strict)  # refuse to run when a GPU provider asked for is not in use
        self.providers_in_use = None  # what the session really uses (set on activation)
        self.threads = threads
        self.session = None
        self.int8_target = None  # the CPU target a trtkit INT8 graph records (trtkit.cpuinfo), read on activation

    def _activate(self):
        ort = require("onnxruntime", "the ONNX Runtime backend")
        if not os.path.isfile(self.path):
            raise InputError("model not found: {}".format(self.path))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if self.threads:
            options.intra_op_num_threads = int(self.threads)
        options.log_severity_level = 3
        requested = self.providers or default_providers()
        try:
            self.session = ort.InferenceSession(self.path, sess_options=options, providers=requested)
        except Exception as exc:
            raise InputError("ONNX Runtime cannot load {}: {}".format(self.path, first_line(exc)),
                             hint="check the file is a complete ONNX model")
        self.providers_in_use = list(self.session.get_providers())
        missing = missing_gpu_providers(requested, self.providers_in_use)
        if missing:
            text = "ONNX Runtime was asked for {} but runs {} on {}".format(
                ", ".join(missing), os.path.basename(self.path), ", ".join(self.providers_in_use))
            if self.strict:
                self.session = None
                raise ProviderUnavailable(text, hint="check the CUDA/cuDNN libraries that provider needs "
                                                     "(onnxruntime-gpu's requirements), or drop --strict to run there")
            log.warn(text + " (results are labelled by the providers in use)")
        from trtkit.cpuinfo import check_artifact
        from trtkit.precision.int8_target import INT8_TARGET_KEY
        if not any(p in GPU_PROVIDERS for p in self.providers_in_use):
            self.int8_target = check_artifact(self.session.get_modelmeta().custom_metadata_map.get(INT8_TARGET_KEY),
                                              os.path.basename(self.path))
        self._inputs = [TensorSpec(i.name, i.shape, _ORT_TYPES.get(i.type, i.type)) for i in self.session.get_inputs()]
        self._outputs = [TensorSpec(o.name, o.shape, _ORT_TYPES.get(o.type, o.type)) for o in self.session.get_outputs()]

    def _deactivate(self):
        self.session = None

    @property
    def device(self):
        """"cuda" when the session runs on a GPU provider, else "cpu" (activates to find out)."""
        if not self.active:
            self.activate()
        return "cuda" if any(p in GPU_PROVIDERS for p in self.providers_in_use) else "cpu"

    def describe(self):
        record = super(OnnxRuntimeRunner, self).describe()
        record["providers"] = list(self.providers_in_use)
        if self.int8_target:
            record["int8_target"] = self.int8_target
        return record

    @property
    def stages_on_device(self):
        return self.device == "cuda"

    def _feed_array(self, batch):
        spec = self._inputs[0]
        return np.ascontiguousarray(batch, dtype=spec.dtype if spec.dtype != "float16" else np.float16)

    def _infer(self, batch):
        feed = {self._inputs[0].name: self._feed_array(batch)}
        names = [o.name for o in self._outputs]
        values = self.session.run(names, feed)
        return dict((n, v.astype(np.float32) if v.dtype == np.float16 else v) for n, v in zip(names, values))

    def stage(self, batch):
        """An I/O binding with the batch copied once to the session's device (inputs and outputs stay there)."""
        if not self.active:
            self.activate()
        ort = require("onnxruntime")
        where = "cuda" if self.device == "cuda" else "cpu"
        value = ort.OrtValue.ortvalue_from_numpy(self._feed_array(batch), where, 0)
        binding = self.session.io_binding()
        binding.bind_ortvalue_input(self._inputs[0].name, value)
        for spec in self._outputs:
            binding.bind_output(spec.name, where)
        return binding, value  # the value is kept alive with its binding

    def run_staged(self, staged):
        """Run a staged binding; returns it (``binding.copy_outputs_to_cpu()`` reads the outputs)."""
        binding, _ = staged
        self.session.run_with_iobinding(binding)
        return binding


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    int8_encoding = "cpu"
    artifact_suffix = ".onnx"

    def nms_placement(self):
        return "graph", "ONNX Runtime runs NonMaxSuppression in the graph"

    def availability(self):
        if not available("onnxruntime"):
            return False, "onnxruntime is not installed (pip install 'trtkit[cpu]')"
        providers = default_providers()
        if "CUDAExecutionProvider" in providers:  # installed is not in use: each artifact records what ran
            return True, "ONNX Runtime, CUDA provider installed (the providers in use are recorded per artifact)"
        return True, "ONNX Runtime on CPU"

    def build(self, onnx_path, precision, out_path, inputs=None, calibration=None):
        if os.path.abspath(onnx_path) != os.path.abspath(out_path):
            with atomic_path(out_path) as tmp:
                shutil.copyfile(onnx_path, tmp)
        ort = require("onnxruntime")
        return {"onnxruntime_version": ort.__version__}  # the providers used are recorded by the runner

    def runner(self, artifact_path, options=None):
        options = options or {}
        return OnnxRuntimeRunner(artifact_path, providers=options.get("providers"), threads=options.get("threads"),
                                 strict=options.get("strict", False))
