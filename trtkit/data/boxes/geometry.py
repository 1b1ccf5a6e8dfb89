"""Boxes between an image's pixels and the model input, by the geometry its pixels took (``preprocess.placement``).

Coordinates are continuous pixel coordinates: pixel ``i`` spans ``[i, i + 1)``,
so a box over a whole W x H image is ``[0, 0, W, H]`` (COCO's convention; VOC's
1-based inclusive indices are converted on reading, ``voc.py``). Boxes are
``x1, y1, x2, y2`` (xyxy) float32 arrays of shape (M, 4).

An image of ``size`` (w, h) is resized to ``new_w`` x ``new_h`` and the input's
pixel (x, y) is the resized image's (x + left, y + top) (``placement``; negative
offsets for ``letterbox``, the centre crop's for ``crop``). Resizing by PIL and
by OpenCV both map continuous coordinates linearly (``u * new / old``, half-pixel
centres), so a box maps exactly as its pixels do::

    x_input = x * new_w / w - left          x = (x_input + left) * w / new_w

``boxes_to_input`` and ``boxes_to_original`` are inverses for every resize mode
(within float32 rounding). Neither clips: a box a centre crop cuts stays as it
is, partly outside the input (``clip_boxes`` cuts it where wanted).
"""

import numpy as np


def _scales(size, placed):
    new_w, new_h, left, top = placed
    width, height = float(size[0]), float(size[1])
    scale = np.array([new_w / width, new_h / height] * 2, dtype=np.float64)
    shift = np.array([left, top] * 2, dtype=np.float64)
    return scale, shift


def _as_boxes(boxes):
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError("boxes are (M, 4) x1, y1, x2, y2, got shape {}".format(boxes.shape))
    return boxes


def boxes_to_input(boxes, size, placed):
    """float32 (M, 4) xyxy in an image of ``size`` (w, h) -> the same boxes in the model input, where
    ``placed`` is ``preprocess.placement(size, contract)``."""
    scale, shift = _scales(size, placed)
    return (_as_boxes(boxes) * scale - shift).astype(np.float32)


def boxes_to_original(boxes, size, placed):
    """The inverse of ``boxes_to_input``: boxes in the model input -> float32 (M, 4) in the image's pixels."""
    scale, shift = _scales(size, placed)
    return ((_as_boxes(boxes) + shift) / scale).astype(np.float32)


def clip_boxes(boxes, width, height):
    """float32 (M, 4) ``boxes`` cut to ``[0, width] x [0, height]`` (an empty box keeps zero width or height)."""
    boxes = _as_boxes(boxes)
    limits = np.array([width, height, width, height], dtype=np.float64)
    return np.clip(boxes, 0.0, limits).astype(np.float32)


def input_boxes(record, contract, clip=False):
    """``record``'s boxes (a ``BoxRecord``) in ``contract``'s model input; ``clip``: cut to the input."""
    from trtkit.data.preprocess import placement
    boxes = boxes_to_input(record.boxes, record.size, placement(record.size, contract))
    return clip_boxes(boxes, contract.width, contract.height) if clip else boxes
