"""Detection builds put to work: ``trtkit.load`` -> ``Detector`` (boxes in each image's own pixels),
``trtkit predict`` (printed, drawn, COCO results JSON), ``serve``'s answer and the Triton export's note.

The detector is a real SSDlite320-MobileNetV3 (4 classes, 128 x 128 letterbox input) exported to ONNX, whose last
convolutions are set so that its answer is known and does not depend on the image: every box code is 0 (each
box is its anchor) and every class logit a constant: background 8 everywhere, except on the 2 x 2 feature map,
where anchor 0 is a cat (score 0.998) and anchor 1 a dog (0.881), and on the 4 x 4 one, where anchor 0 is an owl
(0.198, under the display threshold). So the detections in the model input are read off the ``decoded`` output
by hand, and the ones ``predict`` returns must be those, moved through the letterbox onto the image.

The build is a folder with the ONNX and a manifest as ``pipeline.source`` records a detector (``task``,
``output_kind`` probabilities, ``detection``: the head), written here because the detection build pipeline is
not finished.
"""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")

from conftest import run_cli  # noqa: E402
import trtkit  # noqa: E402
from trtkit.contract import InputContract  # noqa: E402
from trtkit.errors import InputError  # noqa: E402

NAMES = ["background", "cat", "dog", "owl"]
CONTRACT = InputContract(size=128, mean=(0.5,) * 3, std=(0.5,) * 3, resize="letterbox", class_names=NAMES)
CAT, DOG, OWL = 1, 2, 3


def known_detector():
    """The SSDlite of the module doc, as trtkit exports it (one ``decoded`` tensor)."""
    from trtkit.models.detection import create_detection_model
    from trtkit.models.detection.export import deployable
    model = create_detection_model("ssdlite320_mobilenet_v3_large", num_classes=4, contract=CONTRACT).eval()
    scores = model.head.classification_head.module_list
    codes = model.head.regression_head.module_list
    with torch.no_grad():
        for block in list(scores) + list(codes):
            block[1].weight.zero_()
            block[1].bias.zero_()
        for block in scores:
            block[1].bias.view(-1, 4)[:, 0] = 8.0  # channel = anchor * classes + class
        scores[2][1].bias.view(-1, 4)[0, CAT] = 14.0
        scores[2][1].bias.view(-1, 4)[1, DOG] = 10.0
        scores[1][1].bias.view(-1, 4)[0, OWL] = 6.6
    return deployable(model)


@pytest.fixture(scope="module")
def det_build(tmp_path_factory):
    """A build folder: the detector's FP32 ONNX and a manifest with its head."""
    from trtkit.onnx.export import export_onnx
    folder = str(tmp_path_factory.mktemp("det") / "build")
    os.makedirs(folder)
    model = known_detector()
    export_onnx(model, os.path.join(folder, "ssdlite.fp32.onnx"), exporter="torchscript")
    info = {"name": "ssdlite", "source": "checkpoint", "num_classes": 4, "input": CONTRACT.to_dict(),
            "task": "detection", "output_kind": "probabilities", "detection": model.detection_head.to_dict()}
    artifact = {"name": "ssdlite.fp32", "backend": "onnxruntime", "path": "ssdlite.fp32.onnx",
                "onnx": "ssdlite.fp32.onnx", "precision": "fp32", "status": "ok", "throughput_ips": 1.0}
    with open(os.path.join(folder, "manifest.json"), "w") as handle:
        json.dump({"manifest_version": 1, "model": info, "artifacts": [artifact], "files": [artifact["path"]]},
                  handle)
    return folder


def expected_in_input(model, threshold):
    """(boxes in the model input, scores, labels) of the detections, read off ``decoded`` by hand: the rows whose
    best non-background class scores at least ``threshold`` (none of them overlap enough for NMS)."""
    decoded = model.decoded(np.zeros((1, 3, 128, 128), np.float32))[0]
    scores = decoded[:, 5:]
    rows = np.flatnonzero(scores.max(1) >= threshold)
    return decoded[rows, :4], scores[rows].max(1), scores[rows].argmax(1) + 1


def by_hand(boxes, width, height):
    """Model-input boxes on a ``width`` x ``height`` image through the 128 x 128 letterbox, clipped to it."""
    scale = 128.0 / max(width, height)
    new_w, new_h = int(round(width * scale)), int(round(height * scale))
    left, top = int(round((128 - new_w) / 2.0 - 0.1)), int(round((128 - new_h) / 2.0 - 0.1))
    x = (boxes[:, [0, 2]] - left) * width / float(new_w)
    y = (boxes[:, [1, 3]] - top) * height / float(new_h)
    out = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], 1)
    return np.clip(out, 0, [width, height, width, height])


