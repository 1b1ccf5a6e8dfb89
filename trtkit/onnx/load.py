"""Reading and normalizing ONNX files, including ones trtkit did not write.

Foreign classifiers arrive with old opsets, initializers listed as graph inputs
(Caffe2 at IR 3, TorchScript's ``keep_initializers_as_inputs``), weights
computed by ``ConstantOfShape``, ``Dropout`` nodes, fixed batch sizes written
into Reshape shapes, NHWC inputs (tf2onnx), ``-1`` dimensions (paddle2onnx),
``[N, C, 1, 1]`` or Softmax outputs and any tensor names. ``prepare_onnx``
turns such a file into the form the rest of trtkit expects and reports each
change it made or could not make:

1. initializers are removed from the inputs (``onnx_normalize``);
2. the graph must be an image classifier: one 4-D image input (NHWC is
   rewritten to NCHW, ``onnx_layout``) and a first output of rank 2, or
   ``[N, C, 1, 1]`` (flattened); anything else is refused in one line that
   names what was found;
3. a fixed batch becomes dynamic where the graph computes the same per image;
4. constants are folded by ONNX Runtime's basic offline optimizer (why that
   one: ``onnx_normalize``), two-input ``Sum`` becomes ``Add``, shapes are
   inferred;
5. ``OnnxSummary.output_kind`` says what the output holds (``trtkit.outputs``:
   logits, a softmax, a binary score, multi-label sigmoids): every step uses
   that kind's decision rule and never applies a softmax again.

The opset is kept: the INT8 writers upgrade their copy when they need 13
(``onnx_normalize.upgrade_opset``), so a graph the converter cannot upgrade
still builds FP32 and FP16.
"""

import os

from trtkit import log, tasks
from trtkit.deps import require
from trtkit.errors import InputError, first_line
from trtkit.fileio import atomic_path
from trtkit.onnx.normalize import dims_of, drop_unused_initializers, graph_inputs, has_shape, opset_of, \
    subgraph_inputs

__all__ = ["CONTRACT_KEY", "OnnxSummary", "contract_metadata", "graph_inputs", "load_onnx", "opset_of",
           "prepare_onnx", "set_contract_metadata"]

MIN_OPSET = 13  # what the INT8 Q/DQ writers need (per-channel DequantizeLinear); other steps take older opsets


CONTRACT_KEY = "trtkit.input_contract"  # metadata_props entry: the InputContract as JSON


