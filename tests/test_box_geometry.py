"""Boxes follow their image's pixels into the model input and back, for every resize mode; letterbox geometry."""

import numpy as np
import pytest

from trtkit.contract import RESIZE_MODES, InputContract
from trtkit.data.boxes import boxes_to_input, boxes_to_original, clip_boxes, input_boxes
from trtkit.data.boxes.record import BoxRecord
from trtkit.data.preprocess import placement, preprocess


def _random_boxes(rng, size, count=50):
    width, height = size
    x = np.sort(rng.uniform(0, width, (count, 2)), axis=1)
    y = np.sort(rng.uniform(0, height, (count, 2)), axis=1)
    return np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1).astype(np.float32)


@pytest.mark.parametrize("resize", RESIZE_MODES)
@pytest.mark.parametrize("size", [(640, 480), (333, 500), (64, 64), (1000, 90)])
def test_boxes_round_trip_through_every_resize_mode(resize, size):
    rng = np.random.RandomState(sum(size))
    contract = InputContract(size=(320, 416), resize=resize)
    placed = placement(size, contract)
    boxes = _random_boxes(rng, size)
    there = boxes_to_input(boxes, size, placed)
    np.testing.assert_allclose(boxes_to_original(there, size, placed), boxes, atol=1e-3 * max(size))
    inputs = _random_boxes(rng, (416, 320))  # and from the input's side
    np.testing.assert_allclose(boxes_to_input(boxes_to_original(inputs, size, placed), size, placed), inputs,
                               atol=1e-3 * 416)


def test_the_whole_image_maps_to_where_its_pixels_land():
    size = (640, 480)
    whole = np.array([[0, 0, 640, 480]], dtype=np.float32)
    letterbox = InputContract(size=640, resize="letterbox")
    assert placement(size, letterbox) == (640, 480, 0, -80)  # ultralytics: centred, 80 rows of grey above
    np.testing.assert_allclose(boxes_to_input(whole, size, placement(size, letterbox)), [[0, 80, 640, 560]])
    pad = InputContract(size=640, resize="pad")
    np.testing.assert_allclose(boxes_to_input(whole, size, placement(size, pad)), [[0, 0, 640, 480]])
    stretch = InputContract(size=(300, 300), resize="stretch")
    np.testing.assert_allclose(boxes_to_input(whole, size, placement(size, stretch)), [[0, 0, 300, 300]])
    crop = InputContract(size=224, resize="crop")
    new_w, new_h, left, top = placement(size, crop)  # 341x256, offsets 58, 16: the crop cuts the sides off
    np.testing.assert_allclose(boxes_to_input(whole, size, placement(size, crop)),
                               [[-left, -top, new_w - left, new_h - top]], atol=1e-4)
    assert (clip_boxes(boxes_to_input(whole, size, placement(size, crop)), 224, 224) == [[0, 0, 224, 224]]).all()


@pytest.mark.parametrize("size", [(640, 480), (480, 640), (1001, 333), (333, 1001), (7, 5)])
def test_letterbox_centres_the_image_on_grey_as_ultralytics(size):
    """new_unpad = round(side * r); left/top = round(d / 2 - 0.1): ultralytics' LetterBox(center=True)."""
    target_h, target_w = 256, 320
    contract = InputContract(size=(target_h, target_w), resize="letterbox", mean=0, std=1)
    ratio = min(target_h / float(size[1]), target_w / float(size[0]))
    new_w, new_h = int(round(size[0] * ratio)), int(round(size[1] * ratio))
    left, top = int(round((target_w - new_w) / 2.0 - 0.1)), int(round((target_h - new_h) / 2.0 - 0.1))
    assert placement(size, contract) == (new_w, new_h, -left, -top)
    pixels = np.full((size[1], size[0], 3), 200, dtype=np.uint8)
    array = preprocess(pixels, contract)
    grey = 114 / 255.0
    inside = array[:, top:top + new_h, left:left + new_w]
    np.testing.assert_allclose(inside, 200 / 255.0, atol=1e-6)
    outside = np.ones(array.shape[1:], dtype=bool)
    outside[top:top + new_h, left:left + new_w] = False
    np.testing.assert_allclose(array[:, outside], grey, atol=1e-6)


def test_letterbox_fill_is_grey_114_normalized_as_the_image():
    contract = InputContract(size=(40, 40), resize="letterbox")  # ImageNet mean/std
    array = preprocess(np.zeros((10, 40, 3), dtype=np.uint8), contract)
    expected = (114 / 255.0 - np.array(contract.mean)) / np.array(contract.std)
    np.testing.assert_allclose(array[:, 0, 0], expected, rtol=1e-5)
    np.testing.assert_allclose(array[:, 39, 0], expected, rtol=1e-5)


def test_masks_follow_a_letterbox():
    from trtkit.data.masks import preprocess_mask
    mask = np.ones((20, 40), dtype=np.int64)
    out = preprocess_mask(mask, InputContract(size=40, resize="letterbox"))
    assert (out[:10] == 255).all() and (out[10:30] == 1).all() and (out[30:] == 255).all()


def test_a_record_in_the_input_and_its_predictions_back():
    record = BoxRecord("a.jpg", 1, (200, 100), [[10, 20, 110, 70]], [3])
    contract = InputContract(size=100, resize="letterbox")
    boxes = input_boxes(record, contract)
    np.testing.assert_allclose(boxes, [[5, 35, 55, 60]])  # half size, 25 rows of grey above
    back = boxes_to_original(boxes, record.size, placement(record.size, contract))
    np.testing.assert_allclose(back, record.boxes, atol=1e-4)


def test_a_segmentation_map_of_a_letterboxed_input_goes_back_to_the_image():
    from trtkit.app.maps import to_original
    contract = InputContract(size=40, resize="letterbox")
    scores = np.zeros((2, 40, 40), dtype=np.float32)
    scores[1, 10:30, :20] = 5.0  # the left half of the image (rows 10..29 are the image, the rest grey)
    mask = to_original(scores, "logits", contract, size=(40, 20))
    assert mask.shape == (20, 40) and (mask[:, :20] == 1).all() and (mask[:, 20:] == 0).all()
