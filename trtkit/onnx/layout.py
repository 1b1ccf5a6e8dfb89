"""The classifier's interface: an NCHW image input, one (N, classes) output, logits or probabilities.

* NHWC inputs (tf2onnx writes Keras models as ``[N, H, W, C]`` followed by
  ``Transpose(perm=[0, 3, 1, 2])``) are rewritten to take NCHW, the layout of
  trtkit's input contract: the Transpose is removed (or, when the input has
  other consumers, the inverse Transpose is put in front of them).
* A ``uint8`` image input (TF/Keras and TFLite exports that take raw pixels and
  normalize inside the graph) becomes a float32 input carrying the same 0-255
  values: its Cast to float is removed (``uint8_input_to_float``). Every
  backend then takes the one input type (TensorRT 8.x builds no uint8 network
  inputs), and the contract records that the model's own input was uint8 and
  fixes ``pixel_scale`` 255, mean 0, std 1: the graph normalizes itself.
* A ``[N, C, 1, 1]`` output (a 1x1 convolution as classifier: Caffe2's
  SqueezeNet and DenseNet) is flattened to ``[N, C]``.
* A channels-last map output (``[N, H, W, C]``: TFLite and Keras segmenters
  through tf2onnx) of a model whose input was NHWC gets a Transpose to
  ``[N, C, H, W]``, the layout every step reads (``nhwc_output_to_nchw``).
* ``output_kind``: what the output holds (``trtkit.outputs``): a Softmax,
  LogSoftmax or Sigmoid at its end (possibly through a Flatten/Reshape/Squeeze/Transpose)
  and its column count tell class scores, probabilities, a binary score and
  multi-label sigmoids apart; every step then uses that kind's decision rule.
"""

from trtkit import tasks
from trtkit.deps import require
from trtkit.data.masks import map_follows
from trtkit.errors import InputError
from trtkit.onnx.normalize import dims_of, graph_inputs, has_shape

_TO_NCHW = [0, 3, 1, 2]
# ops that move an output's values without changing them: the activation before them decides (tf2onnx writes a
# Reshape and a Transpose after a TFLite segmenter's final Sigmoid; read past them, such a probability map was
# taken for logits and thresholded at 0, agreeing with the package's own masks on 88% of pixels)
_PASS_THROUGH = ("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Cast")
_SIGMOIDS = ("Sigmoid", "HardSigmoid")


def _perm(node):
    for a in node.attribute:
        if a.name == "perm":
            return list(a.ints)
    return None


def _consumers(model, name):
    return [n for n in model.graph.node if name in n.input]


LAYOUTS = ("nchw", "nhwc")


def is_nhwc(model, layout=None):
    """True when the image input is NHWC (channels last).

    Evidence, strongest first: the input is consumed by a Transpose to NCHW (tf2onnx's Keras graphs), or
    its shape has 1 or 3 in the last axis but not in the second (``[N, 224, 224, 3]``, ``[N, ?, ?, 3]``).
    ``layout`` (``nchw``/``nhwc``) is the user's word: it settles a shape the evidence leaves open, and
    one that contradicts the evidence is refused in one line.
    """
    inputs = graph_inputs(model)
    if len(inputs) != 1:
        return False
    dims = dims_of(inputs[0])
    if len(dims) != 4:
        return False
    transposed = any(n.op_type == "Transpose" and _perm(n) == _TO_NCHW for n in _consumers(model, inputs[0].name))
    looks_nhwc = dims[3] in (1, 3) and dims[1] not in (1, 3)
    looks_nchw = dims[1] in (1, 3) and dims[3] not in (1, 3)
    if layout is None:
        return transposed or looks_nhwc
    layout = str(layout).lower()
    if layout not in LAYOUTS:
        from trtkit.errors import InputError
        raise InputError("unknown layout '{}'".format(layout), hint="use nchw or nhwc")
    evidence = "a Transpose to NCHW follows it" if transposed else "channels in the last axis" if looks_nhwc \
        else "channels in the second axis" if looks_nchw else None
    if (layout == "nchw" and (transposed or looks_nhwc)) or (layout == "nhwc" and looks_nchw and not transposed):
        from trtkit.errors import InputError
        raise InputError("--layout {} contradicts the ONNX input '{}' {} ({})".format(
            layout, inputs[0].name, _show(dims), evidence), hint="leave --layout out: trtkit reads it from the graph")
    return layout == "nhwc"


def nhwc_to_nchw(model):
    """Rewrite the NHWC input of ``model`` (in place) to NCHW; returns the note describing it."""
    helper = require("onnx.helper")
    value = graph_inputs(model)[0]
    name = value.name
    before = dims_of(value)
    _permute_dims(value, _TO_NCHW)
    others = _bypass_input(model, name, lambda node: node.op_type == "Transpose" and _perm(node) == _TO_NCHW,
                           helper.make_node("Transpose", [name], [name + "_nhwc"], name=name + "_nhwc",
                                            perm=[0, 2, 3, 1]))
    del model.graph.value_info[:]
    how = "removed its Transpose to NCHW" if not others else "a Transpose to NHWC now feeds its other consumers"
    return "the input '{}' was NHWC {}: it now takes NCHW {} ({})".format(name, _show(before), _show(dims_of(value)),
                                                                          how)


