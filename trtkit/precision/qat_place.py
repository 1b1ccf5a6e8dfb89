"""``qdq_place.tensorrt_edges`` read on a folded ``torch.fx`` graph, and the fake quantization put there.

The rules, as the ONNX placement states them (see ``qdq_place``'s module doc), on fx nodes:

* the data input of every Conv / Linear module (Conv, Gemm or MatMul in ONNX);
* the residual input of an add of two activations: the one not produced by a Conv (``residual_input``'s
  choice, argument order kept, as the exporter keeps it);
* the input of max / average / adaptive average pooling;
* the inputs of a ``torch.cat`` whose output is quantized, with the output's scale (one module, shared);
* none of it on the head (``head_tensors``: the logits after the classifier layer stay float).

Only modules are recognised as layers with weights (a functional ``F.conv2d`` with a parameter is not): the
export check (``qat_onnx.check_placement``) names any tensor this reading misses or adds.
"""

import operator

from trtkit.deps import require
from trtkit.precision.qat_graph import _classes, _conv_types, _weight_types

_ADDS = (operator.add, operator.iadd)
_ADD_METHODS = ("add", "add_")
# the exported ops qdq_place._HEAD_OPS walks back through from the output
_HEAD_METHODS = ("flatten", "view", "reshape", "squeeze", "softmax", "log_softmax", "relu", "add")


def _pool_types(torch):
    nn = torch.nn
    return (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
            nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)


def _pool_functions(torch):
    f = torch.nn.functional
    return (f.max_pool1d, f.max_pool2d, f.max_pool3d, f.avg_pool1d, f.avg_pool2d, f.avg_pool3d,
            f.adaptive_avg_pool1d, f.adaptive_avg_pool2d, f.adaptive_avg_pool3d)


class _Reader(object):
    """What each fx node is, in the placement's words."""

    def __init__(self, torch, gm):
        self.torch = torch
        self.modules = dict(gm.named_modules())
        self.fx = torch.fx

    def module(self, node):
        return self.modules.get(node.target) if node.op == "call_module" else None

    def is_weight(self, node):
        module = self.module(node)
        module = getattr(module, "layer", module)
        return isinstance(module, _weight_types(self.torch))

    def is_conv(self, node):
        module = self.module(node)
        module = getattr(module, "layer", module)
        return isinstance(module, _conv_types(self.torch))

    def is_add(self, node):
        return node.op == "call_function" and node.target in _ADDS + (self.torch.add,) or \
            node.op == "call_method" and node.target in _ADD_METHODS

    def is_pool(self, node):
        return isinstance(self.module(node), _pool_types(self.torch)) or \
            node.op == "call_function" and node.target in _pool_functions(self.torch)

    def is_cat(self, node):
        return node.op == "call_function" and node.target in (self.torch.cat, getattr(self.torch, "concat", None))

    def is_activation(self, arg):
        return isinstance(arg, self.fx.Node) and arg.op not in ("get_attr", "output")

    def activation_args(self, node):
        return [a for a in node.args[:2] if self.is_activation(a)]

    def is_head_op(self, node):
        """The fx spelling of the ops ``head_tensors`` walks through (Flatten, Reshape, Softmax, Relu,
        pooling, Add, Resize...)."""
        torch = self.torch
        f = torch.nn.functional
        if node.op == "call_method":
            return node.target in _HEAD_METHODS
        if node.op == "call_function":
            return node.target in (torch.flatten, torch.reshape, torch.squeeze, torch.softmax, torch.log_softmax,
                                   torch.relu, f.relu, f.softmax, f.log_softmax, f.interpolate) + _ADDS or \
                node.target in _pool_functions(torch)
        module = self.module(node)
        return isinstance(module, (torch.nn.Flatten, torch.nn.ReLU, torch.nn.Softmax, torch.nn.LogSoftmax,
                                   torch.nn.Upsample) + _pool_types(torch))


def _residual_input(reader, node):
    """``qdq_place.residual_input`` on an fx add: the input not from a Conv, else the second."""
    a, b = node.args[0], node.args[1]
    if reader.is_conv(a) and not reader.is_conv(b):
        return b
    return a if reader.is_conv(b) and not reader.is_conv(a) else b


