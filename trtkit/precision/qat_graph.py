"""The PyTorch side of quantization-aware fine-tuning: a model traced with ``torch.fx``, BatchNorm folded, and
fake quantization inserted exactly where trtkit's ``tensorrt`` writer puts Q/DQ (``qdq_place.tensorrt_edges``).

Why fold first: the writer quantizes the ONNX graph *after* folding each BatchNorm into its Conv
(``qdq._fold_batchnorm``), so the INT8 weights TensorRT runs are the folded ones. Training the unfolded model
with fake-quantized conv weights would quantize another tensor than the one deployed; training the folded
weights (BatchNorm frozen at its eval statistics) quantizes exactly the deployed weights.

Why the rules are written again here on the fx graph: fake quantization must be in the PyTorch graph to be
trained through, and the ONNX graph it becomes exists only after export. The two placements are compared on
every export (``qat_onnx.check_placement``): the Q/DQ edges of the exported fake-quant graph must be the edges
``tensorrt_edges`` gives on the same graph with its Q/DQ removed, so a rule that drifts here fails loudly.

Fake quantization (int8, symmetric, zero point 0, as the writer's): activations per tensor with a learned
scale (LSQ: Esser et al. 2020, the straight-through estimator with the scale's gradient scaled by
1/sqrt(n * 127)), initialised from trtkit's calibration of the same images; weights per output channel with
the scale amax / 127 of the current weights, as ``qdq.quantize_weight`` computes it at export.
"""

import copy

from trtkit.deps import require

QMIN, QMAX = -128, 127  # the range of an INT8 QuantizeLinear: what ONNX Runtime, OpenVINO and TensorRT clamp to
_CLASSES = {}


def _classes():
    """The fake-quant modules (made once, lazily: ``import trtkit`` needs no torch)."""
    if _CLASSES:
        return _CLASSES
    torch = require("torch", "quantization-aware training")

    class ActQuant(torch.nn.Module):
        """Per-tensor symmetric INT8 fake quantization with a learned scale. ``exporting``: the forward is
        ``torch.fake_quantize_per_tensor_affine`` at the current scale, which the ONNX exporter writes as a
        QuantizeLinear/DequantizeLinear pair; the same op is the PyTorch reference runtimes are compared
        with."""

        def __init__(self):
            super(ActQuant, self).__init__()
            self.scale = torch.nn.Parameter(torch.tensor(1.0))
            self.enabled = True
            self.exporting = False

        def forward(self, x):
            if not self.enabled:
                return x
            if self.exporting or not torch.is_grad_enabled():
                return torch.fake_quantize_per_tensor_affine(x, float(self.scale.detach().abs()) + 1e-12, 0,
                                                             QMIN, QMAX)
            grad_scale = 1.0 / float(max(x[0].numel(), 1) * QMAX) ** 0.5
            scale = self.scale.abs() + 1e-12
            scale = scale * grad_scale + (scale - scale * grad_scale).detach()  # value: scale; gradient: scaled
            v = torch.clamp(x / scale, QMIN, QMAX)
            v = (torch.round(v) - v).detach() + v  # straight-through round
            return v * scale

    class WeightQuant(torch.nn.Module):
        """A Conv or Linear whose weight is fake-quantized per output channel (symmetric, amax / 127)."""

        def __init__(self, layer):
            super(WeightQuant, self).__init__()
            self.layer = layer
            self.enabled = True

        def quantized_weight(self):
            w = self.layer.weight
            if not self.enabled:
                return w
            amax = w.detach().abs().reshape(w.shape[0], -1).max(dim=1)[0]
            scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
            if not torch.is_grad_enabled():
                return torch.fake_quantize_per_channel_affine(w, scale, torch.zeros_like(scale, dtype=torch.int32),
                                                              0, QMIN, QMAX)
            shape = [-1] + [1] * (w.dim() - 1)
            v = torch.clamp(w / scale.reshape(shape), -QMAX, QMAX)
            return ((torch.round(v) - v).detach() + v) * scale.reshape(shape)

        def forward(self, x):
            w = self.quantized_weight()
            if isinstance(self.layer, torch.nn.Linear):
                return torch.nn.functional.linear(x, w, self.layer.bias)
            return self.layer._conv_forward(x, w, self.layer.bias)

    _CLASSES.update(ActQuant=ActQuant, WeightQuant=WeightQuant)
    return _CLASSES


