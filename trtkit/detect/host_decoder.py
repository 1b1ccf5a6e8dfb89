"""The user's own decoder of a foreign detector's raw heads: a Python function run on the host after the network.

``--decoder module:function`` (or ``path/to/file.py:function``) on the command line, ``decoder=function`` in
the API, for a raw head no built-in family (``detect.decoders``) reads.

Why on the host, and why packed: a Python function cannot be written into the graph, and every runner, the
variants and the verification stream handle a model's one output. So the graph's raw outputs are flattened and
concatenated into one output, ``raw_heads`` ``[N, K]`` (Reshape and Concat: weightless, so it stays FP32 in the
FP16 and INT8 variants like a built-in decoder's tail), and the place every detection is selected
(``detect.select.select_decoded``) unpacks it into the outputs as the graph made them and calls the function;
its ``decoded`` ``[N, A, 4 + C]`` then goes through the same selection, verification, predict and serve as a
built-in decoder's. NMS runs on the host on every backend (the manifest's ``nms`` record says so).

The function: ``decode(outputs, input_hw)``, ``outputs`` {name: float32 array ``[N, ...]``} (the graph's raw
outputs, batch first, shapes as the graph gives them), ``input_hw`` the model input's (H, W); it returns
``(boxes [N, A, 4], scores [N, A, C])`` (x1 y1 x2 y2 in the model input's pixels; scores as probabilities) or
one ``[N, A, 4 + C]`` array. The build names it in the manifest as ``module:function`` (or the file's path) and
imports it from there when the build is loaded; one without an importable name (a lambda, a closure) is given
again: ``trtkit.load(build, decoder=function)``.
"""

import importlib
import os
import sys

import numpy as np

from trtkit.errors import InputError

FAMILY = "python"  # the manifest's decoder family of a host decoder (DecoderSpec.family)
PACKED = "raw_heads"  # the graph's one output: its raw outputs flattened, concatenated
# its post-processing unless --score-threshold/--nms-iou/--max-detections/--class-agnostic say
POSTPROCESSING = {"score_thresh": 0.05, "nms_thresh": 0.5, "detections_per_img": 100, "topk_candidates": 1000,
                  "class_agnostic": False}

_FUNCTIONS = {}  # reference -> the function: given in this process (API), or imported once


def is_reference(value):
    """Whether a ``--decoder`` value names a Python function (``module:function``) or is one."""
    return callable(value) or (isinstance(value, str) and ":" in value.strip(":"))


def register(value):
    """The reference of a ``--decoder`` value (a function is kept for this process under its name; a lambda's or
    a closure's name is made unique, as it cannot be imported: ``trtkit.load(decoder=)`` gives it again)."""
    if not callable(value):
        return value.strip()
    module = getattr(value, "__module__", None) or "__main__"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or repr(value)
    reference = "{}:{}".format(module, name)
    if "<" in name:  # a lambda or a closure: no name to import it by, and two of them share one
        reference += "@{:x}".format(id(value))
    _FUNCTIONS[reference] = value
    return reference


def provide(reference, function):
    """Decode what was built with ``reference`` by ``function`` in this process (``trtkit.load(decoder=)``)."""
    if not callable(function):
        raise InputError("decoder= takes a function, got {}".format(type(function).__name__))
    _FUNCTIONS[reference] = function


def resolve(reference):
    """The function a reference names: one given in this process, else imported (a module on the path, or a
    ``.py`` file); one line saying what to do when it cannot be."""
    found = _FUNCTIONS.get(reference)
    if found is not None:
        return found
    where, _, name = reference.rpartition(":")
    try:
        if where.endswith(".py") or os.sep in where:
            module = _load_file(where)
        else:
            module = importlib.import_module(where)
        found = module
        for part in name.split("."):
            found = getattr(found, part)
    except Exception as error:  # the user's code: anything it raises is the one line below
        raise InputError("the decoder function '{}' cannot be loaded: {}: {}".format(
            reference, type(error).__name__, error),
            hint="put its module on PYTHONPATH, or pass it: trtkit.load(build, decoder=function)")
    if not callable(found):
        raise InputError("the decoder '{}' is not a function".format(reference))
    _FUNCTIONS[reference] = found
    return found


def _load_file(path):
    import importlib.util
    if not os.path.isfile(path):
        raise IOError("no such file")
    name = "trtkit_decoder_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass or pickle in the user's file looks itself up there
    spec.loader.exec_module(module)
    return module


def call(reference, outputs, input_hw, num_classes=None):
    """``decoded`` [N, A, 4 + C] float32 of the function ``reference`` names on ``outputs`` ({name: array});
    one line when it raises or its answer is not boxes and scores of the batch (``num_classes``: C checked)."""
    function = resolve(reference)
    batch = len(next(iter(outputs.values())))
    try:
        answer = function(dict(outputs), tuple(int(v) for v in input_hw))
    except Exception as error:  # the user's code: anything it raises is one line naming it
        raise InputError("the decoder function '{}' raised {}: {}".format(reference, type(error).__name__, error),
                         hint="it is called as decode(outputs, (H, W)), outputs {} (docs/detection.md)".format(
                             _shapes(outputs)))
    decoded = _as_decoded(answer, reference, batch)
    if num_classes is not None and decoded.shape[-1] != 4 + int(num_classes):
        raise InputError("the decoder function '{}' returned {} classes; the build has {}".format(
            reference, decoded.shape[-1] - 4, num_classes), hint="it must score the same classes for every input")
    return decoded


