"""A Triton ``config.pbtxt`` for one artifact, and the check of it against Triton's own schema.

Kept apart from reading artifacts (``triton_io``) and writing the repository
(``triton``) because it is the part with Triton's rules in it: which batch
sizes an engine's profile allows, how dims drop the batch axis, which dtypes
Triton serves. The text is written without any dependency; when tritonclient
is installed it is parsed back with Triton's ``ModelConfig`` protobuf schema,
so a config Triton would refuse is caught before anything is written.
"""

import os

from trtkit import log
from trtkit.deps import require
from trtkit.errors import InputError, MissingDependency

DEFAULT_MAX_BATCH = 32          # ONNX models have no profile: the largest batch Triton may form
DEFAULT_QUEUE_DELAY_US = 100    # how long the dynamic batcher waits to fill a preferred batch

# numpy dtype name (TensorSpec.dtype) -> Triton DataType
TRITON_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "uint16": "TYPE_UINT16", "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
    "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
}


def triton_type(spec):
    """Triton's DataType name for a TensorSpec's numpy dtype; InputError for a dtype Triton cannot serve."""
    try:
        return TRITON_TYPES[spec.dtype]
    except KeyError:
        raise InputError("'{}' has dtype '{}', which Triton cannot serve".format(spec.name, spec.dtype),
                         hint="use one of " + ", ".join(sorted(TRITON_TYPES)))


INSTANCE_KINDS = ("auto", "gpu", "cpu")


def instance_kind_of(options, kind, ran_on=None):
    """Where the instances of an artifact of ``kind`` (plan/onnx) run: ``options.instance_kind``, or with
    ``auto`` a GPU for TensorRT engines and for ONNX the build ran on a GPU (``ran_on`` names CUDA), else the
    CPU. Measured before: every ONNX export said KIND_GPU, which a Triton without a GPU refuses to load."""
    if options.instance_kind != "auto":
        return options.instance_kind
    ran_on = ran_on or {}
    providers = " ".join(ran_on.get("providers") or []) if isinstance(ran_on, dict) else str(ran_on)
    device = str(ran_on.get("device", "")) if isinstance(ran_on, dict) else ""
    on_gpu = device.startswith("cuda") or any(name in providers for name in ("CUDA", "Tensorrt", "ROCM"))
    return "gpu" if kind == "plan" or on_gpu else "cpu"


class TritonOptions(object):
    """How the served model batches and where its instances run (``instance_kind`` auto: ``instance_kind_of``)."""

    def __init__(self, max_batch_size=None, preferred_batch_sizes=None, max_queue_delay_us=DEFAULT_QUEUE_DELAY_US,
                 instances=1, instance_kind="auto", gpus=None, dynamic_batching=True, plan_backend="tensorrt",
                 onnx_backend="onnxruntime"):
        if max_batch_size is not None and max_batch_size < 0:
            raise InputError("--max-batch-size must be 0 or more")
        if instances < 1:
            raise InputError("--instances must be 1 or more")
        if instance_kind not in INSTANCE_KINDS:
            raise InputError("unknown instance kind '{}'".format(instance_kind), hint="use auto, gpu or cpu")
        if max_queue_delay_us < 0:
            raise InputError("--max-queue-delay-us must be 0 or more")
        self.max_batch_size = max_batch_size
        self.preferred_batch_sizes = list(preferred_batch_sizes or [])
        self.max_queue_delay_us = int(max_queue_delay_us)
        self.instances = int(instances)
        self.instance_kind = instance_kind
        self.gpus = list(gpus or [])
        self.dynamic_batching = dynamic_batching
        self.plan_backend = plan_backend
        self.onnx_backend = onnx_backend


