"""``trtkit.detect.select`` (numpy) selects the detections ``models.detection.postprocess`` (torch, torchvision's
decisions) selects: same boxes, scores, labels, same order.

On random detectors' outputs (RetinaNet-R18 per level, SSDlite per class; weights shaped by
``test_detection_models.spread`` so that scores spread, NMS drops boxes and top-k truncates) and on synthetic
cases: IoU exactly at the threshold, empty images, nothing above the score threshold, more candidates than
top-k, class-agnostic NMS, another background class. Scores are made distinct where torch's order is not
defined (ties: see ``select``'s docstring); one test states numpy's tie rule.
"""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trtkit.detect.select as select_module  # noqa: E402
from test_detection_models import scattered, spread  # noqa: E402
from trtkit.detect.params import DetectionHead, PostProcessing  # noqa: E402
from trtkit.detect.select import select, select_decoded  # noqa: E402
from trtkit.errors import InputError  # noqa: E402
from trtkit.models.detection import create_detection_model  # noqa: E402
from trtkit.models.detection.export import deployable, detection_head  # noqa: E402
from trtkit.models.detection.postprocess import postprocess  # noqa: E402


def distinct(scores):
    """``scores`` (float32) with equal values nudged up by float32 steps until all differ, order kept."""
    flat = np.array(scores, dtype=np.float32).reshape(-1)
    order = np.argsort(flat, kind="stable")
    values = flat[order]
    for position in np.flatnonzero(np.diff(values) <= 0) + 1:
        if values[position] <= values[position - 1]:
            values[position] = np.nextafter(values[position - 1], np.float32(2))
    for position in range(1, len(values)):  # a nudge can meet the next value
        if values[position] <= values[position - 1]:
            values[position] = np.nextafter(values[position - 1], np.float32(2))
    flat[order] = values
    return flat.reshape(np.shape(scores))


def torch_select(boxes, scores, head, level_sizes=None):
    return postprocess(torch.from_numpy(boxes), torch.from_numpy(scores), head, level_sizes)


def assert_same(expected, found):
    assert len(expected) == len(found)
    for theirs, ours in zip(expected, found):
        assert np.array_equal(theirs["labels"].numpy(), ours.labels)
        assert np.array_equal(theirs["scores"].numpy(), ours.scores)
        assert np.array_equal(theirs["boxes"].numpy(), ours.boxes)


@pytest.fixture(scope="module")
def outputs():
    """(head, decoded, (H, W)) of a random RetinaNet-R18 at 128 x 160 (2 images) and SSDlite at 320, spread."""
    found = {}
    for name, size, count in (("retinanet_resnet18_fpn", (128, 160), 2), ("ssdlite320_mobilenet_v3_large", (320, 320), 1)):
        torch.manual_seed(0)
        model = create_detection_model(name, num_classes=5).eval()
        x = torch.randn(count, 3, *size, generator=torch.Generator().manual_seed(1))
        model.load_state_dict(spread(model, scattered(model, seed=3), x))
        with torch.no_grad():
            decoded = deployable(model)(x).numpy()
        decoded[..., 4:] = distinct(decoded[..., 4:])
        found[name] = (detection_head(model), decoded, size)
    return found


@pytest.mark.parametrize("name", ["retinanet_resnet18_fpn", "ssdlite320_mobilenet_v3_large"])
@pytest.mark.parametrize("overrides", [  # top-k 300: under the candidates of a level of RetinaNet at 128 x 160
    {"topk_candidates": 300}, {"topk_candidates": 300, "detections_per_img": 100000},
    {"topk_candidates": 300, "class_agnostic": True}, {"topk_candidates": 50, "nms_thresh": 0.3}])