def same_detections(found, boxes, scores, labels):
    """``found`` holds exactly these detections (any order among equals), best first."""
    assert len(found) == len(boxes)
    assert np.all(np.diff(found.scores) <= 0)
    def order(boxes, labels):
        rounded = np.round(np.asarray(boxes, np.float64), 2)
        return np.lexsort(tuple(rounded[:, ::-1].T) + (np.asarray(labels),))
    mine, theirs = order(found.boxes, found.labels), order(boxes, labels)
    assert found.labels[mine].tolist() == np.asarray(labels)[theirs].tolist()
    np.testing.assert_allclose(found.boxes[mine], np.asarray(boxes)[theirs], atol=1e-3)
    np.testing.assert_allclose(found.scores[mine], np.asarray(scores)[theirs], atol=1e-6)


def grey(width, height):
    return np.full((height, width, 3), 90, dtype=np.uint8)


def test_predict_gives_boxes_in_each_images_pixels(det_build):
    with trtkit.load(det_build) as model:
        assert isinstance(model, trtkit.Detector) and model.task == "detection" and model.num_classes == 4
        assert model.names == NAMES and model.head.postprocessing.detections_per_img == 300
        boxes, scores, labels = expected_in_input(model, 0.3)
        assert sorted(labels.tolist()) == [CAT] * 4 + [DOG] * 4  # the owls score 0.198
        for width, height in ((200, 100), (90, 170), (128, 128)):
            found, = model.predict(grey(width, height))
            assert found.size == (width, height)
            same_detections(found, by_hand(boxes, width, height), scores, labels)
            assert [name for _, _, label, name in found] == [NAMES[label] for label in found.labels]
        float_input = model.predict(np.zeros((3, 128, 128), np.float32))[0]  # no original: the input's pixels
        assert float_input.size is None
        same_detections(float_input, boxes, scores, labels)


def test_score_threshold_and_boxes_outside_the_image(det_build):
    with trtkit.load(det_build) as model:
        boxes, scores, labels = expected_in_input(model, 0.01)
        assert len(boxes) == 24 and (labels == OWL).sum() == 16
        everything, = model.predict(grey(200, 100), score_threshold=0.0)  # all the head keeps
        same_detections(everything, by_hand(boxes, 200, 100), scores, labels)
        # a 400 x 100 image fills rows 48-80 of the input: the owls of the first and last rows lie in the padding
        wide, = model.predict(grey(400, 100), score_threshold=0.0)
        inside = (boxes[:, 3] > 48) & (boxes[:, 1] < 80)
        assert len(wide) == inside.sum() == 16
        assert np.all(wide.boxes[:, 2] > wide.boxes[:, 0]) and np.all(wide.boxes[:, 3] > wide.boxes[:, 1])
        assert wide.boxes.min() >= 0 and wide.boxes[:, [0, 2]].max() <= 400 and wide.boxes[:, [1, 3]].max() <= 100
        assert len(model.predict(grey(200, 100), score_threshold=0.9)[0]) == 4  # the cats only
        assert len(model.predict(grey(200, 100))[0]) == 8  # the display threshold again: options are per call


def test_head_overrides_and_bad_options(det_build):
    with trtkit.load(det_build) as model:
        assert len(model.predict(grey(64, 64), max_detections=3)[0]) == 3
        # the dog anchors hold the cat anchors at IoU 0.87: across classes the cats (higher) keep their place
        agnostic, = model.predict(grey(64, 64), class_agnostic=True)
        assert sorted(agnostic.names) == ["cat"] * 4
        model.configure(class_agnostic=True, score_threshold=0.5)
        assert model.head.postprocessing.class_agnostic and len(model.predict(grey(64, 64))[0]) == 4
        model.configure(class_agnostic=False, score_threshold=0.3)
        assert len(model.predict(grey(64, 64))[0]) == 8
        with pytest.raises(InputError, match="score_threshold .--score-threshold. must be in"):
            model.predict(grey(64, 64), score_threshold=2)
        with pytest.raises(InputError, match="has no option 'top_k'"):
            model.predict(grey(64, 64), top_k=3)
        raw = model.decoded([grey(50, 40), grey(40, 50)])
        assert raw.shape == (2, 522, 8)
        assert [len(d) for d in model.detections(raw, [(50, 40), None])] == [8, 8]


def test_a_detector_without_its_manifest_says_so(det_build):
    from trtkit.app.detector import _head_of
    from trtkit.app.locate import Target
    target = Target(os.path.join(det_build, "ssdlite.fp32.onnx"), "onnxruntime", CONTRACT, task="detection")
    with pytest.raises(InputError, match="recorded in its build's manifest"):
        _head_of(target)


