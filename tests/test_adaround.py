"""Learned rounding of INT8 weights (precision.adaround, --int8-rounding adaround) on a small conv net.

The net has what the corpus' MobileNets have: a 3x3 conv, a depthwise conv, a pointwise conv and a classifier
layer; its images are smooth seeded fields (neighbouring pixels correlated, as in photographs: what makes one
weight's rounding error add up with its neighbours'). What is checked against the graphs themselves, run by ONNX
Runtime, not against AdaRound's own bookkeeping: each layer's output error on held-out images, the integers the
written Q/DQ graphs hold, and the build's outputs with the option left at ``nearest``.
"""

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

SIZE = 16
LAYERS = ("conv", "depthwise", "pointwise", "classifier")


def _net():
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(0)
    weights = {"w1": rng.randn(16, 3, 3, 3) * 0.4, "b1": rng.randn(16) * 0.1, "w2": rng.randn(16, 1, 3, 3) * 0.5,
               "w3": rng.randn(24, 16, 1, 1) * 0.3, "b3": rng.randn(24) * 0.1, "w4": rng.randn(24, 5) * 0.3,
               "b4": np.zeros(5)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="depthwise", pads=[1, 1, 1, 1], group=16),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="pointwise"),
             helper.make_node("GlobalAveragePool", ["c3"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], name="classifier")]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in sorted(weights.items())]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _images(seed, count):
    """Smooth fields: seeded noise box-blurred twice (a cumulative-sum blur, no SciPy)."""
    x = np.random.RandomState(seed).randn(count, 3, SIZE + 8, SIZE + 8)
    for axis in (2, 3):
        for _ in range(2):
            c = np.cumsum(x, axis=axis)
            x = (np.take(c, range(4, c.shape[axis]), axis=axis) - np.take(c, range(0, c.shape[axis] - 4), axis=axis)) / 4
    return x[:, :, :SIZE, :SIZE].astype(np.float32)


@pytest.fixture(scope="module")
def learned():
    from trtkit.precision.adaround import learn_rounding
    model = _net()
    return model, learn_rounding(model, _images(1, 32), iterations=300, progress=False)


def _with_weight(model, name, values):
    from onnx import numpy_helper
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    for init in copy.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(values.astype(np.float32), name))
    return copy


def _layer_output(model, layer, x):
    from trtkit.onnx.load import keep_outputs
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    output = [n.output[0] for n in copy.graph.node if n.name == layer][0]
    keep_outputs(copy, [output])
    return ort.InferenceSession(copy.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_learned_rounding_lowers_every_layers_output_error_on_held_out_images(learned):
    """Each layer's output on images it was not learned on, with only that layer's weights rounded (its input
    the FP32 one): closer to FP32 with the learned integers than with the nearest ones."""
    from trtkit.precision.qdq import quantize_weight
    model, rounding = learned
    assert sorted(rounding.chosen) == sorted(LAYERS) and rounding.record["layers"] == len(LAYERS)
    held = _images(2, 16)
    for layer, (weight_name, weight) in rounding.original.items():
        axis = 1 if layer == "classifier" else 0
        nearest, scales = quantize_weight(weight, axis)
        shape = [1] * weight.ndim
        shape[axis] = -1
        fp32 = _layer_output(model, layer, held)
        errors = [float(((fp32 - _layer_output(_with_weight(model, weight_name, q * scales.reshape(shape)),
                                                layer, held)) ** 2).mean()) for q in (nearest, rounding.chosen[layer])]
        print(layer, "output MSE nearest {:.3g}, learned {:.3g}".format(*errors))
        assert errors[1] < 0.9 * errors[0], layer
    assert all(row["check_error"] < 1.0 and row["kept"] for row in rounding.record["rows"])


def test_learned_integers_are_int8_and_one_level_from_nearest(learned):
    from trtkit.precision.qdq import quantize_weight
    _, rounding = learned
    moved = 0
    for layer, q in rounding.chosen.items():
        weight = rounding.original[layer][1]
        nearest = quantize_weight(weight, 1 if layer == "classifier" else 0)[0]
        assert q.dtype == np.int8 and q.shape == weight.shape
        assert np.abs(q.astype(int)).max() <= 127
        assert np.abs(q.astype(int) - nearest.astype(int)).max() <= 1
        moved += int((q != nearest).sum())
    assert moved == rounding.record["weights_changed"] > 0
    # a mixed variant's float layer gets its trained weights back, the others keep the learned ones
    from onnx import numpy_helper
    mixed = dict((i.name, numpy_helper.to_array(i)) for i in rounding.without(rounding.model, ["conv"]).graph.initializer)
    np.testing.assert_array_equal(mixed["w1"], rounding.original["conv"][1])
    assert not np.array_equal(mixed["w3"], rounding.original["pointwise"][1])


@pytest.mark.parametrize("encoding,target", [("tensorrt", None), ("cpu", "vnni"), ("cpu", "avx2")])
def test_written_qdq_graph_holds_the_learned_integers(learned, encoding, target):
    """Read back from the written graph: every layer's INT8 weights (int8, or uint8 minus its zero point 128
    for AVX2) are the learned integers, through trtkit's writer and ONNX Runtime's quantizer alike."""
    from trtkit.precision.adaround import realised
    from trtkit.precision.qdq import write_qdq
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    _, rounding = learned
    hists = collect_stats(rounding.model, _images(1, 32), batch_size=16)
    ranges = dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum})
                  for n, (a, _) in compute_ranges(hists, "minmax").items())
    written = write_qdq(rounding.model, ranges, encoding, target=target)
    assert realised(written, rounding) == (len(LAYERS), [])


