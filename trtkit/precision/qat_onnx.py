"""The fake-quant PyTorch graph to the INT8 Q/DQ ONNX trtkit deploys, with its placement checked.

Three steps, each for a reason:

1. export the fake-quant graph with the TorchScript exporter: torch writes each
   ``fake_quantize_per_tensor_affine`` / ``_per_channel_affine`` as a QuantizeLinear/DequantizeLinear pair
   (measured on torch 2.13; the torch.export-based exporter is not needed for it);
2. take the Q/DQ pairs out again (``strip_qdq``): what is left is the FP32 graph of the fine-tuned, folded
   model, and the pairs say which tensor was quantized, for which consumers, at which scale. ``check_placement``
   compares those edges with ``tensorrt_edges`` on that very graph (missing or extra: ``QatPlacementError``);
3. write the deployed graph with trtkit's own ``tensorrt`` writer (``qdq.write_qdq``) from the learned scales:
   the same writer as post-training INT8 (int8 weight initializers, FP32 biases, which TensorRT's parser takes),
   whose per-channel weight quantization (amax / 127) is the one the fake-quant weights trained with.
"""

import numpy as np

from trtkit.deps import require
from trtkit.errors import TrtkitError
from trtkit.onnx.normalize import constant_value as _constant

QAT_DOC = "trtkit INT8 Q/DQ (tensorrt encoding, quantization-aware fine-tuned)"


class QatPlacementError(TrtkitError):
    """The fake-quant points of the PyTorch graph are not where ``tensorrt_edges`` puts Q/DQ."""


def export_fake_quant(gm, path, example, opset):
    """Export ``gm`` (fake quant on, exportable forward) to ``path`` with the TorchScript exporter."""
    torch = require("torch", "exporting the QAT model")
    from trtkit.onnx.export import _export_torchscript
    from trtkit.precision.qat_place import set_mode
    set_mode(gm, exporting=True, enabled=True)
    try:
        gm.eval()
        _export_torchscript(torch, gm, example, path, opset)
    finally:
        set_mode(gm, exporting=False)
    return path




def strip_qdq(model):
    """(FP32 ModelProto, activation edges): ``model`` (a fake-quant export) with its Q/DQ pairs removed, each
    consumer reading the float tensor again (a weight's: the float weight; an int8 weight initializer the
    exporter folded is dequantized back). Edges: {(tensor, consumer node index, scale)} of the activations.
    """
    onnx = require("onnx", "reading the QAT export")
    numpy_helper = require("onnx.numpy_helper")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = set(i.name for i in model.graph.initializer)
    nodes = list(model.graph.node)  # indices, not id(): protobuf hands out a new wrapper per access
    quant_of = dict((n.output[0], i) for i, n in enumerate(nodes) if n.op_type == "QuantizeLinear")
    renamed, scales, dropped, new_inits = {}, {}, set(), []
    for position, node in enumerate(nodes):
        if node.op_type != "DequantizeLinear":
            continue
        q_index = quant_of.get(node.input[0])
        q = nodes[q_index] if q_index is not None else None
        scale = _constant(model, node.input[1])
        if q is not None:
            renamed[node.output[0]] = q.input[0]
            if q.input[0] not in inits and _constant(model, q.input[0]) is None:
                scales[node.output[0]] = float(np.asarray(scale).reshape(-1)[0])
            dropped.update([q_index, position])
        elif node.input[0] in inits:  # a weight the exporter folded to int8
            q_value = _constant(model, node.input[0]).astype(np.float32)
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            shape = [1] * q_value.ndim
            if np.ndim(scale):
                shape[axis] = -1
            zero = _constant(model, node.input[2]) if len(node.input) > 2 else 0
            value = (q_value - np.reshape(zero, shape)) * np.reshape(scale, shape)
            name = node.output[0] + "_float"
            new_inits.append(numpy_helper.from_array(value.astype(np.float32), name))
            renamed[node.output[0]] = name
            dropped.add(position)
    edges = []
    kept = []
    for position, node in enumerate(nodes):
        if position in dropped:
            continue
        for index, name in enumerate(node.input):
            if name in renamed:
                if name in scales:
                    edges.append((renamed[name], len(kept), scales[name]))
                node.input[index] = renamed[name]
        kept.append(node)
    for output in model.graph.output:  # Q/DQ on a graph output: the float tensor takes the output's name again
        if output.name in renamed:
            inner = renamed[output.name]
            if output.name in scales:
                edges.append((output.name, None, scales[output.name]))
            for node in kept:
                node.output[:] = [output.name if o == inner else o for o in node.output]
                node.input[:] = [output.name if i == inner else i for i in node.input]
    kept = _live([onnx.NodeProto.FromString(n.SerializeToString()) for n in kept], model, edges)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    model.graph.initializer.extend(new_inits)
    from trtkit.onnx.normalize import drop_unused_initializers
    drop_unused_initializers(model)
    del model.graph.value_info[:]
    return model, edges