def _head(reader, gm):
    """``qdq_place.head_tensors`` on fx nodes: the float tail (nodes from which no layer with weights is
    reached) and what the output reaches back through head ops."""
    nodes = list(gm.graph.nodes)
    feeds = set()
    for node in reversed(nodes):  # a node's inputs feed weights when it is a layer with weights or feeds one
        if reader.is_weight(node) or node in feeds:
            feeds.update(node.all_input_nodes)
    found = set(n for n in nodes if n.op not in ("output",) and n not in feeds)
    stack = [a for n in nodes if n.op == "output" for a in n.all_input_nodes]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        if reader.is_head_op(node):
            stack.extend(a for a in node.args[:2] if reader.is_activation(a) and a not in found)
    return found


def fx_edges(gm):
    """[(tensor node, consumer node, range node)]: where ``tensorrt_edges`` would put Q/DQ, in fx terms."""
    torch = require("torch", "quantization-aware training")
    reader = _Reader(torch, gm)
    edges = []
    for node in gm.graph.nodes:
        if reader.is_weight(node):
            inputs = [node.args[0]] if node.args and reader.is_activation(node.args[0]) else []
            edges.extend((t, node, t) for t in inputs)
        elif reader.is_add(node) and len(reader.activation_args(node)) == 2:
            t = _residual_input(reader, node)
            edges.append((t, node, t))
        elif reader.is_pool(node) and node.args and reader.is_activation(node.args[0]):
            edges.append((node.args[0], node, node.args[0]))
    head = _head(reader, gm)
    edges = [e for e in edges if e[0] not in head]
    quantized = set(e[0] for e in edges)
    for node in reversed(list(gm.graph.nodes)):
        if reader.is_cat(node) and node in quantized:
            for t in node.args[0]:
                if reader.is_activation(t):
                    edges.append((t, node, node))
                    quantized.add(t)
    seen, unique = set(), []
    for edge in edges:
        if edge not in seen:
            seen.add(edge)
            unique.append(edge)
    return unique


def insert_fake_quant(gm):
    """Put fake quantization on ``gm`` (changed in place) at ``fx_edges``: one ``ActQuant`` per quantized
    (tensor, range tensor), Concat inputs sharing their output's module, and every Conv/Linear reading a
    quantized input wrapped in ``WeightQuant``. Returns {module name: range node name} of the ActQuants."""
    classes = _classes()
    edges = fx_edges(gm)
    groups = {}
    for tensor, consumer, source in edges:
        groups.setdefault((tensor, source), []).append(consumer)
    owners, names = {}, {}
    order = _order(gm)
    for index, source in enumerate(sorted(set(s for _, s in groups), key=order)):
        name = "qat_act_{}".format(index)
        gm.add_submodule(name, classes["ActQuant"]())
        owners[source] = name
        names[name] = source.name
    for (tensor, source), consumers in sorted(groups.items(), key=lambda item: order(item[0][0])):
        with gm.graph.inserting_after(tensor):
            fq = gm.graph.call_module(owners[source], (tensor,))
        for consumer in consumers:
            consumer.replace_input_with(tensor, fq)
    reader = _Reader(require("torch"), gm)
    for node in gm.graph.nodes:
        if reader.is_weight(node) and node.args and getattr(node.args[0], "op", None) == "call_module" and \
                node.args[0].target in owners.values():
            layer = reader.modules[node.target]
            _set_module(gm, node.target, classes["WeightQuant"](layer))
    gm.graph.lint()
    gm.recompile()
    return names


def _order(gm):
    index = dict((node, i) for i, node in enumerate(gm.graph.nodes))
    return lambda node: index[node]


def _set_module(gm, target, module):
    parent, _, leaf = target.rpartition(".")
    setattr(gm.get_submodule(parent) if parent else gm, leaf, module)


def act_quants(gm):
    """[(name, ActQuant)] of ``gm`` in name order."""
    cls = _classes()["ActQuant"]
    return [(n, m) for n, m in gm.named_modules() if isinstance(m, cls)]


def set_mode(gm, exporting=None, enabled=None):
    """Switch every fake-quant module of ``gm``: ``exporting`` (the exportable forward), ``enabled`` (off: the
    FP32 folded model, what calibration observes)."""
    classes = _classes()
    for module in gm.modules():
        if isinstance(module, (classes["ActQuant"], classes["WeightQuant"])):
            if enabled is not None:
                module.enabled = enabled
            if exporting is not None and isinstance(module, classes["ActQuant"]):
                module.exporting = exporting
