"""The input contract: non-square sizes through every step, where it comes from, and flags that contradict it."""

import json
import os

import numpy as np
import pytest

from conftest import partial_files, run_cli
from trtkit.contract import InputContract, parse_size, read_class_names, resolve
from trtkit.errors import InputError


def test_sizes_parse_and_bad_ones_say_how():
    assert parse_size(224) == (224, 224) and parse_size("48x192") == (48, 192) and parse_size([96, 160]) == (96, 160)
    for bad in ("0", "48x", "ax9", "1x2x3", -3):
        with pytest.raises(InputError, match="not N or HxW"):
            parse_size(bad)


def test_contract_round_trips_and_keeps_the_old_manifest_form():
    contract = InputContract(size=(48, 192), channels=1, mean=0.5, std=0.25, channel_order="rgb", pixel_scale=255,
                             resize="pad", class_names=["a", "b"])
    record = contract.to_dict()
    assert record["size"] == [48, 192] and record["height"] == 48 and record["width"] == 192
    assert InputContract.from_dict(record) == contract
    assert InputContract(size=64).to_dict()["size"] == 64  # square: the number manifests always had
    old = InputContract.from_dict({"size": 64, "mean": [0.1, 0.2, 0.3], "std": [1, 1, 1], "channels": 3})
    assert old.shape == (3, 64, 64) and old.resize == "crop" and old.channel_order == "rgb"


@pytest.mark.parametrize("kwargs, words", [
    (dict(mean=(0.5, 0.5)), "--mean has 2 values; the model has 3"),
    (dict(std=(1, 1, 1, 1)), "--std has 4 values"),
    (dict(std=(0.2, 0.0, 0.2)), "std must not be 0"),
    (dict(channels=2), "1- or 3-channel"),
    (dict(pixel_scale=100), "--pixel-scale must be 1"),
    (dict(resize="zoom"), "crop, pad, height, letterbox or stretch"),
    (dict(channel_order="grb"), "rgb or bgr")])
def test_bad_contracts_are_one_clear_error(kwargs, words):
    with pytest.raises(InputError) as info:
        InputContract(**kwargs)
    assert words in str(info.value)


def test_flags_fill_what_the_model_leaves_open_and_may_not_contradict_it():
    base = InputContract(size=64, mean=(0.1, 0.2, 0.3), std=(0.5, 0.5, 0.5))
    got = resolve(base, {"size": "96x160", "resize": "stretch"})
    assert got.size == (96, 160) and got.resize == "stretch" and got.mean == base.mean
    assert resolve(None, {}, {"size": (48, 192), "channels": 1}).shape == (1, 48, 192)
    with pytest.raises(InputError) as info:
        resolve(None, {"size": (64, 64)}, {"size": (48, 192)}, what="crnn.onnx")
    assert "--input-size 64x64 does not match crnn.onnx's fixed size 48x192" in str(info.value)
    with pytest.raises(InputError, match="--channels 3 does not match"):
        resolve(None, {"channels": 3}, {"channels": 1})


def test_class_names_files(tmp_path):
    lines = tmp_path / "names.txt"
    lines.write_text(u"cat\ndog\n\nbird\n")
    as_json = tmp_path / "names.json"
    as_json.write_text(json.dumps({"1": "dog", "0": "cat"}))
    assert read_class_names(str(lines)) == ["cat", "dog", "bird"]
    assert read_class_names(str(as_json)) == ["cat", "dog"]
    empty = tmp_path / "empty.txt"
    empty.write_text(u"\n")
    with pytest.raises(InputError, match="holds no class names"):
        read_class_names(str(empty))


