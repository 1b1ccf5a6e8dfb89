"""Graph-level normalization of a foreign ONNX: initializers, unknown dimensions, the batch axis, folding, opsets.

Each function takes a ModelProto and returns what it changed, so ``onnx_tools.prepare_onnx``
can report every change as a note.

Constant folding uses ONNX Runtime's own offline optimizer at its *basic* level
(``GraphOptimizationLevel.ORT_ENABLE_BASIC`` + ``optimized_model_filepath``):
semantics-preserving rewrites whose result is a plain ONNX graph any runtime
reads (constant folding, ``Dropout``/``Identity`` removal, Conv+BatchNorm
fusion). Measured on the Caffe2-, tf2onnx- and paddle2onnx-style test graphs
(tests/onnx_zoo.py): it folds every ``ConstantOfShape``/``Constant`` and removes
every ``Dropout`` in 2-11 ms per graph; onnxslim reaches the same graphs (same
node counts) in 30-360 ms and is one more dependency; onnx-graphsurgeon's
``fold_constants`` leaves ``Dropout`` and unfused BatchNorm. ONNX Runtime is
already the ``cpu`` extra, so it is the one used.

The opset is *not* upgraded here: ONNX Runtime and TensorRT read old opsets,
so the FP32 and FP16 variants keep the original graph. ``upgrade_opset`` is
called by the step that needs a newer one (the INT8 Q/DQ writers need 13 for
per-channel scales); when the converter fails, only that step fails.
"""

import os
import shutil
import tempfile

import numpy as np

from trtkit import log
from trtkit.deps import require
from trtkit.errors import InputError, first_line


def copy_model(model):
    return type(model).FromString(model.SerializeToString())


