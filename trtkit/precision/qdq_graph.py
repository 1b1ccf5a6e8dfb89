"""The graph view the Q/DQ writer and its placement rules read: who produces and who consumes each tensor,
the initializers (as arrays on demand), node attributes, and whether a tensor is a float (``is_float``)."""

from trtkit.deps import require


class Graph(object):
    """Producer/consumer maps and initializers of one graph, kept in sync as nodes change (``refresh``)."""

    def __init__(self, model):
        numpy_helper = require("onnx.numpy_helper")
        self.model = model
        self.graph = model.graph
        self.inits = dict((i.name, i) for i in self.graph.initializer)
        self.arrays = {}
        self._to_array = numpy_helper.to_array
        self.outputs = set(o.name for o in self.graph.output)
        self._types = None  # {tensor: ONNX elem type}, inferred on first use (is_float)
        self.refresh()

    def refresh(self):
        self.producer, self.consumers = {}, {}
        for node in self.graph.node:
            for out in node.output:
                self.producer[out] = node
            for inp in node.input:
                self.consumers.setdefault(inp, []).append(node)

    def array(self, name):
        if name not in self.arrays:
            self.arrays[name] = self._to_array(self.inits[name])
        return self.arrays[name]

    def is_init(self, name):
        return name in self.inits

    def is_float(self, name):
        """False for a tensor whose inferred type is not float (a shape computation: ``Gather(Shape(x)) + 1``
        in a graph exported with a dynamic batch), True otherwise (also where inference cannot tell). Why: the
        placement wraps an Add's input, and an Add of two integer shape values is not an activation (a QAT
        export of torchvision's ShuffleNetV2 had 13 of them; calibration has no range for them either)."""
        from trtkit.onnx.types import FLOAT_TYPES, elem_types
        if self._types is None:
            self._types = elem_types(self.model)
        elem = self._types.get(name)
        return not elem or elem in FLOAT_TYPES

    def attr(self, node, name, default):
        for a in node.attribute:
            if a.name == name:
                return a.i if a.type == 2 else (a.f if a.type == 1 else default)
        return default
