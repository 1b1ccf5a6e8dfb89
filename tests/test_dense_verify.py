"""Dense verification: pixel agreement and IoU of decision maps, streamed, with the model's decision rule."""

import numpy as np
import pytest

from trtkit.errors import InputError, VerificationFailed
from trtkit.pipeline.dense import DenseComparison, class_iou, confusion


def _scores(decisions, classes):
    """Class scores (N, C, H, W) whose arg-max is ``decisions`` (N, H, W)."""
    n, h, w = decisions.shape
    scores = np.zeros((n, classes, h, w), dtype=np.float32)
    for c in range(classes):
        scores[:, c][decisions == c] = 1.0
    return scores


def test_iou_of_a_hand_counted_map():
    expected = np.array([[0, 0, 1, 1], [0, 2, 2, 1]])
    got = np.array([[0, 1, 1, 1], [0, 2, 2, 2]])
    matrix = confusion(expected, got, 3)
    assert matrix.tolist() == [[2, 1, 0], [0, 2, 1], [0, 0, 2]]
    ious, mean = class_iou(matrix)
    assert ious == pytest.approx([2 / 3.0, 2 / 4.0, 2 / 3.0])  # |A & B| / |A | B| per class
    assert mean == pytest.approx((2 / 3.0 + 0.5 + 2 / 3.0) / 3)
    ious, mean = class_iou(confusion([0, 0], [0, 0], 3))  # classes 1 and 2 are nowhere: they do not count
    assert ious == [1.0, None, None] and mean == 1.0


def test_streamed_batches_equal_one_pass_and_masks_give_miou():
    rng = np.random.RandomState(0)
    truth = rng.randint(0, 4, size=(6, 8, 8))
    reference = truth.copy()
    reference[:, :2] = 0  # FP32 itself is wrong on two rows
    variant = reference.copy()
    variant[0, 7] = 3  # the variant differs from FP32 on one row of one image
    masks = truth.copy()
    masks[:, 7, 7] = 255  # ignored pixels
    whole = DenseComparison("logits")
    whole.update(_scores(variant, 4), _scores(reference, 4), masks)
    streamed = DenseComparison("logits")
    for start in range(0, 6, 4):
        streamed.update(_scores(variant[start:start + 4], 4), _scores(reference[start:start + 4], 4),
                        masks[start:start + 4])
    a, b = whole.result(), streamed.result()
    assert a == b
    assert a["pixels"] == 6 * 64 and a["task"] == "segmentation" and a["metric"] == "miou"
    assert a["pixel_agreement"] == pytest.approx(1 - np.sum(variant != reference) / 384.0)
    assert a["pixel_agreement"] < 1.0
    assert a["top1_agreement"] == a["pixel_agreement"]
    assert a["class_iou_vs_reference"] == pytest.approx(class_iou(confusion(reference, variant, 4))[0])
    assert a["miou_vs_reference"] is None  # 384 pixels in all: no class has enough to be judged by its IoU
    valid = masks != 255
    assert a["pixel_accuracy"] == pytest.approx(np.mean(variant[valid] == truth[valid]))
    assert a["reference_miou"] == pytest.approx(class_iou(confusion(truth, reference, 4, valid))[1])
    assert a["accuracy"] == a["miou"] and a["reference_accuracy"] == a["reference_miou"]
    assert a["miou"] < a["reference_miou"] < 1.0


def test_a_single_channel_map_is_thresholded_never_arg_maxed():
    logits = np.array([[[[2.0, -1.0], [0.5, -0.2]]]], dtype=np.float32)  # (1, 1, 2, 2)
    flipped = -logits
    result = DenseComparison("binary-logit")
    result.update(flipped, logits)
    assert result.result()["pixel_agreement"] == 0.0  # an arg-max over one channel would say 100%
    with pytest.raises(InputError, match="one column"):
        DenseComparison("logits").update(logits, logits)
    probabilities = DenseComparison("binary-probability")
    probabilities.update(np.full((1, 1, 2, 2), 0.6, np.float32), np.full((1, 1, 2, 2), 0.4, np.float32))
    assert probabilities.result()["pixel_agreement"] == 0.0


def test_bad_masks_and_shapes_are_one_line_errors():
    scores = _scores(np.zeros((1, 4, 4), dtype=np.int64), 3)
    with pytest.raises(InputError, match="holds class 7 but the model has 3 classes"):
        DenseComparison().update(scores, scores, np.full((1, 4, 4), 7))
    with pytest.raises(InputError, match="do not match"):  # masks smaller than the map
        DenseComparison().update(scores, scores, np.zeros((1, 2, 2), dtype=np.int64))
    with pytest.raises(InputError, match="do not match"):  # two masks for one image
        DenseComparison().update(scores, scores, np.zeros((2, 4, 4), dtype=np.int64))
    with pytest.raises(InputError, match="do not match"):  # a map that is not the image at a stride
        DenseComparison().update(scores, scores, np.zeros((1, 4, 12), dtype=np.int64))
    with pytest.raises(VerificationFailed, match="differs"):
        DenseComparison().update(scores, scores[:, :2])
    with pytest.raises(VerificationFailed, match=r"\(N, C, H, W\)"):
        DenseComparison().update(scores[0], scores[0])
    with pytest.raises(InputError):
        DenseComparison("multilabel-logits")


