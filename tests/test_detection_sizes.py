"""Detectors at several image sizes (``--image-sizes``): RetinaNet's anchors, padding and clipping computed in
the exported graph from the input's shape, so ONNX Runtime's ``decoded`` equals PyTorch's at every size; the
graph NMS splitting its per-level candidates at the size it runs at, as the host does; a build and the bench's
image-size sweep of the sample detector; SSD and SSDlite refused with the reason.

Random-init RetinaNet-R18 at small sizes, its heads' weights spread (``test_detection_models.spread``) so
that scores and boxes vary and NMS has work."""

import csv
import os

import numpy as np
import pytest

from conftest import run_cli
from trtkit.errors import InputError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from test_detect_onnx_nms import EQUAL_SUPPRESSES, RUNNERS, assert_agrees, tied  # noqa: E402
from test_detection_models import scattered, spread  # noqa: E402

SIZES = ((128, 128), (192, 256), (100, 150), (320, 320))  # 100x150: padded to 128x160 inside the graph


@pytest.fixture(scope="module")
def dynamic_r18(tmp_path_factory):
    """(deployable model, its ONNX with dynamic H and W from 96 to 320, exported at 128) of a 4-class R18."""
    from trtkit.models.detection import create_detection_model
    from trtkit.models.detection.export import deployable
    from trtkit.onnx.export import export_onnx
    torch.manual_seed(0)
    model = create_detection_model("retinanet_resnet18_fpn", num_classes=4, input_size=128).eval()
    x = torch.randn(2, 3, 128, 128, generator=torch.Generator().manual_seed(1))
    model.load_state_dict(spread(model, scattered(model, seed=3), x))
    model = deployable(model)
    path = str(tmp_path_factory.mktemp("sizes") / "r18.onnx")
    assert export_onnx(model, path, image_sizes=(96, 320))[0] == "torchscript"  # torch.export fixes the size
    return model, path


def test_onnx_runtime_decodes_as_pytorch_at_every_size(dynamic_r18):
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    model, path = dynamic_r18
    dims = [d.dim_param or d.dim_value for d in onnx.load(path).graph.input[0].type.tensor_type.shape.dim]
    assert isinstance(dims[2], str) and isinstance(dims[3], str)
    generator = np.random.RandomState(0)
    with OnnxRuntimeRunner(path, providers=["CPUExecutionProvider"]) as runner:
        for height, width in SIZES:
            images = generator.randn(1, 3, height, width).astype(np.float32)
            with torch.no_grad():
                expected = model(torch.from_numpy(images)).numpy()
            got = runner.infer(images)
            assert got.shape == expected.shape == (1, sum(model.detection_head.level_sizes(height, width)), 8)
            # boxes in pixels, scores as probabilities
            # a wrong anchor is off by a stride (8 px and more); the convolutions' float32 sums differ, as in a
            # fixed-size export, by 4e-4 px at 128 and 1.8e-3 px at 320 (exp() of the size codes scales them
            # with the box: P7's anchors are over 500 px)
            assert np.abs(got[..., :4] - expected[..., :4]).max() < 5e-3, (height, width)
            assert np.abs(got[..., 4:] - expected[..., 4:]).max() < 1e-5, (height, width)


@pytest.mark.parametrize("runtime", sorted(RUNNERS))
def test_the_graph_nms_selects_at_the_size_it_runs_at(dynamic_r18, tmp_path, runtime):
    """No height or width given: the per-level top-k's split comes from the input's shape at each run."""
    from trtkit.detect.onnx_nms import append_nms
    from trtkit.detect.select import select_decoded
    model, path = dynamic_r18
    head = model.detection_head.with_postprocessing(topk_candidates=100)
    graph = append_nms(onnx.load(path), head, equal_suppresses=EQUAL_SUPPRESSES[runtime], keep_decoded=True)
    generator = np.random.RandomState(1)
    for height, width in SIZES[:2]:
        images = generator.randn(2, 3, height, width).astype(np.float32)
        outputs = RUNNERS[runtime](graph, {"input": images}, tmp_path)
        decoded = outputs[0]
        expected = select_decoded(decoded, head, height, width)
        assert min(len(found) for found in expected) >= 20
        assert_agrees(outputs[1:], expected, 2, runtime == "openvino" and tied(decoded, head))


def test_ssd_and_ssdlite_are_refused_with_the_reason(tmp_path):
    from trtkit.models.detection import create_detection_model
    from trtkit.pipeline.source import ModelOptions, resolve_model
    model = create_detection_model("ssdlite320_mobilenet_v3_large", num_classes=3)
    checkpoint = str(tmp_path / "ssdlite.pt")
    torch.save({"state_dict": model.state_dict()}, checkpoint)
    with pytest.raises(InputError) as error:
        resolve_model(ModelOptions(checkpoint=checkpoint, task="detection", image_sizes="160,320"), str(tmp_path))
    assert "--image-sizes is not available for ssdlite320_mobilenet_v3_large: SSD's default boxes are " \
           "fractions of the input size" in str(error.value)
    assert "--input-size" in error.value.hint


@pytest.fixture(scope="module")
def sample_sizes_build(tmp_path_factory):
    """The sample detector (ONNX Runtime, FP32) built with dynamic H and W from 96 to 160."""
    import trtkit
    out = str(tmp_path_factory.mktemp("detsizes") / "build")
    trtkit.build(task="detection", image_sizes=(96, 160), precision="fp32", backend="onnxruntime", verify_images=8,
                 out=out, bench_seconds=0)
    return out


def test_a_detector_build_records_the_sizes_and_the_bench_sweeps_them(sample_sizes_build, tmp_path):
    import json
    with open(os.path.join(sample_sizes_build, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["model"]["image_sizes"] == [96, 160]
    assert manifest["artifacts"][0]["status"] == "ok" and manifest["artifacts"][0]["nms"]["placement"] == "graph"
    out = str(tmp_path / "sweep")
    result = run_cli(["bench", sample_sizes_build, "--image-sizes", "96,160", "--seconds", "0.05", "--warmup",
                      "0.02", "--repeats", "1", "--min-iterations", "2", "--no-torch", "--no-png", "--out", out])
    assert result.returncode == 0, result.stderr[-2000:]
    with open(os.path.join(out, "imsize.csv")) as handle:
        rows = list(csv.reader(handle))
    assert rows[0][1:] == ["96", "160"] and [r[0] for r in rows[1:]] == ["FP32 ONNX Runtime"]
    assert all(float(v) > 0 for r in rows[1:] for v in r[1:])
    with open(os.path.join(out, "imsize.json")) as handle:
        selection = json.load(handle)["host_selection"]
    assert [r["image_size"] for r in selection] == [96, 160] and all(r["ms_per_image"] > 0 for r in selection)
    assert selection[1]["detections_per_image"] > 0  # the build's images, resized: real candidates
    assert "host selection after it (numpy) takes size 96:" in result.stdout


def test_a_size_beyond_the_detector_build_is_refused_in_one_line(sample_sizes_build, tmp_path):
    refused = run_cli(["bench", sample_sizes_build, "--image-sizes", "96,320", "--out", str(tmp_path / "b")])
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "image size 320 is above what FP32 ONNX Runtime was built for (96..160)" in refused.stderr
