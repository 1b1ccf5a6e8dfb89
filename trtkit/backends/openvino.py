"""OpenVINO: trtkit's ONNX variants run on the CPU by Intel's runtime (optional extra ``openvino``).

Like ONNX Runtime, the artifact *is* the ONNX file: OpenVINO reads ONNX
directly (``Core.read_model``, about a tenth of a second for ResNet18), so
``build`` copies the precision variant after checking that OpenVINO converts it:
the same FP32/FP16 files run on either runtime; an INT8 one is rewritten for OpenVINO (below).

INT8 uses the ``cpu`` Q/DQ encoding (unsigned activations, quantized bias); a graph made for a CPU without
VNNI gets its weights back as int8, 7-bit in the first layers, when it is built for OpenVINO
(``precision.int8_overflow``: with ONNX Runtime's uint8 weights OpenVINO ran every convolution in FP32), and
Q/DQ in front of elementwise ops with a constant operand is removed (``precision.openvino_qdq``).
OpenVINO turns either encoding into the same u8 x i8 convolutions (all 20
convolutions of ResNet18 run in u8 both ways), but with the ``cpu`` encoding
the pooling layers stay u8 too, where with the TensorRT encoding they compute
in FP32 and the result is quantized again (one more FakeQuantize) before the
classifier; the compiled ``cpu`` graph is nearly the one NNCF's INT8 compiles to.
Measured interleaved in one run (ResNet18 224, batch 8, 2 threads, AMD EPYC
with AVX-512 VNNI, benchmarks/openvino_compare.py): ``cpu`` 413 img/s,
``tensorrt`` 361 (1.14x), NNCF INT8 414. It is also the encoding ONNX
Runtime runs fastest, so one INT8 file serves both runtimes.

The runner makes deliberate choices, recorded by ``describe()``:

- ``inference_precision`` ``f32`` (option ``{"inference_precision": ...}``).
  OpenVINO's own CPU default is BF16 wherever the CPU has AVX512-BF16 or AMX:
  an "FP32" model would silently run in BF16 and disagree with its reference.
  Here an artifact computes in the precision its graph says (FP16 weights are
  widened to FP32; INT8 layers stay INT8); ask for ``bf16`` explicitly.
- ``performance_hint`` ``LATENCY`` (option ``{"performance_hint": ...}``): ``infer``
  runs one synchronous request, which uses one stream; the THROUGHPUT hint
  splits the cores into streams that a single request cannot use (measured,
  ResNet18 FP32 batch 8, 2 threads: THROUGHPUT 0.64x the img/s of LATENCY).
- ``threads`` (option ``{"threads": N}``, as ONNX Runtime's runner):
  ``INFERENCE_NUM_THREADS``; the number OpenVINO really uses is recorded.
- The model keeps its dynamic batch: compiling a static shape per batch size
  measured within noise of it (1.0-1.06x) and would recompile for every size.

Not picked by ``--backend auto`` (``auto_selectable`` False). Measured here
(same run as above) OpenVINO runs FP32 at ONNX Runtime's speed (111 vs 110
img/s) and trtkit's INT8 1.55x faster (median of per-round ratios; 413 vs 242
img/s): not faster for FP32, and ONNX Runtime stays the embedded default (no
optional package, Python 3.6); the precision search compares candidates on
both by measurement.
"""

import os
import shutil

import numpy as np

from trtkit.backends.base import Backend, Runner, TensorSpec
from trtkit.deps import available, require
from trtkit.errors import InputError, first_line
from trtkit.fileio import atomic_path

DEVICE = "CPU"
DEFAULT_HINT = "LATENCY"
DEFAULT_INFERENCE_PRECISION = "f32"
HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
INFERENCE_PRECISIONS = ("f32", "bf16", "f16")
# what describe() reads back from the compiled model: record key -> OpenVINO property
_COMPILED_PROPERTIES = (("performance_hint", "PERFORMANCE_HINT"), ("threads", "INFERENCE_NUM_THREADS"),
                        ("streams", "NUM_STREAMS"), ("inference_precision", "INFERENCE_PRECISION_HINT"),
                        ("execution_devices", "EXECUTION_DEVICES"))


def _openvino(purpose="the OpenVINO backend"):
    return require("openvino", purpose)


