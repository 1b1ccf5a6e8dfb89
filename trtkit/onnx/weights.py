"""A big model's weights kept out of the graph steps that do not read them, so a step holds one copy.

Why: ONNX's in-memory calls copy the whole model. ``onnx.shape_inference.
infer_shapes(model)`` serializes it, parses it in C++, serializes the result
and parses that back (four copies beside the caller's). ``light_copy`` gives
such a step the graph with its big initializers (``MIN_BYTES`` or more) as
references to data that is nowhere: shape inference reads the values of shape
inputs (a Reshape's target, a Slice's bounds), never of a layer's weights, so
what it infers is the same (``normalize.infer_shapes`` takes it back into the
model; the normalized files were checked byte for byte on real models:
``benchmarks/build_identity.py``). ``save_split`` writes a model with its
weights in a second file; ``give_back_memory`` returns what was freed to the
system.
"""

import os

MIN_BYTES = 64 * 1024  # tensors this big leave the graph; shapes, axes and scalars stay
FILE = "weights.bin"


def light_copy(model):
    """A copy of ``model`` whose initializers of ``MIN_BYTES`` or more keep their name, type and dims but no
    values: references to external data (``FILE``) that is nowhere. For a step that reads only the graph's types
    and shapes (shape inference; external data is never read there): it copies the graph and nothing else."""
    from trtkit.onnx.write import GRAPH_FIELD, INITIALIZER_FIELD, RAW_DATA_FIELD, split_fields
    light = type(model)()
    for part in split_fields(model, GRAPH_FIELD):
        light.MergeFrom(part)
    head, tail = split_fields(model.graph, INITIALIZER_FIELD)
    light.graph.MergeFrom(head)
    for tensor in model.graph.initializer:
        copy = light.graph.initializer.add()
        if not tensor.HasField("raw_data") or len(tensor.raw_data) < MIN_BYTES:
            copy.CopyFrom(tensor)
            continue
        for part in split_fields(tensor, RAW_DATA_FIELD):
            copy.MergeFrom(part)
        copy.data_location = copy.EXTERNAL
        entry = copy.external_data.add()
        entry.key, entry.value = "location", FILE
    light.graph.MergeFrom(tail)
    return light


def save_split(model, path):
    """Write ``model`` to ``path`` with its initializers of ``MIN_BYTES`` or more in ``FILE`` beside it (ONNX's
    external data: location, offset, length), one tensor at a time. Why: a reader of the file (ONNX Runtime,
    its quantizer, ``onnx.load``) then takes the weights tensor by tensor from their own file, never the whole
    model's bytes beside its parsed copy. Returns the names of the tensors written out."""
    from trtkit.onnx.write import save
    light = light_copy(model)
    moved, offset = [], 0
    with open(os.path.join(os.path.dirname(os.path.abspath(path)), FILE), "wb") as handle:
        for tensor, copy in zip(model.graph.initializer, light.graph.initializer):
            if copy.data_location != copy.EXTERNAL or tensor.data_location == tensor.EXTERNAL:
                continue
            data = tensor.raw_data
            handle.write(data)
            del copy.external_data[:]
            for key, value in (("location", FILE), ("offset", str(offset)), ("length", str(len(data)))):
                entry = copy.external_data.add()
                entry.key, entry.value = key, value
            offset += len(data)
            moved.append(tensor.name)
            del data
    save(light, path)
    return moved


def give_back_memory():
    """Return the memory Python and protobuf freed to the system (glibc's ``malloc_trim``; nothing elsewhere).

    Why: a model's bytes and its parsed copy are freed into the C heap, which glibc keeps (its mmap threshold
    rises to the largest block freed, so later big blocks come from the heap too): the process's resident
    memory then stays at its high-water mark, and the next step's copies come on top of it."""
    import ctypes
    import ctypes.util
    import gc
    gc.collect()
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