def test_predict_prints_draws_and_writes_coco_results(det_build, tmp_path):
    folder = tmp_path / "photos"
    os.makedirs(str(folder / "a"))
    files = [str(folder / "a" / "wide.png"), str(folder / "tall.jpg")]
    sizes = [(200, 100), (90, 170)]
    for path, (width, height) in zip(files, sizes):
        Image.fromarray(grey(width, height)).save(path, quality=95)
    out = str(tmp_path / "drawn")
    result = run_cli(["predict", det_build, str(folder), "--out", out, "--json"])
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    ordered = sorted(files)  # predict's order: folders expanded and sorted
    assert [r["image"] for r in printed] == ordered
    with trtkit.load(det_build) as model:
        local = model.predict(ordered)
    results = json.load(open(os.path.join(out, "detections.json")))
    images = json.load(open(os.path.join(out, "images.json")))
    assert [(i["id"], i["file_name"]) for i in images["images"]] == [(1, ordered[0]), (2, ordered[1])]
    assert images["categories"] == [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}, {"id": 3, "name": "owl"}]
    for image_id, (record, found) in enumerate(zip(printed, local), 1):
        assert [d["name"] for d in record["detections"]] == found.names
        mine = [r for r in results if r["image_id"] == image_id]
        assert all(set(r) == {"image_id", "category_id", "bbox", "score"} for r in mine)
        assert [r["category_id"] for r in mine] == found.labels.tolist()
        xywh = np.array([r["bbox"] for r in mine])
        np.testing.assert_allclose(xywh[:, :2], found.boxes[:, :2], atol=0.01)
        np.testing.assert_allclose(xywh[:, :2] + xywh[:, 2:], found.boxes[:, 2:], atol=0.02)
        drawn = np.asarray(Image.open(record["drawn"]).convert("RGB"))
        photo = np.asarray(Image.open(record["image"]).convert("RGB"))
        assert drawn.shape == photo.shape
        changed = np.any(drawn != photo, axis=2)
        x1, y1, x2, y2 = [int(v) for v in found.boxes[0]]
        assert changed[(y1 + y2) // 2, x1] and changed[y2 - 1, (x1 + x2) // 2]  # its left and bottom edges
        assert 0.01 < changed.mean() < 0.5  # outlines and labels, not filled boxes
    assert all(os.path.basename(r["drawn"]) in ("wide.boxes.png", "tall.boxes.png") for r in printed)
    assert os.path.isfile(os.path.join(out, "a", "wide.boxes.png"))

    bad = run_cli(["predict", det_build, files[0], "--max-detections", "0"])
    assert bad.returncode == 2 and "error: max_detections (--max-detections) must be at least 1" in bad.stderr
    assert "Traceback" not in bad.stderr
    text = run_cli(["predict", det_build, files[0], "--score-threshold", "0.9"])
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "{}: 4 detections".format(files[0]) and all(line.split()[0] == "cat" for line in lines[1:])


class FakeTensor(object):
    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, shape


def test_serve_answer_pads_to_the_heads_detections_per_image(det_build):
    from trtkit import tasks
    task = tasks.of("detection")
    with trtkit.load(det_build) as model:
        outputs = dict((t.name, t) for t in task.serve_outputs(FakeTensor, model, 5, None))
        assert [outputs[n].shape for n in ("boxes", "scores", "classes", "names", "count")] == \
            [(300, 4), (300,), (300,), (300,), (1,)]
        photos = [grey(200, 100), grey(90, 170)]
        logits = model.decoded(photos)
        answer = task.serve_answer(model, logits, [(200, 100), (90, 170)], 5)
        assert set(answer) == set(outputs)
        for name, spec in outputs.items():
            assert answer[name].shape == (2,) + spec.shape, name
        expected = model.predict(photos, score_threshold=0.0)
        assert answer["count"].tolist() == [[24], [len(expected[1])]]
        for row, found in enumerate(expected):
            count = len(found)
            np.testing.assert_allclose(answer["boxes"][row, :count], found.boxes)
            np.testing.assert_allclose(answer["scores"][row, :count], found.scores)
            assert answer["classes"][row, :count].tolist() == found.labels.tolist()
            assert [n.decode() for n in answer["names"][row, :count]] == found.names
            assert (answer["classes"][row, count:] == -1).all() and (answer["scores"][row, count:] == 0).all()
            assert (answer["boxes"][row, count:] == 0).all() and set(answer["names"][row, count:]) == {b""}


def test_triton_export_says_what_the_client_runs(det_build, tmp_path):
    from trtkit.deploy.triton import export_repository
    written = export_repository(det_build, str(tmp_path / "repo"))
    text = open(os.path.join(written[0]["dir"], "config.pbtxt")).read()
    assert written[0]["task"] == "detection"
    assert "# detection: 'decoded' holds [A, 4 + C] per image" in text
    assert "above 0.001, the best 300 per class (class 0 is the background" in text
    assert "NMS at IoU 0.55 within each class" in text

    class IO(object):
        class Out(object):
            name, dims = "logits", [-1, 10]
        outputs = [Out()]
    from trtkit import tasks
    with pytest.raises(InputError, match="not one .N, anchors, 4 . classes. tensor"):
        tasks.of("detection").triton_note(IO(), "m")