def _core_class(ov):
    """``openvino.Core`` (2023.1 and later), else ``openvino.runtime.Core`` (2022.x)."""
    core = getattr(ov, "Core", None)
    return core if core is not None else require("openvino.runtime", "the OpenVINO backend").Core


def openvino_version():
    """OpenVINO's full build version, e.g. '2026.4.1-22982-...'."""
    ov = _openvino()
    get_version = getattr(ov, "get_version", None) or getattr(require("openvino.runtime"), "get_version")
    return str(get_version())


def device_name(core):
    """The CPU as OpenVINO names it ('AMD EPYC', 'Intel(R) Xeon(R) ...'); None if it cannot tell."""
    try:
        return str(core.get_property(DEVICE, "FULL_DEVICE_NAME"))
    except Exception:
        return None


def _plain(value):
    """A compiled-model property as JSON: numbers stay numbers, types and enums become their names."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    text = str(value)
    if text.startswith("<Type: '") and text.endswith("'>"):  # openvino.Type repr
        text = text[len("<Type: '"):-2]
    if text.startswith("PerformanceMode."):
        text = text[len("PerformanceMode."):]
    return {"bfloat16": "bf16", "float32": "f32", "float16": "f16"}.get(text, text)


def _dtype_name(element_type):
    try:
        return str(np.dtype(element_type.to_dtype()))
    except Exception:
        return str(element_type)


def _spec(port):
    """A TensorSpec of a model port: dynamic dimensions are None."""
    shape = port.get_partial_shape()
    dims = [] if shape.rank.is_dynamic else [d.get_length() if d.is_static else None for d in shape]
    return TensorSpec(port.get_any_name(), dims, _dtype_name(port.get_element_type()))


def _option(options, key, allowed, default):
    value = options.get(key) or default
    normal = str(value).upper() if key == "performance_hint" else str(value).lower()
    if normal not in allowed:
        raise InputError("unknown OpenVINO {} '{}'".format(key.replace("_", " "), value),
                         hint="use one of " + ", ".join(allowed))
    return normal


class OpenVINORunner(Runner):
    """One ONNX file compiled for OpenVINO's CPU plugin; ``infer`` runs one synchronous request."""

    backend = "openvino"
    device = "cpu"

    def __init__(self, path, threads=None, performance_hint=None, inference_precision=None):
        super(OpenVINORunner, self).__init__(path)
        options = {"performance_hint": performance_hint, "inference_precision": inference_precision}
        self.threads = int(threads) if threads else None
        self.performance_hint = _option(options, "performance_hint", HINTS, DEFAULT_HINT)
        self.inference_precision = _option(options, "inference_precision", INFERENCE_PRECISIONS,
                                           DEFAULT_INFERENCE_PRECISION)
        self.compiled = None
        self.request = None
        self.compiled_properties = {}
        self._device_name = None

    def config(self):
        """The properties passed to ``compile_model``."""
        config = {"PERFORMANCE_HINT": self.performance_hint, "INFERENCE_PRECISION_HINT": self.inference_precision}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = self.threads
        return config

    def _activate(self):
        ov = _openvino()
        if not os.path.isfile(self.path):
            raise InputError("model not found: {}".format(self.path))
        core = _core_class(ov)()
        try:
            self.compiled = core.compile_model(core.read_model(self.path), DEVICE, self.config())
        except Exception as exc:
            raise InputError("OpenVINO cannot compile {}: {}".format(self.path, first_line(exc)),
                             hint="check the file is a complete ONNX model, or use --backend onnxruntime")
        self.request = self.compiled.create_infer_request()
        self._check_int8_target()
        self._inputs = [_spec(p) for p in self.compiled.inputs]
        self._outputs = [_spec(p) for p in self.compiled.outputs]
        self._device_name = device_name(core)
        self.compiled_properties = {}
        for key, name in _COMPILED_PROPERTIES:
            try:
                self.compiled_properties[key] = _plain(self.compiled.get_property(name))
            except Exception:  # a property this OpenVINO does not report
                self.compiled_properties[key] = None

    def _check_int8_target(self):
        """Warn when a trtkit INT8 ONNX made for another CPU (``trtkit.cpuinfo``) runs here."""
        from trtkit.deps import available
        if not self.path.endswith(".onnx") or not available("onnx"):
            return
        from trtkit.cpuinfo import check_artifact
        from trtkit.deps import require
        from trtkit.precision.int8_target import INT8_TARGET_KEY
        model = require("onnx").load(self.path, load_external_data=False)
        recorded = dict((p.key, p.value) for p in model.metadata_props).get(INT8_TARGET_KEY)
        check_artifact(recorded, os.path.basename(self.path))

    def _deactivate(self):
        self.request = None
        self.compiled = None

    def _infer(self, batch):
        spec = self._inputs[0]
        feed = np.ascontiguousarray(batch, dtype=spec.dtype if spec.dtype != "float16" else np.float16)
        result = self.request.infer({0: feed})
        values = [np.array(result[port]) for port in self.compiled.outputs]
        return dict((o.name, v.astype(np.float32) if v.dtype == np.float16 else v)
                    for o, v in zip(self._outputs, values))

    def describe(self):
        """Backend, device, file, I/O, OpenVINO's version, the CPU's name and what the compiled model uses."""
        record = super(OpenVINORunner, self).describe()
        record["openvino_version"] = openvino_version()
        record["device_name"] = self._device_name
        record.update(self.compiled_properties)
        return record