def is_nhwc_map(dims):
    """True for ``[N, H, W, C]`` dims of a channels-last output: C fixed and smaller than H and W, which may be
    dynamic (None, or a symbolic name such as tf2onnx's ``unk__718``), or ``[N, 1, 1, C]`` (a channels-last
    classifier's 1x1 map)."""
    if len(dims) != 4 or not isinstance(dims[3], int) or dims[3] < 1:
        return False
    h, w, c = dims[1], dims[2], dims[3]
    if h == 1 and w == 1:
        return c > 1
    return all(not isinstance(d, int) or d > max(c, 1) for d in (h, w))


def is_channels_last_of(dims, input_hw):
    """True for a fixed ``[N, H', W', C]`` output of a model with an NCHW input of ``input_hw``: H' and W' follow
    the input (``data.masks.map_follows``), C is smaller than both and ``[W', C]`` does not follow it.
    Measured: EasyOCR's CRAFT returns its region/link scores as [N, 192, 256, 2] for a 384x512 input, and was
    built as a 192-class map of 256x2 pixels, "agreeing" 100%."""
    if len(dims) != 4 or not all(isinstance(d, int) and d > 0 for d in dims[1:]) or input_hw is None:
        return False
    rows, columns, channels = dims[1], dims[2], dims[3]
    return channels < min(rows, columns) and map_follows(rows, columns, input_hw) \
        and not map_follows(columns, channels, input_hw)


def nhwc_output_to_nchw(model, input_hw=None):
    """Give the first output a Transpose to NCHW when it is a channels-last map, in place: of a model whose input
    was NHWC (``is_nhwc_map``), or with ``input_hw`` of an NCHW model whose map follows its input
    (``is_channels_last_of``); returns a note, or None when not needed."""
    if not model.graph.output:
        return None
    output = model.graph.output[0]
    dims = dims_of(output)
    if not (is_nhwc_map(dims) if input_hw is None else is_channels_last_of(dims, input_hw)):
        return None
    _append_to_output(model, "_nhwc", lambda inner: require("onnx.helper").make_node(
        "Transpose", [inner], [output.name], name=output.name + "_to_nchw", perm=_TO_NCHW))
    _permute_dims(output, _TO_NCHW)
    del model.graph.value_info[:]
    return "the output '{}' was channels-last {} {}: it now gives NCHW {}".format(
        output.name, _show(dims), "like the input" if input_hw is None else
        "(its H and W follow the {}x{} input)".format(*input_hw), _show(dims_of(output)))


def input_dtype(model):
    """The image input's element type as a numpy-style name (``float32``, ``uint8``, ...)."""
    onnx = require("onnx")
    elem = graph_inputs(model)[0].type.tensor_type.elem_type
    if not elem:
        return "float32"
    # TensorProto's enum names (FLOAT, UINT8, ...) exist in every onnx; helper.tensor_dtype_to_np_dtype only
    # from onnx 1.13, and JetPack 4.6 has older ones
    name = onnx.TensorProto.DataType.Name(elem).lower()
    return {"float": "float32", "double": "float64", "float16": "float16"}.get(name, name)


def uint8_input_to_float(model):
    """Make a uint8 image input float32 (in place); returns a note, or None when it already is float32.

    Consumers that Cast it to float read the input directly (the Cast is removed); any other consumer gets
    a Cast back to uint8, exact for the 0-255 values the contract feeds. Other input types are refused.
    """
    onnx = require("onnx")
    from trtkit.errors import InputError
    value = graph_inputs(model)[0]
    dtype = input_dtype(model)
    if dtype == "float32":
        return None
    if dtype != "uint8":
        raise InputError("the ONNX input '{}' is {}; trtkit takes float32 or uint8 image inputs".format(
            value.name, dtype), hint="export the model with a float32 (or uint8 pixel) input")
    tensor_type = value.type.tensor_type
    tensor_type.elem_type = onnx.TensorProto.FLOAT
    name = value.name
    to_float = [onnx.TensorProto.FLOAT]
    others = _bypass_input(model, name,
                           lambda node: node.op_type == "Cast" and [a.i for a in node.attribute if a.name == "to"]
                           == to_float,
                           require("onnx.helper").make_node("Cast", [name], [name + "_uint8"], name=name + "_uint8",
                                                            to=onnx.TensorProto.UINT8))
    del model.graph.value_info[:]
    return "the input '{}' was uint8 pixels: it now takes float32 with the same 0-255 values ({})".format(
        name, "its Cast to float removed" if not others else "a Cast to uint8 feeds its other consumers")


def _bypass_input(model, name, undoes, restore):
    """After the input ``name`` changed form: remove its consumers for which ``undoes(node)`` (they converted
    the old form into the new one; their readers now read the input), and feed every other consumer through
    ``restore`` (a node from the new form back to the old, put first). Returns those other consumers."""
    others = []
    for node in _consumers(model, name):
        if undoes(node):
            _replace_uses(model, node.output[0], name)
            model.graph.node.remove(node)
        else:
            others.append(node)
    if others:
        for node in others:
            for i, inp in enumerate(node.input):
                if inp == name:
                    node.input[i] = restore.output[0]
        model.graph.node.insert(0, restore)
    return others