def set_contract_metadata(model, contract):
    """Record ``contract`` (an InputContract) in the ModelProto's metadata_props (replacing an older one)."""
    import json
    kept = [p for p in model.metadata_props if p.key != CONTRACT_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key, entry.value = CONTRACT_KEY, json.dumps(contract.to_dict(), sort_keys=True)


DETECTION_KEY = "trtkit.detection_head"  # metadata_props entry: a detector's DetectionHead as JSON


def set_detection_metadata(model, head):
    """Record a detector's ``head`` (``detect.params.DetectionHead``) in the ModelProto's metadata_props, so an
    ``--onnx`` build of the file selects its detections as the build that exported it."""
    import json
    kept = [p for p in model.metadata_props if p.key != DETECTION_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key, entry.value = DETECTION_KEY, json.dumps(head.to_dict(), sort_keys=True)


def detection_metadata(model):
    """The ``DetectionHead`` record (a dict) a trtkit export of a detector wrote in ``model``, or None."""
    import json
    from trtkit.detect.params import DetectionHead
    for prop in model.metadata_props:
        if prop.key == DETECTION_KEY:
            try:
                return DetectionHead.from_dict(json.loads(prop.value)).to_dict()
            except (ValueError, TypeError, KeyError, InputError) as exc:
                log.warn("ignoring the unreadable detection head in the ONNX metadata ({})".format(exc))
    return None


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
    failed = None
    if check:
        try:  # from the file, before it is loaded here: the checker's own copy is gone when ours comes
            onnx.checker.check_model(path)
        except Exception as exc:
            failed = exc
    try:
        model = onnx.load(path)
    except Exception as exc:
        raise InputError("cannot read ONNX file {} ({})".format(path, exc.__class__.__name__),
                         hint="the file is corrupt or truncated; export it again")
    if not model.graph.node:
        raise InputError("ONNX file {} has an empty graph".format(path), hint="export it again")
    if failed is not None:
        raise InputError("ONNX file {} fails onnx.checker: {}".format(path, first_line(failed)),
                         hint="export it again with a current exporter")
    return model


class OnnxSummary(object):
    """Input/output names and shapes of a classifier ONNX, and what trtkit infers from them.

    ``output_kind``: the ``trtkit.outputs`` kind the graph shows (None when it cannot be told);
    ``contract``: the InputContract a trtkit export recorded, else None.
    """

    def __init__(self, model, task=None):
        check_image_input(model)
        self.task = tasks.of(task).name  # the name, as the manifest records it
        inputs = graph_inputs(model)
        self.input_name = inputs[0].name
        self.input_shape = dims_of(inputs[0])
        self.output_names = [o.name for o in model.graph.output]
        self.output_shape = dims_of(model.graph.output[0]) if model.graph.output else []
        self.opset = opset_of(model)
        self.contract = contract_metadata(model)
        from trtkit.onnx.layout import output_kind
        self.output_kind = output_kind(model, task)
        self.source_layout = "nchw"   # the model's own input, before prepare_onnx rewrote it
        self.source_dtype = "float32"

    @property
    def batch(self):
        """The fixed batch size, or None when the batch axis is dynamic."""
        return self.input_shape[0] if isinstance(self.input_shape[0], int) else None

    @property
    def image_shape(self):
        return tuple(self.input_shape[1:])

    @property
    def num_classes(self):
        """The class axis's length: the last of (N, classes), the channels of a (N, C, H, W) segmentation map."""
        axis = tasks.parse(self.task).class_axis
        last = self.output_shape[axis] if len(self.output_shape) > 1 else None
        return last if isinstance(last, int) else None

    def to_dict(self):
        return {"input_name": self.input_name, "input_shape": self.input_shape, "output_names": self.output_names,
                "output_shape": self.output_shape, "output_kind": self.output_kind, "opset": self.opset,
                "task": self.task,
                "source_layout": self.source_layout, "source_dtype": self.source_dtype}


def check_image_input(model):
    """InputError unless ``model`` has exactly one 4-D input (an image batch)."""
    inputs = graph_inputs(model)
    if len(inputs) != 1:
        found = ", ".join("'{}' {}".format(i.name, _show(dims_of(i))) for i in inputs) or "none"
        raise InputError("the ONNX model has {} inputs ({}); trtkit builds image classifiers with one image "
                         "input".format(len(inputs), found), hint="export the model with a single (N, C, H, W) input")
    dims = dims_of(inputs[0])
    if len(dims) != 4:
        raise InputError("the ONNX input '{}' has shape {} ({}-D); trtkit builds image classifiers with a 4-D "
                         "(N, C, H, W) input".format(inputs[0].name, _show(dims), len(dims)),
                         hint="this does not look like an image classifier")


def check_classifier_output(model):
    """InputError unless the first output is class scores: rank 2 (N, classes)."""
    if not model.graph.output:
        raise InputError("the ONNX model has no outputs", hint="export it again")
    output = model.graph.output[0]
    if not has_shape(output):
        raise InputError("the ONNX output '{}' has no fixed rank (its shape is dynamic); trtkit builds classifiers "
                         "whose output is (N, classes)".format(output.name),
                         hint="export the model with a static output rank")
    dims = dims_of(output)
    if len(dims) != 2:
        raise InputError("the ONNX output '{}' has shape {}; trtkit builds classifiers whose output is (N, classes) "
                         "or (N, classes, 1, 1)".format(output.name, _show(dims)),
                         hint="this does not look like an image classifier")


def _show(dims):
    return "[{}]".format(", ".join(str(d) if d is not None else "?" for d in dims))


def prepare_onnx(src, dst, notes=None, layout=None, task=None, output=None):
    """Normalize ``src`` into ``dst`` (see module doc). Returns (OnnxSummary, list of notes).

    ``layout`` (``nchw``/``nhwc``, None: detect) is the user's word on the input layout; one that
    contradicts the graph is refused (``onnx.layout.is_nhwc``). The summary records the source model's
    input layout and dtype (``source_layout``, ``source_dtype``): trtkit's artifacts take NCHW float32.
    ``output``: of several outputs, the one kept (``--output``; the others and what only they need are
    dropped); without it the first is judged and a warning names the others.
    """
    from trtkit.onnx import layout as onnx_layout, normalize as norm
    require("onnx", "reading ONNX files")
    notes = [] if notes is None else notes
    model = load_onnx(src)
    removed = norm.strip_initializer_inputs(model)
    if removed:
        notes.append("removed {} initializers listed as graph inputs".format(removed))
    unknown = norm.mark_unknown_dims(model, list(graph_inputs(model)) + list(model.graph.output))
    if unknown:
        notes.append("named {} dynamic dimension(s) given as -1, 0 or a placeholder (height and width apart)".format(unknown))
    check_image_input(model)
    picked = pick_output(model, output)
    if picked:
        notes.append(picked)
    source_dtype = onnx_layout.input_dtype(model)
    converted = onnx_layout.uint8_input_to_float(model)
    if converted:
        notes.append(converted)
    source_layout = "nhwc" if onnx_layout.is_nhwc(model, layout) else "nchw"
    moved = None
    if source_layout == "nhwc":
        notes.append(onnx_layout.nhwc_to_nchw(model))
        moved = onnx_layout.nhwc_output_to_nchw(model)
    else:
        image_hw = tuple(dims_of(graph_inputs(model)[0])[2:])
        if len(image_hw) == 2 and all(isinstance(d, int) for d in image_hw):  # a map that follows a fixed input
            moved = onnx_layout.nhwc_output_to_nchw(model, image_hw)
    if moved:
        notes.append(moved)
    summary = OnnxSummary(model)
    if summary.batch is not None:
        model, note = norm.free_batch(model, summary.input_name, summary.batch, summary.image_shape)
        notes.append(note)
    before = len(model.graph.node)
    folding = norm.ConstantFolding(model)
    del model  # loaded here: gone before ONNX Runtime reads the weights (see normalize.ConstantFolding)
    model, why = folding.run()
    if why:
        notes.append("constants not folded (ONNX Runtime's optimizer: {})".format(why))
    elif len(model.graph.node) != before:
        notes.append("folded constants, removed Dropout/Identity and fused Conv+BatchNormalization with ONNX "
                     "Runtime's basic optimizer: {} -> {} nodes".format(before, len(model.graph.node)))
    sums = norm.sums_to_adds(model)
    if sums:
        notes.append("{} two-input Sum node(s) are Add".format(sums))
    model = _with_map_channels(_with_output_shape(norm.infer_shapes(model)))
    if detection_metadata(model) is not None and tasks.parse(task or tasks.DETECTION.name) == tasks.DETECTION:
        task = tasks.DETECTION  # trtkit's head says so, whatever the output (host-decoded raw heads are [N, K])
    else:
        task = onnx_layout.check_task(model, task)
    if task.flat:  # class scores: a pooled [N, C, 1, 1] output becomes [N, C]
        flattened = onnx_layout.flatten_output(model)
        if flattened:
            notes.append(flattened)
            model = norm.infer_shapes(model)
        check_classifier_output(model)
    summary = OnnxSummary(model, task)
    summary.source_layout, summary.source_dtype = source_layout, source_dtype
    if summary.output_kind not in ("logits", None):
        notes.append("the output '{}' holds {}: verification uses its decision rule (trtkit.outputs) and compares "
                     "the values as they are, without applying a softmax".format(summary.output_names[0],
                                                                                summary.output_kind))
    if summary.opset < MIN_OPSET:
        notes.append("kept opset {} (INT8 converts its copy to {})".format(summary.opset, MIN_OPSET))
    from trtkit.onnx.write import save
    with atomic_path(dst) as tmp:
        save(model, tmp)  # not onnx.save: its serialized copies of the whole model
    return summary, notes


def pick_output(model, name=None):
    """Keep only the output ``name`` of ``model`` (in place), with the nodes it needs; returns a note. Without
    ``name``, a model of several outputs keeps them all and a warning says that only the first is judged:
    verification, the precision search, predict and serve read the first output, and a landmark regressor's
    63 coordinates judged as 63 class scores would give a meaningless agreement."""
    outputs = list(model.graph.output)
    described = ", ".join("'{}' {}".format(o.name, _show(dims_of(o))) for o in outputs)
    if name is None:
        if len(outputs) > 1:
            log.warn("the ONNX has {} outputs ({}): trtkit judges only the first, '{}'; if another one holds the "
                     "class scores or the map, pass --output NAME (the others are then dropped)".format(
                         len(outputs), described, outputs[0].name))
        return None
    wanted = [o for o in outputs if o.name == name]
    if not wanted:
        raise InputError("--output {}: the ONNX has no such output (it has {})".format(name, described),
                         hint="pass one of the names listed")
    if len(outputs) == 1:
        return None
    removed = keep_outputs(model, [name])
    return "kept the output '{}' of {}, and removed the {} node(s) only the others needed".format(
        name, described, removed)


def keep_outputs(model, names):
    """``model`` (in place) with the outputs ``names`` only, in that order (any tensor of the graph: an output
    is added for one that was not), and the nodes they need; returns how many nodes were removed."""
    from onnx import helper
    declared = dict((o.name, o) for o in model.graph.output)
    wanted = [declared.get(n) or helper.make_empty_tensor_value_info(n) for n in names]
    del model.graph.output[:]
    model.graph.output.extend(wanted)
    needed, kept = set(names), set()
    while True:  # to a fixed point: the user's graph need not be in topological order
        grown = False
        for index, node in enumerate(model.graph.node):
            if index not in kept and any(out in needed for out in node.output):
                kept.add(index)
                needed.update(i for i in node.input if i)
                needed.update(subgraph_inputs(node))
                grown = True
        if not grown:
            break
    nodes = [node for index, node in enumerate(model.graph.node) if index in kept]
    removed = len(model.graph.node) - len(nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    drop_unused_initializers(model)
    return removed


def _with_output_shape(model):
    """Copy an inferred shape into a first output that declares none (the rank check reads it there)."""
    output = model.graph.output[0] if model.graph.output else None
    if output is None or has_shape(output):
        return model
    for info in model.graph.value_info:
        if info.name == output.name and has_shape(info):
            output.type.CopyFrom(info.type)
    return model


# ops whose output has the channels of their first input (a segmentation map's last steps)
_SAME_CHANNELS = ("Resize", "Upsample", "Sigmoid", "Softmax", "LogSoftmax", "Identity", "Cast", "Relu")


def _with_map_channels(model):
    """Fill in the channel count of a [N, ?, H, W] first output from the tensor its upsampling reads.

    Shape inference loses it when a Resize takes sizes computed from the input's shape (a segmentation
    export's ``interpolate(size=x.shape[-2:])``), yet the classes are the channels of the class-score map
    before the Resize, which inference does know."""
    output = model.graph.output[0] if model.graph.output else None
    if output is None or not has_shape(output):
        return model
    dims = output.type.tensor_type.shape.dim
    if len(dims) != 4 or dims[1].HasField("dim_value"):
        return model
    shapes = dict((info.name, info) for info in list(model.graph.value_info) + list(model.graph.input))
    producers = dict((out, node) for node in model.graph.node for out in node.output)
    name = output.name
    for _ in range(8):
        node = producers.get(name)
        if node is None or node.op_type not in _SAME_CHANNELS:
            return model
        name = node.input[0]
        info = shapes.get(name)
        if info is not None and has_shape(info):
            found = info.type.tensor_type.shape.dim
            if len(found) == 4 and found[1].HasField("dim_value"):
                dims[1].Clear()
                dims[1].dim_value = found[1].dim_value
                return model
    return model
