"""Classifiers as other exporters write them build FP32/FP16/INT8 on ONNX Runtime and FP16/INT8 TensorRT-RTX engines.

Styles: torch's dynamo exporter and its TorchScript exporter at opset 9 with
initializers as inputs (a MobileNetV3-style module trained briefly on the
sample digits: depthwise, hardswish, squeeze-excite), tf2onnx (NHWC input and a
Transpose) and paddle2onnx (opset 11, dynamic H x W, hardswish, squeeze-excite)
written in their style by tests/onnx_zoo.py (tf2onnx and paddle2onnx need
TensorFlow and PaddlePaddle, which are not installed here).
"""

import inspect
import os
import warnings

import onnx
import pytest

import onnx_zoo
from conftest import rtx_engine_bytes
from trtkit.pipeline import BuildOptions, ModelOptions, build
from trtkit.contract import InputContract
from trtkit.data import load_images
from trtkit.deps import available
from trtkit.precision.config import CalibrationConfig

STYLES = ("torch-dynamo", "torchscript-opset9", "tf-nhwc", "paddle-opset11")


@pytest.fixture(scope="module")
def digits():
    contract = InputContract(size=64)
    return load_images("sample", contract, split="train", limit=800)


@pytest.fixture(scope="module")
def mobilenet(digits):
    from zoo_models import mobilenet_v3_style, train_briefly
    return train_briefly(mobilenet_v3_style(10), digits.images, digits.labels, epochs=4)


def _torch_export(model, path, dynamo):
    import torch
    example = torch.zeros(2, 3, 64, 64)
    kwargs = dict(input_names=["input"], output_names=["output"])
    if dynamo:
        kwargs.update(dynamo=True, opset_version=18, external_data=False, report=False, verbose=False)
    else:
        kwargs.update(opset_version=9, keep_initializers_as_inputs=True, do_constant_folding=False)
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            kwargs["dynamo"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(model, (example,), path, **kwargs)
    return path


@pytest.fixture(scope="module")
def style_files(tmp_path_factory, mobilenet, digits):
    folder = tmp_path_factory.mktemp("styles")
    files = {"torch-dynamo": _torch_export(mobilenet, str(folder / "dynamo.onnx"), True),
             "torchscript-opset9": _torch_export(mobilenet, str(folder / "ts9.onnx"), False)}
    tf = onnx_zoo.tf_style()
    files["tf-nhwc"] = onnx_zoo.save(onnx_zoo.fit_head(tf, digits.images, digits.labels, nhwc=True),
                                     str(folder / "tf.onnx"))
    paddle = onnx_zoo.paddle_style()
    files["paddle-opset11"] = onnx_zoo.save(onnx_zoo.fit_head(paddle, digits.images, digits.labels),
                                            str(folder / "paddle.onnx"))
    return files


def test_styles_are_written_as_their_exporters_write_them(style_files):
    ts = onnx.load(style_files["torchscript-opset9"])
    assert ts.opset_import[0].version == 9
    assert set(i.name for i in ts.graph.initializer) <= set(i.name for i in ts.graph.input)
    assert {"HardSigmoid", "GlobalAveragePool", "Mul"} <= set(n.op_type for n in ts.graph.node)
    dynamo = onnx.load(style_files["torch-dynamo"])
    assert "HardSwish" in set(n.op_type for n in dynamo.graph.node)
    tf = onnx.load(style_files["tf-nhwc"])
    assert [d.dim_value for d in tf.graph.input[0].type.tensor_type.shape.dim][1:] == [64, 64, 3]
    paddle = onnx.load(style_files["paddle-opset11"])
    assert paddle.opset_import[0].version == 11
    assert [d.dim_value for d in paddle.graph.input[0].type.tensor_type.shape.dim] == [-1, 3, -1, -1]


@pytest.fixture(scope="module")
def style_builds(style_files, tmp_path_factory):
    """{style: (out dir, manifest)}: FP32, FP16 and INT8 on ONNX Runtime (paddle at --input-size 64)."""
    builds = {}
    for style in STYLES:
        out = str(tmp_path_factory.mktemp(style) / "engines")
        source = ModelOptions(onnx=style_files[style], model=style.replace("-", "_"),
                              input_size=64 if style.startswith("paddle") else None)
        manifest = build(BuildOptions(source=source, out=out, precisions="fp32,fp16,int8", backend="onnxruntime",
                                      throughput_seconds=0, verify_images=300,
                                      calibration=CalibrationConfig(method="minmax", images=256)))
        builds[style] = out, manifest
    return builds


@pytest.mark.parametrize("style", STYLES)
def test_style_builds_on_onnxruntime(style, style_builds):
    _, manifest = style_builds[style]
    verify = dict((a["precision"], a["verify"]) for a in manifest["artifacts"])
    assert verify["fp32"]["top1_agreement"] == 1.0
    assert verify["fp16"]["top1_agreement"] >= 0.97
    trained = style.startswith("torch")  # tf/paddle replicas are random features with a fitted head
    assert verify["int8"]["top1_agreement"] >= (0.93 if trained else 0.5), verify["int8"]
    if trained:
        assert verify["fp32"]["accuracy"] >= 0.7
    notes = " ".join(manifest["model"]["notes"])
    if style == "tf-nhwc":
        assert "was NHWC" in notes and "takes NCHW" in notes and "probabilities" in notes
    if style == "torchscript-opset9":
        assert "removed" in notes and "kept opset 9" in notes
    if style == "paddle-opset11":
        assert "dynamic" in notes and manifest["model"]["input"]["size"] == 64


@pytest.mark.skipif(not available("tensorrt_rtx"), reason="tensorrt-rtx-cu12 is not installed")
@pytest.mark.parametrize("style", STYLES)
def test_style_builds_tensorrt_rtx_fp16_and_int8_engines(style, style_builds, digits, tmp_path):
    import tensorrt_rtx as trt
    from trtkit.precision.calibrate import calibrate, save_qdq
    out, manifest = style_builds[style]
    name = manifest["artifacts"][0]["name"].rsplit(".", 1)[0]
    fp32, fp16 = os.path.join(out, name + ".fp32.onnx"), os.path.join(out, name + ".fp16.onnx")
    ranges = calibrate(fp32, digits, "minmax", use_cache=False).ranges
    int8 = save_qdq(fp32, ranges, "tensorrt", str(tmp_path / "int8.onnx"))
    qdq = onnx.load(int8)
    assert qdq.opset_import[0].version >= 13 and any(n.op_type == "QuantizeLinear" for n in qdq.graph.node)
    sizes = dict((p, rtx_engine_bytes(trt, path, (4, 3, 64, 64))) for p, path in (("fp16", fp16), ("int8", int8)))
    assert sizes["int8"] > 0 and sizes["fp16"] > 0
