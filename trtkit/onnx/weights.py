"""A big model's weights out of the Python process while a graph step runs, so a step holds one copy.

Why: ONNX's in-memory calls copy the whole model. ``onnx.shape_inference.
infer_shapes(model)`` serializes it, parses it in C++, serializes the result
and parses that back (four copies beside the caller's). Here the
initializers of at least ``MIN_BYTES`` go to one file (ONNX's external data,
``onnx.save_model(save_as_external_data=True)``, which leaves the in-memory
tensors empty), the step works on the light graph, and the weights come back
(``read_weights``). Small tensors stay in the graph: shape inference reads the
values of shape inputs (a Reshape's target, a Slice's bounds), never of a
layer's weights; the inferred graph is the same, byte for byte (checked on
real models). ``give_back_memory`` returns what was freed to the system.
"""

import os
import shutil
import tempfile

from trtkit.deps import require

MIN_BYTES = 64 * 1024  # tensors this big leave the graph; shapes, axes and scalars stay
FILE = "weights.bin"


class WeightsAside(object):
    """``with WeightsAside(model) as aside:`` ``model``'s big initializers live in ``aside.folder`` (its light
    graph in ``aside.path``) and come back into ``model`` when the block ends, also on an error. A step whose
    result replaces ``model`` calls ``hand_over(result)``: the result gets the weights and ``model`` stays
    light (its caller drops it), so the two never hold them both."""

    def __init__(self, model, purpose="normalizing the ONNX file"):
        self.model = model
        self.purpose = purpose
        self.folder = None
        self.path = None
        self._restore = True

    def __enter__(self):
        onnx = require("onnx", self.purpose)
        self.folder = tempfile.mkdtemp(prefix="trtkit-weights-")
        self.path = os.path.join(self.folder, "light.onnx")
        try:
            onnx.save_model(self.model, self.path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=FILE, size_threshold=MIN_BYTES)
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def fill(self, other):
        """Read into ``other`` (a proto naming the same external tensors) its weights from the folder."""
        return read_weights(other, self.folder)

    def hand_over(self, result):
        """``result`` with the weights; ``model`` keeps none (it is replaced by ``result``)."""
        self.keep_light()
        return self.fill(result)

    def keep_light(self):
        """Leave ``model`` without its big weights when the block ends (it is replaced)."""
        self._restore = False

    def __exit__(self, exc_type, exc, tb):
        try:
            if self._restore:
                self.fill(self.model)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            give_back_memory()
        return False


def light_copy(model):
    """A copy of ``model`` whose initializers of ``MIN_BYTES`` or more keep their name, type and dims but no
    values: references to external data (``FILE``) that is nowhere. For a step that reads only the graph's types
    and shapes (shape inference; external data is never read there): ``WeightsAside`` writes the weights out and
    reads them back, this copies the rest of the graph and nothing else."""
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


def read_weights(model, folder):
    """``model`` with the external data it names read from ``folder``, as if it had been loaded whole (no
    explicit DEFAULT location left behind: the same bytes when saved)."""
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data
    moved = [t for t in _initializers(model.graph) if uses_external_data(t)]
    load_external_data_for_model(model, folder)
    for tensor in moved:
        tensor.ClearField("data_location")
        if not tensor.doc_string:  # ONNX Runtime's writer of external data sets an empty one
            tensor.ClearField("doc_string")
    return model


def _initializers(graph):
    """Every initializer of ``graph`` and of its subgraphs (If branches, Loop bodies)."""
    for tensor in graph.initializer:
        yield tensor
    for node in graph.node:
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                for tensor in _initializers(sub):
                    yield tensor


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
