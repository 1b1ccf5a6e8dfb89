"""Write a big ONNX model to its file without serializing it whole: the bytes of ``onnx.save``, one piece at a time.

Why: with the upb protobuf that current onnx wheels use, ``SerializeToString`` of a
model encodes it into a buffer that grows by doubling and then copies it into a
Python bytes object, and ``onnx.save`` first calls ``ByteSize()``, which encodes it
once more: saving a VGG19 (548 MB of weights) took the process from 0.6 GB to 2.8 GB
(measured with the peak resident set, ``VmHWM``). Here the model is written as the
concatenation protobuf defines (known fields in field-number order): the model's
fields before its graph, the graph's fields before its initializers, each
initializer with its ``raw_data`` written straight from the tensor, then the fields
after. Lengths are computed from the pieces, so nothing bigger than one tensor's data
is ever copied. The file is the same, byte for byte, as ``onnx.save`` writes
(checked on the test models and real ones); a message with fields this writer does not
see (unknown fields), and a model over protobuf's 2 GB, go to ``onnx.save`` (which keeps the
former and refuses the latter, as before).
"""

from trtkit.deps import require

GRAPH_FIELD = 7        # ModelProto.graph
INITIALIZER_FIELD = 5  # GraphProto.initializer
RAW_DATA_FIELD = 9     # TensorProto.raw_data
SMALL_BYTES = 1 << 20  # tensors below this are serialized as they are
LIMIT = (1 << 31) - 1  # protobuf's limit on a message: onnx.save refuses a bigger model, in its own words


def varint(value):
    """The protobuf base-128 encoding of a non-negative integer."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number):
    return varint(number << 3 | 2)  # a length-delimited field


def split_fields(message, number):
    """(head, tail): two messages of ``message``'s type holding its fields numbered below and above ``number``
    (that field itself in neither): serialized one after the other around that field they are ``message``."""
    head, tail = type(message)(), type(message)()
    for field, value in message.ListFields():
        if field.number == number:
            continue
        part = head if field.number < number else tail
        if is_repeated(field):
            getattr(part, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(part, field.name).CopyFrom(value)
        else:
            setattr(part, field.name, value)
    return head, tail


def is_repeated(field):
    """Whether a field descriptor is repeated (``is_repeated`` where ``label`` is deprecated)."""
    flag = getattr(field, "is_repeated", None)
    if flag is None:
        return field.label == field.LABEL_REPEATED
    return flag() if callable(flag) else bool(flag)


class _Piece(object):
    """A length-delimited field whose body is a list of bytes and sub-pieces, measured without joining them."""

    def __init__(self, number, parts):
        self.number = number
        self.parts = parts
        self.body = sum(len(p) for p in parts)

    def __len__(self):
        return len(_tag(self.number)) + len(varint(self.body)) + self.body

    def write(self, handle):
        handle.write(_tag(self.number) + varint(self.body))
        for part in self.parts:
            _write(part, handle)


class _RawData(object):
    """A tensor's ``raw_data`` field, read from the tensor only when written (one copy at a time)."""

    def __init__(self, tensor, size):
        self.tensor = tensor
        self.size = size

    def __len__(self):
        return len(_tag(RAW_DATA_FIELD)) + len(varint(self.size)) + self.size

    def write(self, handle):
        handle.write(_tag(RAW_DATA_FIELD) + varint(self.size))
        handle.write(self.tensor.raw_data)


def _write(part, handle):
    if isinstance(part, bytes):
        handle.write(part)
    else:
        part.write(handle)


def _tensor(tensor):
    """The pieces of one initializer field: small ones serialized whole, big ones around their raw_data."""
    if not tensor.HasField("raw_data"):
        return _Piece(INITIALIZER_FIELD, [tensor.SerializeToString()])
    size = len(tensor.raw_data)
    if size < SMALL_BYTES:
        return _Piece(INITIALIZER_FIELD, [tensor.SerializeToString()])
    head, tail = split_fields(tensor, RAW_DATA_FIELD)
    return _Piece(INITIALIZER_FIELD, [head.SerializeToString(), _RawData(tensor, size), tail.SerializeToString()])


def _has_unknown_fields(*messages):
    """Whether one of ``messages`` holds fields its schema does not name (upb answers through
    ``unknown_fields.UnknownFieldSet``; older protobufs through ``UnknownFields()``); True when it cannot tell."""
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet
        count = lambda message: len(UnknownFieldSet(message))  # noqa: E731
    except ImportError:
        count = lambda message: len(message.UnknownFields())  # noqa: E731
    try:
        return any(count(message) for message in messages)
    except (AttributeError, NotImplementedError, TypeError):
        return True


def save(model, path):
    """Write ``model`` (a ModelProto with its weights inside) to ``path``, as ``onnx.save(model, path)`` does."""
    onnx = require("onnx", "writing ONNX files")
    graph = model.graph
    if _has_unknown_fields(model, graph) or not model.HasField("graph"):
        onnx.save(model, path)
        return path
    model_head, model_tail = split_fields(model, GRAPH_FIELD)
    graph_head, graph_tail = split_fields(graph, INITIALIZER_FIELD)
    parts = [graph_head.SerializeToString()]
    parts += [_tensor(tensor) for tensor in graph.initializer]
    parts.append(graph_tail.SerializeToString())
    whole = [model_head.SerializeToString(), _Piece(GRAPH_FIELD, parts), model_tail.SerializeToString()]
    if sum(len(part) for part in whole) > LIMIT:
        onnx.save(model, path)
        return path
    with open(path, "wb") as handle:
        for part in whole:
            _write(part, handle)
    return path