def opset_of(model):
    """The default-domain opset of ``model`` (0 when it names none)."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 0


def graph_inputs(model):
    """The real inputs: graph inputs that are not initializers."""
    initializers = set(i.name for i in model.graph.initializer)
    return [i for i in model.graph.input if i.name not in initializers]


def probe_image(model, noise=False):
    """(input name, an image for one run of ``model``): its first real input's shape with every unknown
    dimension 1 and its type (uint8 or float32), zeros, or seeded noise (``noise``: 0-255 for uint8, 0-1 else).
    What the graph readers run once to see what a head computes."""
    import numpy as np
    image = graph_inputs(model)[0]
    dims = [d if isinstance(d, int) else 1 for d in dims_of(image)]
    if image.type.tensor_type.elem_type == 2:  # uint8
        values = np.random.RandomState(0).randint(0, 256, dims) if noise else np.zeros(dims)
        return image.name, values.astype(np.uint8)
    values = np.random.RandomState(0).rand(*dims) if noise else np.zeros(dims)
    return image.name, values.astype(np.float32)


def dims_of(value_info):
    """The dimensions of a ValueInfoProto: ints, dim_param names, or None (unknown; -1 and 0 count as unknown)."""
    dims = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return dims


def has_shape(value_info):
    """True when the ValueInfoProto declares a rank (a shape, even with unknown dimensions)."""
    return value_info.type.tensor_type.HasField("shape")


def strip_initializer_inputs(model):
    """Drop initializers listed as graph inputs (IR < 4, TorchScript's keep_initializers_as_inputs).

    Returns the count. IR version 3 requires every initializer to be an input, so the IR
    version is raised to 4 (the only change between them): otherwise ONNX's own tools
    see ``X__SHAPE is undefined``.
    """
    names = set(i.name for i in model.graph.initializer)
    kept = [i for i in model.graph.input if i.name not in names]
    removed = len(model.graph.input) - len(kept)
    if removed:
        del model.graph.input[:]
        model.graph.input.extend(kept)
        model.ir_version = max(int(model.ir_version), 4)
    return removed


_PLACEHOLDER_NAMES = ("?", "-1", "None", "none", "unknown")


def mark_unknown_dims(model, value_infos):
    """Name the unknown dimensions of ``value_infos``; returns how many were renamed.

    Dimensions written as -1 or 0 (paddle2onnx, old exporters) or named by a placeholder (``?``, as
    paddle2onnx names dynamic H and W) get the axis's own name: batch, channels, height, width. A 4-D
    image input whose height and width share one name gets two: TensorRT reads input dimensions of one
    name as equal, so a shared ``?`` would refuse every non-square size (``Input dimensions with this name
    have different constant values``), while ONNX Runtime ignores the names.
    """
    count = 0
    for value in value_infos:
        dims = value.type.tensor_type.shape.dim
        names = ("batch", "channels", "height", "width") if len(dims) == 4 else None
        for axis, dim in enumerate(dims):
            unknown = dim.HasField("dim_value") and dim.dim_value <= 0
            placeholder = dim.HasField("dim_param") and dim.dim_param.strip() in _PLACEHOLDER_NAMES
            if unknown or placeholder:
                dim.ClearField("dim_value")
                dim.dim_param = names[axis] if names else ("batch" if axis == 0 else "dim{}".format(axis))
                count += 1
        if names and dims[2].HasField("dim_param") and dims[2].dim_param == dims[3].dim_param:
            dims[2].dim_param, dims[3].dim_param = "height", "width"
            count += 2
    return count


def subgraph_inputs(node):
    """Names the subgraphs of an If/Loop/Scan ``node`` read (from the outer scope too): their producers and
    initializers are needed as much as the node's own inputs."""
    names = set()
    for attr in node.attribute:
        for graph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for inner in graph.node:
                names.update(i for i in inner.input if i)
                names.update(subgraph_inputs(inner))
    return names


def constant_value(model, name):
    """The value of ``name`` when it is an initializer or a Constant node's output, else None."""
    numpy_helper = require("onnx.numpy_helper")
    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            for attribute in node.attribute:
                if attribute.name == "value":
                    return numpy_helper.to_array(attribute.t)
    return None


def drop_unused_initializers(model):
    """Remove the initializers no node (subgraphs included) and no output reads, in place."""
    used = set(o.name for o in model.graph.output)
    for node in model.graph.node:
        used.update(node.input)
        used.update(subgraph_inputs(node))
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


def sort_nodes(model):
    """Put the nodes of ``model``'s graph in topological order (in place); returns how many moved.

    The ONNX standard requires it and ``onnx.checker`` enforces it, but the float16 converters append the
    Casts they add for FP32 graph inputs at the end, after their readers (ONNX Runtime and OpenVINO load
    such graphs anyway; any tool that checks them refuses). onnx has no public sort, and ONNX Runtime's
    (``onnxruntime.transformers``) is not there where only onnxconverter-common is (a Jetson), so this is
    Kahn's algorithm, stable: nodes already in order keep their places. Names a node reads from an outer
    scope or that nothing produces count as available, so a graph that cannot be sorted keeps its order.
    """
    graph = model.graph
    nodes = list(graph.node)
    produced = set(out for node in nodes for out in node.output if out)
    ready = set()
    ordered, pending = [], nodes
    while pending:
        waiting = []
        for node in pending:
            if all(not name or name in ready or name not in produced for name in node.input):
                ordered.append(node)
                ready.update(out for out in node.output if out)
            else:
                waiting.append(node)
        if len(waiting) == len(pending):  # a cycle, or a producer that never becomes ready: keep the rest
            ordered.extend(waiting)
            break
        pending = waiting
    moved = sum(1 for a, b in zip(nodes, ordered) if a is not b)
    if moved:
        copies = [type(node)() for node in ordered]
        for copy, node in zip(copies, ordered):
            copy.CopyFrom(node)
        del graph.node[:]
        graph.node.extend(copies)
    return moved


def sums_to_adds(model):
    """``Sum`` of two tensors (Caffe2's residual) becomes ``Add``: the same result, and INT8 writers and
    runtimes fuse Add. Returns the count."""
    count = 0
    for node in model.graph.node:
        if node.op_type == "Sum" and len(node.input) == 2:
            node.op_type = "Add"
            count += 1
    return count


class ConstantFolding(object):
    """``ConstantFolding(model)`` writes ``model`` to a folder of its own; ``run()`` folds that file by ONNX
    Runtime's basic offline optimizer and returns (folded model, None), or (the model read back, reason) when it
    cannot. Two steps so that a caller that loaded ``model`` drops it in between: with upb protobuf (current onnx
    wheels) a model's memory is given back only when the model itself goes (clearing its initializers frees
    nothing), and the session then holds the weights alone."""

    def __init__(self, model):
        from trtkit.onnx.write import save
        self.domains = set(n.domain for n in model.graph.node)
        self.metadata = [type(p).FromString(p.SerializeToString()) for p in model.metadata_props]
        self.folder = tempfile.mkdtemp(prefix="trtkit-fold-")
        self.original = os.path.join(self.folder, "model.onnx")
        try:
            save(model, self.original)
        except Exception:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def run(self):
        ort = require("onnxruntime", "normalizing the ONNX file")
        onnx = require("onnx", "normalizing the ONNX file")
        from trtkit.onnx.weights import give_back_memory
        try:
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.optimized_model_filepath = os.path.join(self.folder, "folded.onnx")
            options.log_severity_level = 3
            options.add_session_config_entry("session.disable_prepacking", "1")  # never run: no packed weights
            give_back_memory()
            try:
                ort.InferenceSession(self.original, options, providers=["CPUExecutionProvider"])
                folded = onnx.load(options.optimized_model_filepath)
            except Exception as exc:
                return onnx.load(self.original), first_line(exc, 200)
            added = set(n.domain for n in folded.graph.node) - self.domains - {"", "ai.onnx"}
            if added:  # never hand a runtime-specific graph to other runtimes
                return onnx.load(self.original), "the optimizer introduced operators of {}".format(
                    ", ".join(sorted(added)))
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        keys = set(q.key for q in folded.metadata_props)
        folded.metadata_props.extend(p for p in self.metadata if p.key not in keys)
        return folded, None


def upgrade_opset(model, target, purpose):
    """``model`` at opset >= ``target``: itself when it already is, else converted by ONNX's version converter.

    A failure is an InputError naming the step that needed it; the caller's other steps keep the
    original graph.
    """
    onnx = require("onnx", purpose)
    opset = opset_of(model)
    if opset >= target:
        return model
    from onnx import version_converter
    try:
        converted = version_converter.convert_version(model, target)
        onnx.checker.check_model(converted)
    except Exception as exc:
        raise InputError("{} needs ONNX opset >= {}; converting this opset-{} graph failed: {}".format(
            purpose, target, opset, first_line(exc, 200)),
            hint="re-export the model with opset {} or newer (the FP32/FP16 variants do not need it)".format(target))
    log.debug("converted opset {} -> {} for {}".format(opset, target, purpose))
    return converted


def infer_shapes(model):
    """``model`` with value_info filled by ONNX shape inference (``model`` unchanged when inference fails).

    Inference runs on ``weights.light_copy`` (the graph without its big weights' bytes: in memory ONNX copies
    the whole model four times); what it gives (the nodes with their subgraphs' value_info, the value_info, the
    inputs' and outputs' types) is taken back into ``model``, whose weights never move."""
    onnx = require("onnx", "normalizing the ONNX file")
    from trtkit.onnx.weights import light_copy
    try:
        inferred = onnx.shape_inference.infer_shapes(light_copy(model))
    except Exception as exc:
        log.debug("shape inference failed ({}); continuing without value_info".format(first_line(exc, 200)))
        return model
    for field in ("node", "value_info", "input", "output"):
        model.graph.ClearField(field)
        getattr(model.graph, field).extend(getattr(inferred.graph, field))
    return model


# ------------------------------------------------------------------ the batch axis

def free_batch(model, input_name, batch, image_shape):
    """(model with a dynamic batch, note) when the graph computes the same per image at other batch sizes;
    (``model``, note) keeping the fixed batch otherwise.

    Reshape shapes that spell out the fixed batch (Caffe2's ``[1, 9216]`` before a Gemm,
    ShuffleNet's ``[1, g, C/g, H, W]``) get ``0`` there (copy the input's batch); the result is
    checked numerically against the original at two batch sizes.
    """
    reference = _session(model)
    if reference is None:
        return model, _kept(batch)
    for rewrite_reshapes in (True, False):
        trial = copy_model(model)
        rewritten = _dynamic_io(trial, batch, rewrite_reshapes)
        if rewrite_reshapes and not rewritten:
            continue
        if _same_per_image(reference, _session(trial), input_name, batch, image_shape):
            note = "made the fixed batch size {} dynamic".format(batch)
            if rewritten:
                note += " ({} Reshape shape(s) spelled out the batch: now taken from the input)".format(rewritten)
            return trial, note
    return model, _kept(batch)


def _kept(batch):
    return "kept the fixed batch size {}: the graph hard-codes it (verification runs in batches of {})".format(
        batch, batch)


def _dynamic_io(model, batch, rewrite_reshapes):
    numpy_helper = require("onnx.numpy_helper")
    for value in list(model.graph.input[:1]) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "batch"
    del model.graph.value_info[:]
    if not rewrite_reshapes:
        return 0
    inits = dict((i.name, i) for i in model.graph.initializer)
    constants = dict((n.output[0], n) for n in model.graph.node if n.op_type == "Constant")
    count, done = 0, set()
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] in done:
            continue
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        tensor = inits.get(node.input[1])
        if tensor is None and node.input[1] in constants:
            tensor = [a.t for a in constants[node.input[1]].attribute if a.name == "value"][0]
        if tensor is None:
            continue
        shape = numpy_helper.to_array(tensor)
        if shape.ndim == 1 and shape.size >= 2 and int(shape[0]) == batch:
            if -1 in shape.tolist() and allowzero:
                continue
            shape = shape.copy()
            shape[0] = 0 if -1 in shape.tolist() else -1  # -1: infer it; 0: copy the input's batch
            tensor.CopyFrom(numpy_helper.from_array(shape.astype(np.int64), tensor.name))
            done.add(node.input[1])
            count += 1
    return count


