"""Every input layout real exporters write: NCHW or NHWC, RGB or BGR, float or uint8 input tensors, fixed or
dynamic H and W.

The check that matters: trtkit's artifact, fed the user's image files through the recorded input contract,
gives what the *original* graph gives when fed the way that model's own users feed it (raw uint8 NHWC
pixels, in its channel order). The graphs are written here in tf2onnx's style (uint8 NHWC input, Cast,
scaling, Transpose to NCHW), with fixed weights; no TensorFlow is needed.
"""

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("PIL")

from conftest import partial_files, run_cli  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SIZE = 32
CLASSES = 4


def keras_style_graph(path, dtype="uint8", height=SIZE, width=SIZE, seed=0):
    """image [N, H, W, 3] (uint8 or float 0-255) -> Cast -> (x - 127.5) / 127.5 -> Transpose to NCHW -> Conv ->
    Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax."""
    rng = np.random.RandomState(seed)
    elem = TensorProto.UINT8 if dtype == "uint8" else TensorProto.FLOAT
    image = helper.make_tensor_value_info("image", elem, ["N", height, width, 3])
    probs = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", CLASSES])
    inits = [numpy_helper.from_array(np.array(127.5, np.float32), "half"),
             numpy_helper.from_array(rng.randn(8, 3, 3, 3).astype(np.float32) * 0.5, "w"),
             numpy_helper.from_array(rng.randn(8).astype(np.float32) * 0.1, "b"),
             numpy_helper.from_array(rng.randn(CLASSES, 8).astype(np.float32), "fc_w"),
             numpy_helper.from_array(rng.randn(CLASSES).astype(np.float32) * 0.1, "fc_b")]
    nodes = []
    x = "image"
    if dtype == "uint8":
        nodes.append(helper.make_node("Cast", [x], ["x_float"], to=TensorProto.FLOAT))
        x = "x_float"
    nodes += [helper.make_node("Sub", [x, "half"], ["centred"]),
              helper.make_node("Div", ["centred", "half"], ["scaled"]),
              helper.make_node("Transpose", ["scaled"], ["nchw"], perm=[0, 3, 1, 2]),
              helper.make_node("Conv", ["nchw", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["conv"], ["relu"]),
              helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
              helper.make_node("Flatten", ["pool"], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
              helper.make_node("Softmax", ["logits"], ["probs"], axis=1)]
    graph = helper.make_graph(nodes, "keras_style", [image], [probs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")
    model.ir_version = 8
    onnx.save(model, path)
    return path


def image_files(folder, count=12, seed=0):
    """Photos-like RGB images of several sizes and aspect ratios (smooth gradients plus noise)."""
    from PIL import Image
    rng = np.random.RandomState(seed)
    os.makedirs(folder)
    paths = []
    for i in range(count):
        h, w = rng.randint(24, 90), rng.randint(24, 90)
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255.0 / w, yy * 255.0 / h, np.full((h, w), rng.uniform(0, 255))], -1)
        pixels = np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)
        path = os.path.join(folder, "img{:02d}.png".format(i))
        Image.fromarray(pixels).save(path)
        paths.append(path)
    return paths


def original_outputs(path, pixels_nhwc):
    """The original graph run as its users run it: raw pixels in the graph's own input type."""
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    entry = session.get_inputs()[0]
    dtype = np.uint8 if entry.type == "tensor(uint8)" else np.float32
    return session.run(None, {entry.name: pixels_nhwc.astype(dtype)})[0]


def contract_pixels(paths, contract):
    """The 0-255 pixels trtkit's contract makes of ``paths``, as NHWC (the contract's resize, channel order)."""
    from trtkit.data.preprocess import preprocess
    from PIL import Image
    return np.stack([preprocess(Image.open(p).convert("RGB"), contract).transpose(1, 2, 0) for p in paths])


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return image_files(str(tmp_path_factory.mktemp("layout_images") / "imgs"))


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_keras_style_nhwc_graph_keeps_the_original_outputs(dtype, images, tmp_path):
    import trtkit
    from trtkit.contract import InputContract
    model = keras_style_graph(str(tmp_path / "keras.onnx"), dtype=dtype)
    result = trtkit.build(onnx=model, precision="fp32,fp16", backend="onnxruntime", out=str(tmp_path / "out"),
                          verify_images=64, bench_seconds=0, **({} if dtype == "uint8" else  # it normalizes itself
                                                                {"pixel_scale": 255, "mean": 0, "std": 1}))
    recorded = result.manifest["model"]["input"]
    assert recorded["layout"] == "nhwc" and recorded["input_dtype"] == dtype
    if dtype == "uint8":  # the graph normalizes itself: raw pixels
        assert recorded["pixel_scale"] == 255 and recorded["mean"] == [0.0] * 3 and recorded["std"] == [1.0] * 3
    assert any("NHWC" in n for n in result.manifest["model"]["notes"])
    contract = InputContract.from_dict(recorded)
    expected = original_outputs(model, contract_pixels(images, contract))
    got = trtkit.load(result.dir, precision="fp32").logits(images)
    assert got.shape == (len(images), CLASSES)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    fp16 = trtkit.load(result.dir, precision="fp16").logits(images)
    assert np.array_equal(fp16.argmax(1), expected.argmax(1)) and np.abs(fp16 - expected).max() < 1e-2


def test_bgr_model_gets_bgr_pixels(images, tmp_path):
    import trtkit
    from trtkit.contract import InputContract
    model = keras_style_graph(str(tmp_path / "bgr.onnx"))
    result = trtkit.build(onnx=model, precision="fp32", backend="onnxruntime", out=str(tmp_path / "out"),
                          verify_images=32, bench_seconds=0, channel_order="bgr")
    recorded = InputContract.from_dict(result.manifest["model"]["input"])
    assert recorded.channel_order == "bgr"
    rgb = contract_pixels(images, recorded.with_overrides({"channel_order": "rgb"}))
    expected = original_outputs(model, rgb[..., ::-1])  # the model's users feed it BGR (OpenCV's imread)
    np.testing.assert_allclose(trtkit.load(result.dir).logits(images), expected, atol=1e-5)
    assert not np.allclose(original_outputs(model, rgb), expected, atol=1e-3), "the test cannot tell RGB from BGR"


def test_dynamic_height_and_width_nhwc_takes_the_contract_size(images, tmp_path):
    import trtkit
    from trtkit.contract import InputContract
    model = keras_style_graph(str(tmp_path / "dyn.onnx"), height="H", width="W")
    result = trtkit.build(onnx=model, precision="fp32,int8", backend="onnxruntime", out=str(tmp_path / "out"),
                          verify_images=64, bench_seconds=0, input_size=(24, 40), resize="stretch",
                          calib_images=32)
    recorded = InputContract.from_dict(result.manifest["model"]["input"])
    assert recorded.layout == "nhwc" and recorded.size == (24, 40)
    expected = original_outputs(model, contract_pixels(images, recorded))
    np.testing.assert_allclose(trtkit.load(result.dir, precision="fp32").logits(images), expected, atol=1e-5)
    assert result.artifact("int8")["verify"]["images"] > 0


def _cli_refuses(args, out, *phrases):
    proc = run_cli(["build", "--backend", "onnxruntime", "--precision", "fp32", "--bench-seconds", "0",
                    "--verify-images", "16", "--out", out] + args)
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for phrase in phrases:
        assert phrase in lines[-1], lines[-1]
    assert not os.path.exists(os.path.join(out, "manifest.json")) and not partial_files(os.path.dirname(out))


def test_layout_flag_contradicting_the_graph_is_one_line(tmp_path):
    nhwc = keras_style_graph(str(tmp_path / "k.onnx"))
    _cli_refuses(["--onnx", nhwc, "--layout", "nchw"], str(tmp_path / "a"), "--layout nchw contradicts",
                 "'image' [N, 32, 32, 3]", "channels in the last axis")


def test_uint8_model_refuses_normalization_flags_and_float_data(tmp_path):
    model = keras_style_graph(str(tmp_path / "u.onnx"))
    _cli_refuses(["--onnx", model, "--mean", "0.5", "--std", "0.5"], str(tmp_path / "a"), "--mean 0.5",
                 "does not match", "fixed mean 0,0,0")
    normalized = np.random.RandomState(0).uniform(-1, 1, (40, 3, SIZE, SIZE)).astype(np.float32)
    data = str(tmp_path / "normalized.npz")
    np.savez(data, x=normalized, y=np.arange(40) % CLASSES)
    _cli_refuses(["--onnx", model, "--data", data], str(tmp_path / "b"), "float values in [-1",
                 "the model takes uint8 pixels 0-255")


def test_a_pytorch_model_is_nchw(sample, tmp_path):
    _cli_refuses(["--checkpoint", sample[1], "--layout", "nhwc"], str(tmp_path / "a"),
                 "--layout nhwc does not match", "fixed layout nchw")


def test_old_contract_records_read_as_nchw_float():
    from trtkit.contract import InputContract
    old = {"size": 64, "mean": [0.5], "std": [0.5], "channels": 1}
    contract = InputContract.from_dict(old)
    assert contract.layout == "nchw" and contract.input_dtype == "float32"
    assert json.loads(json.dumps(contract.to_dict()))["layout"] == "nchw"


def test_preprocessed_floats_in_the_models_own_nhwc_are_taken_as_given(images, tmp_path):
    """A Keras model's user holds its inputs as the model takes them, [N, H, W, C] floats: trtkit's NCHW rewrite
    of the graph must not leak into that data contract (predict, the app and --data .npy take both layouts)."""
    import trtkit
    from trtkit.contract import InputContract
    model = keras_style_graph(str(tmp_path / "keras.onnx"), dtype="float32")
    out = str(tmp_path / "out")
    result = trtkit.build(onnx=model, precision="fp32", backend="onnxruntime", out=out, verify_images=16,
                          bench_seconds=0, pixel_scale=255, mean=0, std=1)
    contract = InputContract.from_dict(result.manifest["model"]["input"])
    nhwc = contract_pixels(images, contract).astype(np.float32)  # as its users feed the original graph
    expected = original_outputs(model, nhwc)
    with trtkit.load(result.dir, precision="fp32") as loaded:
        np.testing.assert_allclose(loaded.logits(nhwc), expected, atol=1e-5)  # a batch in its own layout
        np.testing.assert_allclose(loaded.logits(list(nhwc[:2])), expected[:2], atol=1e-5)  # single images
        np.testing.assert_allclose(loaded.logits(nhwc.transpose(0, 3, 1, 2)), expected, atol=1e-5)  # trtkit's NCHW
        with pytest.raises(Exception) as refused:
            loaded.logits(nhwc[:, :, :SIZE - 1])
        assert "or {}x{}x3 (H x W x C) as the model's own input".format(SIZE, SIZE) in str(refused.value)
    data = str(tmp_path / "own.npy")
    np.save(data, np.concatenate([nhwc] * 2))
    again = trtkit.build(onnx=model, precision="fp32", backend="onnxruntime", out=str(tmp_path / "again"),
                         data=data, verify_images="all", bench_seconds=0, pixel_scale=255, mean=0, std=1)
    assert again.artifact("fp32")["status"] == "ok"
    assert again.artifact("fp32")["verify"]["images"] == 2 * len(images)