def _build(folder, **options):
    import trtkit
    data = os.path.join(os.path.dirname(folder), "data.npz")
    if not os.path.exists(data):
        np.savez(data, images=_images(3, 48), labels=np.arange(48) % 5)
    path = os.path.join(os.path.dirname(folder), "tiny.onnx")
    if not os.path.exists(path):
        onnx.save(_net(), path)
    return trtkit.build(onnx=path, data=data, mean=[0, 0, 0], std=[1, 1, 1], precision="int8", verify_images=16,
                        calib_images=32, backend="onnxruntime", bench_seconds=0, out=folder, **options).manifest


def test_nearest_is_todays_build_and_adaround_is_recorded(tmp_path):
    """``nearest`` writes the same bytes as a build without the option; ``adaround`` is in the manifest, with
    every learned layer realised in the written graph."""
    plain = _build(str(tmp_path / "plain"))
    nearest = _build(str(tmp_path / "nearest"), int8_rounding="nearest")
    files = [os.path.join(str(tmp_path / k), m["artifacts"][0]["onnx"]) for k, m in (("plain", plain),
                                                                                        ("nearest", nearest))]
    assert open(files[0], "rb").read() == open(files[1], "rb").read()
    assert nearest["artifacts"][0]["rounding"] == {"rule": "nearest"}
    learned = _build(str(tmp_path / "learned"), int8_rounding="adaround")
    art = learned["artifacts"][0]
    record = art["rounding"]
    assert record["rule"] == "adaround" and record["layers"] >= 3 and "rows" not in record
    assert record["realised"] == record["layers"] and record["not_realised"] == []
    report = json.load(open(os.path.join(str(tmp_path / "learned"), art["calibration"]["report"])))
    assert len(report["rounding"]["rows"]) == record["candidates"]


def test_a_bad_value_is_refused_in_one_line():
    import argparse
    from trtkit.commands import build as build_command
    from trtkit.errors import InputError
    from trtkit.precision.config import CalibrationConfig
    assert CalibrationConfig().rounding == "nearest"
    parser = argparse.ArgumentParser()
    build_command.add_arguments(parser)
    for rule in ("adaround", "adaround-q"):
        chosen = CalibrationConfig.from_keywords(int8_rounding=rule)
        assert chosen.rounding == rule and chosen.to_dict()["rounding"] == rule
        assert CalibrationConfig.from_keywords(**chosen.to_keywords()).rounding == rule
        assert parser.parse_args(["--int8-rounding", rule]).int8_rounding == rule
    for bad in ("stochastic", "adaround_q2"):
        with pytest.raises(InputError) as refused:
            CalibrationConfig(rounding=bad)
        message = str(refused.value)
        assert message.count("\n") == 0 and "unknown --int8-rounding '{}'".format(bad) in message
        assert "adaround-q" in message
    # bias correction would measure INT8 against the rounded weights, not FP32's (review): refused until it can't
    with pytest.raises(InputError, match="cannot be combined yet"):
        CalibrationConfig(rounding="adaround", bias_correction="fast")
    assert CalibrationConfig(rounding="adaround", bias_correction="off").rounding == "adaround"


# ------------------------------------------------------------------ adaround-q: learned on the INT8 graph's inputs

def _ranges(model, images):
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    hists = collect_stats(model, images, batch_size=16)
    return dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum})
                for n, (a, _) in compute_ranges(hists, "minmax").items())


@pytest.fixture(scope="module")
def learned_q(learned):
    """The tiny net's minmax ranges (its activations really quantized, per tensor) and its rounding learned on
    the inputs the INT8 graph written with them gives each layer."""
    from trtkit.precision.adaround import learn_rounding
    from trtkit.precision.qdq import write_qdq_of
    model = _net()
    ranges = _ranges(model, _images(1, 32))
    write = lambda m: write_qdq_of(m, ranges, "tensorrt", tensors=set(ranges), layers=set(LAYERS))  # noqa: E731
    return ranges, learn_rounding(model, _images(1, 32), iterations=300, progress=False, quantized=write)


