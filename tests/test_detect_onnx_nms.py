"""``trtkit.detect.onnx_nms``: the selection as ONNX operators gives ``select``'s detections in ONNX Runtime and
OpenVINO, on random detectors exported with ``torch.onnx.export`` (RetinaNet-R18 per level, SSDlite per class)
and on synthetic ``decoded`` tensors (``nms_graph``): IoU at the threshold, class-agnostic NMS, a background
class, padding, dynamic batch, and the refusals.

Each runtime's NMS graph is compared with ``select`` on that runtime's own ``decoded`` (the original model run
by the same runtime), so the comparison is of the selection alone: the same set of detections (labels and
boxes equal), ordered by score, scores within 1e-6.
"""

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from test_detect_select import distinct  # noqa: E402
from test_detection_models import scattered, spread  # noqa: E402
from trtkit.detect.onnx_nms import append_nms, nms_graph  # noqa: E402
from trtkit.detect.params import DetectionHead, PostProcessing  # noqa: E402
from trtkit.detect.select import select  # noqa: E402
from trtkit.errors import InputError  # noqa: E402
from trtkit.models.detection import create_detection_model  # noqa: E402
from trtkit.models.detection.export import deployable, detection_head  # noqa: E402


def run_ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_openvino(model, feeds, tmp_path):
    ov = pytest.importorskip("openvino")
    path = str(tmp_path / "model_{}.onnx".format(abs(hash(model.SerializeToString())) % 10 ** 8))
    onnx.save(model, path)
    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    result = compiled(feeds)
    return [np.asarray(result[output]) for output in compiled.outputs]


EQUAL_SUPPRESSES = {"onnxruntime": False, "openvino": True}  # OpenVINO drops a box at IoU == threshold
RUNNERS = {"onnxruntime": lambda model, feeds, tmp_path: run_ort(model, feeds), "openvino": run_openvino}


def tied(decoded, head):
    """Whether two candidates of one class score the same (the runtimes' NMS may then visit them in another
    order than ``select``: OpenVINO does)."""
    scores = decoded[..., 4:]
    for image in scores:
        for label in head.detection_classes():
            values = image[:, label][image[:, label] > head.postprocessing.score_thresh]
            if len(np.unique(values)) < len(values):
                return True
    return False


