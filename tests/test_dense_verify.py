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
    assert a["pixel_agreement"] == a["top1_agreement"] == pytest.approx(1 - np.sum(variant != reference) / 384.0)
    assert a["pixel_agreement"] < 1.0
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
    with pytest.raises(InputError, match="do not match"):
        DenseComparison().update(scores, scores, np.zeros((1, 2, 2), dtype=np.int64))
    with pytest.raises(VerificationFailed, match="differs"):
        DenseComparison().update(scores, scores[:, :2])
    with pytest.raises(VerificationFailed, match=r"\(N, C, H, W\)"):
        DenseComparison().update(scores[0], scores[0])
    with pytest.raises(InputError):
        DenseComparison("multilabel-logits")


def test_nothing_compared_has_no_agreement():
    result = DenseComparison().result()
    assert result["top1_agreement"] is None and result["accuracy"] is None and result["images"] == 0