@pytest.mark.extended
def test_non_square_checkpoint_builds_fp32_fp16_int8_and_rtx_engines(sample, tmp_path):
    """A torchvision-layout ResNet18 checkpoint at 96x160: export, FP16, INT8 and TensorRT-RTX all take 96x160."""
    from trtkit.pipeline import BuildOptions, build
    from trtkit.precision.config import CalibrationConfig
    from trtkit.pipeline.source import ModelOptions
    _, checkpoint = sample
    out = str(tmp_path / "b")
    source = ModelOptions(checkpoint=checkpoint, input={"size": "96x160", "resize": "stretch"})
    manifest = build(BuildOptions(source=source, precisions="fp32,fp16,int8", backend="onnxruntime", out=out,
                                  throughput_seconds=0, verify_images=96, calibration=CalibrationConfig(images=128)))
    model_input = manifest["model"]["input"]
    assert model_input["height"] == 96 and model_input["width"] == 160
    assert manifest["export"]["max_abs_diff"] <= 1e-3  # ONNX Runtime matches PyTorch at 96x160
    by_precision = dict((a["precision"], a) for a in manifest["artifacts"])
    assert by_precision["fp32"]["verify"]["top1_agreement"] == 1.0
    assert by_precision["fp16"]["verify"]["top1_agreement"] >= 0.99
    # the digits model was trained at 64x64; stretched to 96x160 its activations shift, INT8 still mostly agrees
    assert by_precision["int8"]["verify"]["top1_agreement"] >= 0.8 and by_precision["int8"]["verify"]["images"] == 96
    for artifact in manifest["artifacts"]:
        assert artifact["ran_on"]["inputs"][0]["shape"][1:] == [3, 96, 160]

    pytest.importorskip("tensorrt_rtx")
    from trtkit.backends import get_backend
    from trtkit.backends.base import BuildInputs
    from trtkit.backends.tensorrt.options import TensorRTOptions
    from trtkit.backends.tensorrt.sidecar import read_sidecar
    from trtkit.contract import InputContract as Contract
    from trtkit.precision.calibrate import calibrate, load_calibration_images, save_qdq
    contract = Contract.from_dict(model_input)
    fp32_onnx = os.path.join(out, by_precision["fp32"]["onnx"])
    ranges = calibrate(fp32_onnx, load_calibration_images("sample", contract, 64), "entropy", 32).ranges
    sources = {"fp16": os.path.join(out, by_precision["fp16"]["onnx"]),
               "int8": save_qdq(fp32_onnx, ranges, "tensorrt", str(tmp_path / "x.int8-tensorrt.onnx"))}
    inputs = BuildInputs(contract=contract, tensorrt=TensorRTOptions(batch="1:4:8"))
    for precision, onnx_path in sorted(sources.items()):
        engine = str(tmp_path / "x.{}.engine".format(precision))
        get_backend("tensorrt-rtx").build(onnx_path, precision, engine, inputs)
        record = read_sidecar(engine)
        assert record["inputs"][0]["shape"] == [-1, 3, 96, 160]
        assert record["profile"]["input"] == [[1, 3, 96, 160], [4, 3, 96, 160], [8, 3, 96, 160]]


def test_input_size_contradicting_the_onnx_is_refused_cleanly(sample_build, tmp_path):
    src, manifest = sample_build
    onnx = os.path.join(src, "resnet18.fp32.onnx")
    import onnx as onnx_lib
    model = onnx_lib.load(onnx)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value, dims[3].dim_value = 64, 64  # a fixed-size export, as many exporters write
    fixed = str(tmp_path / "fixed.onnx")
    onnx_lib.save(model, fixed)
    out = tmp_path / "out"
    result = run_cli(["build", "--onnx", fixed, "--input-size", "96x160", "--out", str(out)])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "--input-size 96x160 does not match fixed.onnx's fixed size 64x64" in lines[0]
    assert not out.exists() and partial_files(str(tmp_path)) == []


def test_mean_of_the_wrong_length_is_refused_by_the_cli(tmp_path):
    out = tmp_path / "out"
    result = run_cli(["build", "--mean", "0.5,0.5", "--out", str(out)])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--mean has 2 values; the model has 3 channel(s)" in result.stderr
    assert not out.exists()


def test_trtkit_exports_carry_their_contract_to_a_later_onnx_build(sample_build):
    from trtkit.onnx.load import OnnxSummary, load_onnx
    src, manifest = sample_build
    summary = OnnxSummary(load_onnx(os.path.join(src, "resnet18.fp32.onnx")))
    assert summary.contract == InputContract.from_dict(manifest["model"]["input"])
    assert np.allclose(summary.contract.mean, manifest["model"]["input"]["mean"])
