"""A Triton Inference Server model repository from a trtkit build.

``export_repository(manifest, out)`` writes, for each artifact of a build,
``OUT/<model>/config.pbtxt`` and ``OUT/<model>/1/model.plan`` (TensorRT
engines) or ``OUT/<model>/1/model.onnx`` (ONNX files, served by Triton's ONNX
Runtime backend). Why this module exists: Triton refuses a model whose
config disagrees with the file (names, dtypes, dims, a ``max_batch_size``
above the engine's optimization profile), so the config is derived from the
artifact itself, never typed by hand:

- TensorRT plans: the engine's JSON sidecar (I/O names, shapes, dtypes and the
  optimization profile, written by the TensorRT backend), else the ONNX file
  the engine was built from;
- ONNX files: the graph's own inputs and outputs.

The config text is written here without any dependency; when tritonclient is
installed it is parsed back with Triton's own ``ModelConfig`` protobuf schema
before anything is written. Nothing is left half-written: models are
assembled in a staging folder inside OUT and renamed into place.
"""

import os
import re
import shutil
import tempfile

from trtkit import __version__, log
from trtkit.deps import require
from trtkit.errors import InputError, MissingDependency
from trtkit.fileio import output_dir, read_json
from trtkit.manifest import artifact_path, load_manifest

DEFAULT_MAX_BATCH = 32          # ONNX models have no profile: the largest batch Triton may form
DEFAULT_QUEUE_DELAY_US = 100    # how long the dynamic batcher waits to fill a preferred batch

# numpy dtype name -> Triton DataType
TRITON_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "uint16": "TYPE_UINT16", "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
    "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
}

# spellings a sidecar may use (numpy, TensorRT enum names, ONNX names) -> numpy dtype name
_DTYPE_ALIASES = {
    "float": "float32", "fp32": "float32", "float32": "float32", "half": "float16", "fp16": "float16",
    "float16": "float16", "double": "float64", "float64": "float64", "bf16": "bfloat16", "bfloat16": "bfloat16",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8", "uint16": "uint16",
    "uint32": "uint32", "uint64": "uint64", "bool": "bool", "boolean": "bool",
}

# ONNX TensorProto element types -> numpy dtype name
_ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}

PLAN_BACKENDS = ("tensorrt", "tensorrt-rtx")


def normalize_dtype(value, where="tensor"):
    """A dtype as written anywhere (``float32``, ``DataType.HALF``, ``kFLOAT``, ``TYPE_FP16``) -> numpy name."""
    text = str(value).strip().lower()
    for prefix in ("datatype.", "trt.", "tensorrt.", "type_", "tensor(", "np.", "numpy."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.rstrip(")")
    if text.startswith("k") and text[1:] in _DTYPE_ALIASES:
        text = text[1:]
    name = _DTYPE_ALIASES.get(text)
    if name is None or name not in TRITON_TYPES:
        raise InputError("{} has dtype '{}', which Triton cannot serve".format(where, value),
                         hint="use one of " + ", ".join(sorted(TRITON_TYPES)))
    return name


class TensorIO(object):
    """One input or output: name, numpy dtype name, full shape (batch axis included, -1 when dynamic)."""

    def __init__(self, name, dtype, shape):
        self.name = str(name)
        self.dtype = normalize_dtype(dtype, "'{}'".format(name))
        self.shape = [_dim(d) for d in shape]

    @property
    def triton_type(self):
        return TRITON_TYPES[self.dtype]

    def to_dict(self):
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    def __repr__(self):
        return "TensorIO({!r}, {}, {})".format(self.name, self.dtype, self.shape)


def _dim(value):
    """A dimension as Triton writes it: a positive int, or -1 when dynamic (None, a name, 0 or -1)."""
    if isinstance(value, bool):
        raise InputError("bad dimension {!r}".format(value))
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
        return int(value)
    return -1


class ModelIO(object):
    """What Triton needs to know about an artifact: its I/O and, for engines, the batch range it was built for."""

    def __init__(self, inputs, outputs, max_batch=None, opt_batch=None, source=""):
        self.inputs = inputs
        self.outputs = outputs
        self.max_batch = max_batch
        self.opt_batch = opt_batch
        self.source = source

    @property
    def batch_is_dynamic(self):
        """True when every input and output has a dynamic leading axis (Triton's batch dimension)."""
        return all(t.shape and t.shape[0] == -1 for t in self.inputs + self.outputs)


# ---------------------------------------------------------------- reading artifacts

def onnx_io(path):
    """Inputs (initializers excluded) and outputs of an ONNX file."""
    onnx = require("onnx", "reading the ONNX file's inputs and outputs")
    if not os.path.isfile(path):
        raise InputError("ONNX file not found: {}".format(path), hint="run the build again")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:
        raise InputError("cannot read ONNX file {} ({})".format(path, exc.__class__.__name__),
                         hint="the file is corrupt or truncated; run the build again")
    initializers = set(i.name for i in model.graph.initializer)

    def spec(value):
        ttype = value.type.tensor_type
        dtype = _ONNX_TYPES.get(ttype.elem_type, "onnx type {}".format(ttype.elem_type))
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim]
        return TensorIO(value.name, dtype, dims)

    inputs = [spec(v) for v in model.graph.input if v.name not in initializers]
    outputs = [spec(v) for v in model.graph.output]
    if not inputs or not outputs:
        raise InputError("ONNX file {} has no inputs or no outputs".format(path))
    return ModelIO(inputs, outputs, source="onnx:" + os.path.basename(path))