def plan_batching(io, kind, options, label="artifact"):
    """(max_batch_size, preferred batch sizes) for Triton, checked against the artifact's profile.

    ``io`` is a ``triton_io.ModelIO``; ``kind`` is ``"plan"`` or ``"onnx"``.
    """
    if not io.batch_is_dynamic:
        if options.max_batch_size:
            raise InputError("{} has a fixed batch axis; Triton can only serve it with max_batch_size 0".format(label),
                             hint="drop --max-batch-size, or rebuild from an ONNX with a dynamic batch axis")
        return 0, []
    if kind == "plan" and io.max_batch is not None:
        max_batch = io.max_batch if options.max_batch_size is None else options.max_batch_size
        if max_batch > io.max_batch:
            raise InputError("--max-batch-size {} is above the engine profile's maximum batch {} for {}".format(
                max_batch, io.max_batch, label), hint="use --max-batch-size {} or rebuild the engine".format(io.max_batch))
    else:
        if kind == "plan" and options.max_batch_size is None:
            log.warn("{}: the engine's profile is unknown (no sidecar); assuming max batch {} - Triton will refuse "
                     "to load it if the engine was built for less (set --max-batch-size)".format(label, DEFAULT_MAX_BATCH))
        max_batch = DEFAULT_MAX_BATCH if options.max_batch_size is None else options.max_batch_size
    if max_batch == 0:
        return 0, []
    preferred = options.preferred_batch_sizes
    if preferred:
        bad = [p for p in preferred if p < 1 or p > max_batch]
        if bad:
            raise InputError("preferred batch sizes {} are outside 1..{} for {}".format(bad, max_batch, label))
    else:
        opt = io.opt_batch if io.opt_batch and 1 < io.opt_batch < max_batch else max(max_batch // 2, 1)
        preferred = [opt, max_batch] if 1 < opt < max_batch else [max_batch]
    return max_batch, sorted(set(preferred))


def triton_backend(options, kind, runtime=None):
    """The Triton backend that serves an artifact of ``kind`` (plan/onnx) verified on ``runtime`` (the
    manifest's ``backend``): an ONNX verified on OpenVINO goes to Triton's OpenVINO backend, which loads the
    same ``model.onnx``. Measured before: a facemask INT8 ONNX passed its gate on OpenVINO (98.33%) and was
    exported for ONNX Runtime, on which the same file had failed it (96.67%)."""
    if kind == "plan":
        return options.plan_backend
    return "openvino" if runtime == "openvino" else options.onnx_backend


def model_config_text(name, io, kind, options, comment=None, batching=None, ran_on=None, runtime=None):
    """The ``config.pbtxt`` text (protobuf text format of Triton's ModelConfig) for one model.

    ``batching`` is ``plan_batching``'s result when the caller has it already; ``ran_on``: where the build
    verified the artifact (its ``ran_on`` record), which ``instance_kind_of`` reads for ``auto``; ``runtime``:
    the runtime it was verified on (``triton_backend``).
    """
    max_batch, preferred = batching or plan_batching(io, kind, options, label=name)
    instance = instance_kind_of(options, kind, ran_on)
    if kind == "plan" and instance != "gpu":
        raise InputError("a TensorRT engine runs on a GPU only", hint="drop --instance-kind cpu, or serve the ONNX")
    cut = 1 if max_batch > 0 else 0
    lines = []
    for text in (comment or "").splitlines():
        lines.append("# " + text)
    lines.append('name: "{}"'.format(_quote(name)))
    backend = triton_backend(options, kind, runtime)
    if backend == "openvino" and instance == "gpu":
        raise InputError("{} was verified on OpenVINO, whose Triton backend runs on the CPU".format(name),
                         hint="drop --instance-kind gpu, or export an artifact verified on ONNX Runtime or TensorRT")
    lines.append('backend: "{}"'.format(_quote(backend)))
    if backend == "openvino":  # its default file is model.xml (OpenVINO IR)
        lines.append('default_model_filename: "model.onnx"')
    lines.append("max_batch_size: {}".format(max_batch))
    for section, tensors in (("input", io.inputs), ("output", io.outputs)):
        lines.append("{} [".format(section))
        for index, tensor in enumerate(tensors):
            dims = tensor.dims[cut:]
            if not dims and not (cut and section == "output"):
                raise InputError("{} '{}' has no dimensions besides the batch axis; trtkit serves image "
                                 "classifiers, segmentation models and detectors".format(section, tensor.name))
            lines.append("  {")
            lines.append('    name: "{}"'.format(_quote(tensor.name)))
            lines.append("    data_type: {}".format(triton_type(tensor)))
            if dims:
                lines.append("    dims: [ {} ]".format(", ".join(str(d) for d in dims)))
            else:  # one value per image (a detector's det_count): Triton's batched form of a [N] tensor
                lines.append("    dims: [ 1 ]")
                lines.append("    reshape: { shape: [ ] }")
            lines.append("  }" + ("," if index < len(tensors) - 1 else ""))
        lines.append("]")
    if max_batch > 0 and options.dynamic_batching:
        lines.append("dynamic_batching {")
        lines.append("  preferred_batch_size: [ {} ]".format(", ".join(str(p) for p in preferred)))
        lines.append("  max_queue_delay_microseconds: {}".format(options.max_queue_delay_us))
        lines.append("}")
    lines.append("instance_group [")
    lines.append("  {")
    lines.append("    count: {}".format(options.instances))
    lines.append("    kind: {}".format("KIND_GPU" if instance == "gpu" else "KIND_CPU"))
    if options.gpus and instance == "gpu":
        lines.append("    gpus: [ {} ]".format(", ".join(str(int(g)) for g in options.gpus)))
    lines.append("  }")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _quote(text):
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def model_config_pb2():
    """Triton's ModelConfig protobuf module, shipped in tritonclient.

    ``tritonclient.grpc``'s package import needs grpcio, which the schema does
    not; without grpcio the generated module is loaded straight from its file.
    """
    require("google.protobuf", "checking Triton model configs")
    try:
        from tritonclient.grpc import model_config_pb2 as module
        return module
    except Exception:
        pass
    client = require("tritonclient", "checking Triton model configs")
    path = os.path.join(os.path.dirname(client.__file__), "grpc", "model_config_pb2.py")
    if not os.path.isfile(path):
        raise MissingDependency("this tritonclient has no model_config_pb2", hint="pip install 'trtkit[triton]'")
    import importlib.util
    spec = importlib.util.spec_from_file_location("trtkit_triton_model_config_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_model_config(text):
    """Parse config.pbtxt text into a ``ModelConfig`` message; InputError when the schema rejects it."""
    pb2 = model_config_pb2()
    from google.protobuf import text_format
    message = pb2.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise InputError("the model config does not parse as Triton's ModelConfig: {}".format(exc))
    return message
