"""Reading and normalizing ONNX files, including ones trtkit did not write.

Foreign classifiers arrive with old opsets, initializers listed as graph
inputs (TorchScript's ``keep_initializers_as_inputs``), fixed batch sizes and
any tensor names. ``prepare_onnx`` turns such a file into the form the rest
of trtkit expects (opset >= 13, initializers not inputs, a dynamic batch axis
when the graph allows it) and reports each change it made or could not make.
"""

import os

from trtkit import log
from trtkit.deps import require
from trtkit.errors import InputError
from trtkit.fileio import atomic_path

MIN_OPSET = 13  # per-channel Q/DQ and ONNX Runtime's FP16/INT8 tools need 13


CONTRACT_KEY = "trtkit.input_contract"  # metadata_props entry: the InputContract as JSON


def set_contract_metadata(model, contract):
    """Record ``contract`` (an InputContract) in the ModelProto's metadata_props (replacing an older one)."""
    import json
    kept = [p for p in model.metadata_props if p.key != CONTRACT_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key, entry.value = CONTRACT_KEY, json.dumps(contract.to_dict(), sort_keys=True)


def contract_metadata(model):
    """The InputContract a trtkit export recorded in ``model``, or None (other exporters, unreadable)."""
    import json
    from trtkit.contract import InputContract
    for prop in model.metadata_props:
        if prop.key == CONTRACT_KEY:
            try:
                return InputContract.from_dict(json.loads(prop.value))
            except (ValueError, TypeError, KeyError, InputError) as exc:
                log.warn("ignoring the unreadable input contract in the ONNX metadata ({})".format(exc))
    return None


def load_onnx(path, check=True):
    """Load and check an ONNX file; one clear InputError for missing or corrupt files."""
    onnx = require("onnx", "reading ONNX files")
    if not os.path.isfile(path):
        raise InputError("ONNX file not found: {}".format(path), hint="check the path")
    try:
        model = onnx.load(path)
    except Exception as exc:
        raise InputError("cannot read ONNX file {} ({})".format(path, exc.__class__.__name__),
                         hint="the file is corrupt or truncated; export it again")
    if not model.graph.node:
        raise InputError("ONNX file {} has an empty graph".format(path), hint="export it again")
    if check:
        try:
            onnx.checker.check_model(model)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            raise InputError("ONNX file {} fails onnx.checker: {}".format(path, first[:300]),
                             hint="export it again with a current exporter")
    return model


def opset_of(model):
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 0


def graph_inputs(model):
    """The real inputs: graph inputs that are not initializers."""
    initializers = set(i.name for i in model.graph.initializer)
    return [i for i in model.graph.input if i.name not in initializers]


def _dims(value_info):
    dims = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return dims


class OnnxSummary(object):
    """Input/output names and shapes of a classifier ONNX, and what trtkit infers from them."""

    def __init__(self, model):
        inputs = graph_inputs(model)
        if len(inputs) != 1:
            raise InputError("the ONNX model has {} inputs ({}); trtkit handles single-input image classifiers".format(
                len(inputs), ", ".join(i.name for i in inputs)))
        self.input_name = inputs[0].name
        self.input_shape = _dims(inputs[0])
        self.output_names = [o.name for o in model.graph.output]
        self.output_shape = _dims(model.graph.output[0])
        self.opset = opset_of(model)
        self.contract = contract_metadata(model)  # what a trtkit export recorded, else None
        if len(self.input_shape) != 4:
            raise InputError("the ONNX input '{}' has shape {}; expected images (N, C, H, W)".format(
                self.input_name, self.input_shape))

    @property
    def batch(self):
        """The fixed batch size, or None when the batch axis is dynamic."""
        return self.input_shape[0] if isinstance(self.input_shape[0], int) else None

    @property
    def image_shape(self):
        return tuple(self.input_shape[1:])

    @property
    def num_classes(self):
        last = self.output_shape[-1] if self.output_shape else None
        return last if isinstance(last, int) else None


def prepare_onnx(src, dst, notes=None):
    """Normalize ``src`` into ``dst`` (see module doc). Returns (OnnxSummary, list of notes)."""
    onnx = require("onnx", "reading ONNX files")
    notes = [] if notes is None else notes
    model = load_onnx(src)
    initializer_names = set(i.name for i in model.graph.initializer)
    as_inputs = [i for i in model.graph.input if i.name in initializer_names]
    if as_inputs:
        kept = [i for i in model.graph.input if i.name not in initializer_names]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        notes.append("removed {} initializers listed as graph inputs".format(len(as_inputs)))
    opset = opset_of(model)
    if opset < MIN_OPSET:
        from onnx import version_converter
        try:
            model = version_converter.convert_version(model, MIN_OPSET)
            notes.append("converted opset {} -> {}".format(opset, MIN_OPSET))
        except Exception as exc:
            raise InputError("cannot convert the ONNX file from opset {} to {}: {}".format(
                opset, MIN_OPSET, str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__),
                hint="re-export the model with opset_version={} or newer".format(MIN_OPSET))
    summary = OnnxSummary(model)
    if summary.batch is not None:
        trial = _with_dynamic_batch(model)
        if _batch_is_free(trial, summary):
            model = trial
            notes.append("made the fixed batch size {} dynamic".format(summary.batch))
        else:
            notes.append("kept the fixed batch size {}: the graph hard-codes it (verification runs in batches of {})".format(
                summary.batch, summary.batch))
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:
        log.debug("shape inference failed; continuing without value_info")
    with atomic_path(dst) as tmp:
        onnx.save(model, tmp)
    return OnnxSummary(model), notes


def _with_dynamic_batch(model):
    copy = type(model)()
    copy.CopyFrom(model)
    for value in list(copy.graph.input[:1]) + list(copy.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "batch"
    del copy.graph.value_info[:]
    return copy


def _batch_is_free(model, summary):
    """True when ONNX Runtime runs the model at two batch sizes other than the fixed one."""
    try:
        import numpy as np
        ort = require("onnxruntime")
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        shape = [d if isinstance(d, int) else 1 for d in summary.image_shape]
        for batch in (1, 3):
            if batch == summary.batch:
                continue
            out = session.run(None, {summary.input_name: np.zeros([batch] + shape, dtype=np.float32)})[0]
            if out.shape[0] != batch:
                return False
        return True
    except Exception:
        return False