def sidecar_candidates(manifest, artifact):
    """Where the TensorRT backend may have put the engine's JSON sidecar, most explicit first."""
    engine = artifact_path(manifest, artifact)
    found = []
    for key in ("sidecar", "metadata", "meta"):
        value = artifact.get(key)
        if isinstance(value, str) and value.endswith(".json"):
            found.append(os.path.join(manifest["_dir"], value))
    found.append(engine + ".json")
    found.append(os.path.splitext(engine)[0] + ".json")
    return found


def plan_io(manifest, artifact):
    """I/O and profile of a TensorRT plan: from its sidecar, else from the ONNX it was built from."""
    for candidate in sidecar_candidates(manifest, artifact):
        if os.path.isfile(candidate):
            try:
                meta = read_json(candidate)
            except ValueError as exc:
                log.warn("ignoring the unreadable engine sidecar: {}".format(exc))
                continue
            io = sidecar_io(meta, os.path.basename(candidate))
            if io is not None:
                return io
            log.warn("{} lists no inputs/outputs; reading them from the source ONNX".format(candidate))
    onnx_name = artifact.get("onnx")
    if not onnx_name:
        raise InputError("engine {} has no sidecar JSON and no source ONNX in the manifest".format(artifact["path"]),
                         hint="rebuild it with this trtkit")
    io = onnx_io(os.path.join(manifest["_dir"], onnx_name))
    opt, high = _profile_batches(artifact.get("backend_info") or {}, io.inputs[0].name)
    io.opt_batch, io.max_batch = opt, high
    io.source = "source " + io.source
    return io


def sidecar_io(meta, label="sidecar"):
    """ModelIO from an engine sidecar dict (keys ``inputs``/``outputs``/``profile``), or None when it has no I/O.

    Read defensively: I/O may be a list of ``{name, shape|dims, dtype}`` or a
    dict ``{name: {shape, dtype}}``; the profile may be ``{min, opt, max}``
    shapes, per-input dicts of those, a list of profiles (the first is the one
    Triton uses), or plain ``max_batch``/``opt_batch`` numbers.
    """
    if not isinstance(meta, dict):
        return None
    lists = []
    for key in ("inputs", "outputs"):
        value = meta.get(key)
        if isinstance(value, dict):
            value = [dict(spec, name=name) if isinstance(spec, dict) else {"name": name} for name, spec in value.items()]
        if not isinstance(value, list) or not value:
            return None
        specs = []
        for entry in value:
            if not isinstance(entry, dict) or "name" not in entry:
                raise InputError("{}: malformed {} entry {!r}".format(label, key, entry), hint="rebuild the engine")
            shape = entry.get("shape", entry.get("dims"))
            dtype = entry.get("dtype", entry.get("data_type", entry.get("type")))
            if shape is None or dtype is None:
                raise InputError("{}: {} '{}' has no shape or dtype".format(label, key[:-1], entry["name"]),
                                 hint="rebuild the engine")
            specs.append(TensorIO(entry["name"], dtype, shape))
        lists.append(specs)
    inputs, outputs = lists
    opt, high = _profile_batches(meta, inputs[0].name)
    if high is None:
        for entry in meta.get("inputs") if isinstance(meta.get("inputs"), list) else []:
            if isinstance(entry, dict) and entry.get("name") == inputs[0].name:
                opt, high = _profile_batches(entry, inputs[0].name)
    return ModelIO(inputs, outputs, max_batch=high, opt_batch=opt, source="sidecar:" + label)