def _weight_types(torch):
    nn = torch.nn
    return (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def _conv_types(torch):
    return (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


# ------------------------------------------------------------------ folding

def fold_batchnorm(model):
    """A ``torch.fx.GraphModule`` copy of ``model`` (eval mode, CPU) with every BatchNorm that follows a Conv
    (its only user) folded into the Conv's weight and bias, and the eval no-ops (Dropout, Identity) removed.
    Returns (graph module, [(conv name, batchnorm name)]): the pairs let ``unfold_into`` write the fine-tuned
    weights back into the original architecture."""
    torch = require("torch", "quantization-aware training")
    fx = torch.fx
    model = copy.deepcopy(model).eval().cpu()
    try:
        gm = fx.symbolic_trace(model)
    except Exception as exc:  # data-dependent control flow, unsupported Python in forward...
        from trtkit.errors import InputError, first_line
        raise InputError("QAT traces the model with torch.fx, which cannot trace this one: {}".format(
            first_line(exc, 200)), hint="make forward traceable (no Python branches on tensor values), or use "
                                        "post-training INT8")
    modules = dict(gm.named_modules())
    calls = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    norms = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
    pairs = []
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not isinstance(modules[node.target], norms):
            continue
        prev = node.args[0]
        if not (isinstance(prev, fx.Node) and prev.op == "call_module" and len(prev.users) == 1
                and isinstance(modules[prev.target], _conv_types(torch)) and calls[prev.target] == 1
                and calls[node.target] == 1):
            continue
        _fold_into(torch, modules[prev.target], modules[node.target])
        node.replace_all_uses_with(prev)
        gm.graph.erase_node(node)
        pairs.append((prev.target, node.target))
    _drop_noops(torch, gm, modules)
    gm.graph.lint()
    gm.recompile()
    gm.delete_all_unused_submodules()
    return gm, pairs


def _fold_into(torch, conv, bn):
    with torch.no_grad():
        std = torch.sqrt(bn.running_var + bn.eps)
        gamma = bn.weight if bn.weight is not None else torch.ones_like(std)
        beta = bn.bias if bn.bias is not None else torch.zeros_like(std)
        factor = gamma / std
        bias = conv.bias if conv.bias is not None else torch.zeros_like(std)
        conv.weight.mul_(factor.reshape([-1] + [1] * (conv.weight.dim() - 1)))
        conv.bias = torch.nn.Parameter((bias - bn.running_mean) * factor + beta)


def _drop_noops(torch, gm, modules):
    """Dropout, Identity and torchvision's stochastic depth do nothing in eval mode and the exporter leaves them
    out: so must the placement (it reads what produced an Add's inputs)."""
    noop_modules = (torch.nn.Dropout, torch.nn.Identity)
    noop_functions = (torch.nn.functional.dropout,)
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and isinstance(modules.get(node.target), noop_modules) or \
                node.op == "call_function" and (node.target in noop_functions or _eval_stochastic_depth(node)):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)


def _eval_stochastic_depth(node):
    """True for a call of ``torchvision.ops.stochastic_depth`` (fx keeps it as one call: torchvision wraps it)
    with ``training`` False or ``p`` 0, which returns its input. Why: a blind test's EfficientNet-B0 (residual
    MBConv blocks, ``result = stochastic_depth(block(x)) + x``) had its fake quantization on the wrong Add input,
    the placement reading the call as not coming from a Conv, and the export check refused it."""
    target = node.target
    if getattr(target, "__name__", "") != "stochastic_depth" or \
            not str(getattr(target, "__module__", "")).startswith("torchvision"):
        return False
    args, kwargs = list(node.args), dict(node.kwargs)
    names = ("input", "p", "mode", "training")
    values = dict(zip(names, args))
    values.update(kwargs)
    return values.get("training", True) is False or values.get("p") == 0


def unfold_into(model, gm, pairs):
    """Write the folded (fine-tuned) weights of ``gm`` back into ``model`` (its unfolded architecture, changed
    in place): each Conv gets the folded weight and its BatchNorm becomes the identity plus the folded bias
    (mean 0, variance 1 - eps, scale 1), so the checkpoint loads and exports as the original architecture and
    folds back to exactly the fine-tuned weights."""
    torch = require("torch")
    folded = dict(gm.named_modules())
    own = dict(model.named_modules())
    with torch.no_grad():
        for conv_name, bn_name in pairs:
            layer = folded[conv_name]
            layer = getattr(layer, "layer", layer)
            conv, bn = own[conv_name], own[bn_name]
            conv.weight.copy_(layer.weight)
            if conv.bias is not None:
                conv.bias.zero_()
            bn.running_mean.zero_()
            bn.running_var.fill_(1.0 - bn.eps)
            if bn.weight is not None:
                bn.weight.fill_(1.0)
            if bn.bias is not None:
                bn.bias.copy_(layer.bias)
        convs = dict(pairs)
        for name, module in folded.items():  # the layers without a BatchNorm (the classifier...)
            base = getattr(module, "layer", module)
            if isinstance(base, _weight_types(torch)) and name in own and name not in convs:
                own[name].load_state_dict(base.state_dict())
    return model
