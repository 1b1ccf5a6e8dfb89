"""torchvision's own detection exports (NMS inside, on per-level or per-class top-k candidates) built by trtkit.

Each graph is made here by ``torchvision_exports`` (torchvision's source, its ``torchvision::nms`` a real custom
operator with torchvision's ONNX symbolic, the TorchScript exporter), never stored. The tests check that:

- the export is torchvision's model: ONNX Runtime's detections are the eager model's (F1 at IoU 0.5);
- ``--decoder nms`` (the default for a graph with NMS inside) reads it by structure: the cut at the head's class
  logits and box regression, and the selection torchvision's model was built with (score_thresh, nms_thresh,
  detections_per_img, topk_candidates, per level or per class, the background, the box coder's weights and
  clamp, the anchors);
- trtkit's FP32 build (ONNX Runtime) selects exactly the export's detections on drawn shape-boxes images (same
  count, labels, scores and boxes), and the INT8 build's own gate is reported.

The weights are random, shaped (``test_detection_models.spread``) so that RetinaNet's levels have more candidates
above the threshold than its top-1000: a host NMS over all anchors would differ there, the per-level top-k not.
Slow (exports, VGG16), so extended, except the refusal of an export that resizes inside.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import torchvision_exports  # noqa: E402
from test_detect_nms_tail import f1  # noqa: E402

IMAGES = 16


@pytest.fixture(scope="module")
def tv():
    with torchvision_exports.source() as package:
        yield package


def as_detections(found):
    from trtkit.detect.records import Detections
    return [Detections(d["boxes"].astype(np.float64), d["scores"], d["labels"].astype(np.int64)) for d in found]


def with_area(detections):
    """``detections`` without the boxes of no area (clipped onto the image's edge)."""
    from trtkit.detect.records import Detections
    keep = (detections.boxes[:, 2] > detections.boxes[:, 0]) & (detections.boxes[:, 3] > detections.boxes[:, 1])
    return Detections(detections.boxes[keep], detections.scores[keep], detections.labels[keep])


def assert_same(found, expected):
    """Per image the same detections: count, labels, scores (within 1e-6) and boxes (within 1e-3 px)."""
    for mine, theirs in zip(found, expected):
        assert len(mine) == len(theirs)
        a = np.lexsort(np.c_[mine.boxes.round(2), mine.labels].T)
        b = np.lexsort(np.c_[theirs.boxes.round(2), theirs.labels].T)
        assert np.array_equal(mine.labels[a], theirs.labels[b])
        assert np.abs(mine.scores[a] - theirs.scores[b]).max() < 1e-6
        assert np.abs(mine.boxes[a] - theirs.boxes[b]).max() < 1e-3


def expected_params(model, per_level):
    """What torchvision's ``model`` selects with, in the names ``--decoder nms`` reads them under."""
    return {"score_threshold": pytest.approx(model.score_thresh), "iou_threshold": pytest.approx(model.nms_thresh),
            "detections": model.detections_per_img, "topk_candidates": model.topk_candidates,
            "per_level": per_level, "weights": list(model.box_coder.weights),
            "clamp": pytest.approx(model.box_coder.bbox_xform_clip),
            "activation": "sigmoid" if per_level else "softmax"}


def assert_top_k_matters(cut, params, batch, expected):
    """The cut graph's ``decoded`` selected per level with the top-k read gives the export's detections on every
    image; with no top-k (a host NMS over every candidate above the threshold) it gives other ones on some image:
    a level has more than ``topk_candidates`` above the threshold there, so the comparison can fail."""
    import onnxruntime as ort
    from trtkit.detect.params import DetectionHead, PostProcessing
    from trtkit.detect.select import select_decoded
    from trtkit.pipeline.foreign_detector import DecoderOptions
    from trtkit.detect.decoders import family
    values = DecoderOptions().postprocessing(family("nms").postprocessing(params))
    head = DetectionHead(params["num_classes"], PostProcessing(**values), levels=params["level_anchors"],
                         size_divisible=params["size_divisible"])
    session = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"])
    decoded = [session.run(None, {"images": image[None]})[0] for image in batch]
    size = batch.shape[-2:]
    read = [select_decoded(d, head, *size)[0] for d in decoded]
    every = [select_decoded(d, head.with_postprocessing(topk_candidates=10 ** 9), *size)[0] for d in decoded]
    assert_same(read, expected)
    assert sum(len(a) != len(b) or not np.array_equal(np.sort(a.scores), np.sort(b.scores))
               for a, b in zip(every, expected)) >= 1  # measured: 4 of 16 images (seed 2)


@pytest.mark.extended
@pytest.mark.parametrize("name", ["retinanet_resnet18_fpn", "ssdlite320_mobilenet_v3_large", "ssd300_vgg16"])
def test_torchvision_export_builds_to_its_own_detections(tv, tmp_path, name):
    import trtkit
    from trtkit.pipeline.foreign_detector import decode_graph
    path, model = torchvision_exports.export(tv, name, tmp_path)
    size = torchvision_exports.SIZES[name]
    images, batch = torchvision_exports.drawn(IMAGES, size, seed=21)
    expected = as_detections(torchvision_exports.graph_detections(path, batch.numpy()))
    eager = as_detections(torchvision_exports.eager(model, batch))
    # the export is torchvision's model: boxes with area (a box clipped onto the image's edge has no IoU unless
    # identical, and eager and ONNX Runtime differ in its last bits: SSDlite's 8 per image, F1 0.979 with them)
    assert f1([with_area(e) for e in expected], [with_area(e) for e in eager]) >= 0.99
    assert sum(len(e) for e in expected) >= 20 * IMAGES

    cut, family, params, _ = decode_graph(onnx.load(path), "nms")
    per_level = name.startswith("retinanet")
    assert params["selection"] == "topk_candidates" and family.name == "nms"
    assert dict((k, params[k]) for k in expected_params(model, per_level)) == expected_params(model, per_level)
    assert params["num_classes"] == 7 and params["dropped"]["outputs"] == ["boxes", "scores", "labels"]
    assert params.get("background") == (None if params["per_level"] else 0)
    assert "NonMaxSuppression" not in [n.op_type for n in cut.graph.node] and "If" not in [
        n.op_type for n in cut.graph.node]
    if params["per_level"]:  # RetinaNet: 9 anchors per place at strides 8-128
        assert params["level_anchors"] == [[8, 9], [16, 9], [32, 9], [64, 9], [128, 9]]
        assert_top_k_matters(cut, params, batch.numpy(), expected)

    out = str(tmp_path / "build")
    result = trtkit.build(onnx=path, task="detection", mean=[0, 0, 0], std=[1, 1, 1], resize="stretch",
                          data="shape-boxes", precision="fp32,int8", verify_images=IMAGES, calib_images=16,
                          calib_batch_size=1, backend="onnxruntime", bench_seconds=0, out=out)
    head = result.manifest["model"]["detection"]
    assert head["decoder"]["family"] == "nms" and head["decoder"]["params"]["selection"] == "topk_candidates"
    assert head["postprocessing"]["per_level"] == params["per_level"]
    shown = [with_area(e) for e in expected]  # predict drops a box with no area (app.detector), as shown
    with trtkit.load(out, precision="fp32") as detector:
        found = detector.predict(list(images), score_threshold=0.0)
    assert f1(found, shown) == 1.0
    assert_same(found, shown)
    int8 = [a for a in result.manifest["artifacts"] if a["precision"] == "int8"]
    with trtkit.load(out, precision="int8") as detector:
        quantized = f1(detector.predict(list(images), score_threshold=0.0), shown)
    gate = "{} (agreement with FP32 {})".format(int8[0]["status"], (int8[0]["verify"] or {}).get("top1_agreement"))
    print(name, "FP32 F1 1.000 vs the export; INT8 F1 {:.3f} vs the export; INT8 gate: {}".format(quantized, gate))
    assert int8[0]["status"] in ("ok", "failing")  # verified: the gate's verdict is the build's, reported


@pytest.mark.extended
def test_an_export_that_resizes_inside_is_refused_in_one_line(tv, tmp_path):
    """RetinaNet exported at 256 px with its transform's min_size 320: the graph resizes the image to 320x320
    before the network, its boxes are in those pixels; refused, saying how to export instead."""
    from trtkit.errors import InputError
    from trtkit.pipeline.foreign_detector import decode_graph
    path, _ = torchvision_exports.export(tv, "retinanet_resnet18_fpn", tmp_path, min_size=320)
    with pytest.raises(InputError, match="resizes its image from 256x256 to 320x320 before the network"):
        decode_graph(onnx.load(path), "nms")


@pytest.mark.parametrize("compare", ["Greater", "GreaterOrEqual"])
def test_a_candidate_filter_at_or_above_c_is_read_as_the_float32_just_below(compare):
    """``x[x >= c]`` keeps a score equal to ``c``; the host keeps scores ``> threshold``, so ``>= c`` is read as
    the float32 just below ``c`` (``> c`` as ``c``): the same scores pass, at ``c`` and one float either side."""
    from trtkit.detect.decoders import topk
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    c = np.float32(0.05)
    graph = helper.make_graph([
        helper.make_node(compare, ["x", "c"], ["mask"]), helper.make_node("NonZero", ["mask"], ["where"]),
        helper.make_node("Transpose", ["where"], ["indices"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "indices"], ["kept"])], "filter",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("kept", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(c), "c")])
    index = topk.Index(helper.make_model(graph))
    threshold = topk.filter_threshold(index.producers, index.scalar, "indices")
    scores = np.array([np.nextafter(c, np.float32(0)), c, np.nextafter(c, np.float32(1))], np.float32)
    graph_keeps = scores >= c if compare == "GreaterOrEqual" else scores > c
    assert np.array_equal(scores > np.float32(threshold), graph_keeps)
    assert graph_keeps.sum() == (2 if compare == "GreaterOrEqual" else 1)