def test_quantized_input_rounding_lowers_each_layers_error_given_its_int8_inputs(learned, learned_q):
    """Each layer's output in the written INT8 graph (activations quantized with the ranges, every layer on its
    learned integers) against the FP32 graph's, measured by ONNX Runtime on the graphs themselves: on the
    images the roundings were learned on, closer with the rounding learned on the INT8 graph's inputs than with
    the one learned on FP32 inputs, layer by layer (what it minimises); on held-out images the classifier,
    whose input (a pooled, quantized tensor) carries the most activation error, at least 2x closer. (The convs'
    held-out errors are within 2 % of each other either way on this net: printed, not asserted.)"""
    from trtkit.precision.qdq import write_qdq
    model, fp32_inputs = learned
    ranges, q_inputs = learned_q
    assert q_inputs.record["rule"] == "adaround-q" and q_inputs.record["layers"] == len(LAYERS)
    graphs = [write_qdq(r.model, ranges, "tensorrt") for r in (fp32_inputs, q_inputs)]
    for images, held_out in ((_images(1, 32), False), (_images(2, 16), True)):
        for layer in LAYERS:
            fp32 = _layer_output(model, layer, images)
            errors = [float(((fp32 - _layer_output(g, layer, images)) ** 2).mean()) for g in graphs]
            print(layer, "held-out" if held_out else "learned-on", "INT8 graph's output MSE: FP32-input rounding "
                  "{:.4g}, INT8-input {:.4g}".format(*errors))
            if not held_out:
                assert errors[1] < errors[0], layer
            elif layer == "classifier":
                assert errors[1] < 0.5 * errors[0]
    assert all(row["kept"] for row in q_inputs.record["rows"])


@pytest.mark.parametrize("encoding,target", [("tensorrt", None), ("cpu", "avx2")])
def test_written_qdq_graph_holds_the_quantized_input_integers(learned_q, encoding, target):
    from trtkit.precision.adaround import realised
    from trtkit.precision.qdq import write_qdq
    ranges, rounding = learned_q
    assert realised(write_qdq(rounding.model, ranges, encoding, target=target), rounding) == (len(LAYERS), [])


def test_adaround_q_build_keeps_the_ranges_it_learned_with(tmp_path):
    """A build with ``adaround-q``: recorded as such, every layer realised, and the INT8 graph's ranges the ones
    of the calibration it learned on (the FP32 graph's, not re-measured on the rounded one)."""
    learned = _build(str(tmp_path / "q"), int8_rounding="adaround-q")
    art = learned["artifacts"][0]
    record = art["rounding"]
    assert record["rule"] == "adaround-q" and record["inputs"] == "int8 graph's" and record["layers"] >= 3
    assert record["realised"] == record["layers"] and record["not_realised"] == []
    report = json.load(open(os.path.join(str(tmp_path / "q"), art["calibration"]["report"])))
    assert report["model"]["onnx"] == "tiny.fp32.onnx" and report["rounding"]["rule"] == "adaround-q"
    assert os.path.exists(os.path.join(str(tmp_path / "q"), "tiny.adaround.onnx"))



def test_a_fixed_batch_model_keeps_a_held_out_check_and_an_oversized_layer_keeps_nearest():
    """Review: a model fixed at batch 16 with 32 images had 2 batches and no held-out one, so the check ran on
    the fitted rows; now its images are split one by one. A layer whose statistics alone would pass the budget
    (a VGG fc6's 25088 inputs: 9.4 GiB) keeps nearest rounding, said why."""
    from onnx import TensorProto, helper, numpy_helper
    from trtkit.precision import adaround_inputs
    from trtkit.precision.adaround import _layers
    from trtkit.precision.qdq_graph import Graph
    model = _net()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 16  # fixed batch
    specs, _ = _layers(Graph(model), None)
    found = adaround_inputs.collect(model, dict((n, specs[n]) for n in ("conv", "classifier")), _images(3, 32))
    for name in ("conv", "classifier"):
        fit, check = found[name].rows
        assert fit > 0 and check > 0 and found[name].check is not found[name].fit
    wide = 1 << 13  # K = 8192: 2 x 8192^2 x 8 bytes = 1 GiB of statistics for a 64 KB weight
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="wide")]
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, wide])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
                              [numpy_helper.from_array(np.ones((wide, 2), np.float32), "w")])
    specs, skipped = _layers(Graph(helper.make_model(graph)), None)
    assert not specs and skipped == ["wide: 8192 weights per output, statistics of 1024 MiB"]
