"""What a build artifact takes and returns, read from the artifact itself, for its Triton config.

Triton refuses a model whose config disagrees with the file it serves (names,
dtypes, dims, a ``max_batch_size`` above the engine's optimization profile),
so nothing here is typed by hand or guessed:

- TensorRT engines: the engine's sidecar, read only through
  ``trtkit.backends.tensorrt.sidecar`` (the one module that writes it and
  knows its format), which also gives the profile's batch range; an engine
  whose sidecar is gone falls back to the ONNX it was built from, with an
  unknown batch range;
- ONNX files (FP32, FP16, INT8 Q/DQ alike): the graph's own inputs and outputs.

Tensors are ``backends.base.TensorSpec``, the same record runners describe
their I/O with.
"""

import os

from trtkit.backends.base import TensorSpec
from trtkit.backends.tensorrt.sidecar import batch_range, check_file, read_sidecar, sidecar_path, tensor_specs
from trtkit.deps import require
from trtkit.errors import InputError

PLAN_BACKENDS = ("tensorrt", "tensorrt-rtx")

# ONNX TensorProto element types -> numpy dtype name (bfloat16 has no numpy type, hence a table)
_ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}


class ModelIO(object):
    """An artifact's inputs and outputs (TensorSpec lists) and, for engines, the profile's opt and max batch."""

    def __init__(self, inputs, outputs, max_batch=None, opt_batch=None, source=""):
        self.inputs = inputs
        self.outputs = outputs
        self.max_batch = max_batch
        self.opt_batch = opt_batch
        self.source = source

    @property
    def batch_is_dynamic(self):
        """True when every input and output has a dynamic leading axis (Triton's batch dimension)."""
        return all(t.dims and t.dims[0] == -1 for t in self.inputs + self.outputs)


def artifact_kind(artifact):
    """``"plan"`` for TensorRT engines, ``"onnx"`` for ONNX files (INT8 Q/DQ ONNX included)."""
    path = artifact.get("path", "")
    if artifact.get("backend") in PLAN_BACKENDS or path.endswith((".engine", ".plan", ".trt")):
        return "plan"
    if path.endswith(".onnx"):
        return "onnx"
    raise InputError("artifact {} ({}) is neither an ONNX file nor a TensorRT engine".format(
        artifact.get("name"), path), hint="export-triton serves .onnx files and TensorRT engines")


def artifact_io(build, artifact):
    """ModelIO of one artifact of a ``Build`` (TensorRT plan or ONNX file)."""
    if artifact_kind(artifact) == "plan":
        return plan_io(build, artifact)
    return onnx_io(build.path(artifact))


def plan_io(build, artifact):
    """I/O and profile batches of a TensorRT engine: from its sidecar, else I/O only from its source ONNX."""
    engine = build.path(artifact)
    record = read_sidecar(engine)
    if record is not None:
        check_file(engine, record)  # a truncated or altered engine would only fail inside Triton
        inputs, outputs = tensor_specs(record)
        batches = batch_range(record, inputs[0].name) if inputs else None
        opt, high = batches[1:] if batches else (None, None)
        return ModelIO(inputs, outputs, max_batch=high, opt_batch=opt,
                       source="sidecar:" + os.path.basename(sidecar_path(engine)))
    onnx_name = artifact.get("onnx")
    if not onnx_name:
        raise InputError("engine {} has no sidecar JSON and no source ONNX in the manifest".format(artifact["path"]),
                         hint="rebuild it with this trtkit")
    io = onnx_io(build.path(onnx_name))
    io.source = "source " + io.source
    return io


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
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in ttype.shape.dim]
        return TensorSpec(value.name, shape, dtype)

    inputs = [spec(v) for v in model.graph.input if v.name not in initializers]
    outputs = [spec(v) for v in model.graph.output]
    if not inputs or not outputs:
        raise InputError("ONNX file {} has no inputs or no outputs".format(path))
    return ModelIO(inputs, outputs, source="onnx:" + os.path.basename(path))