def _profile_batches(meta, input_name):
    """(opt batch, max batch) from whatever profile description ``meta`` holds; (None, None) when none."""
    if not isinstance(meta, dict):
        return None, None
    for key in ("max_batch", "max_batch_size"):
        if isinstance(meta.get(key), int) and not isinstance(meta.get(key), bool) and meta[key] > 0:
            opt = meta.get("opt_batch")
            return (opt if isinstance(opt, int) and opt > 0 else None), meta[key]
    profile = meta.get("profile", meta.get("profiles"))
    if isinstance(profile, list):
        profile = profile[0] if profile else None
    if not isinstance(profile, dict):
        profile = meta if "max" in meta else None
    if not isinstance(profile, dict):
        return None, None
    if isinstance(profile.get(input_name), dict):
        profile = profile[input_name]
    elif "max" not in profile and "max_batch" not in profile:
        nested = [v for v in profile.values() if isinstance(v, dict) and "max" in v]
        if nested:
            profile = nested[0]
    if "max_batch" in profile or "max_batch_size" in profile:
        return _profile_batches(dict((k, v) for k, v in profile.items() if k != "profile"), input_name)

    def first(shape):
        if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], int) and shape[0] > 0:
            return shape[0]
        return None

    return first(profile.get("opt")), first(profile.get("max"))


def artifact_io(manifest, artifact):
    """ModelIO of one artifact of a loaded manifest (TensorRT plan or ONNX file)."""
    if artifact_kind(artifact) == "plan":
        return plan_io(manifest, artifact)
    return onnx_io(artifact_path(manifest, artifact))


def artifact_kind(artifact):
    """``"plan"`` for TensorRT engines, ``"onnx"`` for ONNX files (INT8 Q/DQ ONNX included)."""
    path = artifact.get("path", "")
    if artifact.get("backend") in PLAN_BACKENDS or path.endswith((".engine", ".plan", ".trt")):
        return "plan"
    if path.endswith(".onnx"):
        return "onnx"
    raise InputError("artifact {} ({}) is neither an ONNX file nor a TensorRT engine".format(
        artifact.get("name"), path), hint="export-triton serves .onnx files and TensorRT engines")


# ---------------------------------------------------------------- the config

class TritonOptions(object):
    """How the served model batches and where its instances run."""

    def __init__(self, max_batch_size=None, preferred_batch_sizes=None, max_queue_delay_us=DEFAULT_QUEUE_DELAY_US,
                 instances=1, instance_kind="gpu", gpus=None, dynamic_batching=True, plan_backend="tensorrt",
                 onnx_backend="onnxruntime"):
        if max_batch_size is not None and max_batch_size < 0:
            raise InputError("--max-batch-size must be 0 or more")
        if instances < 1:
            raise InputError("--instances must be 1 or more")
        if instance_kind not in ("gpu", "cpu"):
            raise InputError("unknown instance kind '{}'".format(instance_kind), hint="use gpu or cpu")
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
    """(max_batch_size, preferred batch sizes) for Triton, checked against the artifact's profile."""
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


def model_config_text(name, io, kind, options, comment=None, batching=None):
    """The ``config.pbtxt`` text (protobuf text format of Triton's ModelConfig) for one model.

    ``batching`` is ``plan_batching``'s result when the caller has it already.
    """
    max_batch, preferred = batching or plan_batching(io, kind, options, label=name)
    if kind == "plan" and options.instance_kind != "gpu":
        raise InputError("a TensorRT engine runs on a GPU only", hint="drop --instance-kind cpu, or serve the ONNX")
    cut = 1 if max_batch > 0 else 0
    lines = []
    for text in (comment or "").splitlines():
        lines.append("# " + text)
    lines.append('name: "{}"'.format(_quote(name)))
    lines.append('backend: "{}"'.format(_quote(options.plan_backend if kind == "plan" else options.onnx_backend)))
    lines.append("max_batch_size: {}".format(max_batch))
    for section, tensors in (("input", io.inputs), ("output", io.outputs)):
        lines.append("{} [".format(section))
        for index, tensor in enumerate(tensors):
            dims = tensor.shape[cut:]
            if not dims:
                raise InputError("{} '{}' has no dimensions besides the batch axis; trtkit serves image "
                                 "classifiers".format(section, tensor.name))
            lines.append("  {")
            lines.append('    name: "{}"'.format(_quote(tensor.name)))
            lines.append("    data_type: {}".format(tensor.triton_type))
            lines.append("    dims: [ {} ]".format(", ".join(str(d) for d in dims)))
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
    lines.append("    kind: {}".format("KIND_GPU" if options.instance_kind == "gpu" else "KIND_CPU"))
    if options.gpus and options.instance_kind == "gpu":
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


def model_name(artifact, base=None, multiple=True):
    """Triton model name for an artifact: ``resnet18_fp16`` (letters, digits, ``_`` and ``-`` only)."""
    if base:
        raw = "{}_{}".format(base, artifact.get("precision", "model")) if multiple else base
    else:
        raw = artifact.get("name") or os.path.splitext(os.path.basename(artifact["path"]))[0]
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", raw).strip("_")
    if not name:
        raise InputError("cannot make a Triton model name from '{}'".format(raw), hint="pass --name")
    return name


