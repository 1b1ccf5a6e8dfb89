"""Small ONNX classifiers written the way other exporters write them (no downloads: onnx.helper only).

* ``caffe2_zoo(name)``: replicas of the ONNX Model Zoo's classic Caffe2 exports
  (AlexNet, DenseNet, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG,
  ZFNet): IR version 3, opset 9, ``gpu_0/...`` names, every initializer listed
  as a graph input, batch fixed at 1 (and hard-coded in Reshape shapes where
  Caffe2 did), some weights computed by ``ConstantOfShape`` from a ``__SHAPE``
  initializer or given by ``Constant`` nodes, ``LRN``, ``Dropout``, ``Sum``,
  and a ``Softmax`` output (4-D ``[1, C, 1, 1]`` for DenseNet and SqueezeNet).
* ``tf_style()``: what tf2onnx writes for a Keras MobileNet-like model: an NHWC
  input ``[unk__N, H, W, 3]`` followed by ``Transpose(perm=[0, 3, 1, 2])``,
  ReLU6 as ``Clip``, depthwise convolution, ``ReduceMean`` pooling,
  ``MatMul`` + ``Add`` for Dense, a Softmax output; opset 13.
* ``paddle_style()``: what paddle2onnx writes for a PaddleClas MobileNetV3:
  opset 11, input ``[-1, 3, -1, -1]`` (dynamic H x W), hardswish as
  ``Add/Clip/Mul/Div``, squeeze-excite (GlobalAveragePool -> Conv -> Relu ->
  Conv -> HardSigmoid -> Mul), Flatten -> MatMul -> Add, Softmax.

Weights are random (He-scaled, seeded) so every model is deterministic; ``fit_head``
then fits the classifier layer to real images (a linear probe on the random
features), so a replica predicts all classes with real margins and agreement
figures mean something.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CAFFE2_MODELS = ("alexnet", "densenet", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
                 "vgg", "zfnet")
SIZE = 64
RIDGE = 0.1
CLASSES = 10


class _Writer(object):
    """Accumulates nodes and initializers; tracks each tensor's channel count."""

    def __init__(self, prefix="", seed=0):
        self.rng = np.random.RandomState(seed)
        self.prefix = prefix
        self.nodes, self.inits, self.channels = [], [], {}
        self.count = 0

    def name(self, base):
        self.count += 1
        return "{}{}_{}".format(self.prefix, base, self.count)

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, channels=None, base=None, **attrs):
        out = self.name(base or op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        self.channels[out] = channels if channels is not None else self.channels.get(inputs[0])
        return out

    def weight(self, cout, cin, k):
        return (self.rng.randn(cout, cin, k, k) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)


class Caffe2Net(_Writer):
    """The operators of Caffe2's ONNX exporter at opset 9."""

    def __init__(self, seed=0):
        super(Caffe2Net, self).__init__("gpu_0/", seed)
        self.input = "gpu_0/data_0"
        self.channels[self.input] = 3
        self.fills = 0

    def conv(self, x, cout, k, stride=1, pad=0, group=1, bias=True):
        base = self.name("conv")
        w = self.init(base + "_w_0", self.weight(cout, self.channels[x] // group, k))
        inputs = [x, w]
        if bias:
            b = base + "_b_0"
            if self.fills == 0:  # Caffe2's ConstantFill: ConstantOfShape of a __SHAPE initializer
                self.init(b + "__SHAPE", np.array([cout], dtype=np.int64))
                self.nodes.append(helper.make_node("ConstantOfShape", [b + "__SHAPE"], [b], name=b + "_fill",
                                                   value=numpy_helper.from_array(np.array([0.02], np.float32))))
            else:
                self.init(b, (self.rng.randn(cout) * 0.05).astype(np.float32))
            self.fills += 1
            inputs.append(b)
        return self.node("Conv", inputs, cout, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         group=group)

    def relu(self, x):
        return self.node("Relu", [x])

    def conv_relu(self, x, cout, k, stride=1, pad=0, group=1):
        return self.relu(self.conv(x, cout, k, stride, pad, group))

    def bn(self, x):
        c = self.channels[x]
        base = self.name("spatbn")
        scale = self.init(base + "_s", (1.0 + 0.1 * self.rng.randn(c)).astype(np.float32))
        bias = self.init(base + "_b", (0.1 * self.rng.randn(c)).astype(np.float32))
        mean = self.init(base + "_rm", (0.1 * self.rng.randn(c)).astype(np.float32))
        var = base + "_riv"
        self.init(var + "__SHAPE", np.array([c], dtype=np.int64))
        self.nodes.append(helper.make_node("ConstantOfShape", [var + "__SHAPE"], [var], name=var + "_fill",
                                           value=numpy_helper.from_array(np.array([1.0], np.float32))))
        return self.node("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def conv_bn_relu(self, x, cout, k, stride=1, pad=0, group=1):
        return self.relu(self.bn(self.conv(x, cout, k, stride, pad, group, bias=False)))

    def maxpool(self, x, k, stride, pad=0):
        return self.node("MaxPool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def avgpool(self, x, k, stride, pad=0):
        return self.node("AveragePool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def lrn(self, x):
        return self.node("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def dropout(self, x):
        return self.node("Dropout", [x], ratio=0.5)

    def concat(self, xs):
        return self.node("Concat", xs, sum(self.channels[x] for x in xs), axis=1)

    def sum(self, xs):
        return self.node("Sum", xs)

    def fc(self, x, cin, cout, constant=False):
        base = self.name("fc")
        w = (self.rng.randn(cout, cin) * np.sqrt(2.0 / cin)).astype(np.float32)
        if constant:  # a weight given by a Constant node
            self.nodes.append(helper.make_node("Constant", [], [base + "_w_0"], name=base + "_w",
                                               value=numpy_helper.from_array(w)))
        else:
            self.init(base + "_w_0", w)
        b = self.init(base + "_b_0", (self.rng.randn(cout) * 0.05).astype(np.float32))
        return self.node("Gemm", [x, base + "_w_0", b], cout, transB=1)

    def reshape(self, x, shape):
        s = self.init(self.name("OC2_DUMMY"), np.array(shape, dtype=np.int64))
        return self.node("Reshape", [x, s])

    def model(self, out, size=SIZE, four_d=False):
        prob = self.node("Softmax", [out], base="softmax", axis=1)
        shape = [1, CLASSES, 1, 1] if four_d else [1, CLASSES]
        init_inputs = [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in self.inits]
        graph = helper.make_graph(self.nodes, "caffe2", [helper.make_tensor_value_info(
            self.input, TensorProto.FLOAT, [1, 3, size, size])] + init_inputs,
            [helper.make_tensor_value_info(prob, TensorProto.FLOAT, shape)], self.inits)
        model = helper.make_model(graph, producer_name="onnx-caffe2", opset_imports=[helper.make_opsetid("", 9)])
        model.ir_version = 3
        return model


def _alexnet(n, first_k=11, first_stride=4, first_pad=2, side=2):
    x = n.lrn(n.conv_relu(n.input, 16, first_k, first_stride, first_pad))
    x = n.maxpool(x, 3, 2)
    x = n.maxpool(n.lrn(n.conv_relu(x, 24, 5, 1, 2, group=2)), 3, 2)
    x = n.conv_relu(n.conv_relu(x, 32, 3, 1, 1), 24, 3, 1, 1, group=2)
    x = n.maxpool(x, 3, 2, 1)
    flat = n.reshape(x, [1, -1])  # Caffe2 wrote the batch into the shape
    x = n.dropout(n.relu(n.fc(flat, 24 * side * side, 64)))
    x = n.dropout(n.relu(n.fc(x, 64, 64)))
    return n.model(n.fc(x, 64, CLASSES, constant=True))


def _zfnet(n):
    return _alexnet(n, first_k=7, first_stride=2, first_pad=1, side=3)


def _inception(n, x, c1, c3r, c3, c5r, c5, cp, bn=False, pool="max"):
    unit = n.conv_bn_relu if bn else n.conv_relu
    a = unit(x, c1, 1)
    b = unit(unit(x, c3r, 1), c3, 3, 1, 1)
    c = unit(unit(x, c5r, 1), c5, 3 if bn else 5, 1, 1 if bn else 2)
    p = n.maxpool(x, 3, 1, 1) if pool == "max" else n.avgpool(x, 3, 1, 1)
    return n.concat([a, b, c, unit(p, cp, 1)])


def _inception_v1(n):
    x = n.maxpool(n.conv_relu(n.input, 16, 7, 2, 3), 3, 2, 1)
    x = n.lrn(x)
    x = n.lrn(n.conv_relu(n.conv_relu(x, 16, 1), 32, 3, 1, 1))
    x = n.maxpool(x, 3, 2, 1)
    x = _inception(n, x, 8, 8, 16, 4, 8, 8)
    x = _inception(n, x, 16, 8, 16, 4, 8, 8)
    x = n.avgpool(x, 8, 1)  # the 7x7 average pool of GoogLeNet, here over 8x8
    x = n.dropout(n.reshape(x, [1, 48]))
    return n.model(n.fc(x, 48, CLASSES))


def _inception_v2(n):
    x = n.maxpool(n.conv_bn_relu(n.input, 16, 7, 2, 3), 3, 2, 1)
    x = n.maxpool(n.conv_bn_relu(x, 32, 3, 1, 1), 3, 2, 1)
    x = _inception(n, x, 8, 8, 16, 8, 16, 8, bn=True, pool="avg")
    x = _inception(n, x, 16, 8, 16, 8, 16, 8, bn=True, pool="avg")
    x = n.avgpool(x, 8, 1)
    return n.model(n.fc(n.reshape(x, [1, 56]), 56, CLASSES))


def _resnet50(n):
    x = n.maxpool(n.conv_bn_relu(n.input, 16, 7, 2, 3), 3, 2, 1)
    for cout, stride in ((32, 1), (32, 1), (64, 2)):
        mid = cout // 4
        y = n.conv_bn_relu(x, mid, 1)
        y = n.conv_bn_relu(y, mid, 3, stride, 1)
        y = n.bn(n.conv(y, cout, 1, bias=False))
        short = x if n.channels[x] == cout and stride == 1 else n.bn(n.conv(x, cout, 1, stride, bias=False))
        x = n.relu(n.sum([y, short]))
    x = n.avgpool(x, 8, 1)
    return n.model(n.fc(n.reshape(x, [1, 64]), 64, CLASSES))


def _shuffle(n, x, groups, hw):
    c = n.channels[x]
    y = n.reshape(x, [1, groups, c // groups, hw, hw])
    y = n.node("Transpose", [y], c, perm=[0, 2, 1, 3, 4])
    return n.reshape(y, [1, c, hw, hw])


def _shufflenet(n):
    x = n.maxpool(n.conv_relu(n.input, 24, 3, 2, 1), 3, 2, 1)  # 16x16
    for _ in range(2):
        y = n.conv_bn_relu(x, 24, 1, group=3)
        y = _shuffle(n, y, 3, 16)
        y = n.bn(n.conv(y, 24, 3, 1, 1, group=24, bias=False))  # depthwise
        y = n.bn(n.conv(y, 24, 1, group=3, bias=False))
        x = n.relu(n.sum([x, y]))
    x = n.avgpool(x, 16, 1)
    return n.model(n.fc(n.reshape(x, [1, 24]), 24, CLASSES))


def _fire(n, x, s, e):
    sq = n.conv_relu(x, s, 1)
    return n.concat([n.conv_relu(sq, e, 1), n.conv_relu(sq, e, 3, 1, 1)])


def _squeezenet(n):
    x = n.maxpool(n.conv_relu(n.input, 32, 3, 2), 3, 2)
    x = n.maxpool(_fire(n, _fire(n, x, 8, 16), 8, 16), 3, 2)
    x = _fire(n, x, 16, 32)
    x = n.conv_relu(n.dropout(x), CLASSES, 1)
    return n.model(n.node("GlobalAveragePool", [x]), four_d=True)


def _densenet(n):
    x = n.maxpool(n.conv_bn_relu(n.input, 16, 7, 2, 3), 3, 2, 1)
    for block in range(2):
        for _ in range(3):
            y = n.conv(n.relu(n.bn(x)), 16, 1, bias=False)
            y = n.conv(n.relu(n.bn(y)), 8, 3, 1, 1, bias=False)
            x = n.concat([x, y])
        if block == 0:
            x = n.avgpool(n.conv(n.relu(n.bn(x)), 24, 1, bias=False), 2, 2)
    x = n.node("GlobalAveragePool", [n.relu(n.bn(x))])
    return n.model(n.conv(x, CLASSES, 1), four_d=True)  # the classifier is a 1x1 convolution


def _vgg(n):
    x = n.input
    for cout, convs in ((8, 1), (16, 2), (32, 2), (32, 2)):
        for _ in range(convs):
            x = n.conv_relu(x, cout, 3, 1, 1)
        x = n.maxpool(x, 2, 2)
    x = n.node("Flatten", [x], axis=1)
    x = n.dropout(n.relu(n.fc(x, 32 * 4 * 4, 64)))
    x = n.dropout(n.relu(n.fc(x, 64, 64)))
    return n.model(n.fc(x, 64, CLASSES))


_BUILDERS = {"alexnet": _alexnet, "zfnet": _zfnet, "inception_v1": _inception_v1, "inception_v2": _inception_v2,
             "resnet50": _resnet50, "shufflenet": _shufflenet, "squeezenet": _squeezenet, "densenet": _densenet,
             "vgg": _vgg}


def caffe2_zoo(name, seed=0):
    """The Caffe2-style replica ``name`` (one of CAFFE2_MODELS) as a ModelProto."""
    return _BUILDERS[name](Caffe2Net(seed))


# ------------------------------------------------------------------ tf2onnx style

def _dw_block(w, x, cout, stride, act):
    c = w.channels[x]
    dw = w.node("Conv", [x, w.init(w.name("depthwise/weights"), w.weight(c, 1, 3)),
                         w.init(w.name("depthwise/bias"), np.zeros(c, np.float32))], c,
                kernel_shape=[3, 3], strides=[stride, stride], pads=[1, 1, 1, 1], group=c)
    pw = w.node("Conv", [act(dw), w.init(w.name("pointwise/weights"), w.weight(cout, c, 1)),
                         w.init(w.name("pointwise/bias"), (0.05 * w.rng.randn(cout)).astype(np.float32))], cout,
                kernel_shape=[1, 1])
    return act(pw)


def tf_style(size=SIZE, seed=1):
    """A Keras MobileNet-like classifier as tf2onnx writes it: NHWC input, Transpose to NCHW, opset 13."""
    w = _Writer("model/", seed)
    six = w.init("model/relu6/max", np.array(6.0, np.float32))
    zero = w.init("model/relu6/min", np.array(0.0, np.float32))

    def relu6(x):
        return w.node("Clip", [x, zero, six], base="Relu6")

    nchw = w.node("Transpose", ["input_1"], 3, base="Conv1__6", perm=[0, 3, 1, 2])
    x = relu6(w.node("Conv", [nchw, w.init("model/Conv1/weights", w.weight(16, 3, 3)),
                               w.init("model/Conv1/bias", np.zeros(16, np.float32))], 16,
                     kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]))
    x = _dw_block(w, x, 24, 2, relu6)
    x = _dw_block(w, x, 32, 1, relu6)
    pooled = w.node("ReduceMean", [x], 32, base="global_average_pooling2d/Mean", axes=[2, 3], keepdims=0)
    dense = w.node("MatMul", [pooled, w.init("model/dense/MatMul/ReadVariableOp:0",
                                             (w.rng.randn(32, CLASSES) * 0.3).astype(np.float32))], CLASSES)
    dense = w.node("Add", [dense, w.init("model/dense/BiasAdd/ReadVariableOp:0",
                                         np.zeros(CLASSES, np.float32))], CLASSES)
    prob = w.node("Softmax", [dense], base="dense/Softmax", axis=-1)
    graph = helper.make_graph(
        w.nodes, "tf2onnx", [helper.make_tensor_value_info("input_1", TensorProto.FLOAT, ["unk__312", size, size, 3])],
        [helper.make_tensor_value_info(prob, TensorProto.FLOAT, ["unk__313", CLASSES])], w.inits)
    model = helper.make_model(graph, producer_name="tf2onnx", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return model


# ------------------------------------------------------------------ paddle2onnx style

def paddle_style(seed=2):
    """A PaddleClas MobileNetV3-like classifier as paddle2onnx writes it at opset 11 (dynamic H x W)."""
    w = _Writer("", seed)
    consts = dict((k, w.init("p2o.{}".format(k), np.array(v, np.float32)))
                  for k, v in (("three", 3.0), ("six", 6.0), ("zero", 0.0)))

    def hardswish(x):  # paddle2onnx below opset 14: x * clip(x + 3, 0, 6) / 6
        shifted = w.node("Add", [x, consts["three"]], base="p2o.Add")
        clipped = w.node("Clip", [shifted, consts["zero"], consts["six"]], base="p2o.Clip")
        return w.node("Div", [w.node("Mul", [x, clipped], base="p2o.Mul"), consts["six"]], base="p2o.Div")

    def conv_bn(x, cout, k, stride=1, group=1):
        cin = w.channels[x]
        conv = w.node("Conv", [x, w.init(w.name("conv2d.w"), w.weight(cout, cin // group, k))], cout,
                      base="p2o.Conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4,
                      group=group, dilations=[1, 1])
        params = [w.init(w.name("batch_norm.w"), (1 + 0.1 * w.rng.randn(cout)).astype(np.float32)),
                  w.init(w.name("batch_norm.b"), (0.1 * w.rng.randn(cout)).astype(np.float32)),
                  w.init(w.name("batch_norm.mean"), (0.1 * w.rng.randn(cout)).astype(np.float32)),
                  w.init(w.name("batch_norm.var"), (1 + 0.1 * np.abs(w.rng.randn(cout))).astype(np.float32))]
        return w.node("BatchNormalization", [conv] + params, base="p2o.BatchNormalization", epsilon=1e-5)

    def squeeze_excite(x):
        c = w.channels[x]
        s = w.node("GlobalAveragePool", [x], base="p2o.GlobalAveragePool")
        s = w.node("Conv", [s, w.init(w.name("se.conv1.w"), w.weight(c // 4, c, 1)),
                            w.init(w.name("se.conv1.b"), np.zeros(c // 4, np.float32))], c // 4,
                   base="p2o.Conv", kernel_shape=[1, 1])
        s = w.node("Conv", [w.node("Relu", [s], base="p2o.Relu"), w.init(w.name("se.conv2.w"), w.weight(c, c // 4, 1)),
                            w.init(w.name("se.conv2.b"), np.zeros(c, np.float32))], c,
                   base="p2o.Conv", kernel_shape=[1, 1])
        s = w.node("HardSigmoid", [s], base="p2o.HardSigmoid", alpha=0.2, beta=0.5)
        return w.node("Mul", [x, s], base="p2o.Mul")

    w.channels["x"] = 3
    x = hardswish(conv_bn("x", 16, 3, 2))
    y = squeeze_excite(w.node("Relu", [conv_bn(x, 16, 3, 1, group=16)], base="p2o.Relu"))
    x = w.node("Add", [x, conv_bn(y, 16, 1)], base="p2o.Add")
    x = hardswish(conv_bn(x, 48, 1))
    x = hardswish(conv_bn(x, 48, 3, 2, group=48))
    x = hardswish(conv_bn(squeeze_excite(x), 32, 1))
    x = w.node("Flatten", [w.node("GlobalAveragePool", [x], base="p2o.GlobalAveragePool")], base="p2o.Flatten",
               axis=1)
    x = w.node("MatMul", [x, w.init("linear_0.w_0", (w.rng.randn(32, CLASSES) * 0.3).astype(np.float32))],
               base="p2o.MatMul")
    x = w.node("Add", [x, w.init("linear_0.b_0", np.zeros(CLASSES, np.float32))], base="p2o.Add")
    prob = w.node("Softmax", [x], base="p2o.Softmax", axis=1)
    graph = helper.make_graph(w.nodes, "paddle", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [-1, 3, -1, -1])],
                              [helper.make_tensor_value_info(prob, TensorProto.FLOAT, [-1, CLASSES])], w.inits)
    model = helper.make_model(graph, producer_name="PaddlePaddle", opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    return model


# ------------------------------------------------------------------ linear probe

_THROUGH = ("Relu", "GlobalAveragePool", "Flatten", "Reshape", "Add", "Softmax")


def _head(model):
    """(weight node, Relu between it and the output?) of the classifier layer."""
    producers = dict((o, n) for n in model.graph.node for o in n.output)
    node, relu = producers[model.graph.output[0].name], False
    while node.op_type in _THROUGH:
        relu = relu or node.op_type == "Relu"
        data = [i for i in node.input if i in producers]
        node = producers[data[0]]
    assert node.op_type in ("Gemm", "MatMul", "Conv"), node.op_type
    return node, relu


def _set_tensor(model, name, array):
    for init in model.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(array.astype(np.float32), name))
            return
    for node in model.graph.node:
        if node.output and node.output[0] == name and node.op_type == "Constant":
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(array.astype(np.float32), name))
            return
    raise KeyError(name)


def _features(model, name, images):
    import onnxruntime as ort
    probe = onnx.ModelProto.FromString(model.SerializeToString())
    probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    fixed = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1
    step = 1 if fixed else 64
    rows = [session.run([name], {session.get_inputs()[0].name: images[i:i + step]})[0]
            for i in range(0, len(images), step)]
    feats = np.concatenate(rows)
    return feats.reshape(feats.shape[0], feats.shape[1], -1).mean(axis=2) if feats.ndim == 4 else feats


def fit_head(model, images, labels, nhwc=False):
    """``model`` with its classifier layer fitted by ridge regression on ``images`` (NCHW) and ``labels``."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    node, relu = _head(model)
    feats = _features(model, node.input[0], images.transpose(0, 2, 3, 1) if nhwc else images)
    mean = feats.mean(0)
    x = feats - mean  # not standardized: the ridge prefers the directions the features really vary in
    y = np.eye(CLASSES)[labels] * 8.0 - 4.0
    gram = x.T.dot(x)
    weight = np.linalg.solve(gram + RIDGE * np.trace(gram) / len(gram) * np.eye(len(gram)), x.T.dot(y))
    bias = y.mean(0) - mean.dot(weight) + (30.0 if relu else 0.0)  # a Relu after the head stays open
    if node.op_type == "Gemm":
        _set_tensor(model, node.input[1], weight.T)
    elif node.op_type == "Conv":
        _set_tensor(model, node.input[1], weight.T.reshape(CLASSES, -1, 1, 1))
    else:
        _set_tensor(model, node.input[1], weight)
    if node.op_type == "MatMul":  # the bias is the next Add's initializer
        add = [n for n in model.graph.node if node.output[0] in n.input][0]
        bias_name = [i for i in add.input if i != node.output[0]][0]
    else:
        bias_name = node.input[2] if len(node.input) > 2 else ""
        if not bias_name or not any(i.name == bias_name for i in model.graph.initializer):
            bias_name = node.name + "_fitted_b"  # replaces a ConstantOfShape fill
            model.graph.initializer.append(numpy_helper.from_array(np.zeros(CLASSES, np.float32), bias_name))
            if len(node.input) > 2:
                node.input[2] = bias_name
            else:
                node.input.append(bias_name)
            if model.ir_version < 4:
                model.graph.input.append(helper.make_tensor_value_info(bias_name, TensorProto.FLOAT, [CLASSES]))
    _set_tensor(model, bias_name, bias)
    return model


def save(model, path):
    onnx.save(model, path)
    return path
