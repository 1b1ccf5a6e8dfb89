"""Several image sizes (issue 22): dynamic H and W on request (--image-sizes), TensorRT profiles spanning them,
and the reference benchmark's image-size sweep and pivot tables, refused beyond what a build allows."""

import csv
import json
import os

import numpy as np
import pytest

from conftest import run_cli
from trtkit.deps import available
from trtkit.errors import InputError

torch = pytest.importorskip("torch")


def test_image_sizes_parse_to_the_smallest_and_largest():
    from trtkit.contract import parse_image_sizes
    assert parse_image_sizes("128,1024") == (128, 1024)
    assert parse_image_sizes("512,128,256") == (128, 512)
    assert parse_image_sizes([96]) == (96, 96)
    for bad in ("", "a,b", "0,64"):
        with pytest.raises(InputError, match="image sizes"):
            parse_image_sizes(bad)


def test_a_tensorrt_profile_spans_the_image_sizes_optimized_at_the_input_size():
    from trtkit.backends.tensorrt.builder import profile_shapes
    assert profile_shapes([("x", (-1, 3, -1, -1))], (1, 4, 8), (3, 256, 256), (128, 1024)) == {
        "x": [[1, 3, 128, 128], [4, 3, 256, 256], [8, 3, 1024, 1024]]}
    # the input size outside the range widens it; a fixed dim stays fixed
    assert profile_shapes([("x", (-1, 3, -1, 64))], (1, 1, 1), (3, 48, 64), (96, 512)) == {
        "x": [[1, 3, 48, 64], [1, 3, 48, 64], [1, 3, 512, 64]]}


def test_an_input_outside_the_engines_profile_is_one_line():
    from trtkit.backends.tensorrt.runner import check_image_dims
    profile = ([1, 3, 128, 128], [4, 3, 256, 256], [8, 3, 512, 512])
    check_image_dims((2, 3, 512, 128), profile)
    check_image_dims((2, 3, 1024, 1024), None)  # no profile: nothing to check
    with pytest.raises(InputError) as info:
        check_image_dims((1, 3, 1024, 1024), profile)
    assert "1x3x1024x1024 is outside the engine's profile (128..512, 128..512" in str(info.value)
    assert "--image-sizes" in info.value.hint


@pytest.fixture(scope="module")
def dynamic_build(tmp_path_factory):
    """The segmentation sample built with dynamic H and W from 64 to 192 (fp32 and int8). Its tests read the
    graphs' shapes and bench them, not the INT8's accuracy nor the build's own timing: 64 calibration images and
    no timing (``test_segmentation_sample`` judges the default recipe's INT8)."""
    out = str(tmp_path_factory.mktemp("dyn") / "build")
    result = run_cli(["build", "--task", "segmentation", "--image-sizes", "64,192", "--precision", "fp32,int8",
                      "--verify-images", "64", "--calib-images", "64", "--bench-seconds", "0", "--out", out])
    assert result.returncode == 0, result.stderr[-2000:]
    return out


@pytest.mark.extended
def test_image_sizes_export_dynamic_h_and_w_that_run_at_every_size(dynamic_build):
    import onnx
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    with open(os.path.join(dynamic_build, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["model"]["image_sizes"] == [64, 192]
    graph = onnx.load(os.path.join(dynamic_build, "lraspp_mobilenet_v3_large.fp32.onnx")).graph
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert isinstance(dims[2], str) and isinstance(dims[3], str) and dims[1] == 3
    for artifact in manifest["artifacts"]:
        with OnnxRuntimeRunner(os.path.join(dynamic_build, artifact["path"])) as runner:
            for h, w in ((64, 64), (192, 128), (96, 96)):
                out = runner.infer(np.zeros((1, 3, h, w), np.float32))
                assert out.shape == (1, 4, h, w), (artifact["name"], out.shape)


@pytest.mark.extended
def test_bench_sweeps_image_sizes_into_the_reference_layout_and_refuses_beyond_the_build(dynamic_build, tmp_path):
    out = str(tmp_path / "sweep")
    result = run_cli(["bench", "--manifest", dynamic_build, "--image-sizes", "64,128,192", "--seconds", "0.05",
                      "--warmup", "0.02", "--repeats", "1", "--min-iterations", "2", "--torch-modes", "fp32",
                      "--out", out])
    assert result.returncode == 0, result.stderr[-2000:]
    with open(os.path.join(out, "imsize.csv")) as handle:
        rows = list(csv.reader(handle))
    assert rows[0][1:] == ["64", "128", "192"]
    labels = [r[0] for r in rows[1:]]
    assert labels == ["FP32 PyTorch (eager)", "FP32 ONNX Runtime", "INT8 ONNX Runtime"]
    assert all(float(v) > 0 for r in rows[1:] for v in r[1:])
    assert os.path.getsize(os.path.join(out, "imsize.png")) > 5000
    refused = run_cli(["bench", "--manifest", dynamic_build, "--image-sizes", "64,1024", "--out", out])
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "image size 1024 is above what FP32 ONNX Runtime was built for (64..192)" in refused.stderr


def test_an_onnx_with_fixed_h_and_w_cannot_take_image_sizes(tmp_path):
    path = str(tmp_path / "fixed.onnx")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3, padding=1)).eval()
    torch.onnx.export(model, torch.zeros(1, 3, 32, 32), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17, dynamo=False)
    result = run_cli(["build", "--onnx", path, "--image-sizes", "32,64", "--out", str(tmp_path / "b")])
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--image-sizes needs an ONNX with dynamic height and width" in result.stderr


def test_pivot_tables_have_the_reference_layout():
    from trtkit.bench.sweeps import pivot, pivot_csv
    rows = [{"status": "ok", "variant": "FP32 ONNX Runtime", "image_size": 128, "latency_ms": {"median": 2.0}},
            {"status": "ok", "variant": "INT8 ONNX Runtime", "image_size": 128, "latency_ms": {"median": 1.0}},
            {"status": "ok", "variant": "FP32 ONNX Runtime", "image_size": 256, "latency_ms": {"median": 8.0}},
            {"status": "skipped", "variant": "FP16 TensorRT", "image_size": 256}]
    table = pivot(rows, "image_size", lambda r: r["latency_ms"]["median"])
    assert table == [("FP32 ONNX Runtime", {128: 2.0, 256: 8.0}), ("INT8 ONNX Runtime", {128: 1.0})]
    assert pivot_csv(table, [128, 256], "ms").splitlines() == ["ms,128,256", "FP32 ONNX Runtime,2.0,8.0",
                                                              "INT8 ONNX Runtime,1.0,"]


@pytest.mark.extended
@pytest.mark.skipif(not available("tensorrt_rtx"), reason="tensorrt-rtx-cu12 is needed")
def test_tensorrt_rtx_builds_the_segmentation_sample_with_a_profile_over_the_image_sizes(tmp_path):
    import trtkit
    out = str(tmp_path / "rtx")
    result = trtkit.build(task="segmentation", backend="tensorrt-rtx", precision="fp16,int8", image_sizes=(64, 192),
                          out=out, bench_seconds=0, verify_images=8, calib_batch_size=8, batch="1:2:4")
    for precision in ("fp16", "int8"):
        artifact = result.artifact(precision)
        assert artifact["status"] in ("built", "ok"), artifact
        assert artifact["backend_info"]["precision_built"] == precision
        profile = list(artifact["backend_info"]["profile"].values())[0]
        assert profile == [[1, 3, 64, 64], [2, 3, 96, 96], [4, 3, 192, 192]]
        assert os.path.getsize(os.path.join(out, artifact["path"])) > 1 << 20