def test_same_as_torch_on_random_models(outputs, name, overrides):
    head, decoded, (height, width) = outputs[name]
    head = head.with_postprocessing(**overrides)
    boxes, scores = decoded[..., :4], decoded[..., 4:]
    sizes = head.level_sizes(height, width)
    found = select_decoded(decoded, head, height, width)
    assert_same(torch_select(boxes, scores, head, sizes), found)
    params = head.postprocessing
    groups = np.split(scores[0], np.cumsum(sizes)[:-1]) if params.per_level else [scores[0][:, c] for c in range(1, 5)]
    candidates = sum(min(int((group > params.score_thresh).sum()), params.topk_candidates) for group in groups)
    assert max(int((group > params.score_thresh).sum()) for group in groups) > params.topk_candidates  # top-k cuts
    survivors = select_decoded(decoded, head.with_postprocessing(detections_per_img=10 ** 6), height, width)
    assert 20 <= len(found[0]) and len(survivors[0]) < candidates  # NMS drops boxes
    assert len(np.unique(found[0].labels)) > 1


def head_of(num_classes=3, background=None, per_level=False, **params):
    values = dict(score_thresh=0.05, nms_thresh=0.5, detections_per_img=100, topk_candidates=1000,
                  per_level=per_level)
    values.update(params)
    levels = [(8, 1), (16, 1)] if per_level else None
    return DetectionHead(num_classes, PostProcessing(**values), background=background, levels=levels)


def random_case(count, classes, seed, span=200.0):
    generator = np.random.RandomState(seed)
    corner = generator.rand(1, count, 2) * span
    boxes = np.concatenate([corner, corner + generator.rand(1, count, 2) * span / 3], -1).astype(np.float32)
    scores = distinct(generator.rand(1, count, classes).astype(np.float32) ** 2)
    return boxes, scores


@pytest.mark.parametrize("count,classes,background", [(60, 3, None), (300, 4, 0), (900, 6, 2), (3000, 3, None)])
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.55])
def test_same_as_torch_on_synthetic_boxes(count, classes, background, threshold):
    """Few candidates (torch shifts the labels' boxes apart, one NMS) and many (one NMS per label)."""
    boxes, scores = random_case(count, classes, seed=count + classes)
    for agnostic in (False, True):
        head = head_of(classes, background, nms_thresh=threshold, class_agnostic=agnostic, topk_candidates=700)
        assert_same(torch_select(boxes, scores, head), select(boxes, scores, head))


def test_per_level_top_k_and_background():
    boxes, scores = random_case(200, 4, seed=5)
    for background in (None, 1):
        head = head_of(4, background, per_level=True, topk_candidates=40)
        found = select(boxes, scores, head, [120, 80])
        assert_same(torch_select(boxes, scores, head, [120, 80]), found)
        assert background is None or background not in found[0].labels


def test_iou_exactly_at_the_threshold():
    """IoU 0.5 exactly keeps the box (strictly above drops); IoU 55/100, 0.550000012 in float32, drops it at
    0.55 (the float overlap against the double threshold, torchvision's CPU kernel)."""
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 5], [20, 20, 30, 30], [20, 20, 30, 25.5]]], np.float32)
    scores = np.array([[[0.9], [0.8], [0.7], [0.6]]], np.float32)
    for threshold, kept in ((0.5, [0, 1, 2]), (0.55, [0, 1, 2])):
        head = head_of(1, nms_thresh=threshold)
        found = select(boxes, scores, head)[0]
        assert_same(torch_select(boxes, scores, head), [found])
        assert found.boxes.tolist() == boxes[0, kept].tolist()
    head = head_of(1, nms_thresh=0.549)
    assert len(select(boxes, scores, head)[0]) == 3


def test_a_mutated_comparison_fails(monkeypatch):
    """The exact-threshold test can fail: comparing with >= (the threshold one float32 step lower) keeps a
    different set."""
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], np.float32)
    scores = np.array([[[0.9], [0.8]]], np.float32)
    head = head_of(1, nms_thresh=0.5)
    assert len(select(boxes, scores, head)[0]) == 2
    monkeypatch.setattr(select_module, "float32_threshold",
                        lambda t: np.nextafter(np.float32(t), np.float32(-1)))
    assert len(select(boxes, scores, head)[0]) == 1


