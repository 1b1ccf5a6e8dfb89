"""What every decoder family shares: the ``DecoderSpec`` record, the graph's outputs as a family reads them,
parameter parsing, and ``Tail``, a small writer of weightless ONNX nodes.

Why weightless only (Gather, Mul, Add, Sub, Exp, Sigmoid, Softmax, ReduceSum, Concat, Reshape, Transpose,
Max, Min): ``precision.qdq_place.float_tail`` keeps every tensor from which no Conv/Gemm/MatMul is reached in
float, so a tail written this way stays FP32 in the FP16 and INT8 variants without any other code knowing it
is there. Columns are taken with ``Gather`` rather than ``Slice`` (one spelling at every opset), and
``ReduceSum`` follows the graph's opset (its axes an input from 13, an attribute before).
"""

import numpy as np

from trtkit.errors import InputError


class DecoderSpec(object):
    """Which family decodes a foreign head and with what: ``family`` (a registry name) and ``params`` (plain
    JSON values: numbers, lists, strings). Recorded in the manifest's detection head (``decoder``) so a build
    says how its ``decoded`` tensor was made."""

    def __init__(self, family, params=None):
        self.family = str(family)
        self.params = dict(params or {})

    def to_dict(self):
        return {"family": self.family, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, values):
        return cls(values["family"], values.get("params"))

    def __eq__(self, other):
        return isinstance(other, DecoderSpec) and other.to_dict() == self.to_dict()

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        return "DecoderSpec({!r}, {!r})".format(self.family, self.params)


class OutputInfo(object):
    """One graph output as the families read it: ``name``, ``dims`` (ints, None where dynamic; the batch is
    left as it is) and ``activation``: the op that makes it once reshapes and transposes are looked through
    (``Sigmoid``, ``Softmax``, ...; None for a Conv or an input, or where concatenated parts differ) and
    ``sources``: the set of ops that make its concatenated parts (``{"Conv", "Sigmoid"}`` for YOLOX's raw box
    columns beside its sigmoid scores); ``span``: its largest absolute value on a zero image (None where not
    run): boxes within 0-1 there are fractions of the input (a TensorFlow export's), not pixels."""

    def __init__(self, name, dims, activation=None, sources=(), span=None):
        self.name = name
        self.dims = list(dims)
        self.activation = activation
        self.sources = set(sources)
        self.span = span

    def __repr__(self):
        return "'{}' {}".format(self.name, "[{}]".format(", ".join("?" if d is None else str(d) for d in self.dims)))


def fail(message, hint=None):
    """The one-line refusal of a decoder that cannot read the graph (``InputError``)."""
    return InputError(message, hint=hint)


def ints(value, name):
    """``8,16,32`` / ``[8, 16, 32]`` / ``8`` -> a list of ints; one line naming the parameter when it is not."""
    try:
        if isinstance(value, str):
            return [int(v) for v in value.replace(" ", "").split(",") if v]
        if isinstance(value, (list, tuple)):
            return [int(v) for v in value]
        return [int(value)]
    except (TypeError, ValueError):
        raise fail("--decoder-param {}={!r} is not a list of integers".format(name, value), hint="e.g. 8,16,32")


def floats(value, name, count=None):
    try:
        if isinstance(value, str):
            found = [float(v) for v in value.replace(" ", "").split(",") if v]
        elif isinstance(value, (list, tuple)):
            found = [float(v) for v in value]
        else:
            found = [float(value)]
    except (TypeError, ValueError):
        raise fail("--decoder-param {}={!r} is not a list of numbers".format(name, value), hint="e.g. 0.1,0.1,0.2,0.2")
    if count is not None and len(found) == 1:
        found = found * count
    if count is not None and len(found) != count:
        raise fail("--decoder-param {} takes {} numbers, got {}".format(name, count, len(found)))
    return found


def flag(value, name):
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise fail("--decoder-param {}={!r} is not true or false".format(name, value))


def choice(value, name, allowed):
    if value not in allowed:
        raise fail("--decoder-param {}={!r}: not one of {}".format(name, value, ", ".join(allowed)))
    return value


def check_known(params, known, family):
    """Refuse a parameter the family does not take, naming the ones it does."""
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise fail("decoder {} has no parameter {}".format(family, ", ".join(unknown)),
                   hint="its parameters: " + ", ".join(sorted(known)))