def _replace_uses(model, old, new):
    for node in model.graph.node:
        for i, inp in enumerate(node.input):
            if inp == old:
                node.input[i] = new
    for out in model.graph.output:
        if out.name == old:
            out.name = new


def _append_to_output(model, suffix, make_node):
    """Make the first output's tensor ``NAME + suffix`` everywhere and append ``make_node(that name)``, which
    writes the output ``NAME`` anew (a Transpose, a Flatten): the graph's output keeps its name."""
    name = model.graph.output[0].name
    inner = name + suffix
    for node in model.graph.node:
        for i, out in enumerate(node.output):
            if out == name:
                node.output[i] = inner
        for i, inp in enumerate(node.input):
            if inp == name:
                node.input[i] = inner
    model.graph.node.append(make_node(inner))


def _permute_dims(value, perm):
    """Reorder the declared dims of a 4-D ValueInfo by ``perm`` (new axis i takes old axis perm[i]), in place."""
    dims = value.type.tensor_type.shape.dim
    old = [type(dims[i])() for i in range(4)]
    for i in range(4):
        old[i].CopyFrom(dims[i])
    for target, source in enumerate(perm):
        dims[target].CopyFrom(old[source])


def flatten_output(model):
    """Flatten a [N, C, 1, 1] first output to [N, C] (in place); returns a note, or None when not needed."""
    output = model.graph.output[0]
    dims = dims_of(output)
    if len(dims) != 4 or dims[2:] != [1, 1]:
        return None
    _append_to_output(model, "_nc11", lambda inner: require("onnx.helper").make_node(
        "Flatten", [inner], [output.name], name=output.name + "_flatten", axis=1))
    shape = output.type.tensor_type.shape
    del shape.dim[2:]
    return "flattened the output '{}' from {} to (N, {})".format(output.name, _show(dims), dims[1])


def task_of(model):
    """The ``trtkit.tasks`` Task the first output says the model does (``tasks.of_shape``: a [N, C, H, W] map
    whose H or W is not 1 or is dynamic is segmentation, [N, classes] or [N, classes, 1, 1] classification); None
    when its rank is unknown."""
    if not model.graph.output or not has_shape(model.graph.output[0]):
        return None
    return tasks.of_shape(dims_of(model.graph.output[0]))


def check_task(model, task=None):
    """The Task of ``model``: the detected one, or ``task`` (``--task``, a name or a Task) when it agrees with the
    output's rank; InputError when they contradict (a classifier built as segmentation or the reverse)."""
    found = task_of(model)
    output = model.graph.output[0] if model.graph.output else None
    if task is None:
        return found or tasks.DEFAULT
    task = tasks.parse(task)
    if found is not None and found != task:
        raise InputError("--task {} does not fit this ONNX: its output '{}' {} is {}".format(
            task.name, output.name, _show(dims_of(output)), found.output_text),
            hint="drop --task (trtkit detects it) or pass the model trained for {}".format(task.name))
    return task


def output_kind(model, task=None):
    """The ``trtkit.outputs`` kind name the first output holds, or None when it cannot be told.

    The activation that produces it (through Flatten/Reshape/Squeeze/Identity/Cast) and its column count
    decide: Softmax -> probabilities, LogSoftmax -> log-probabilities, Sigmoid -> binary-probability on one
    column, multilabel-probabilities on several; no activation -> binary-logit on one column, logits on
    several (multilabel-logits look the same: only ``--output-kind`` can say so). A column count the graph
    leaves dynamic cannot be told apart (one column or classes): None. ``task`` (a name or a Task; None:
    classification) says which axis holds the classes and whether sigmoids over it are labels.
    """
    producers = {}
    for node in model.graph.node:
        for out in node.output:
            producers[out] = node
    output = model.graph.output[0] if model.graph.output else None
    dims = dims_of(output) if output is not None else []
    task = tasks.of(task)
    axis = task.class_axis if len(dims) > 1 else -1
    columns = dims[axis] if dims and isinstance(dims[axis], int) else None
    activation, name = None, output.name if output is not None else None
    for _ in range(8):
        node = producers.get(name)
        if node is None or node.op_type not in _PASS_THROUGH:
            activation = node.op_type if node is not None else None
            break
        name = node.input[0]
    if activation == "Softmax":
        return "probabilities"
    if activation == "LogSoftmax":
        return "log-probabilities"
    if columns is None:
        return None
    if activation in _SIGMOIDS:
        if not task.multilabel and columns != 1:
            return None  # e.g. a sigmoid per channel of a map: overlapping masks, not one class per pixel
        return "binary-probability" if columns == 1 else "multilabel-probabilities"
    return "binary-logit" if columns == 1 else "logits"


def _show(dims):
    return "[{}]".format(", ".join(str(d) if d is not None else "?" for d in dims))