def _int8_for_openvino(onnx_path):
    """(the model, what changed) of a trtkit ``cpu`` Q/DQ graph, rewritten the way OpenVINO runs it fastest
    (``precision.openvino_qdq``); None for any other file (copied as it is)."""
    if not onnx_path.endswith(".onnx") or not available("onnx"):
        return None
    onnx = require("onnx")
    from trtkit.precision.openvino_qdq import for_openvino, is_cpu_qdq
    if not is_cpu_qdq(onnx.load(onnx_path, load_external_data=False)):
        return None
    model = onnx.load(onnx_path)
    return model, for_openvino(model)


class OpenVINOBackend(Backend):
    """Copies the precision's ONNX file (after OpenVINO has read it) and runs it with ``OpenVINORunner``."""

    name = "openvino"
    nms_equal_suppresses = True  # measured on its CPU plugin (2026.4): an IoU equal to the threshold drops the box

    def nms_placement(self):
        return "graph", "OpenVINO runs NonMaxSuppression in the graph"
    int8_encoding = "cpu"
    artifact_suffix = ".onnx"
    auto_selectable = False
    auto_skip_reason = ("optional runtime, chosen by name (--backend openvino): ONNX Runtime stays the embedded "
                        "default; OpenVINO is no faster for FP32 here, and the precision search compares the two "
                        "by measurement")

    def availability(self):
        if not available("openvino"):
            return False, "openvino is not installed (pip install 'trtkit[openvino]')"
        core = _core_class(_openvino())()
        if DEVICE not in core.available_devices:
            return False, "OpenVINO {} finds no CPU device".format(openvino_version())
        name = device_name(core)
        where = " ({})".format(name) if name else ""
        return True, "OpenVINO {} on CPU{}".format(openvino_version().split("-")[0], where)

    def build(self, onnx_path, precision, out_path, inputs=None, calibration=None):
        ov = _openvino()
        core = _core_class(ov)()
        try:
            core.read_model(onnx_path)
        except Exception as exc:
            raise InputError("OpenVINO cannot read the {} ONNX {}: {}".format(
                precision, os.path.basename(onnx_path), first_line(exc)),
                hint="use --backend onnxruntime for this model")
        meta = {"openvino_version": openvino_version()}
        rewritten = _int8_for_openvino(onnx_path)
        if rewritten is not None:
            model, changed = rewritten
            meta.update(openvino_qdq=changed,
                        rewrote_graph=bool(changed["int8_weights"] or changed["float_elementwise"]))
            if changed["int8_weights"]:
                meta["isa"] = changed["int8_weights"]
            from trtkit.onnx.write import save
            with atomic_path(out_path) as tmp:
                save(model, tmp)
        elif os.path.abspath(onnx_path) != os.path.abspath(out_path):
            with atomic_path(out_path) as tmp:
                shutil.copyfile(onnx_path, tmp)
        return meta

    def runner(self, artifact_path, options=None):
        options = options or {}
        return OpenVINORunner(artifact_path, threads=options.get("threads"),
                              performance_hint=options.get("performance_hint"),
                              inference_precision=options.get("inference_precision"))
