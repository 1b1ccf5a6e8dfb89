"""trtkit.detect.map_interval: the paired bootstrap of a difference of two mAPs on the same images, run by the
maintained COCO evaluator (no evaluator is imitated here)."""

import numpy as np
import pytest

from trtkit.detect.map_interval import describe, paired_map_difference
from trtkit.detect.metrics import CocoMap
from trtkit.detect.records import Detections
from trtkit.errors import InputError

pytest.importorskip("faster_coco_eval")


def _scene(rng, count=3):
    xy = rng.uniform([0, 0], [520, 360], size=(count, 2))
    wh = rng.uniform(20, 120, size=(count, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32), rng.randint(0, 3, size=count)


def _maps(images=120, drop=0.0, jitter=2.0, seed=0):
    """(good, worse): two CocoMaps of the same images; ``worse`` misses a share ``drop`` of the boxes ``good``
    finds (and is otherwise the same detections)."""
    rng = np.random.RandomState(seed)
    good, worse = CocoMap(), CocoMap()
    for image in range(images):
        boxes, labels = _scene(rng)
        found = boxes + rng.normal(0, jitter, boxes.shape).astype(np.float32)
        scores = rng.uniform(0.3, 1.0, len(boxes)).astype(np.float32)
        keep = rng.uniform(size=len(boxes)) >= drop
        good.update(image, boxes, labels, Detections(found, scores, labels))
        worse.update(image, boxes, labels, Detections(found[keep], scores[keep], labels[keep]))
    return good, worse


def test_resampling_every_image_once_gives_the_same_map_and_a_repeat_counts_twice():
    good, worse = _maps(images=40, drop=0.3)
    assert worse.resampled(range(40)).result()["map"] == pytest.approx(worse.result()["map"], abs=1e-9)
    doubled = worse.resampled(list(range(40)) + list(range(40)))
    assert doubled.result()["ground_truth_boxes"] == 2 * worse.result()["ground_truth_boxes"]
    assert len(doubled) == 80 and len(worse) == 40


def test_a_detector_missing_boxes_is_lower_with_an_interval_below_zero():
    good, worse = _maps(images=80, drop=0.25)
    record = paired_map_difference(worse, good, replicates=30, progress=False)
    assert record["difference"] == pytest.approx(worse.result()["map"] - good.result()["map"], abs=1e-6)
    assert record["difference"] < -0.1
    low, high = record["interval"]
    assert low <= record["difference"] <= high and high < 0
    assert record["replicates"] == 30 and record["share_below_zero"] == 1.0
    assert describe(record, "int8", "fp32").endswith("int8 lower")


def test_the_same_detections_differ_by_nothing_and_noise_straddles_zero():
    good, _ = _maps(images=30)
    same = paired_map_difference(good, good, replicates=20, progress=False)
    assert same["difference"] == 0.0 and same["interval"] == [0.0, 0.0]
    # two detectors of equal quality (independent jitter of the same boxes): the interval holds zero
    first, _ = _maps(images=150, jitter=3.0, seed=1)
    rng = np.random.RandomState(5)
    second = CocoMap()
    for position in range(len(first)):
        boxes, labels = first._truth[position][:2]
        second.update(position, boxes, labels, Detections(
            boxes + rng.normal(0, 3.0, boxes.shape).astype(np.float32),
            rng.uniform(0.3, 1.0, len(boxes)).astype(np.float32), labels))
    record = paired_map_difference(first, second, replicates=40, progress=False)
    low, high = record["interval"]
    assert low < 0 < high
    assert describe(record, "a", "b").endswith("not distinguishable on these images")


def test_maps_of_different_images_or_too_few_replicates_are_refused():
    good, _ = _maps(images=10)
    other, _ = _maps(images=11)
    with pytest.raises(InputError, match="same images"):
        paired_map_difference(good, other)
    with pytest.raises(InputError, match="replicates"):
        paired_map_difference(good, good, replicates=5)
