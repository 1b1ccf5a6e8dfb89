"""Graphs as TensorFlow/TFLite converters write them, where a blind test on real models (MediaPipe's selfie
segmenter and hand landmark model, fer's emotion classifier, through tf2onnx) found trtkit wrong:

* a channels-last map output ``[N, H, W, 1]`` or ``[N, H, W, C]`` (every TFLite/Keras segmenter) was read as a
  classifier of 256 columns and could not be built;
* a Sigmoid followed by a Reshape/Transpose (tf2onnx writes both) was taken for logits and thresholded at 0:
  masks agreed with the package's own on 88% of pixels, silently;
* a model with int8 weights and DequantizeLinear (fer's default TFLite model) gave an FP16 graph ONNX Runtime
  refused, which stopped the whole build (and ``--precision auto`` with a traceback); every FP16 graph failed
  ``onnx.checker`` (its input Casts after their readers);
* of several outputs (a landmark model: 63 coordinates, presence, handedness) the first was judged as class
  scores without a word.

The graphs are exported here from small PyTorch modules written in those converters' style (NHWC in and
out), with fixed seeded weights.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import trtkit  # noqa: E402
from conftest import run_cli  # noqa: E402

nn = torch.nn
SIZE = 32


class ChannelsLastSegmenter(nn.Module):
    """NHWC image in, NHWC map out, as tf2onnx writes a TFLite segmenter: ``classes`` 1 gives a sigmoid
    probability map [N, H, W, 1] (Sigmoid, then Transpose and Reshape), more a softmax over the last axis."""

    def __init__(self, classes=1):
        super(ChannelsLastSegmenter, self).__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, classes, 1))
        self.classes = classes
        with torch.no_grad():  # confident scores, as a trained model's: few pixels near a tie
            self.body[-1].weight.mul_(8.0)

    def forward(self, x):
        n, h, w, _ = x.shape
        scores = nn.functional.interpolate(self.body(x.permute(0, 3, 1, 2)), size=(h, w), mode="bilinear",
                                           align_corners=False)
        if self.classes == 1:
            return torch.sigmoid(scores).permute(0, 2, 3, 1).reshape(n, h, w, 1)
        return torch.softmax(scores.permute(0, 2, 3, 1), dim=-1)


def _export(module, path, outputs=("y",)):
    torch.onnx.export(module.eval(), torch.zeros(1, SIZE, SIZE, 3), str(path), input_names=["image"],
                      output_names=list(outputs), opset_version=13, dynamo=False)
    return str(path)


def _original(path, nchw):
    """The exported graph's outputs (batch 1, as exported), fed NHWC as its users feed it."""
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    nhwc = np.ascontiguousarray(np.transpose(nchw, (0, 2, 3, 1)))
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: nhwc[i:i + 1]})[0] for i in range(len(nhwc))])


@pytest.mark.parametrize("classes", [1, 3])
def test_a_channels_last_map_output_builds_by_its_decision_rule(classes, tmp_path):
    from trtkit.data import load_images
    from trtkit.onnx.load import OnnxSummary
    path = _export(ChannelsLastSegmenter(classes), tmp_path / "seg.onnx")
    result = trtkit.build(onnx=path, data="sample", precision="fp32,fp16,int8", backend="onnxruntime",
                          out=str(tmp_path / "b"), verify_images=24, calib_images=32, bench_seconds=0)
    model = result.manifest["model"]
    kind = "binary-probability" if classes == 1 else "probabilities"
    assert (model["task"], model["output_kind"]) == ("segmentation", kind), model
    assert model["num_classes"] == max(classes, 2)
    assert any("channels-last" in note for note in model["notes"]), model["notes"]
    artifacts = dict((a["precision"], a) for a in result.manifest["artifacts"])
    assert artifacts["fp16"]["status"] == "ok" and artifacts["fp16"]["verify"]["pixel_agreement"] >= 0.99
    assert 0.0 < artifacts["int8"]["verify"]["pixel_agreement"] <= 1.0
    # the FP32 artifact gives the original graph's values, channels first; its masks follow the kind's rule
    contract = trtkit.contract.InputContract.from_dict(model["input"])
    images = load_images("sample", contract, split="heldout", limit=4).images
    original = np.transpose(_original(path, images), (0, 3, 1, 2))
    fp32 = os.path.join(result.dir, artifacts["fp32"]["path"])
    session = ort.InferenceSession(fp32, providers=["CPUExecutionProvider"])
    ours = session.run(None, {session.get_inputs()[0].name: images})[0]
    assert ours.shape == original.shape and np.allclose(ours, original, atol=1e-5)
    with trtkit.load(result.dir, precision="fp32") as segmenter:
        masks = segmenter.masks(ours)
    expected = (original[:, 0] > 0.5).astype(np.int64) if classes == 1 else original.argmax(1)
    assert all(np.array_equal(m, e) for m, e in zip(masks, expected))
    if classes == 1:  # a probability map: thresholded at 0.5, never at 0 (every pixel of a sigmoid is > 0)
        assert 0 < expected.mean() < 1
    for artifact in ("fp16", "int8"):  # every graph trtkit writes is a valid, sorted ONNX
        onnx.checker.check_model(onnx.load(os.path.join(result.dir, artifacts[artifact]["path"])), full_check=True)
    assert OnnxSummary(onnx.load(fp32), "segmentation").output_shape[1] == classes