def named(outputs, name, what):
    """The output called ``name`` (a ``--decoder-param`` value)."""
    for output in outputs:
        if output.name == name:
            return output
    raise fail("--decoder-param {}={}: the graph has no such output (it has {})".format(
        what, name, ", ".join(repr(o) for o in outputs)))


def grid(size, stride):
    """Cells of a feature map of stride ``stride`` over ``size`` pixels: ``ceil(size / stride)`` (a stride-2
    convolution with padding rounds up)."""
    return -(-int(size) // int(stride))


CANDIDATE_STRIDES = (8, 16, 32, 64)  # the strides a head's levels are looked for in, when none are given


def stride_runs(input_hw, strides):
    """{anchor count: strides} of every run of consecutive ``strides``, and of each stride alone, at
    ``input_hw`` (ceil grids: 608 / 64 is 10 cells)."""
    found = {}
    for start in range(len(strides)):
        for stop in range(start + 1, len(strides) + 1):
            run = list(strides[start:stop])
            found.setdefault(sum(grid(input_hw[0], s) * grid(input_hw[1], s) for s in run), run)
    return found


def level_counts(input_hw, strides, per_location=1):
    height, width = input_hw
    counts = per_location if isinstance(per_location, (list, tuple)) else [per_location] * len(strides)
    return [grid(height, s) * grid(width, s) * k for s, k in zip(strides, counts)]


def cell_centres(input_hw, stride, offset):
    """``[cells, 2]`` (x, y) centres of a stride's grid in input pixels, row by row."""
    rows, columns = grid(input_hw[0], stride), grid(input_hw[1], stride)
    xs = (np.arange(columns, dtype=np.float64) + offset) * stride
    ys = (np.arange(rows, dtype=np.float64) + offset) * stride
    return np.stack([np.tile(xs, rows), np.repeat(ys, columns)], axis=1)


def clip_corners(boxes, input_hw):
    """numpy: x1 y1 x2 y2 boxes clamped into the input."""
    height, width = input_hw
    bound = np.array([width, height, width, height], dtype=boxes.dtype)
    return np.minimum(np.maximum(boxes, 0), bound)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    shifted = np.exp(x - x.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


class Tail(object):
    """Appends nodes to an ONNX graph under one prefix: ``op`` adds a node and returns its output name,
    ``const`` an FP32 (or int64) initializer."""

    def __init__(self, model, prefix="decode"):
        from trtkit.onnx.normalize import opset_of
        self.model = model
        self.graph = model.graph
        self.opset = opset_of(model)
        self.prefix = prefix
        self.count = 0

    def _name(self, what):
        self.count += 1
        return "{}/{}_{}".format(self.prefix, what, self.count)

    def const(self, values, dtype=np.float32, what="const"):
        from onnx import numpy_helper
        name = self._name(what)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def op(self, op_type, inputs, output=None, **attributes):
        from onnx import helper
        output = output or self._name(op_type.lower())
        self.graph.node.append(helper.make_node(op_type, list(inputs), [output], name=self._name(op_type), **attributes))
        return output

    def columns(self, tensor, start, stop, axis=-1):
        """``tensor[..., start:stop]`` along ``axis`` (a Gather of those indices)."""
        return self.op("Gather", [tensor, self.const(np.arange(start, stop), np.int64, "columns")], axis=axis)

    def reduce_sum(self, tensor, axis):
        if self.opset >= 13:
            return self.op("ReduceSum", [tensor, self.const([axis], np.int64, "axes")], keepdims=0)
        return self.op("ReduceSum", [tensor], axes=[axis], keepdims=0)

    def reshape(self, tensor, shape):
        return self.op("Reshape", [tensor, self.const(shape, np.int64, "shape")])

    def activation(self, tensor, kind, axis=-1):
        if kind == "sigmoid":
            return self.op("Sigmoid", [tensor])
        if kind == "softmax":
            return self.op("Softmax", [tensor], axis=axis)
        return tensor

    def clip(self, corners, input_hw):
        """x1 y1 x2 y2 corners clamped into the input (Max with 0, Min with W H W H)."""
        height, width = input_hw
        low = self.op("Max", [corners, self.const([0.0])])
        return self.op("Min", [low, self.const([width, height, width, height])])

    def centre_size_to_corners(self, centres, sizes):
        """(cx, cy) and (w, h) ``[..., 2]`` -> x1 y1 x2 y2 ``[..., 4]``."""
        half = self.op("Mul", [sizes, self.const([0.5])])
        return self.op("Concat", [self.op("Sub", [centres, half]), self.op("Add", [centres, half])], axis=-1)