class _Wrong(ValueError):
    """What is wrong with a function's answer (its message completes "returned ...")."""


def _as_decoded(answer, reference, batch):
    expected = "(boxes [N, A, 4], scores [N, A, C]) or one [N, A, 4 + C] array, N = {}".format(batch)
    try:
        if isinstance(answer, dict):
            answer = (answer["boxes"], answer["scores"])
        if isinstance(answer, (tuple, list)):
            boxes, scores = [np.asarray(part, dtype=np.float32) for part in answer]
            if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.ndim != 3 or scores.shape[:2] != boxes.shape[:2]:
                raise _Wrong("boxes {} and scores {}".format(list(boxes.shape), list(scores.shape)))
            decoded = np.concatenate([boxes, scores], axis=-1)
        else:
            decoded = np.asarray(answer, dtype=np.float32)
            if decoded.ndim != 3 or decoded.shape[-1] < 5:
                raise _Wrong("an array {}".format(list(decoded.shape)))
        if decoded.shape[0] != batch:
            raise _Wrong("{} images for a batch of {}".format(decoded.shape[0], batch))
    except (KeyError, TypeError, ValueError) as error:
        raise InputError("the decoder function '{}' returned {}; expected {}".format(
            reference, error if isinstance(error, _Wrong) else "a {}".format(type(answer).__name__), expected))
    return decoded


def _shapes(outputs):
    return ", ".join("'{}' {}".format(name, list(np.shape(value))) for name, value in outputs.items())


def is_host(head):
    """Whether a ``DetectionHead``'s ``decoded`` is made on the host by a Python function."""
    return (getattr(head, "decoder", None) or {}).get("family") == FAMILY


def packed_size(params):
    return sum(int(np.prod(dims)) for _, dims in params["outputs"])


def decoded(array, head, input_hw):
    """``array`` as ``decoded`` [N, A, 4 + C]: a host decoder's packed ``raw_heads`` [N, K] unpacked and
    decoded; anything else (trtkit's and the built-in decoders' ``decoded``) as it is."""
    array = np.asarray(array, dtype=np.float32)
    if not is_host(head) or array.ndim == 3:
        return array
    params = head.decoder["params"]
    if array.ndim != 2 or array.shape[1] != packed_size(params):
        raise InputError("the detector's raw heads are {} values per image, {} expected (its outputs {})".format(
            list(array.shape[1:]), packed_size(params), params["outputs"]),
            hint="the manifest does not belong to this artifact: rebuild it")
    outputs, start = {}, 0
    for name, dims in params["outputs"]:
        stop = start + int(np.prod(dims))
        outputs[name] = array[:, start:stop].reshape([len(array)] + list(dims))
        start = stop
    return call(params["function"], outputs, input_hw, head.num_classes)


def pack_graph(model, values, reference, input_hw):
    """``model`` (in place) ending in ``raw_heads`` [N, K], and the decoder's parameters: the function's
    reference, each raw output's (name, dims without the batch), C and A as the function answered ``values``
    (one run's {output: array}, batch 1)."""
    from onnx import TensorProto, helper, numpy_helper
    outputs = [(o.name, [int(d) for d in np.shape(values[o.name])[1:]]) for o in model.graph.output]
    decoded_values = call(reference, dict((name, values[name]) for name, _ in outputs), input_hw)
    flat = []
    for index, (name, _) in enumerate(outputs):
        shape = "{}/flat_shape_{}".format(PACKED, index)
        model.graph.initializer.append(numpy_helper.from_array(np.array([0, -1], dtype=np.int64), shape))
        flat.append("{}/flat_{}".format(PACKED, index))
        source = name
        if np.asarray(values[name]).dtype != np.float32:  # Concat takes one type: every part as float32
            source = "{}/float_{}".format(PACKED, index)
            model.graph.node.append(helper.make_node("Cast", [name], [source], name=source, to=TensorProto.FLOAT))
        model.graph.node.append(helper.make_node("Reshape", [source, shape], [flat[-1]], name=flat[-1]))
    model.graph.node.append(helper.make_node("Concat", flat, [PACKED], name=PACKED, axis=1))
    total = sum(int(np.prod(dims)) for _, dims in outputs)
    del model.graph.output[:]
    model.graph.output.extend([helper.make_tensor_value_info(PACKED, TensorProto.FLOAT, ["N", total])])
    return {"function": reference, "outputs": [[name, dims] for name, dims in outputs],
            "num_classes": int(decoded_values.shape[-1] - 4), "anchors": int(decoded_values.shape[1])}