def test_a_channels_last_map_of_dynamic_size_is_transposed_too(tmp_path):
    """tf2onnx names a fully convolutional model's free dims (``unk__718``): MTCNN's PNet gave
    ``[unk, unk, unk, 2]`` and was judged with its height as the class axis."""
    from trtkit.onnx.layout import is_nhwc_map
    assert is_nhwc_map(["unk__717", "unk__718", "unk__719", 2]) and is_nhwc_map([None, None, None, 1])
    assert not is_nhwc_map(["n", 2, "h", "w"]) and not is_nhwc_map([1, 8, 8, 16]) and not is_nhwc_map([1, 10])
    path = str(tmp_path / "dyn.onnx")
    torch.onnx.export(ChannelsLastSegmenter(3).eval(), torch.zeros(1, SIZE, SIZE, 3), path, input_names=["image"],
                      output_names=["y"], opset_version=13, dynamo=False,
                      dynamic_axes={"image": {0: "n", 1: "h", 2: "w"}, "y": {0: "n", 1: "oh", 2: "ow"}})
    graph = onnx.load(path)
    dims = graph.graph.output[0].type.tensor_type.shape.dim
    dims[3].dim_value = 3  # tf2onnx keeps the channel count, torch's exporter names it: write it as tf2onnx does
    assert [d.dim_param for d in dims[:3]] == ["n", "oh", "ow"]
    onnx.save(graph, path)
    result = trtkit.build(onnx=path, data="sample", input_size=SIZE, precision="fp32", backend="onnxruntime",
                          out=str(tmp_path / "b"), verify_images=8, bench_seconds=0)
    model = result.manifest["model"]
    assert (model["task"], model["output_kind"], model["num_classes"]) == ("segmentation", "probabilities", 3)
    assert any("channels-last" in note for note in model["notes"]), model["notes"]


def _dequantized_weights_graph(path):
    """A classifier whose conv weights are int8 initializers read through DequantizeLinear (tf2onnx's graph of a
    TFLite model with quantized weights, as fer ships its default emotion model)."""
    rng = np.random.RandomState(0)
    from onnx import TensorProto, helper, numpy_helper
    weight = rng.randn(8, 3, 3, 3).astype(np.float32)
    scale = (np.abs(weight).max() / 127.0).astype(np.float32)
    inits = [numpy_helper.from_array(np.clip(np.round(weight / scale), -127, 127).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.array(scale, np.float32), "w_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
             numpy_helper.from_array(rng.randn(4, 8).astype(np.float32), "fc_w"),
             numpy_helper.from_array(np.zeros(4, np.float32), "fc_b")]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"]),
             helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
             helper.make_node("Flatten", ["pool"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1)]
    graph = helper.make_graph(nodes, "dq_weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  ["N", 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def test_fp16_of_a_model_with_int8_weights_runs_and_every_variant_is_built(tmp_path):
    from trtkit.precision.fp16 import convert_fp16
    path = _dequantized_weights_graph(tmp_path / "dq.onnx")
    kept = convert_fp16(path, str(tmp_path / "dq.fp16.onnx"))
    assert "DequantizeLinear" in kept
    onnx.checker.check_model(onnx.load(str(tmp_path / "dq.fp16.onnx")), full_check=True)
    result = trtkit.build(onnx=path, data="sample", precision="fp32,fp16,int8", backend="onnxruntime",
                          out=str(tmp_path / "b"), verify_images=24, calib_images=32, bench_seconds=0)
    status = dict((a["precision"], a["status"]) for a in result.manifest["artifacts"])
    assert sorted(status) == ["fp16", "fp32", "int8"] and status["fp16"] == "ok", status


def test_sort_nodes_puts_readers_after_producers_and_keeps_a_sorted_graph():
    from onnx import TensorProto, helper
    from trtkit.onnx.normalize import sort_nodes
    nodes = [helper.make_node("Relu", ["a"], ["b"], name="second"), helper.make_node("Neg", ["x"], ["a"], name="first"),
             helper.make_node("Abs", ["x"], ["c"], name="apart")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1]),
                               helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert sort_nodes(model) > 0
    assert [n.name for n in model.graph.node] == ["first", "apart", "second"]
    onnx.checker.check_model(model)
    assert sort_nodes(model) == 0


class ThreeHeads(nn.Module):
    """A landmark model's outputs: 12 coordinates, a presence score, a handedness sigmoid."""

    def __init__(self):
        super(ThreeHeads, self).__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten())
        self.points, self.presence, self.hand = nn.Linear(8, 12), nn.Linear(8, 1), nn.Linear(8, 1)

    def forward(self, x):
        features = self.body(x.permute(0, 3, 1, 2))
        return self.points(features), torch.sigmoid(self.presence(features)), torch.sigmoid(self.hand(features))