def test_nothing_compared_has_no_agreement():
    result = DenseComparison().result()
    assert result["top1_agreement"] is None and result["accuracy"] is None and result["images"] == 0


def test_a_class_on_few_pixels_is_judged_by_its_iou_not_drowned_in_the_background():
    """MTCNN's PNet (a blind test): faces on ~1% of its map, INT8 agreed 99.89% per pixel and passed the
    98% gate while its face IoU against FP32 was 0.90. mIoU against FP32's decisions has a gate of its own;
    a class on a handful of pixels (under VISIBLE_SHARE) does not count in it."""
    from trtkit.pipeline.dense import MIN_CLASS_PIXELS, MIN_MIOU_VS_REFERENCE, VISIBLE_SHARE, dense_agreement
    from trtkit.pipeline.gate import judge
    from trtkit.search.select import drop_of
    reference = np.zeros((8, 100, 100), dtype=np.int64)
    reference[:, 40:50, 40:50] = 1  # 100 of 10000 pixels: 1%, 800 in all
    variant = reference.copy()
    variant[:, 40:44, 40:50] = 0  # 40% of the face pixels lost: 0.4% of all pixels
    comparison = DenseComparison("logits")
    comparison.update(_scores(variant, 2), _scores(reference, 2))
    figures = comparison.result()
    assert figures["pixel_agreement"] == figures["top1_agreement"] == pytest.approx(0.996)
    face_iou = 60.0 / 100.0
    assert figures["class_iou_vs_reference"][1] == pytest.approx(face_iou)
    assert figures["miou_vs_reference"] == pytest.approx((9900.0 / 9940 + face_iou) / 2)
    record = {"name": "m.int8", "precision": "int8", "verify": figures}
    judge(record, 0.98)
    assert record["status"] == "failing", record
    assert record["status_detail"] == ("mIoU against FP32's decisions 79.80% is below {:g}% (pixel agreement "
                                       "99.60%: a class on few pixels changed)".format(100 * MIN_MIOU_VS_REFERENCE[
                                           "int8"])), record["status_detail"]
    # --min-agreement sets both figures; without it each has its default
    from trtkit.pipeline.gate import miou_threshold

    class Options(object):
        min_agreement = {"fp32": 0.999, "fp16": 0.995, "int8": 0.95, "mixed": 0.98}
        min_agreement_given = ("int8",)
    assert miou_threshold(Options(), "segmentation", "int8") == 0.95
    assert miou_threshold(Options(), "segmentation", "mixed") == MIN_MIOU_VS_REFERENCE["mixed"]
    assert miou_threshold(Options(), "segmentation", "fp32") is None
    assert miou_threshold(Options(), "classification", "int8") is None
    lenient = {"name": "m.int8", "precision": "int8", "verify": figures}
    judge(lenient, 0.95, 0.79)
    assert lenient["status"] == "ok" and lenient["min_miou_vs_reference"] == 0.79
    # the budget of --precision auto without masks counts the lower figure
    assert drop_of(record, "agreement") == pytest.approx(100 * (1 - figures["miou_vs_reference"]))
    assert dense_agreement(0.99, None) == 0.99
    # one flipped pixel of a class on 2 of 10000 pixels, or 10 flipped of a class on 100 (under
    # MIN_CLASS_PIXELS): not changes the mean should show
    tiny = np.zeros((1, 100, 100), dtype=np.int64)
    tiny[0, 0, :2] = 1
    assert 2 / 10000.0 < VISIBLE_SHARE
    flipped = tiny.copy()
    flipped[0, 0, 0] = 0
    comparison = DenseComparison("logits")
    comparison.update(_scores(flipped, 2), _scores(tiny, 2))
    figures = comparison.result()
    assert figures["class_iou_vs_reference"][1] == 0.5 and figures["miou_vs_reference"] > 0.999
    record = {"name": "m.fp16", "precision": "fp16", "verify": figures}
    judge(record, 0.995)
    assert record["status"] == "ok", record
    few = reference[:1].copy()  # the face class above on one image: 100 pixels
    comparison = DenseComparison("logits")
    comparison.update(_scores(variant[:1], 2), _scores(few, 2))
    assert 100 < MIN_CLASS_PIXELS and comparison.result()["miou_vs_reference"] > 0.99


def test_masks_of_the_image_size_are_scored_on_a_smaller_output_map():
    """A strided map (MTCNN's PNet: 55x75 for 120x160 images) was refused after every variant was built, with a
    hint that the masks must have the image's size, which they had."""
    from trtkit.data.masks import masks_to_map_size
    masks = np.zeros((1, 8, 8), dtype=np.int64)
    masks[0, :4, :4] = 1  # the top-left quarter
    assert np.array_equal(masks_to_map_size(masks, 4, 4)[0], np.kron([[1, 0], [0, 0]], np.ones((2, 2))))
    assert masks_to_map_size(masks, 3, 5).shape == (1, 3, 5)
    decisions = np.zeros((1, 4, 4), dtype=np.int64)
    decisions[0, :2, :2] = 1
    comparison = DenseComparison("logits")
    comparison.update(_scores(decisions, 2), _scores(decisions, 2), masks)
    assert comparison.result()["miou"] == 1.0