def assert_agrees(outputs, expected, batch, ties=False):
    boxes, scores, labels, counts = outputs
    assert boxes.shape[:2] == scores.shape == labels.shape and counts.shape == (batch,)
    assert boxes.dtype == np.float32 and scores.dtype == np.float32 and labels.dtype == np.int64
    for image, reference in enumerate(expected):
        count = int(counts[image])
        assert count == len(reference)
        assert np.all(np.diff(scores[image, :count]) <= 0)
        assert np.all(labels[image, count:] == -1) and np.all(scores[image, count:] == 0)
        assert np.all(boxes[image, count:] == 0)
        if ties:  # which of the tied boxes is kept may differ: the scores agree
            assert np.allclose(scores[image, :count], reference.scores, rtol=0, atol=1e-6)
            continue
        found = sorted(zip(labels[image, :count].tolist(), boxes[image, :count].tolist()))
        assert found == sorted(zip(reference.labels.tolist(), reference.boxes.tolist()))
        assert np.allclose(scores[image, :count], reference.scores, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def exported():
    """(head, ONNX model with a dynamic batch, images, (H, W)) of a random RetinaNet-R18 at 128 x 128 and
    SSDlite at 160 x 160, 4 classes, weights spread (``test_detection_models.spread``)."""
    found = {}
    for name, size in (("retinanet_resnet18_fpn", (128, 128)), ("ssdlite320_mobilenet_v3_large", (160, 160))):
        torch.manual_seed(0)
        model = create_detection_model(name, num_classes=4).eval()
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
        model.load_state_dict(spread(model, scattered(model, seed=3), x))
        buffer = io.BytesIO()
        torch.onnx.export(deployable(model), x, buffer, input_names=["images"], output_names=["decoded"],
                          opset_version=13, dynamic_axes={"images": {0: "N"}, "decoded": {0: "N"}}, dynamo=False)
        found[name] = (detection_head(model), onnx.load_from_string(buffer.getvalue()), x.numpy(), size)
    return found


OVERRIDES = [{"topk_candidates": 100}, {"topk_candidates": 100, "class_agnostic": True}, {"detections_per_img": 30}]


def _nms_cases():
    """Every option on ONNX Runtime, the first on each other runtime in the landing tier; the other runtimes'
    remaining options are the extended tier's (the graph is the same one, its options are constants)."""
    cases = []
    for runtime in sorted(RUNNERS):
        for name in ("retinanet_resnet18_fpn", "ssdlite320_mobilenet_v3_large"):
            for index, overrides in enumerate(OVERRIDES):
                marks = [pytest.mark.extended] if runtime != "onnxruntime" and index else []
                cases.append(pytest.param(runtime, name, overrides, marks=marks,
                                          id="overrides{}-{}-{}".format(index, name, runtime)))
    return cases


@pytest.mark.parametrize("runtime,name,overrides", _nms_cases())
def test_appended_nms_is_select(exported, tmp_path, runtime, name, overrides):
    head, model, images, (height, width) = exported[name]
    head = head.with_postprocessing(**overrides)
    run = RUNNERS[runtime]
    appended = append_nms(model, head, equal_suppresses=EQUAL_SUPPRESSES[runtime])
    assert [o.name for o in appended.graph.output] == ["det_boxes", "det_scores", "det_labels", "det_count"]
    appended.graph.output.extend([model.graph.output[0]])  # and decoded, as this graph computed it
    for batch in (images, images[1:]):  # dynamic batch
        outputs = run(appended, {"images": batch}, tmp_path)
        decoded = outputs[4]
        expected = select(decoded[..., :4], decoded[..., 4:], head, head.level_sizes(height, width))
        assert min(len(d) for d in expected) >= 20
        ties = runtime == "openvino" and tied(decoded, head)  # SSDlite's random scores repeat (ONNX Runtime
        assert_agrees(outputs[:4], expected, len(batch), ties)  # visits ties lowest anchor first, as select)


def synthetic(count, classes, seed, batch=2, span=200.0):
    generator = np.random.RandomState(seed)
    corner = generator.rand(batch, count, 2) * span
    boxes = np.concatenate([corner, corner + generator.rand(batch, count, 2) * span / 3], -1)
    scores = distinct(generator.rand(batch, count, classes).astype(np.float32) ** 2)
    return np.concatenate([boxes.astype(np.float32), scores], -1)


def head_of(classes, background=None, per_level=False, **params):
    values = dict(score_thresh=0.05, nms_thresh=0.5, detections_per_img=60, topk_candidates=80, per_level=per_level)
    values.update(params)
    return DetectionHead(classes, PostProcessing(**values), background=background,
                         levels=[(8, 2), (16, 2)] if per_level else None)


@pytest.mark.parametrize("runtime", sorted(RUNNERS))
@pytest.mark.parametrize("background,per_level,agnostic", [
    (None, False, False), (0, False, False), (0, False, True), (None, True, False), (1, True, False), (None, True, True)])
def test_nms_graph_is_select(tmp_path, runtime, background, per_level, agnostic):
    """Synthetic decoded (distinct scores) at 32 x 64: per-level heads have 2 x 32 + 2 x 8 = 80 anchors."""
    decoded = synthetic(80, 4, seed=3 + 2 * per_level + (background or 0))
    for threshold in (0.3, 0.55):
        head = head_of(4, background, per_level, nms_thresh=threshold, class_agnostic=agnostic)
        sizes = head.level_sizes(32, 64)
        expected = select(decoded[..., :4], decoded[..., 4:], head, sizes)
        graph = nms_graph(head, 80, 32, 64, equal_suppresses=EQUAL_SUPPRESSES[runtime])
        assert_agrees(RUNNERS[runtime](graph, {"decoded": decoded}, tmp_path), expected, 2)


@pytest.mark.parametrize("runtime", sorted(RUNNERS))
@pytest.mark.parametrize("per_level", [False, True])
def test_a_per_class_cap_below_the_total_is_select(tmp_path, runtime, per_level):
    """``max_per_class`` 5 of 60 per image (TensorFlow's ``max_output_size_per_class``): NonMaxSuppression's
    ``max_output_boxes_per_class`` in the graph keeps what ``select`` keeps, each class at most 5 and fewer
    detections than without the cap."""
    decoded = synthetic(80, 4, seed=11)
    head = head_of(4, per_level=per_level, max_per_class=5)
    expected = select(decoded[..., :4], decoded[..., 4:], head, head.level_sizes(32, 64))
    uncapped = select(decoded[..., :4], decoded[..., 4:], head_of(4, per_level=per_level), head.level_sizes(32, 64))
    for capped, whole in zip(expected, uncapped):
        assert np.bincount(capped.labels, minlength=4).tolist() == [5, 5, 5, 5] and len(whole) > 20
    graph = nms_graph(head, 80, 32, 64, equal_suppresses=EQUAL_SUPPRESSES[runtime])
    assert_agrees(RUNNERS[runtime](graph, {"decoded": decoded}, tmp_path), expected, 2)


@pytest.mark.parametrize("runtime", sorted(RUNNERS))
def test_iou_at_the_threshold(tmp_path, runtime):
    """IoU 0.5 exactly (kept, strictly above drops) and 55/100 (0.550000012 in float32: torchvision's CPU kernel
    drops it at 0.55; ONNX compares in float32, so the graph's threshold is 0.55 rounded down)."""
    boxes = [[0, 0, 10, 10], [0, 0, 10, 5], [20, 20, 30, 30], [20, 20, 30, 25.5]]
    decoded = np.array([[box + [score] for box, score in zip(boxes, (0.9, 0.8, 0.7, 0.6))]], np.float32)
    for threshold, count in ((0.5, 3), (0.55, 3), (0.549, 3), (0.56, 4)):
        head = head_of(1, nms_thresh=threshold)
        expected = select(decoded[..., :4], decoded[..., 4:], head)
        assert len(expected[0]) == count
        graph = nms_graph(head, 4, equal_suppresses=EQUAL_SUPPRESSES[runtime])
        assert_agrees(RUNNERS[runtime](graph, {"decoded": decoded}, tmp_path), expected, 1)
    if runtime == "openvino":  # without the option, OpenVINO drops the box at IoU 0.5 exactly
        outputs = RUNNERS[runtime](nms_graph(head_of(1, nms_thresh=0.5), 4), {"decoded": decoded}, tmp_path)
        assert outputs[3].tolist() == [2]


def test_padding_dynamic_anchors_and_opset_11():
    """Fewer detections than K: padding rows; a per-class graph with A dynamic; opset 11 kept."""
    head = head_of(3, background=0, detections_per_img=500)
    graph = nms_graph(head, None, opset=11)
    assert graph.opset_import[0].version == 11
    for anchors in (5, 40):
        decoded = synthetic(anchors, 3, seed=anchors, batch=3)
        expected = select(decoded[..., :4], decoded[..., 4:], head)
        outputs = run_ort(graph, {"decoded": decoded})
        assert outputs[0].shape == (3, 500, 4)
        assert_agrees(outputs, expected, 3)
    assert_agrees(run_ort(nms_graph(head, 40), {"decoded": synthetic(40, 3, seed=1, batch=1)[:, :, :]}),
                  select(synthetic(40, 3, seed=1, batch=1)[..., :4], synthetic(40, 3, seed=1, batch=1)[..., 4:],
                         head), 1)


def test_refusals(exported):
    head, model, _, _ = exported["retinanet_resnet18_fpn"]
    dynamic = onnx.ModelProto()
    dynamic.CopyFrom(model)
    for axis in (2, 3):
        dynamic.graph.input[0].type.tensor_type.shape.dim[axis].dim_param = "HW"
    # dynamic H and W: the level sizes come from the input's shape per run (test_detection_sizes runs them)
    assert "Shape" in [node.op_type for node in append_nms(dynamic, head).graph.node if "trtkit_nms" in node.name]
    assert append_nms(dynamic, head, height=128, width=128).graph.output[0].name == "det_boxes"
    with pytest.raises(InputError, match="anchors"):
        nms_graph(head, 1000, 128, 128)
    with pytest.raises(InputError, match="no output"):
        append_nms(model, head, output_name="boxes")
    with pytest.raises(InputError, match="columns"):
        append_nms(model, head_of(7))
    with pytest.raises(InputError, match="height and width"):
        nms_graph(head_of(3, per_level=True), 80)