def _live(nodes, model, edges):
    """``nodes`` less those whose outputs nothing reads (the weight scales' Abs/ReduceMax the exporter left),
    with the edges' consumer indices moved along."""
    outputs = set(o.name for o in model.graph.output)
    alive = [True] * len(nodes)
    changed = True
    while changed:
        read = set(i for n, a in zip(nodes, alive) if a for i in n.input) | outputs
        changed = False
        for index, node in enumerate(nodes):
            if alive[index] and not any(o in read for o in node.output):
                alive[index] = False
                changed = True
    moved = dict((old, new) for new, old in enumerate(i for i, a in enumerate(alive) if a))
    edges[:] = [(t, None if i is None else moved[i], s) for t, i, s in edges]
    return [n for n, a in zip(nodes, alive) if a]


def _edge_table(model, edges):
    """{(tensor, range tensor): sorted consumer op types} of the stripped graph's edges; a Concat input's
    range tensor is the Concat's output when that is quantized at the same scale (``tensorrt_edges``' rule)."""
    nodes = list(model.graph.node)
    own = {}
    for tensor, index, scale in edges:
        own.setdefault(tensor, set()).add(scale)
    table = {}
    for tensor, index, scale in edges:
        consumer = nodes[index] if index is not None else None  # None: the graph's output
        source = tensor
        if consumer is not None and consumer.op_type == "Concat" and scale in own.get(consumer.output[0], ()):
            source = consumer.output[0]
        table.setdefault((tensor, source), []).append(consumer.op_type if consumer is not None else "output")
    return dict((k, sorted(v)) for k, v in table.items()), own


def check_placement(stripped, edges):
    """Raise ``QatPlacementError`` unless the Q/DQ edges of the fake-quant export are exactly those
    ``tensorrt_edges`` gives on the same FP32 graph (the same tensors, range tensors and consumers).
    Returns ({(tensor, range tensor): consumer ops}, {tensor: scale}) for the writer."""
    from trtkit.precision.qdq import quantization_plan
    got, scales = _edge_table(stripped, edges)
    _, activations, _ = quantization_plan(stripped, "tensorrt")
    expected = dict(((t, s), sorted(ops)) for t, s, ops in activations)
    missing = sorted(k for k in expected if k not in got)
    extra = sorted(k for k in got if k not in expected)
    differ = sorted(k for k in expected if k in got and expected[k] != got[k])
    if missing or extra or differ:
        raise QatPlacementError("the fake quantization differs from trtkit's TensorRT Q/DQ placement: {} missing "
                                "(e.g. {}), {} extra (e.g. {}), {} with other consumers (e.g. {})".format(
                                    len(missing), missing[:2], len(extra), extra[:2], len(differ), differ[:2]),
                                hint="report the model to trtkit: its QAT graph needs a placement rule")
    several = [t for t, s in scales.items() if len(s) > 1 and (t, t) in got]
    if several:
        raise QatPlacementError("tensor {} is fake-quantized at two scales".format(several[0]))
    return got, dict((t, min(s)) for t, s in scales.items())


def write_qat_qdq(fake_quant_onnx, dst, contract=None):
    """The deployed INT8 Q/DQ ONNX of a fake-quant export: stripped, checked, written by ``write_qdq`` with
    the learned scales (amax = scale x 127), ``contract`` recorded in its metadata. Returns (dst, the stripped FP32 ModelProto, the placement)."""
    onnx = require("onnx", "writing the QAT ONNX")
    from trtkit.fileio import atomic_path
    from trtkit.precision.qdq import write_qdq
    stripped, edges = strip_qdq(onnx.load(fake_quant_onnx))
    placement, scales = check_placement(stripped, edges)
    ranges = {}
    for tensor, source in placement:
        amax = scales[source] * 127.0
        ranges[source] = {"amax": amax, "min": -amax, "max": amax}
    written = write_qdq(stripped, ranges, "tensorrt")
    written.doc_string = QAT_DOC
    if contract is not None:  # a later --onnx build of it preprocesses the same way
        from trtkit.onnx.load import set_contract_metadata
        set_contract_metadata(written, contract)
    with atomic_path(dst) as tmp:
        onnx.save(written, tmp)
    return dst, stripped, placement


def qdq_tensors(model):
    """{tensor: scale} quantized by the activation QuantizeLinear nodes of a Q/DQ ModelProto."""
    inits = set(i.name for i in model.graph.initializer)
    found = {}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits:
            found[node.input[0]] = float(np.asarray(_constant(model, node.input[1])).reshape(-1)[0])
    return found
