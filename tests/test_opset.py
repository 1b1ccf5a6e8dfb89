"""The export's opset follows the installed torch and the target TensorRT (issue 23, item 5).

Opset 17 everywhere broke a Jetson Nano: torch 1.10 cannot write it and TensorRT 8.2's parser reads up to 13.
"""

import os

import pytest

from trtkit.errors import InputError
from trtkit.onnx.opsets import DEFAULT_OPSET, choose_opset, tensorrt_max_opset, torch_max_opset


# (torch, TensorRT or None, dynamo exporter, expected opset) - the documented table of trtkit.onnx.opsets
CHOICES = [
    ("1.10.0a0+git36449ea", "8.2.1.8", False, 13),  # Jetson Nano, JetPack 4.6: NVIDIA's torch wheel, TensorRT 8.2
    ("1.10.0", None, False, 13),  # torch 1.10 alone: its stable maximum
    ("1.12.1", None, False, 16),
    ("1.12.1", "8.5.2.2", False, 16),
    ("1.13.1", "8.5.2.2", False, 17),  # Xavier, JetPack 5
    ("2.1.0", "8.6.2.3", False, 17),  # Orin, JetPack 6.0
    ("2.13.0+cpu", None, False, DEFAULT_OPSET),  # ONNX Runtime / OpenVINO: the default
    ("2.13.0+cpu", None, True, 18),  # the dynamo exporter starts at 18
    ("2.5.0", "10.3.0.26", True, 18),  # Orin, JetPack 6.1+: TensorRT 10.3 reads up to 19
    ("2.13.0", "8.2.1", True, 13),  # dynamo wanted, but TensorRT 8.2 caps it at 13
    ("2.13.0", "8.4.3", False, 13),  # 8.4 has no documented row: 8.2's
]


@pytest.mark.parametrize("torch_version, trt_version, dynamo, expected", CHOICES)
def test_default_opset_is_the_highest_both_read(torch_version, trt_version, dynamo, expected):
    assert choose_opset(torch_version, trt_version, dynamo=dynamo) == expected


def test_limits_per_version():
    assert [torch_max_opset(v) for v in ("1.8.1", "1.10.2", "1.11.0", "1.12.0", "1.13.0", "2.4.1", "2.13.0")] == \
        [13, 13, 13, 16, 17, 17, 20]
    assert [tensorrt_max_opset(v) for v in ("7.2.3", "8.2.1.8", "8.5.2", "8.6.1.post1", "9.2.0", "10.3.0.26",
                                            "10.15.1", "11.2.0")] == [13, 13, 17, 17, 19, 19, 24, 24]
    assert [torch_max_opset(v, dynamo=True) for v in ("2.1.0", "2.12.0", "2.13.0")] == [18, 18, 23]
    assert tensorrt_max_opset(None) is None
    # parsed, never compared as strings: "10.3" > "8.6" although "10.3" < "8.6" as text
    assert tensorrt_max_opset("10.3") > tensorrt_max_opset("8.6")


def test_requested_opset_within_both_limits_is_kept():
    assert choose_opset("1.10.0", "8.2.1", requested=11) == 11
    assert choose_opset("2.13.0", "10.15.1", requested="20") == 20
    assert choose_opset("2.13.0", None, requested=13, dynamo=True) == 13  # the exporter then is TorchScript


@pytest.mark.parametrize("torch_version, trt_version, requested, phrase", [
    ("1.10.0", None, 14, "torch 1.10.0"),
    ("2.13.0", "8.2.1", 17, "TensorRT 8.2.1's ONNX parser reads (opset 13)"),
    ("2.13.0", None, 21, "opset 20"),
    ("2.5.0", None, 19, "opset 17"),
    ("2.13.0", None, 5, "below opset 9"),
    ("2.13.0", None, "thirteen", "takes a number"),
])
def test_impossible_request_is_refused(torch_version, trt_version, requested, phrase):
    with pytest.raises(InputError) as info:
        choose_opset(torch_version, trt_version, requested=requested)
    assert phrase in str(info.value)
    assert "\n" not in str(info.value) and info.value.hint


def test_table_does_not_exceed_the_installed_torch():
    """The row for the installed torch is at most what that torch says it writes (when it says)."""
    torch = pytest.importorskip("torch")
    constants = pytest.importorskip("torch.onnx._constants")
    limit = getattr(constants, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", None) or getattr(constants, "ONNX_MAX_OPSET",
                                                                                        None)
    if limit is None:
        pytest.skip("this torch names no maximum opset")
    assert torch_max_opset(torch.__version__) <= limit


def test_nano_style_export_at_opset_13_builds_and_verifies(sample, tmp_path):
    """``trtkit.build(opset=13)``: the ONNX is opset 13, exported by TorchScript, verified on ONNX Runtime, and
    the manifest records it."""
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    import trtkit
    result = trtkit.build(opset=13, backend="onnxruntime", precision="fp32,fp16", out=str(tmp_path / "out"),
                          verify_images=64, bench_seconds=0, strict=True)
    export = result.manifest["export"]
    assert export["opset"] == 13 and export["exporter"] == "torchscript"
    assert export["max_abs_diff"] <= 1e-3
    fp32 = result.artifact("fp32")
    model = onnx.load(fp32["file"])
    assert [e.version for e in model.opset_import if e.domain in ("", "ai.onnx")] == [13]
    for precision in ("fp32", "fp16"):
        record = result.artifact(precision)
        assert record["status"] == "ok" and record["verify"]["images"] == 64, record


def test_bad_opset_flag_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    from test_cli_errors import assert_clean_failure, run_build
    out_dir = str(tmp_path / "out")
    for value, phrase in (("99", "--opset 99 is above"), ("5", "--opset 5 is below"), ("abc", "--opset takes")):
        code, err = run_build(["--opset", value, "--backend", "onnxruntime", "--out", out_dir], capsys)
        assert_clean_failure(code, err, out_dir, phrase)


def test_opset_with_an_onnx_file_is_refused(tmp_path, capsys):
    from test_cli_errors import assert_clean_failure, run_build
    out_dir = str(tmp_path / "out")
    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(b"")
    code, err = run_build(["--onnx", str(onnx_file), "--opset", "13", "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "an --onnx file keeps its own")
    assert os.path.exists(str(onnx_file))
