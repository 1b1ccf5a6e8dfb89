"""Layer-wise bias correction (precision.biascorr, --int8-bias-correction fast): each INT8 layer's output mean
restored against FP32 in its bias, in graph order, guarded against noise.

The synthetic graph shifts its INT8 output mean on purpose: in one conv every weight sits 0.45 of an INT8 step
past a grid point (one large weight per filter fixes the scale), so rounding moves all of them the same way and,
on positive inputs, the output of every channel drops; the next layers read the shift as signal. The
correction must take it back (output SQNR against FP32 on other images, 18 -> 44 dB when written), and on the
same graph without the skew (weights on the grid) it must not make anything worse.
"""

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _graph(skew):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(0)
    first = (rng.randn(16, 3, 3, 3) * 0.3).astype(np.float32)
    skewed = ((rng.randint(-20, 20, size=(16, 16, 3, 3)) + skew) / 127.0).astype(np.float32)
    skewed[:, 0, 0, 0] = 1.0  # the filter's amax: its INT8 step is 1/127
    third = (rng.randn(8, 16, 1, 1) * 0.3).astype(np.float32)
    fc = rng.randn(8, 5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="skewed", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["c3"], name="conv3"),
             helper.make_node("GlobalAveragePool", ["c3"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf"], ["y"], name="fc")]
    inits = [numpy_helper.from_array(a, n) for a, n in ((first, "w1"), (np.zeros(16, np.float32), "b1"),
                                                         (skewed, "w2"), (third, "w3"), (fc, "wf"))]
    graph = helper.make_graph(nodes, "skew", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _images(seed, count=64):
    return np.random.RandomState(seed).rand(count, 3, 16, 16).astype(np.float32)


def _ranges(model, x):
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    hists = collect_stats(model, x, batch_size=16)
    return dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum, "rule": rule})
                for n, (a, rule) in compute_ranges(hists, "minmax").items())


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0].astype(np.float64)


def _corrected(skew, encoding, images):
    from trtkit.precision.biascorr import correct_biases
    from trtkit.precision.qdq import write_qdq
    model = _graph(skew)
    ranges = _ranges(model, images)

    def write(graph):
        return write_qdq(graph, ranges, encoding, target="avx2")

    return model, write, correct_biases(model, ranges, images, write, encoding)


def _sqnr(reference, graph, x):
    out = _run(graph, x)
    return 10 * np.log10((reference ** 2).sum() / ((reference - out) ** 2).sum()), (out.argmax(1) == reference.argmax(1))


@pytest.mark.parametrize("encoding", ["cpu", "tensorrt"])
def test_correction_restores_a_shifted_int8_mean(encoding):
    model, write, correction = _corrected(0.45, encoding, _images(1))
    record = correction.record
    assert record["kept"] and record["rule"] == "fast" and record["images"] == 64
    rows = dict((r["layer"], r) for r in record["rows"])
    assert rows["skewed"]["channels"] == 16, rows["skewed"]  # every channel of the skewed conv is shifted
    assert rows["skewed"]["held_out_error"]["after"] < 0.01 * rows["skewed"]["held_out_error"]["before"]
    assert record["output_sqnr_db"]["after"] > record["output_sqnr_db"]["before"] + 10
    x = _images(2)  # images the correction never saw
    reference = _run(model, x)
    plain, _ = _sqnr(reference, write(model), x)
    fixed, _ = _sqnr(reference, write(correction.model), x)
    assert plain < 22 and fixed > plain + 15, (plain, fixed)
    # the skewed conv had no bias: it got one; a float layer of a mixed graph gets back its FP32 bias (or none)
    assert record["added_biases"] >= 1
    for layer in [r["layer"] for r in record["rows"] if r["channels"]]:
        undone = [n for n in correction.without([layer]).graph.node if n.name == layer][0]
        if layer == "conv1":
            assert np.array_equal(_init(correction.without([layer]), undone.input[2]), np.zeros(16, np.float32))
        else:
            assert len(undone.input) == 2, layer


def _init(model, name):
    from onnx import numpy_helper
    return [numpy_helper.to_array(i) for i in model.graph.initializer if i.name == name][0]