def test_empty_images_and_nothing_above_the_threshold():
    boxes, scores = random_case(50, 3, seed=1)
    head = head_of(3, score_thresh=0.99999)
    assert [len(d) for d in select(boxes, scores * 0.5, head)] == [0]
    empty = select(np.zeros((2, 0, 4), np.float32), np.zeros((2, 0, 3), np.float32), head_of(3, background=0))
    assert [len(d) for d in empty] == [0, 0] and empty[0].boxes.shape == (0, 4)
    assert [len(d) for d in select(boxes, np.zeros_like(scores), head_of(3))] == [0]


def test_more_candidates_than_top_k_and_detections():
    boxes, scores = random_case(500, 2, seed=3)
    head = head_of(2, topk_candidates=30, detections_per_img=25, nms_thresh=1.0)  # NMS drops nothing
    found = select(boxes, scores, head)[0]
    assert_same(torch_select(boxes, scores, head), [found])
    assert len(found) == 25 and np.all(np.diff(found.scores) <= 0)
    best = np.sort(scores[0].reshape(-1))[::-1]
    assert found.scores.tolist() == best[:25].tolist()  # the best 30 per class, the best 25 of those


def test_class_agnostic_drops_across_labels():
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 9]]], np.float32)
    scores = np.array([[[0.9, 0.1], [0.1, 0.8]]], np.float32)
    assert select(boxes, scores, head_of(2))[0].labels.tolist() == [0, 1]
    agnostic = head_of(2, class_agnostic=True)
    assert select(boxes, scores, agnostic)[0].labels.tolist() == [0]
    assert_same(torch_select(boxes, scores, agnostic), select(boxes, scores, agnostic))


def test_ties_go_in_candidate_order():
    """numpy's documented tie rule (torch's is its unstable sort's): equal scores are visited in candidate
    order, so of two overlapping equal-scored boxes of a class the lower anchor is kept, and a top-k cut
    through a tie keeps the lowest anchors."""
    boxes = np.array([[[0, 0, 10, 10], [1, 0, 10, 10], [50, 50, 60, 60], [50, 50, 61, 60]]], np.float32)
    scores = np.array([[[0.5], [0.5], [0.7], [0.7]]], np.float32)
    found = select(boxes, scores, head_of(1))[0]
    assert found.boxes.tolist() == boxes[0, [2, 0]].tolist()
    found = select(boxes, np.full_like(scores, 0.5), head_of(1, topk_candidates=2, nms_thresh=1.0))[0]
    assert found.boxes.tolist() == boxes[0, [0, 1]].tolist()


def test_refusals():
    boxes, scores = random_case(20, 3, seed=2)
    with pytest.raises(InputError, match="level_sizes"):
        select(boxes, scores, head_of(3, per_level=True))
    with pytest.raises(InputError, match="add up to"):
        select(boxes, scores, head_of(3, per_level=True), [10, 5])
    with pytest.raises(InputError, match="classes"):
        select(boxes, scores, head_of(4))
    with pytest.raises(InputError, match="DetectionHead"):
        select(boxes, scores, head_of(3).postprocessing)


def test_ssd300_sized_image_is_fast():
    """8732 anchors x 91 classes (SSD300's), softmax scores of spread logits: ~36,000 candidates, 90 NMS."""
    generator = np.random.RandomState(0)
    corner = generator.rand(1, 8732, 2) * 300
    boxes = np.concatenate([corner, np.minimum(corner + 5 + generator.rand(1, 8732, 2) * 80, 300)], -1)
    logits = generator.randn(1, 8732, 91) * 1.5
    scores = distinct(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))
    boxes = boxes.astype(np.float32)
    head = DetectionHead(91, PostProcessing(0.01, 0.45, 200, 400, False), background=0)
    took = []
    for _ in range(3):
        start = time.time()
        found = select(boxes, scores, head)
        took.append(time.time() - start)
    assert_same(torch_select(boxes, scores, head), found)
    print("select, SSD300 image (8732 x 91): {:.0f} ms".format(1000 * min(took)))
    assert min(took) < 1.0
