"""INT8 diagnosis (``precision.diagnose``, ``trtkit calibrate --report``): which quantized tensor hurts, and why.

A tiny synthetic classifier (three convolutions and a classifier layer, random
weights, random preprocessed images) keeps it fast: its calibrated ranges are
well placed, and one range is then made 100 times too small on purpose; the
diagnosis must put that tensor first, with a low SQNR, most of its values
clipped and agreement lost, while the well-ranged tensors stay above 30 dB.
"""

import json
import os

import numpy as np
import pytest

from conftest import run_cli
from trtkit.errors import InputError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

SIZE = 16
CLASSES = 10


def _tiny_classifier(outlier_channel=True):
    """Conv(3->8) Relu Conv(8->8) Relu Conv1x1(8->8) Relu GlobalAveragePool Flatten Gemm(8->10), opset 13.
    The second conv's channel 0 has weights 1000x the others' (``outlier_channel``): a weight spread to see."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(0)

    def conv_weight(out, inp, k):
        return (rng.standard_normal((out, inp, k, k)) * np.sqrt(2.0 / (inp * k * k))).astype(np.float32)

    w2 = conv_weight(8, 8, 3)
    if outlier_channel:
        w2[0] *= 1000.0
    inits = [numpy_helper.from_array(conv_weight(8, 3, 3), "w1"), numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.zeros(8, np.float32), "b2"),
             numpy_helper.from_array(conv_weight(8, 8, 1), "w3"), numpy_helper.from_array(np.zeros(8, np.float32), "b3"),
             numpy_helper.from_array(rng.standard_normal((CLASSES, 8)).astype(np.float32), "fc_w"),
             numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc_b")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3"),
             helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
             helper.make_node("GlobalAveragePool", ["r3"], ["pooled"], name="pool"),
             helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            ["N", 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    # the classifier's bias centres the pooled features (on typical images): otherwise one class wins every image
    # (the features after Relu are all positive) and no range, however wrong, could change a decision
    from trtkit.search.tune import logits_of
    features = onnx.ModelProto.FromString(model.SerializeToString())
    features.graph.output[0].CopyFrom(helper.make_tensor_value_info("flat", TensorProto.FLOAT, ["N", 8]))
    mean = logits_of(features, _images(64, seed=9)).mean(axis=0)
    weights = numpy_helper.to_array(model.graph.initializer[6])
    model.graph.initializer[7].CopyFrom(numpy_helper.from_array((-weights.dot(mean)).astype(np.float32), "fc_b"))
    return model


def _images(count, seed=1):
    return np.random.RandomState(seed).standard_normal((count, 3, SIZE, SIZE)).astype(np.float32)


@pytest.fixture(scope="module")
def tiny():
    """(model, minmax ranges from 64 images, tune set of 48 other images with FP32's logits)."""
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    from trtkit.search.tune import TuneSet, logits_of
    model = _tiny_classifier(outlier_channel=False)
    histograms = collect_stats(model, _images(64, seed=0), batch_size=32)
    ranges = dict((n, {"amax": float(a), "min": float(histograms[n].minimum), "max": float(histograms[n].maximum),
                       "rule": rule}) for n, (a, rule) in compute_ranges(histograms, "minmax").items())
    images = _images(48)
    return model, ranges, lambda: TuneSet(images, None, logits_of(model, images), "tiny-tune")


def test_a_range_100x_too_small_comes_out_first(tiny):
    from trtkit.precision.diagnose import diagnose
    model, ranges, tune = tiny
    bad = dict(ranges, r1=dict(ranges["r1"], amax=ranges["r1"]["amax"] / 100.0))
    found = diagnose(model, bad, tune(), scored=3)
    first = found["rows"][0]
    assert first["tensor"] == "r1" and first["kind"] == "activation"
    assert first["sqnr_db"] < 10.0 and first["clipped"] > 0.3, first
    assert first["drop"] > 10.0 and first["made_by"] == "Relu" and first["read_by"] == ["Conv"]
    assert found["drop"]["activations_only"] >= first["drop"] - 1e-9 and found["scored"] == 6  # 3 of each kind
    assert found["activations"] == 5 and found["weights"] == 4  # x, r1, r2, r3 (pool) and flat feed the layers
    scored = [r for r in found["rows"] if r["drop"] is not None]
    assert sorted(r["kind"] for r in scored) == ["activation"] * 3 + ["weight"] * 3
    assert all(r["drop"] < first["drop"] for r in scored[1:]) and found["drop"]["weights_only"] < first["drop"]


def test_well_ranged_tensors_are_over_30_db_and_the_outlier_channel_shows(tiny):
    from trtkit.precision.diagnose import diagnose, format_table
    model, ranges, tune = tiny
    found = diagnose(model, ranges, tune(), scored=0)
    activations = [r for r in found["rows"] if r["kind"] == "activation"]
    assert activations and all(r["sqnr_db"] > 30.0 and r["clipped"] < 1e-3 for r in activations), activations
    assert all(r["rule"] == "minmax" for r in activations) and found["scored"] == 0
    assert all(r["spread"] < 50.0 and r["sqnr_db"] > 30.0 for r in found["rows"] if r["kind"] == "weight")
    from trtkit.precision.diagnose import weight_errors
    from trtkit.precision.qdq import quantization_plan
    _, _, weights = quantization_plan(_tiny_classifier(outlier_channel=True), "tensorrt")
    spread = dict((r["layer"], r) for r in weight_errors(weights))
    assert spread["conv2"]["spread"] > 500.0 and spread["conv1"]["spread"] < 50.0
    assert spread["conv2"]["sqnr_db"] > 30.0  # per-channel scales absorb the outlier channel
    text = format_table(found, rows=3)
    assert "SQNR" in text and "clipped" in text and "... {} more".format(len(found["rows"]) - 3) in text


def test_fake_quantize_matches_the_qdq_graph(tiny):
    """The SQNR is computed without a runtime: its quantization must be exactly what ONNX Runtime runs."""
    from trtkit.precision.diagnose import fake_quantize
    from trtkit.precision.qdq import write_qdq_of
    from trtkit.precision.stats import _instrumented_session
    model, ranges, _ = tiny
    graph = write_qdq_of(model, ranges, "tensorrt", ["r1"])
    session = _instrumented_session(graph, ["r1", "r1_dequantized"])
    r1, dequantized = session.run(["r1", "r1_dequantized"], {"x": _images(2, seed=5)})
    expected, _ = fake_quantize(r1, ranges["r1"])
    assert np.array_equal(expected, dequantized)
    cpu_expected, _ = fake_quantize(r1, ranges["r1"], "cpu")
    cpu = _instrumented_session(write_qdq_of(model, ranges, "cpu", ["r1"]), ["r1_dequantized"])
    assert np.allclose(cpu.run(["r1_dequantized"], {"x": _images(2, seed=5)})[0], cpu_expected, atol=1e-6)


def test_a_model_with_nothing_to_quantize_is_one_input_error():
    from onnx import TensorProto, helper
    from trtkit.precision.diagnose import DiagnosisOptions, diagnose
    from trtkit.search.tune import TuneSet
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "flat",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    images = np.ones((2, 4), np.float32)
    with pytest.raises(InputError, match="nothing to diagnose"):
        diagnose(model, {"x": {"amax": 1.0, "min": 0.0, "max": 1.0}}, TuneSet(images, None, images, "t"))
    with pytest.raises(InputError, match="--report-layers"):
        DiagnosisOptions.from_keywords(report_layers=-1)


def test_calibrate_report_cli(tmp_path):
    model_path = str(tmp_path / "tiny.onnx")
    onnx.save(_tiny_classifier(outlier_channel=False), model_path)
    data = str(tmp_path / "data.npz")
    np.savez(data, images=_images(160, seed=3), labels=np.arange(160) % CLASSES)
    out = str(tmp_path / "out")
    done = run_cli(["calibrate", "--onnx", model_path, "--calib-data", data, "--calib-images", "32", "--report",
                    "--report-layers", "2", "--report-images", "24", "--out", out])
    assert done.returncode == 0, done.stderr
    assert "INT8 diagnosis (tensorrt encoding)" in done.stdout and "SQNR" in done.stdout, done.stdout
    table = done.stdout[done.stdout.index("tensor (made by -> read by)"):].splitlines()[1:]
    assert len(table) == 9 and "(Relu -> Conv)" in done.stdout
    found = json.load(open(os.path.join(out, "tiny.diagnosis.json")))
    assert found["scored"] == 4 and found["images"] == {"sqnr": 16, "agreement": 24}
    assert found["calibration_report"] == "tiny.calibration.json" and len(found["rows"]) == 9  # 5 activations, 4 weights
    assert all(r["sqnr_db"] > 20.0 for r in found["rows"])
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]
    shown = run_cli(["calibrate", "--help"])
    assert shown.returncode == 0 and "--report-layers" in shown.stdout and "SQNR" in shown.stdout