# ---------------------------------------------------------------- the repository

def select_artifacts(manifest, names=None, precisions=None, include_failing=False):
    """The artifacts to export: by name and/or precision; failing ones only when asked."""
    chosen = []
    for artifact in manifest["artifacts"]:
        if names and artifact.get("name") not in names:
            continue
        if precisions and artifact.get("precision") not in precisions:
            continue
        if artifact.get("status") == "failing" and not include_failing:
            log.warn("skipping {}: {} (pass --include-failing to export it anyway)".format(
                artifact.get("name"), artifact.get("status_detail", "failing verification")))
            continue
        chosen.append(artifact)
    if not chosen:
        have = ", ".join(a.get("name", "?") for a in manifest["artifacts"]) or "none"
        raise InputError("no artifact of the build matches (artifacts: {})".format(have),
                         hint="check --artifact/--precision, or build first")
    return chosen


def export_repository(manifest_path, out_dir, artifacts=None, precisions=None, options=None, base_name=None,
                      include_failing=False, force=False, validate=True):
    """Write a Triton model repository for a build; returns one dict per model written.

    ``validate`` parses every config with Triton's ModelConfig schema when
    tritonclient is installed (it is skipped, with a debug note, when not).
    """
    options = options or TritonOptions()
    manifest = load_manifest(manifest_path)
    chosen = select_artifacts(manifest, artifacts, precisions, include_failing)
    out = os.path.abspath(out_dir)
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError("{} exists and is not a folder".format(out))
    names = [model_name(a, base_name, multiple=len(chosen) > 1) for a in chosen]
    if len(set(names)) != len(names):
        raise InputError("two artifacts map to the same model name ({})".format(", ".join(names)),
                         hint="select artifacts with --artifact or --precision")
    for name in names:
        if os.path.exists(os.path.join(out, name)) and not force:
            raise InputError("{} already exists".format(os.path.join(out, name)),
                             hint="pass --force to replace it, or use another --out")
    check = validate
    if check:
        try:
            model_config_pb2()
        except MissingDependency as exc:
            log.debug("config not checked against Triton's schema: {}".format(exc))
            check = False
    with output_dir(out) as out:
        staging = tempfile.mkdtemp(prefix=".trtkit-triton-", dir=out)
        written = []
        try:
            for artifact, name in zip(chosen, names):
                written.append(_stage_model(manifest, artifact, name, staging, options, check))
            for record in written:
                target = os.path.join(out, record["model"])
                old = None
                if os.path.exists(target):
                    old = os.path.join(staging, ".old-" + record["model"])
                    os.rename(target, old)
                os.rename(os.path.join(staging, record["model"]), target)
                if old:
                    shutil.rmtree(old)
                record["dir"] = target
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return written


def _stage_model(manifest, artifact, name, staging, options, check):
    kind = artifact_kind(artifact)
    source = artifact_path(manifest, artifact)
    if not os.path.isfile(source):
        raise InputError("artifact file missing: {}".format(source), hint="run the build again")
    io = artifact_io(manifest, artifact)
    comment = "generated by trtkit {} from {} ({}, {} backend; I/O from {})".format(
        __version__, artifact.get("name"), artifact.get("precision"), artifact.get("backend"), io.source)
    if artifact.get("backend") == "tensorrt-rtx":
        comment += ("\nTensorRT-RTX engine: needs a Triton whose TensorRT backend runs TensorRT-RTX plans"
                    "\n(the stock 'tensorrt' backend loads engines of its own TensorRT version only)")
    max_batch, preferred = plan_batching(io, kind, options, label=name)
    text = model_config_text(name, io, kind, options, comment=comment, batching=(max_batch, preferred))
    if check:
        parse_model_config(text)
    folder = os.path.join(staging, name)
    os.makedirs(os.path.join(folder, "1"))
    file_name = "model.plan" if kind == "plan" else "model.onnx"
    shutil.copyfile(source, os.path.join(folder, "1", file_name))
    with open(os.path.join(folder, "config.pbtxt"), "w") as handle:
        handle.write(text)
    return {"model": name, "artifact": artifact.get("name"), "precision": artifact.get("precision"),
            "kind": kind, "file": os.path.join(name, "1", file_name), "max_batch_size": max_batch,
            "preferred_batch_sizes": preferred, "inputs": [t.to_dict() for t in io.inputs],
            "outputs": [t.to_dict() for t in io.outputs], "io_source": io.source}