def _session(model):
    ort = require("onnxruntime", "normalizing the ONNX file")
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # trials that fail are expected: no error lines
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        log.debug("ONNX Runtime cannot load the graph ({})".format(first_line(exc, 200)))
        return None


def _same_per_image(reference, trial, input_name, batch, image_shape):
    """True when ``trial`` at batch 1 and 2*batch+1 gives what ``reference`` gives in batches of ``batch``."""
    if trial is None:
        return False
    shape = [d if isinstance(d, int) else 32 for d in image_shape]
    images = np.random.RandomState(0).rand(*([2 * batch] + shape)).astype(np.float32)
    try:
        expected = np.concatenate([reference.run(None, {input_name: images[s:s + batch]})[0]
                                   for s in range(0, len(images), batch)])
        got = trial.run(None, {input_name: np.concatenate([images, images[:1]])})[0]
        single = trial.run(None, {input_name: images[:1]})[0]
    except Exception:
        return False
    if got.shape[0] != len(images) + 1 or single.shape[0] != 1 or got.shape[1:] != expected.shape[1:]:
        return False
    scale = max(float(np.abs(expected).max()), 1e-6)
    return (np.abs(got[:-1] - expected).max() <= 1e-4 * scale and np.abs(got[-1:] - expected[:1]).max() <= 1e-4 * scale
            and np.abs(single - expected[:1]).max() <= 1e-4 * scale)