def test_a_build_with_report_diagnoses_its_int8_variant_and_records_it(tmp_path, capsys):
    """``trtkit build --report``: the INT8 variant's calibration is diagnosed after verification; the file lies
    beside the artifacts, the variant's record names it with the summary and its worst tensors, the options are
    recorded, and the table is printed. A build with no INT8 variant says --report had nothing to do."""
    import trtkit
    from trtkit.pipeline.diagnosis import hint
    model_path = str(tmp_path / "tiny.onnx")
    onnx.save(_tiny_classifier(outlier_channel=False), model_path)
    data = str(tmp_path / "data.npz")
    np.savez(data, images=_images(160, seed=3), labels=np.arange(160) % CLASSES)
    out = str(tmp_path / "out")
    result = trtkit.build(onnx=model_path, data=data, precision="fp32,int8", backend="onnxruntime", out=out,
                          bench_seconds=0, calib_images=32, report=True, report_layers=1, report_images=24)
    manifest = result.manifest
    int8 = result.artifact("int8")
    record = int8["diagnosis"]
    assert record["file"] == "tiny.int8-{}.diagnosis.json".format(int8["calibration"]["method"])
    found = json.load(open(os.path.join(out, record["file"])))
    assert found["scored"] == 2 and found["images"] == {"sqnr": 16, "agreement": 24} and len(found["rows"]) == 9
    assert record["drop"] == found["drop"] and set(record["drop"]) == {"int8", "activations_only", "weights_only",
                                                                       "int8_rows_placement"}  # cpu encoding
    assert [w["tensor"] for w in record["worst"]] == [r["tensor"] for r in found["rows"][:3]]
    assert "diagnosis" not in result.artifact("fp32")
    assert manifest["options"]["diagnosis"] == {"scored": 1, "images": 24}
    assert "INT8 diagnosis" in capsys.readouterr().out
    assert hint(manifest) is None  # its INT8 fails its gate (a random tiny model), and is diagnosed
    assert hint({"artifacts": [dict(int8, status="failing")]}) is None  # failed, and diagnosed
    failing = {"artifacts": [dict(int8, status="failing", diagnosis=None)]}
    assert "--report" in hint(failing) and int8["name"] in hint(failing)
    trtkit.build(onnx=model_path, data=data, precision="fp32", backend="onnxruntime", out=str(tmp_path / "o2"),
                 bench_seconds=0, report=True)
    assert "this build made none" in capsys.readouterr().err


