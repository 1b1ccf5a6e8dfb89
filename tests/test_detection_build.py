"""Detectors through the whole build: the trained sample to FP32 and INT8 on ONNX Runtime (NMS in the graph,
checked against the host's), verified by COCO mAP and by agreement with FP32; TensorRT-RTX engines of the
torchvision layouts (NMS on the host: measured, RTX has no runner for it)."""

import json
import os

import numpy as np
import pytest

import trtkit
from trtkit.deps import available

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (available("onnxruntime") and available("pycocotools")),
                                reason="onnxruntime and pycocotools are needed")


@pytest.fixture(scope="module")
def sample_build(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("detection") / "build")
    result = trtkit.build(task="detection", precision="fp32,int8", out=out, verify_images=120, calib_images=64,
                          backend="onnxruntime")
    return out, result.manifest


def _artifact(manifest, precision):
    return [a for a in manifest["artifacts"] if a["precision"] == precision][0]


def test_the_sample_detector_builds_and_is_verified_by_map(sample_build):
    out, manifest = sample_build
    model = manifest["model"]
    assert model["task"] == "detection" and model["name"] == "retinanet_sample"
    assert model["detection"]["postprocessing"]["per_level"] and model["detection"]["levels"]
    assert manifest["data"]["labels"] and manifest["data"]["images"] == 120
    fp32, int8 = _artifact(manifest, "fp32"), _artifact(manifest, "int8")
    for record in (fp32, int8):
        verify = record["verify"]
        assert verify["task"] == "detection" and verify["images"] == 120
        assert verify["evaluator"].split()[0] in ("faster-coco-eval", "pycocotools")
        assert verify["ground_truth_boxes"] > 120  # several objects per image
    assert fp32["verify"]["map50"] > 0.5 and fp32["verify"]["map"] > 0.2  # a real detector, not noise
    assert fp32["verify"]["map"] == pytest.approx(fp32["verify"]["reference_map"], abs=1e-3)
    assert fp32["verify"]["f1_agreement"] == pytest.approx(1.0, abs=2e-3) and fp32["status"] == "ok"
    # INT8 keeps the boxes (the decoding stays float): its agreement and mAP are judged, not assumed
    assert 0.8 < int8["verify"]["f1_agreement"] <= 1.0
    assert abs(int8["verify"]["agreement_mean_score_shift"]) < 0.05
    assert int8["status"] == ("ok" if int8["verify"]["f1_agreement"] >= 0.90 and
                              fp32["verify"]["map"] - int8["verify"]["map"] <= 0.02 else "failing")
    from trtkit.pipeline.table import format_table
    table = format_table(manifest)
    assert "mAP@.5" in table and "F1 vs FP32" in table and "score shift" in table


def test_onnx_runtime_runs_nms_in_the_graph_as_the_host_selects(sample_build):
    out, manifest = sample_build
    for record in manifest["artifacts"]:
        nms = record["nms"]
        assert nms["placement"] == "graph" and record["path"].endswith(".nms.onnx")
        check = nms["versus_host"]
        assert check["images"] > 0 and check["identical_images"] == check["images"]
        assert os.path.isfile(os.path.join(out, record["path"]))
    import onnx
    graph = onnx.load(os.path.join(out, _artifact(manifest, "int8")["path"]))
    assert [o.name for o in graph.graph.output] == ["decoded", "det_boxes", "det_scores", "det_labels", "det_count"]
    assert any(n.op_type == "NonMaxSuppression" for n in graph.graph.node)
    # the decoding after the network stays float in the INT8 graph: no Q/DQ feeds the box arithmetic
    producers = dict((out_name, node) for node in graph.graph.node for out_name in node.output)
    exp = [n for n in graph.graph.node if n.op_type == "Exp"]
    assert exp and all(producers.get(n.input[0]) is None or producers[n.input[0]].op_type != "DequantizeLinear"
                       for n in exp)


def test_the_loaded_detector_answers_in_the_images_pixels(sample_build, tmp_path):
    from PIL import Image

    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.detect.agreement import box_iou
    out, manifest = sample_build
    images, records = draw_shape_boxes(3, seed=123)
    paths = []
    for index, image in enumerate(images):  # the same pictures, twice the size: boxes must come back doubled
        path = str(tmp_path / "{}.png".format(index))
        Image.fromarray(image).resize((256, 256), Image.BILINEAR).save(path)
        paths.append(path)
    with trtkit.load(out, precision="fp32") as detector:
        assert type(detector).__name__ == "Detector"
        found = detector.predict(paths)
        small = detector.predict(images)  # uint8 N x H x W x C: the drawn pictures themselves
    matched, found_objects, objects = 0, 0, 0
    for big, little, record in zip(found, small, records):
        assert big.size == (256, 256) and little.size == (128, 128)
        assert set(big.names) <= {"circle", "square", "triangle"}
        if len(little) and len(big):  # the same objects, found in pictures twice the size: boxes twice as large
            matched += int((box_iou(big.boxes / 2.0, little.boxes).max(axis=1) > 0.7).sum())
        if len(little):
            found_objects += int((box_iou(little.boxes, record.boxes).max(axis=0) > 0.5).sum())
        objects += len(record)
    assert matched > 0
    assert found_objects >= 0.4 * objects  # most drawn objects found where they are (a detector at mAP@.5 ~0.6)


