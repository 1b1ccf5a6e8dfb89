"""The classifier's interface: an NCHW image input, one (N, classes) output, logits or probabilities.

* NHWC inputs (tf2onnx writes Keras models as ``[N, H, W, C]`` followed by
  ``Transpose(perm=[0, 3, 1, 2])``) are rewritten to take NCHW, the layout of
  trtkit's input contract: the Transpose is removed (or, when the input has
  other consumers, the inverse Transpose is put in front of them).
* A ``[N, C, 1, 1]`` output (a 1x1 convolution as classifier: Caffe2's
  SqueezeNet and DenseNet) is flattened to ``[N, C]``.
* ``output_kind``: ``probabilities`` when the output comes from a Softmax
  (possibly through a Flatten/Reshape/Squeeze), ``log-probabilities`` from
  LogSoftmax, else ``logits``. Verification compares arg-max and differences
  of what the model outputs; it never applies a softmax.
"""

from trtkit.deps import require
from trtkit.onnx.normalize import dims_of, graph_inputs

_TO_NCHW = [0, 3, 1, 2]
_PASS_THROUGH = ("Flatten", "Reshape", "Squeeze", "Identity", "Cast")


def _perm(node):
    for a in node.attribute:
        if a.name == "perm":
            return list(a.ints)
    return None


def _consumers(model, name):
    return [n for n in model.graph.node if name in n.input]


def is_nhwc(model):
    """True when the image input is NHWC: consumed by a Transpose to NCHW, or shaped [N, H, W, 1|3]
    with H a real image size."""
    inputs = graph_inputs(model)
    if len(inputs) != 1:
        return False
    dims = dims_of(inputs[0])
    if len(dims) != 4:
        return False
    if any(n.op_type == "Transpose" and _perm(n) == _TO_NCHW for n in _consumers(model, inputs[0].name)):
        return True
    return dims[3] in (1, 3) and isinstance(dims[1], int) and dims[1] > 4 and isinstance(dims[2], int) and dims[2] > 4


def nhwc_to_nchw(model):
    """Rewrite the NHWC input of ``model`` (in place) to NCHW; returns the note describing it."""
    helper = require("onnx.helper")
    value = graph_inputs(model)[0]
    name = value.name
    before = dims_of(value)
    dims = value.type.tensor_type.shape.dim
    old = [type(dims[i])() for i in range(4)]
    for i in range(4):
        old[i].CopyFrom(dims[i])
    for target, source in enumerate((0, 3, 1, 2)):
        dims[target].CopyFrom(old[source])
    removed, others = 0, []
    for node in _consumers(model, name):
        if node.op_type == "Transpose" and _perm(node) == _TO_NCHW:
            _replace_uses(model, node.output[0], name)
            model.graph.node.remove(node)
            removed += 1
        else:
            others.append(node)
    if others:
        nhwc = name + "_nhwc"
        for node in others:
            for i, inp in enumerate(node.input):
                if inp == name:
                    node.input[i] = nhwc
        model.graph.node.insert(0, helper.make_node("Transpose", [name], [nhwc], name=nhwc, perm=[0, 2, 3, 1]))
    del model.graph.value_info[:]
    how = "removed its Transpose to NCHW" if not others else "a Transpose to NHWC now feeds its other consumers"
    return "the input '{}' was NHWC {}: it now takes NCHW {} ({})".format(name, _show(before), _show(dims_of(value)),
                                                                          how)


def _replace_uses(model, old, new):
    for node in model.graph.node:
        for i, inp in enumerate(node.input):
            if inp == old:
                node.input[i] = new
    for out in model.graph.output:
        if out.name == old:
            out.name = new


def flatten_output(model):
    """Flatten a [N, C, 1, 1] first output to [N, C] (in place); returns a note, or None when not needed."""
    helper = require("onnx.helper")
    output = model.graph.output[0]
    dims = dims_of(output)
    if len(dims) != 4 or dims[2:] != [1, 1]:
        return None
    inner = output.name + "_nc11"
    for node in model.graph.node:
        for i, out in enumerate(node.output):
            if out == output.name:
                node.output[i] = inner
        for i, inp in enumerate(node.input):
            if inp == output.name:
                node.input[i] = inner
    model.graph.node.append(helper.make_node("Flatten", [inner], [output.name], name=output.name + "_flatten",
                                             axis=1))
    shape = output.type.tensor_type.shape
    del shape.dim[2:]
    return "flattened the output '{}' from {} to (N, {})".format(output.name, _show(dims), dims[1])


def output_kind(model):
    """``probabilities``, ``log-probabilities`` or ``logits``: what the first output holds."""
    producers = {}
    for node in model.graph.node:
        for out in node.output:
            producers[out] = node
    name = model.graph.output[0].name if model.graph.output else None
    for _ in range(8):
        node = producers.get(name)
        if node is None:
            return "logits"
        if node.op_type == "Softmax":
            return "probabilities"
        if node.op_type == "LogSoftmax":
            return "log-probabilities"
        if node.op_type not in _PASS_THROUGH:
            return "logits"
        name = node.input[0]
    return "logits"


def _show(dims):
    return "[{}]".format(", ".join(str(d) if d is not None else "?" for d in dims))