def test_the_cpu_diagnosis_quantizes_weights_as_the_variant_does(tiny):
    """Found by a blind test (rapidocr's classifier on a CPU without VNNI): the build's variant has uint8 weights
    there, the diagnosis quantized with int8 ones, whose 16-bit pair sums saturate, and said INT8 lost 7.8 points
    where the variant lost none. The one-tensor graphs now take the variant's target, and a diagnosis of the
    ``cpu`` encoding says what its own placement loses whole, beside the built graph's figure."""
    from onnx import TensorProto
    from trtkit.precision.diagnose import diagnose, format_table
    from trtkit.precision.qdq import write_qdq_of
    model, ranges, tune = tiny
    for target, weight_type in (("avx2", TensorProto.UINT8), ("vnni", TensorProto.INT8)):
        graph = write_qdq_of(model, ranges, "cpu", layers=["conv2"], target=target)
        quantized = set(n.input[0] for n in graph.graph.node if n.op_type == "DequantizeLinear")
        types = [i.data_type for i in graph.graph.initializer if i.name in quantized and len(i.dims) == 4]
        assert types == [weight_type], (target, types)
    found = diagnose(model, ranges, tune(), "cpu", scored=1, target="avx2")
    assert found["target"] == "avx2" and found["drop"]["int8_rows_placement"] is not None
    assert "int8 as built (ONNX Runtime's quantizer) loses" in format_table(found)