def test_manifest_records_the_head_the_app_selects_with(sample_build):
    out, manifest = sample_build
    with open(os.path.join(out, "manifest.json")) as handle:
        saved = json.load(handle)
    from trtkit.detect.params import DetectionHead
    head = DetectionHead.from_dict(saved["model"]["detection"])
    assert head.level_sizes(128, 128) is not None and sum(head.level_sizes(128, 128)) > 1000
    assert head.postprocessing.score_thresh <= 0.05  # COCO evaluation needs the low-scored detections too


# ------------------------------------------------------------------ TensorRT-RTX engines

@pytest.mark.skipif(not available("tensorrt_rtx"), reason="tensorrt-rtx-cu12 is needed")
@pytest.mark.parametrize("name,classes,size", [
    ("ssdlite320_mobilenet_v3_large", 4, None),
    pytest.param("retinanet_resnet18_fpn", 3, 128, marks=pytest.mark.extended),
    pytest.param("ssd300_vgg16", 4, None, marks=pytest.mark.extended)])
def test_tensorrt_rtx_builds_fp16_and_int8_engines_with_host_nms(tmp_path, name, classes, size):
    from trtkit.models.detection import create_detection_model
    torch.manual_seed(0)
    model = create_detection_model(name, num_classes=classes, input_size=size)
    checkpoint = str(tmp_path / "detector.pt")
    torch.save({"state_dict": model.state_dict(), "meta": {"input": model.input_contract.to_dict()}}, checkpoint)
    out = str(tmp_path / "engines")
    manifest = trtkit.build(checkpoint=checkpoint, task="detection", backend="tensorrt-rtx", precision="fp16,int8",
                            data="shape-boxes", out=out, calib_images=16, calib_batch_size=8, verify_images=8,
                            exporter="torchscript").manifest
    assert manifest["model"]["name"] == name and manifest["model"]["task"] == "detection"
    assert [a["precision"] for a in manifest["artifacts"]] == ["fp16", "int8"]
    for record in manifest["artifacts"]:
        assert record["backend"] == "tensorrt-rtx" and record["path"].endswith(".engine")
        assert record["nms"]["placement"] == "host" and "no runner" in record["nms"]["reason"]
        assert os.path.getsize(os.path.join(out, record["path"])) > 100000
        assert record["status"] in ("built", "ok")  # without a GPU the engines are built, not run


def test_the_app_uses_the_artifacts_own_nms_and_it_answers_as_the_host(sample_build):
    from trtkit.data.shape_boxes import draw_shape_boxes
    out, _ = sample_build
    images, _ = draw_shape_boxes(8, seed=77)
    with trtkit.load(out, precision="int8") as detector:
        assert detector._graph_selects(detector.options)  # NMS in the ONNX Runtime artifact, the build's head
        assert not detector._graph_selects(detector.options.updated(iou_threshold=0.3))  # an override: the host
        graph = detector.predict(images)
        host = detector.detections(detector.decoded(images), [(128, 128)] * len(images))
    assert sum(len(found) for found in graph) > 0
    for mine, theirs in zip(graph, host):
        assert len(mine) == len(theirs)
        one, two = np.lexsort((mine.labels, -mine.scores)), np.lexsort((theirs.labels, -theirs.scores))
        assert np.array_equal(mine.labels[one], theirs.labels[two])
        assert np.allclose(mine.boxes[one], theirs.boxes[two], atol=1e-3)


def test_bench_reports_the_host_selection_apart(sample_build):
    from trtkit.bench.selection import selection_notes, time_host_selection
    from trtkit.data.shape_boxes import draw_shape_boxes
    out, manifest = sample_build
    images, _ = draw_shape_boxes(3, seed=5)
    from trtkit.contract import InputContract
    from trtkit.data.preprocess import preprocess
    contract = InputContract.from_dict(manifest["model"]["input"])
    batch = np.stack([preprocess(image, contract) for image in images])
    rows = time_host_selection(out, manifest, batch, [1, 4], seconds=0.05)
    assert [r["batch"] for r in rows] == [1, 4] and all(r["ms_per_batch"] > 0 and r["calls"] >= 3 for r in rows)
    assert rows[1]["ms_per_image"] == pytest.approx(rows[1]["ms_per_batch"] / 4, rel=1e-2)
    assert "host selection" in selection_notes(rows)[0] and selection_notes([]) == []
    assert time_host_selection(out, {"model": {"task": "classification"}}, batch, [1]) == []


def test_the_triton_export_serves_the_graphs_selection(sample_build, tmp_path):
    from trtkit.deploy.triton import export_repository
    out, _ = sample_build
    written = export_repository(out, str(tmp_path / "repo"))
    text = open(os.path.join(written[0]["dir"], "config.pbtxt")).read()
    assert "the graph selects too" in text and "det_count" in text