@pytest.mark.parametrize("encoding", ["cpu", "tensorrt"])
def test_correction_does_no_harm_on_a_model_int8_serves_well(encoding):
    """Weights on the INT8 grid: what is left is the activations' rounding, nearly unbiased. Whatever the guard
    lets through must not make the outputs agree less with FP32 on other images."""
    model, write, correction = _corrected(0.0, encoding, _images(1))
    x = _images(3)
    reference = _run(model, x)
    plain, plain_agree = _sqnr(reference, write(model), x)
    fixed, fixed_agree = _sqnr(reference, write(correction.model), x)
    assert plain > 30  # a model INT8 already serves well
    assert fixed >= plain - 0.1 and fixed_agree.sum() >= plain_agree.sum(), (plain, fixed)


def test_guard_corrects_no_channel_on_noise_or_too_few_images():
    from trtkit.precision.biascorr import MIN_IMAGES, Z_SCORE, _guarded_shift
    noise = np.random.RandomState(0).randn(64, 32) * 0.1  # per-image shifts around zero
    chosen, delta = _guarded_shift(noise, Z_SCORE)
    assert not chosen.any() and np.abs(delta).max() > 0
    shifted = noise + 0.2
    assert _guarded_shift(shifted, Z_SCORE)[0].all()
    assert not _guarded_shift(shifted[:MIN_IMAGES - 1], Z_SCORE)[0].any()
    # and through the whole correction: too few images, nothing corrected, the graph as the writer prepares it
    model, _, correction = _corrected(0.45, "tensorrt", _images(1, MIN_IMAGES - 1))
    assert not correction.record["kept"] and correction.record["channels"] == 0
    assert [len(n.input) for n in correction.model.graph.node if n.op_type == "Conv"] == [3, 2, 2]


def test_option_is_checked_and_recorded():
    from trtkit.errors import InputError
    from trtkit.precision.config import CalibrationConfig
    assert CalibrationConfig().bias_correction == "off"
    chosen = CalibrationConfig.from_keywords(int8_bias_correction="fast")
    assert chosen.bias_correction == "fast" and chosen.to_dict()["bias_correction"] == "fast"
    assert CalibrationConfig.from_keywords(**chosen.to_keywords()).bias_correction == "fast"
    with pytest.raises(InputError, match="unknown bias correction 'slow'"):
        CalibrationConfig(bias_correction="slow")
    import argparse
    from trtkit.commands import build as build_command
    parser = argparse.ArgumentParser()
    build_command.add_arguments(parser)
    assert parser.parse_args(["--int8-bias-correction", "fast"]).int8_bias_correction == "fast"


@pytest.mark.extended  # 27 s of a cold landing run; the landing tier keeps the correction's own tests above
def test_build_records_the_correction(sample_build, tmp_path):
    """The build's INT8 step corrects the graph it writes and the manifest's artifact says what was corrected;
    the calibration report has every layer's row."""
    from trtkit.pipeline import BuildOptions, ModelOptions, build
    from trtkit.precision.config import CalibrationConfig
    out, manifest = sample_build
    fp32 = os.path.join(out, [a for a in manifest["artifacts"] if a["precision"] == "fp32"][0]["onnx"])
    folder = str(tmp_path / "b")
    built = build(BuildOptions(source=ModelOptions(onnx=fp32, model="resnet18"), precisions="int8",
                               backend="onnxruntime", out=folder, throughput_seconds=0, verify_images=64,
                               calibration=CalibrationConfig(images=32, bias_correction="fast")))
    art = built["artifacts"][0]
    record = art["bias_correction"]
    assert record["rule"] == "fast" and record["images"] == 32 and "rows" not in record
    assert record["candidates"] >= 20 and record["layers"] >= 1 and record["kept"] in (True, False)
    assert art["verify"]["top1_agreement"] >= 0.98 and art["status"] == "ok"
    report = json.load(open(os.path.join(folder, art["calibration"]["report"])))
    assert len(report["bias_correction"]["rows"]) == record["candidates"]