def test_a_relu6_is_quantized_after_its_clip_as_the_variant_has_it():
    """Found by the corpus (MediaPipe's hand landmarks): trtkit's own ``cpu`` placement quantized a conv's
    output before its ReLU6 (a Clip), whose values reach 19.5 there, so the diagnosis' rows spent two thirds of
    the steps on values the clip drops and overstated what those tensors cost against the built graph (ONNX
    Runtime's quantizer folds the clip into the range). The tensor after the clip is quantized now, as after a
    Relu, and its error is that of a range within [0, 6]."""
    from onnx import numpy_helper
    from trtkit.precision.qdq import Graph, quantization_plan, write_qdq_of
    from trtkit.precision.qdq_place import cpu_edges
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    from trtkit.precision.diagnose import fake_quantize, sqnr_db
    from trtkit.precision.stats import _instrumented_session
    model = _tiny_classifier(outlier_channel=False)
    model.graph.initializer.extend([numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                                    numpy_helper.from_array(np.array(6.0, np.float32), "six")])
    for node in model.graph.node:
        if node.name == "relu1":  # ReLU6 as exporters write it, on a conv made to reach well past 6
            node.op_type, node.input[:] = "Clip", ["c1", "zero", "six"]
    w1 = [i for i in model.graph.initializer if i.name == "w1"][0]
    w1.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w1) * 8.0, "w1"))
    quantized = set(edge[0] for edge in cpu_edges(Graph(model)))
    assert "r1" in quantized and "c1" not in quantized, quantized
    _, activations, _ = quantization_plan(model, "cpu")
    assert ("r1", "r1") in [(a[0], a[1]) for a in activations]
    images = _images(64, seed=0)
    histograms = collect_stats(model, images, batch_size=32)
    ranges = dict((n, {"amax": float(a), "min": float(histograms[n].minimum), "max": float(histograms[n].maximum),
                       "rule": rule}) for n, (a, rule) in compute_ranges(histograms, "minmax").items())
    assert ranges["c1"]["max"] > 12.0 and ranges["r1"]["max"] <= 6.0  # the clip is active
    graph = write_qdq_of(model, ranges, "cpu", ["r1"])
    session = _instrumented_session(graph, ["c1", "r1", "r1_dequantized"])
    c1, r1, dequantized = session.run(["c1", "r1", "r1_dequantized"], {"x": _images(4, seed=5)})
    expected, _ = fake_quantize(r1, ranges["r1"], "cpu")
    assert np.allclose(dequantized, expected, atol=1e-6)
    before_clip = np.clip(fake_quantize(c1, ranges["c1"], "cpu")[0], 0.0, 6.0)  # the old placement
    after, before = [sqnr_db(float(np.sum(r1 ** 2)), float(np.sum((r1 - q) ** 2))) for q in (dequantized, before_clip)]
    assert after > before + 6.0, (after, before)  # a bit and more of resolution back