def test_of_several_outputs_one_is_picked_by_name_and_the_first_is_named_when_none_is(tmp_path):
    path = _export(ThreeHeads(), tmp_path / "heads.onnx", outputs=("points", "presence", "handedness"))
    out = str(tmp_path / "b")
    done = run_cli(["build", "--onnx", path, "--data", "sample", "--precision", "fp32", "--out", out,
                    "--bench-seconds", "0", "--output", "handedness", "--verify-images", "16"])
    assert done.returncode == 0, done.stderr
    import json
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["model"]["output_names"] == ["handedness"]
    assert manifest["model"]["output_kind"] == "binary-probability"
    graph = onnx.load(os.path.join(out, manifest["artifacts"][0]["path"]))
    assert [o.name for o in graph.graph.output] == ["handedness"]
    assert not any(n.output[0].startswith("points") for n in graph.graph.node if n.output)
    done = run_cli(["build", "--onnx", path, "--data", "sample", "--precision", "fp32",
                    "--out", str(tmp_path / "c"), "--bench-seconds", "0", "--verify-images", "16"])
    assert done.returncode == 0, done.stderr
    assert "3 outputs" in done.stderr and "'points'" in done.stderr and "--output NAME" in done.stderr
    done = run_cli(["build", "--onnx", path, "--data", "sample", "--precision", "fp32",
                    "--out", str(tmp_path / "d"), "--output", "landmarks"])
    err = done.stderr
    assert done.returncode == 2 and "no such output" in err and "'handedness'" in err and "Traceback" not in err
    assert not os.path.exists(str(tmp_path / "d"))


def test_bench_agreement_of_a_one_column_output_follows_its_sign():
    from trtkit.bench.agreement import agreement_of, compare_outputs
    reference = np.array([[2.0], [-1.0], [0.5], [-3.0]])
    assert agreement_of(reference, -reference) == 0.0  # an arg-max of one column would say 100%
    assert agreement_of(reference, reference * 2) == 1.0
    probabilities = np.array([[0.9], [0.2], [0.6], [0.4]])  # thresholded at 0.5, not at 0
    assert agreement_of(probabilities, probabilities[::-1], "binary-probability") == 0.0
    assert agreement_of(probabilities, probabilities * 0.5, "binary-probability") == 0.5
    maps = np.zeros((1, 1, 2, 2))
    maps[0, 0, 0, 0] = 1.0
    assert agreement_of(maps, -maps) == 0.75  # per pixel: only the positive one flips
    check = compare_outputs(reference, -reference, "fp16")
    assert not check["ok"] and check["top1_agreement"] == 0.0


def test_an_unexpected_error_is_one_line_unless_verbose(tmp_path):
    import subprocess
    import sys
    script = ("import sys\nfrom trtkit.cli import run_command\nclass A: verbose = '-v' in sys.argv\n"
              "def boom(args): raise RuntimeError('the runtime broke\\nsecond line')\n"
              "sys.exit(run_command(boom, A()))\n")
    for flag in ([], ["-v"]):
        result = subprocess.run([sys.executable, "-c", script] + flag, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, universal_newlines=True)
        assert result.returncode == 70
        assert "internal error, RuntimeError: the runtime broke" in result.stderr
        assert "second line" not in result.stderr.splitlines()[-1]
        assert ("Traceback" in result.stderr) == bool(flag)
