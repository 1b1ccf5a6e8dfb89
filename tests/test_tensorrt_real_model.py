"""TensorRT-RTX builds a real third-party classifier wherever ONNX Runtime does: PaddleOCR's text-direction classifier.

``ch_ppocr_mobile_v2.0_cls_infer.onnx`` (inside the ``rapidocr-onnxruntime==1.3.24``
wheel; paddle2onnx, opset 11) takes ``x`` [-1, 3, ?, ?] and is used at 48x192.
paddle2onnx names dynamic H and W both ``?``, and TensorRT reads input dims of
one name as one size: given as it is, TensorRT refuses every non-square
profile, and the refusal must say so in TensorRT's words. Through ``trtkit
build`` (which names the dims apart) it builds in FP16 and INT8 (trtkit's Q/DQ
ONNX, ``tensorrt`` encoding) at a 48x192 profile. The engines are real; with no
GPU they are recorded as built, not run. The only skip is pip not reaching the
registry.
"""

import os

import pytest

from conftest import real_model
from trtkit.deps import available

pytestmark = pytest.mark.skipif(not (available("tensorrt_rtx") and available("onnx")),
                                reason="tensorrt-rtx-cu12 and onnx are needed")

WORDS = ["hello world", "trtkit 2026", "TensorRT", "text line", "ONNX model", "paddle ocr", "classifier",
         "48 x 192", "rotate me", "upside down", "Jetson Nano", "engine 8.2"]


@pytest.fixture(scope="module")
def paddle_cls():
    return real_model("rapidocr_textline_cls")


def text_lines(folder, per_class=12):
    """Rendered 192x48 text lines in two class folders, ``0`` (upright) and ``180`` (upside down)."""
    from PIL import Image, ImageDraw
    for label in ("0", "180"):
        os.makedirs(os.path.join(folder, label))
        for i in range(per_class):
            image = Image.new("RGB", (192, 48), (255, 255, 255))
            ImageDraw.Draw(image).text((4 + 3 * (i % 5), 14 + i % 7), WORDS[i % len(WORDS)], fill=(0, 0, 0))
            (image.rotate(180) if label == "180" else image).save(os.path.join(folder, label, "{}.png".format(i)))
    return folder


def test_the_raw_graph_is_refused_with_tensorrts_reason_and_what_to_do(paddle_cls, tmp_path):
    """Built as paddle2onnx wrote it (H and W both named '?'), the 48x192 profile contradicts the shared name."""
    from trtkit.backends import get_backend
    from trtkit.backends.base import BuildInputs
    from trtkit.contract import InputContract
    from trtkit.errors import InputError
    out = str(tmp_path / "raw.fp32.engine")
    with pytest.raises(InputError) as info:
        get_backend("tensorrt-rtx").build(paddle_cls, "fp32", out,
                                          BuildInputs(contract=InputContract(size=(48, 192)), default_batch=(1, 4, 8)))
    message = str(info.value)
    assert "\n" not in message and "could not build an engine from ch_ppocr_mobile_v2.0_cls_infer.onnx" in message
    assert "ERROR" in message and "Input dimensions with this name" in message, message
    assert "names them apart" in info.value.hint
    assert any("Input dimensions with this name" in m for m in info.value.tensorrt_log)
    assert not os.path.exists(out)


def test_tensorrt_rtx_builds_the_paddle_classifier_at_48x192_in_fp16_and_int8(paddle_cls, tmp_path):
    import onnx
    import trtkit
    data = text_lines(str(tmp_path / "lines"))
    out = str(tmp_path / "out")
    result = trtkit.build(onnx=paddle_cls, backend="tensorrt-rtx", precision="fp16,int8", input_size=(48, 192),
                          resize="pad", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), data=data, out=out,
                          bench_seconds=0, verify_images=4, calib_batch_size=4, batch="1:4:8")
    for precision in ("fp16", "int8"):
        artifact = result.artifact(precision)
        info = artifact["backend_info"]
        assert artifact["status"] in ("built", "ok"), artifact
        assert info["precision_built"] == precision and info["strongly_typed"] is True
        assert info["profile"]["x"] == [[1, 3, 48, 192], [4, 3, 48, 192], [8, 3, 48, 192]]
        engine = os.path.join(out, artifact["path"])
        assert os.path.getsize(engine) == artifact["bytes"] > 1 << 20
        graph = onnx.load(os.path.join(out, artifact["onnx"])).graph
        ops = set(node.op_type for node in graph.node)
        if precision == "int8":
            assert artifact["int8_encoding"] == "tensorrt" and info["int8_path"] == "qdq"
            assert {"QuantizeLinear", "DequantizeLinear"} <= ops
        else:
            assert "QuantizeLinear" not in ops
            weights = [t for t in graph.initializer if len(t.dims) == 4]
            assert weights and all(t.data_type == onnx.TensorProto.FLOAT16 for t in weights)
