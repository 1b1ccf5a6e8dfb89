"""trtkit.detect.metrics (COCO mAP by a maintained evaluator) and trtkit.detect.agreement (a variant against
FP32's detections): figures checked against values worked out by hand, and the two evaluators against each
other."""

import importlib
import sys

import numpy as np
import pytest

from trtkit.detect.agreement import DetectionAgreement, box_iou, greedy_match
from trtkit.detect.metrics import EVALUATORS, CocoMap
from trtkit.detect.records import Detections
from trtkit.errors import InputError, MissingDependency

MODULES = {"faster-coco-eval": "faster_coco_eval", "pycocotools": "pycocotools.cocoeval"}


def _installed(name):
    try:
        importlib.import_module(MODULES[name])
        return True
    except ImportError:
        return False


evaluators = pytest.mark.parametrize("evaluator", [
    pytest.param(name, marks=pytest.mark.skipif(not _installed(name), reason=name + " is not installed"))
    for name in EVALUATORS])


def _dets(boxes, scores, labels):
    return Detections(np.asarray(boxes, np.float32).reshape(-1, 4), scores, labels)


def _scene(rng, count=3):
    """(boxes, labels): ``count`` random boxes of 3 classes in a 640 x 480 image."""
    xy = rng.uniform([0, 0], [520, 360], size=(count, 2))
    wh = rng.uniform(20, 120, size=(count, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32), rng.randint(0, 3, size=count)


# ------------------------------------------------------------------ mAP

@evaluators
def test_perfect_detections_score_one_and_print_nothing(evaluator, capsys):
    rng = np.random.RandomState(0)
    evaluation = CocoMap(evaluator)
    for image in range(10):
        boxes, labels = _scene(rng, 4)
        evaluation.update(image, boxes, labels, _dets(boxes, rng.uniform(0.3, 1.0, 4), labels))
    result = evaluation.result()
    assert result["map"] == pytest.approx(1.0) and result["map50"] == pytest.approx(1.0)
    assert result["map75"] == pytest.approx(1.0)
    assert result["images"] == 10 and result["ground_truth_boxes"] == 40 and result["detections"] == 40
    assert result["evaluator"].startswith(evaluator + " ")
    assert capsys.readouterr().out == ""  # the evaluators' progress and tables are captured


@evaluators
def test_iou_two_thirds_counts_at_half_not_at_three_quarters(evaluator):
    # a 100 x 100 box shifted 20 px: intersection 80 x 100, union 120 x 100, IoU 0.667: a match at the
    # thresholds 0.50, 0.55, 0.60, 0.65 (4 of COCO's 10), none from 0.70 on
    evaluation = CocoMap(evaluator)
    for image in range(3):
        evaluation.update(image, [[0, 0, 100, 100]], [1], _dets([[20, 0, 120, 100]], [0.9], [1]))
    result = evaluation.result()
    assert result["map50"] == pytest.approx(1.0)
    assert result["map75"] == pytest.approx(0.0)
    assert result["map"] == pytest.approx(0.4)
    assert result["class_ap"] == [None, pytest.approx(0.4)]


@evaluators
def test_crowd_region_is_neither_found_nor_missed(evaluator):
    boxes = [[10, 10, 60, 60], [100, 100, 300, 300]]
    inside = [[10, 10, 60, 60], [110, 110, 160, 160], [200, 200, 260, 260]]  # the person, two in the crowd

    def run(crowd):
        evaluation = CocoMap(evaluator)
        evaluation.update("a.jpg", boxes, [0, 0], _dets(inside, [0.5, 0.9, 0.8], [0, 0, 0]), iscrowd=crowd)
        return evaluation.result()
    assert run([False, True])["map"] == pytest.approx(1.0)
    assert run([False, True])["ignored_boxes"] == 1
    assert run([False, False])["map50"] < 0.5  # as an ordinary box it is missed and its detections are wrong
    undetected = CocoMap(evaluator)
    undetected.update(1, boxes, [0, 0], _dets(inside[:1], [0.5], [0]), iscrowd=[False, True])
    assert undetected.result()["map"] == pytest.approx(1.0)


@evaluators
def test_difficult_objects_are_ignored_though_the_evaluators_overwrite_ignore(evaluator):
    # both evaluators set ignore = iscrowd while preparing; without the step CocoMap adds, the missed
    # difficult object would halve recall (AP 0.505)
    boxes, labels = [[0, 0, 50, 50], [100, 100, 150, 150]], [0, 0]
    missed = CocoMap(evaluator)
    missed.update(0, boxes, labels, _dets(boxes[:1], [0.9], [0]), difficult=[False, True])
    assert missed.result()["map"] == pytest.approx(1.0)
    found = CocoMap(evaluator)
    found.update(0, boxes, labels, _dets(boxes, [0.4, 0.9], [0, 0]), difficult=[False, True])
    assert found.result()["map"] == pytest.approx(1.0)  # the detection of it, ranked first, is not an error
    counted = CocoMap(evaluator)
    counted.update(0, boxes, labels, _dets(boxes[:1], [0.9], [0]))
    assert counted.result()["map"] == pytest.approx(0.505, abs=0.001)


@evaluators
def test_detection_on_an_unlabelled_image_is_a_false_positive(evaluator):
    evaluation = CocoMap(evaluator)
    evaluation.update(0, [[0, 0, 50, 50]], [0], _dets([[0, 0, 50, 50]], [0.8], [0]))
    evaluation.update(1, np.zeros((0, 4)), [], _dets([[10, 10, 40, 40]], [0.9], [0]))
    # ranked first, the false positive holds precision at 1/2 up to full recall: AP 0.5 at every threshold
    result = evaluation.result()
    assert result["map50"] == pytest.approx(0.5) and result["map"] == pytest.approx(0.5)
    assert result["images"] == 2


@evaluators
def test_class_without_ground_truth_adds_nothing(evaluator):
    evaluation = CocoMap(evaluator, num_classes=4)
    evaluation.update(0, [[0, 0, 50, 50]], [0], _dets([[0, 0, 50, 50], [60, 60, 90, 90]], [0.5, 0.9], [0, 2]))
    result = evaluation.result()
    assert result["map"] == pytest.approx(1.0)
    assert result["class_ap"] == [pytest.approx(1.0), None, None, None]


@evaluators
def test_no_ground_truth_anywhere_has_no_map(evaluator):
    evaluation = CocoMap(evaluator)
    evaluation.update(0, np.zeros((0, 4)), [], _dets([[0, 0, 5, 5]], [0.9], [0]))
    assert evaluation.result()["map"] is None
    missed = CocoMap(evaluator)
    missed.update(0, [[0, 0, 5, 5]], [0], Detections.empty())
    assert missed.result()["map"] == pytest.approx(0.0)


@evaluators
def test_best_hundred_detections_per_image_are_kept(evaluator):
    truth = [[0, 0, 50, 50]]
    others = [[200 + i, 200, 230 + i, 230] for i in range(100)]  # 100 better-scored boxes of a class not there

    def run(cap):
        evaluation = CocoMap(evaluator, max_detections=cap)
        evaluation.update(0, truth, [0], _dets(truth + others, [0.1] + [0.9] * 100, [0] + [1] * 100))
        return evaluation.result()
    # the evaluators cap per image and class (they would keep the one box of class 0); CocoMap per image
    assert run(100)["map"] == pytest.approx(0.0) and run(100)["detections"] == 100
    assert run(101)["map"] == pytest.approx(1.0) and run(101)["detections"] == 101


def _noisy_set(seed=7, images=50):
    """A realistic stream: 0-6 objects of 3 classes per image (some crowd, some difficult, some images
    empty), detections jittered, some objects missed, false positives added, scores loosely tied to quality."""
    rng = np.random.RandomState(seed)
    stream = []
    for image in range(images):
        count = rng.randint(0, 7)
        boxes, labels = _scene(rng, count)
        crowd, difficult = rng.rand(count) < 0.05, rng.rand(count) < 0.08
        kept = rng.rand(count) > 0.2
        sizes = boxes[:, 2:] - boxes[:, :2]
        jitter = rng.normal(0, 0.05, size=(count, 4)) * np.concatenate([sizes, sizes], axis=1)
        found = (boxes + jitter)[kept]
        extra, extra_labels = _scene(rng, rng.randint(0, 4))
        det_boxes = np.concatenate([found, extra]).astype(np.float32)
        det_labels = np.concatenate([labels[kept], extra_labels])
        det_labels = np.where(rng.rand(len(det_labels)) < 0.05, (det_labels + 1) % 3, det_labels)
        scores = np.concatenate([rng.uniform(0.3, 1.0, kept.sum()), rng.uniform(0.05, 0.7, len(extra))])
        stream.append((image, boxes, labels, _dets(det_boxes, scores, det_labels), crowd, difficult))
    return stream


def test_both_evaluators_give_the_same_figures():
    if not all(_installed(name) for name in EVALUATORS):
        pytest.skip("needs both faster-coco-eval and pycocotools")
    results = []
    for evaluator in EVALUATORS:
        evaluation = CocoMap(evaluator)
        for image, boxes, labels, detections, crowd, difficult in _noisy_set():
            evaluation.update(image, boxes, labels, detections, iscrowd=crowd, difficult=difficult)
        results.append(evaluation.result())
    fast, reference = results
    assert 0.2 < reference["map"] < 0.9 and reference["map50"] > reference["map75"] > reference["map"] * 0.5
    assert reference["ignored_boxes"] > 0 and fast["ground_truth_boxes"] == reference["ground_truth_boxes"]
    for key in ("map", "map50", "map75"):
        assert fast[key] == pytest.approx(reference[key], abs=1e-9), key
    assert len(fast["class_ap"]) == len(reference["class_ap"]) == 3
    for mine, theirs in zip(fast["class_ap"], reference["class_ap"]):
        assert mine == pytest.approx(theirs, abs=1e-9)


def test_box_record_and_bad_input():
    from trtkit.data.boxes.record import BoxRecord
    record = BoxRecord("a.jpg", 42, (640, 480), [[0, 0, 50, 50], [60, 60, 99, 99]], [1, 1], difficult=[0, 1])
    evaluation = CocoMap()
    evaluation.update_record(record, _dets([[0, 0, 50, 50]], [0.9], [1]))
    assert evaluation.result()["map"] == pytest.approx(1.0)
    with pytest.raises(InputError, match="twice"):
        evaluation.update_record(record, Detections.empty())
    with pytest.raises(InputError, match="2 boxes, 1 labels"):
        evaluation.update(1, [[0, 0, 1, 1], [1, 1, 2, 2]], [0], Detections.empty())
    with pytest.raises(InputError):
        CocoMap("detectron")


def test_missing_evaluators_name_the_extra(monkeypatch):
    for module in ("faster_coco_eval", "pycocotools", "pycocotools.coco", "pycocotools.cocoeval"):
        monkeypatch.setitem(sys.modules, module, None)  # None in sys.modules: the import raises ImportError
    evaluation = CocoMap()
    evaluation.update(0, [[0, 0, 5, 5]], [0], Detections.empty())
    with pytest.raises(MissingDependency, match=r"trtkit\[detection\]"):
        evaluation.result()


# ------------------------------------------------------------------ agreement with FP32

def test_box_iou_and_greedy_match_by_score():
    assert box_iou([[0, 0, 100, 100]], [[20, 0, 120, 100], [200, 200, 210, 210]]).tolist() == \
        [[pytest.approx(80.0 / 120.0), 0.0]]
    reference = _dets([[0, 0, 100, 100]], [0.9], [0])
    # the better-scored variant box takes the reference box though the other overlaps it more (COCO's order)
    variant = _dets([[0, 0, 100, 100], [30, 0, 130, 100]], [0.5, 0.9], [0, 0])
    assert greedy_match(variant, reference) == [(1, 0, pytest.approx(70.0 / 130.0))]
    assert greedy_match(_dets([[40, 0, 140, 100]], [0.9], [0]), reference) == []  # IoU 0.43
    assert greedy_match(_dets([[0, 0, 100, 100]], [0.9], [1]), reference) == []   # another class


def test_a_box_without_area_matches_itself_only():
    """A box clipped onto the image's edge (no width) made by FP32 and by its variant is the same detection; a
    different degenerate box is not (found on a torchvision SSDlite export whose FP32 agreed 93% with itself)."""
    edge, other = [0, 10, 0, 30], [0, 12, 0, 30]
    assert box_iou([edge, other], [edge]).tolist() == [[1.0], [0.0]]
    assert box_iou([[5, 5, 5, 5]], [[0, 0, 10, 10]]).tolist() == [[0.0]]  # a point inside a box: no overlap
    agreement = DetectionAgreement()
    reference = _dets([edge, [10, 10, 50, 50]], [0.9, 0.8], [0, 1])
    agreement.update(reference, reference)
    assert agreement.result()["f1"] == 1.0


def _reference_stream(seed=3, images=20):
    rng = np.random.RandomState(seed)
    return [_dets(*_scene_with_scores(rng)) for _ in range(images)]


def _scene_with_scores(rng):
    boxes, labels = _scene(rng, rng.randint(1, 6))
    return boxes, rng.uniform(0.4, 1.0, len(boxes)).astype(np.float32), labels


def test_identical_detections_agree_fully():
    agreement = DetectionAgreement()
    for reference in _reference_stream():
        agreement.update(reference, reference)
    result = agreement.result()
    assert result["f1"] == result["top1_agreement"] == pytest.approx(1.0)
    assert result["mean_iou"] == pytest.approx(1.0) and result["mean_score_shift"] == 0.0
    assert result["max_abs_score_shift"] == 0.0 and result["image_agreement"] == 1.0
    assert result["images_with_reference"] == 20 and result["empty_reference"] is False
    low, high = result["intervals"]["recall"]
    assert high == 1.0 and 0.9 < low < 1.0
    assert result["intervals"]["f1"] == result["intervals"]["top1_agreement"]


def test_squeezed_scores_show_as_a_negative_shift():
    agreement = DetectionAgreement()
    shifts = []
    for reference in _reference_stream():
        squeezed = Detections(reference.boxes + 1.0, reference.scores * 0.8, reference.labels)
        shifts.extend(squeezed.scores.astype(np.float64) - reference.scores)
        agreement.update(squeezed, reference)
    result = agreement.result()
    assert result["f1"] == pytest.approx(1.0)
    assert result["mean_score_shift"] == pytest.approx(np.mean(shifts), abs=1e-6)
    assert result["mean_score_shift"] < -0.08
    assert result["max_abs_score_shift"] == pytest.approx(np.max(np.abs(shifts)), abs=1e-6)
    assert 0.9 < result["mean_iou"] < 1.0


def test_missing_detections_give_a_known_f1():
    reference = _dets([[10 * i, 0, 10 * i + 8, 8] for i in range(10)], np.linspace(0.9, 0.5, 10), [0] * 10)
    variant = Detections(reference.boxes[:6], reference.scores[:6], reference.labels[:6])
    agreement = DetectionAgreement()
    agreement.update(variant, reference)
    agreement.update(Detections.empty(), Detections.empty())
    result = agreement.result()
    assert result["f1"] == pytest.approx(12.0 / 16.0)
    assert result["recall"] == pytest.approx(0.6) and result["precision"] == pytest.approx(1.0)
    assert result["image_agreement"] == pytest.approx(0.5) and result["images_with_reference"] == 1
    low, high = result["intervals"]["f1"]
    assert low < 0.75 < high
    nothing = DetectionAgreement()
    nothing.update(Detections.empty(), reference)
    assert nothing.result()["f1"] == 0.0 and nothing.result()["precision"] is None
    assert nothing.result()["intervals"]["f1"][0] == 0.0


def test_empty_reference_has_no_agreement_and_fails_the_gate():
    agreement = DetectionAgreement()
    for _ in range(5):
        agreement.update(_dets([[0, 0, 10, 10]], [0.6], [0]), Detections.empty())
    result = agreement.result()
    assert result["f1"] is None and result["top1_agreement"] is None and result["empty_reference"] is True
    assert "f1" not in result["intervals"]
    from trtkit.pipeline.gate import judge
    record = {"name": "int8", "precision": "int8", "verify": {"top1_agreement": result["top1_agreement"]}}
    judge(record, 0.99)
    assert record["status"] == "failing"
