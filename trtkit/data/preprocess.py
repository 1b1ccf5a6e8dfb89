"""The one function from pixels to a model input: ``preprocess(image, contract)`` -> float32 (C, H, W).

Every source (image files, uint8 arrays, CIFAR-10 rows, the sample digits) goes
through it, so verification, calibration, benchmarking and training see the same
numbers for the same pixels. Resizing is PIL's BILINEAR on the image in its own
mode (uint8 for 'L'/'RGB'), as torchvision's transforms do on PIL images:

* ``crop``: torchvision's ImageNet evaluation, ``Resize(int(S / 0.875))`` +
  ``CenterCrop(S)``, reproduced pixel for pixel for a square size S (the short
  side becomes ``int(S / 0.875)``, the long side ``int(short * long / short0)``,
  crop offsets ``int(round((h - th) / 2.0))``). For an HxW target the image is
  scaled so that both sides cover H/0.875 and W/0.875, then centre-cropped.
* ``pad``: keep the aspect ratio, fit inside HxW (the bound side filled, the
  other rounded up, as PaddleOCR), zeros right/bottom *after* normalization.
* ``letterbox``: ultralytics' ``LetterBox`` (YOLO's detectors): scaled by
  ``r = min(H / h, W / w)`` to ``round(w r)`` x ``round(h r)``, centred
  (left/top offsets ``round(d / 2 - 0.1)``, the odd pixel right/bottom),
  the rest grey 114 pixels (normalized as the image).
* ``stretch``: plain resize to HxW.

``resize_filter`` ``opencv`` resizes as ``cv2.resize(..., INTER_LINEAR)`` does
instead (``opencv_linear``): half-pixel centres, two source pixels per axis
whatever the scale, so no antialiasing when shrinking. ``asymmetric``
(``asymmetric_sample``) samples the input's pixel x at the image's x * w / new_w,
no half-pixel centres, as MediaPipe's ImageToTensorCalculator (a corner-to-corner
``cv2.warpPerspective``), TF1's ``resize_bilinear`` and ONNX Resize's
``asymmetric`` mode do; its ``letterbox`` is MediaPipe's ``keep_aspect_ratio``:
the image's longer side fills the input exactly, centred at a fraction of a
pixel, the border blended with the padding.

Channels: a 1-channel model gets PIL's 'L' conversion of colour images; a
3-channel model given grayscale repeats the channel. Pixel arrays are RGB.
Then ``channel_order`` (bgr reverses), ``pixel_scale`` (0-1 or 0-255) and
``(x - mean) / std`` per channel.
"""

import math

import numpy as np

from trtkit.contract import CROP_FRACTION
from trtkit.deps import require
from trtkit.errors import InputError

_GRAY_MODES = ("L", "F")


def _pil():
    return require("PIL.Image", "reading images")


def to_pil(pixels):
    """A PIL image from a PIL image or a uint8 array: HxW, HxWx1 (grayscale) or HxWx3 (RGB)."""
    Image = _pil()
    if isinstance(pixels, Image.Image):
        return pixels
    array = np.asarray(pixels)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise InputError("pixels must be uint8 HxW, HxWx3 (RGB) or HxWx4 (RGBA), got {} {}".format(
            array.dtype, array.shape), hint="float arrays are taken as already preprocessed (C, H, W)")
    mode = "L" if array.ndim == 2 else "RGB" if array.shape[2] == 3 else "RGBA"  # RGBA: as a PIL RGBA image
    return Image.fromarray(np.ascontiguousarray(array), mode)


def for_channels(image, channels):
    """``image`` in the mode to resize in: 'L'/'F' kept (repeated to 3 channels later), else 'RGB' or 'L'."""
    if image.mode in _GRAY_MODES:
        return image
    if image.mode.startswith("I"):
        return _grey_8bit(image)
    if channels == 1 or image.mode in ("1", "LA", "La"):
        return image.convert("L")
    return image if image.mode == "RGB" else image.convert("RGB")


def _grey_8bit(image):
    """A 16- or 32-bit grey image ('I;16', 'I') as 'L', its range scaled down: PIL's own conversion clips every
    value above 255 to white (measured: a 16-bit PNG photo came out 95% white and was segmented as background)."""
    Image = _pil()
    values = np.asarray(image).astype(np.float64)
    top = 65535.0 if image.mode.startswith("I;16") or values.max() > 255 else 255.0
    return Image.fromarray(np.clip(np.round(values * (255.0 / top)), 0, 255).astype(np.uint8), "L")


PADDED = ("pad", "height", "letterbox")  # resize modes that fill the rest of the input (see ``fill_values``)
LETTERBOX_GREY = 114  # ultralytics' LetterBox fill, a pixel value (0-255) normalized as the image


def crop_resize_size(width, height, target_h, target_w):
    """(w, h) an image of ``width`` x ``height`` is resized to before the centre crop of ``target_h`` x ``target_w``.

    The side that needs the larger scale to cover its target / 0.875 is set to
    ``int(target / 0.875)``; the other follows torchvision's arithmetic
    ``int(new * other / side)``. For a square target this is ``Resize(int(S / 0.875))``.
    """
    cover_h, cover_w = int(target_h / CROP_FRACTION), int(target_w / CROP_FRACTION)
    if cover_h * width >= cover_w * height:  # the height binds (for a square target: height is the short side)
        new_h = cover_h
        new_w = int(new_h * width / height)
    else:
        new_w = cover_w
        new_h = int(new_w * height / width)
    return max(new_w, target_w), max(new_h, target_h)


def pad_resize_size(width, height, target_h, target_w):
    """(w, h) fitting ``width`` x ``height`` inside the target with its aspect ratio (the free side rounded up)."""
    if height * target_w >= width * target_h:  # relatively tall: the height fills
        return min(target_w, max(1, int(math.ceil(target_h * width / float(height))))), target_h
    return target_w, min(target_h, max(1, int(math.ceil(target_w * height / float(width)))))


def height_resize_size(width, height, target_h, target_w):
    """(w, h) for ``height`` resizing: the height to the target, the width by the aspect ratio (rounded up),
    squashed to the target width when wider. PaddleOCR's text-line rule (``resize_norm_img``): a long line
    keeps the full height its model was trained on rather than shrinking inside the box."""
    return min(target_w, max(1, int(math.ceil(target_h * width / float(height))))), target_h


def letterbox_resize_size(width, height, target_h, target_w):
    """(w, h) for ``letterbox``: ultralytics' ``new_unpad``, ``round(side * min(H / h, W / w))`` (Python's round)."""
    ratio = min(target_h / float(height), target_w / float(width))
    return (min(target_w, max(1, int(round(width * ratio)))), min(target_h, max(1, int(round(height * ratio)))))


def resize_target(size, contract):
    """(w, h) an image of ``size`` (w, h) is resized to; decode.py asks it to pick JPEG draft scales."""
    width, height = size
    if contract.resize == "crop":
        return crop_resize_size(width, height, contract.height, contract.width)
    if contract.resize == "pad":
        return pad_resize_size(width, height, contract.height, contract.width)
    if contract.resize == "height":
        return height_resize_size(width, height, contract.height, contract.width)
    if contract.resize == "letterbox":
        return letterbox_resize_size(width, height, contract.height, contract.width)
    return contract.width, contract.height


def placement(size, contract):
    """Where an image of ``size`` (w, h) lands in the model input, as ``(new_w, new_h, left, top)``: it is
    resized to ``new_w`` x ``new_h`` and the input's pixel (x, y) is the resized image's (x + left, y + top).
    ``crop``: the centre crop's offsets; ``pad`` and ``height``: 0, 0 (the rest of the input is padding);
    ``letterbox``: minus the padding left and above (ultralytics' ``round(d / 2 - 0.1)``); ``stretch``: the
    input itself; ``letterbox`` with the ``asymmetric`` filter: MediaPipe's unrounded floats. Masks follow it
    (``masks.preprocess_mask``, rounded), predicted maps go back by it (``trtkit.app.maps``), boxes both ways
    (``trtkit.data.boxes.geometry``)."""
    if contract.resize == "letterbox" and contract.resize_filter == "asymmetric":  # MediaPipe: no rounding
        ratio = min(contract.height / float(size[1]), contract.width / float(size[0]))
        new_w, new_h = size[0] * ratio, size[1] * ratio
        return new_w, new_h, (new_w - contract.width) / 2.0, (new_h - contract.height) / 2.0
    new_w, new_h = resize_target(size, contract)
    if contract.resize == "letterbox":
        return (new_w, new_h, -int(round((contract.width - new_w) / 2.0 - 0.1)),
                -int(round((contract.height - new_h) / 2.0 - 0.1)))
    if contract.resize != "crop":
        return new_w, new_h, 0, 0
    return new_w, new_h, int(round((new_w - contract.width) / 2.0)), int(round((new_h - contract.height) / 2.0))


def fill_values(contract):
    """float32 (C,) the padded part of an input holds: 0 (after normalization) for ``pad`` and ``height``, grey
    114 normalized as the image for ``letterbox``; ``contract.pad_value`` (a pixel value) normalized as the
    image when given, as YOLOX's canvas of 114 under a top-left paste."""
    value = getattr(contract, "pad_value", None)
    if value is None and contract.resize != "letterbox":
        return np.zeros(contract.channels, dtype=np.float32)
    grey = (LETTERBOX_GREY if value is None else value) * (contract.pixel_scale / 255.0)
    return ((grey - np.asarray(contract.mean, dtype=np.float64)) / np.asarray(contract.std)).astype(np.float32)


def pad_into(values, out, left, top):
    """``values`` (..., h, w) written into ``out`` (..., H, W) at offsets ``-left``, ``-top`` (``placement``'s
    for a padded mode: 0 or negative); ``out`` already holds the fill."""
    out[..., -top:-top + values.shape[-2], -left:-left + values.shape[-1]] = values
    return out


_COEF_SCALE = 2048  # OpenCV's INTER_RESIZE_COEF_SCALE: its uint8 resize works in 11-bit fixed point


def _linear_taps(n_in, n_out):
    """Per output index along one axis: the two source indices and their 11-bit weights, as OpenCV's
    INTER_LINEAR computes them (centre-aligned, in float32; clamped at the borders)."""
    position = ((np.arange(n_out) + 0.5) * (float(n_in) / n_out) - 0.5).astype(np.float32)
    first = np.floor(position).astype(np.int64)
    fraction = (position - first).astype(np.float32)
    low = first < 0
    first[low], fraction[low] = 0, 0.0
    high = first >= n_in - 1
    first[high], fraction[high] = n_in - 1, 0.0
    weight = np.round((np.float32(1.0) - fraction) * np.float32(_COEF_SCALE)).astype(np.int64)
    return first, np.minimum(first + 1, n_in - 1), weight, _COEF_SCALE - weight


def opencv_linear(pixels, new_w, new_h):
    """``cv2.resize(pixels, (new_w, new_h), interpolation=cv2.INTER_LINEAR)`` of uint8 HxW or HxWxC pixels, in
    OpenCV's fixed-point arithmetic (its vectorized x86 rounding): checked equal to OpenCV 4.10's output when
    shrinking, within one grey level on a few pixels when enlarging. Written here because trtkit does not
    depend on OpenCV (PIL and NumPy read every image), and PIL's filters all widen when shrinking."""
    source = np.asarray(pixels).astype(np.int64)
    ys0, ys1, wy0, wy1 = _linear_taps(source.shape[0], new_h)
    xs0, xs1, wx0, wx1 = _linear_taps(source.shape[1], new_w)
    along_x = (1, -1) + (1,) * (source.ndim - 2)
    along_y = (-1,) + (1,) * (source.ndim - 1)
    rows = source[:, xs0] * wx0.reshape(along_x) + source[:, xs1] * wx1.reshape(along_x)  # x 2048
    out = (((wy0.reshape(along_y) * (rows[ys0] >> 4)) >> 16) +
           ((wy1.reshape(along_y) * (rows[ys1] >> 4)) >> 16) + 2) >> 2
    return np.clip(out, 0, 255).astype(np.uint8)


def float_linear(pixels, new_w, new_h):
    """float32 pixels (HxW or HxWxC) resized to ``new_w`` x ``new_h`` as ONNX Runtime's Resize ``linear`` with
    ``half_pixel`` coordinates computes it (``tf.image.resize``'s bilinear, torch's ``interpolate(align_corners=
    False)`` without antialiasing): the source point ``(x + 0.5) / scale - 0.5`` in float32, clamped to the image,
    two taps per axis, not rounded to whole levels (a TensorFlow export resizes its float image)."""
    source = np.asarray(pixels, dtype=np.float32)

    def taps(n_in, n_out):
        scale = np.float32(n_out) / np.float32(n_in)
        position = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) / scale - np.float32(0.5)
        position = np.clip(position, np.float32(0), np.float32(n_in - 1))
        low = np.floor(position).astype(np.int64)
        return low, np.minimum(low + 1, n_in - 1), (position - low).astype(np.float32)
    y0, y1, dy1 = taps(source.shape[0], new_h)
    x0, x1, dx1 = taps(source.shape[1], new_w)
    dx1 = dx1.reshape((1, -1) + (1,) * (source.ndim - 2))
    dy1 = dy1.reshape((-1,) + (1,) * (source.ndim - 1))
    dx2, dy2 = np.float32(1) - dx1, np.float32(1) - dy1
    top, bottom = source[y0], source[y1]
    return (dx2 * dy2 * top[:, x0] + dx1 * dy2 * top[:, x1] + dx2 * dy1 * bottom[:, x0] +
            dx1 * dy1 * bottom[:, x1]).astype(np.float32)


def asymmetric_sample(pixels, placed, contract):
    """uint8 (C, h, w) pixels -> float32 (C, H, W) at the contract's size: the input's pixel (x, y) takes the image's
    point ((x + left) * w / new_w, (y + top) * h / new_h) (``placed`` = ``placement``), bilinear at OpenCV's
    warp precision (1/32 pixel), rounded to whole levels as ``cv2.warpPerspective`` of uint8 does. Points beyond
    the image blend with the padding's pixels in a padded mode (MediaPipe's BORDER_ZERO, padding 0), else with
    the edge pixel."""
    new_w, new_h, left, top = placed
    channels, height, width = pixels.shape
    padded = contract.resize in PADDED
    fill = fill_values(contract).astype(np.float64) * np.asarray(contract.std) + np.asarray(contract.mean)
    fill = fill * (255.0 / contract.pixel_scale)

    def taps(source, resized, offset, count):
        position = np.round((np.arange(count) + offset) * (float(source) / resized) * 32.0) / 32.0
        if not padded:
            position = np.clip(position, 0, source - 1)
        low = np.floor(position).astype(np.int64)
        # indices into the image with a one-pixel border of padding: -1 and ``source`` are the padding
        return np.clip(low + 1, 0, source + 1), np.clip(low + 2, 0, source + 1), position - low

    y0, y1, fy = taps(height, new_h, top, contract.height)
    x0, x1, fx = taps(width, new_w, left, contract.width)
    framed = np.empty((channels, height + 2, width + 2), dtype=np.float64)
    framed[...] = fill.reshape(-1, 1, 1)[:channels] if padded else 0.0
    framed[:, 1:-1, 1:-1] = pixels
    if not padded:
        framed[:, 1:-1, 0], framed[:, 1:-1, -1] = pixels[:, :, 0], pixels[:, :, -1]
        framed[:, 0], framed[:, -1] = framed[:, 1], framed[:, -2]
    rows = framed[:, y0] * (1 - fy)[None, :, None] + framed[:, y1] * fy[None, :, None]
    out = rows[:, :, x0] * (1 - fx)[None, None, :] + rows[:, :, x1] * fx[None, None, :]
    return np.round(out).astype(np.float32)


def preprocess(image, contract, original_size=None):
    """Pixels -> float32 (C, H, W) for ``contract`` (an InputContract).

    ``image``: a PIL image (any mode; 'F' is read in 0-255 like 'L') or a
    uint8 HxW / HxWx3 RGB array. ``original_size`` (w, h): the size before a
    JPEG draft shrank the decode, so the geometry is that of the full image.
    """
    Image = _pil()
    image = for_channels(to_pil(image), contract.channels)
    new_w, new_h, left, top = placement(original_size or image.size, contract)
    asymmetric = contract.resize_filter == "asymmetric"
    if asymmetric or image.size == (new_w, new_h):
        pixels = np.asarray(image)
    elif contract.resize_filter == "opencv":
        pixels = opencv_linear(np.asarray(image), new_w, new_h)
    elif contract.resize_filter == "tf":
        pixels = float_linear(np.asarray(image), new_w, new_h)
    else:
        pixels = np.asarray(image.resize((new_w, new_h), Image.BILINEAR))
    if contract.resize == "crop" and not asymmetric:  # the centre crop lies inside the resized image
        pixels = pixels[top:top + contract.height, left:left + contract.width]
    pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)  # CHW views, no copy
    if contract.channels == 3:
        if pixels.shape[0] == 1:
            pixels = np.broadcast_to(pixels, (3,) + pixels.shape[1:])
        if contract.channel_order == "bgr":
            pixels = pixels[::-1]
    if asymmetric:
        pixels = asymmetric_sample(pixels, (new_w, new_h, left, top), contract)
    array = np.empty(pixels.shape, dtype=np.float32)  # one float copy, normalized in place
    if contract.pixel_scale != 255.0:
        np.divide(pixels, np.float32(255.0), out=array)
    else:
        array[...] = pixels
    array -= np.asarray(contract.mean, dtype=np.float32).reshape(-1, 1, 1)
    array /= np.asarray(contract.std, dtype=np.float32).reshape(-1, 1, 1)
    if contract.resize not in PADDED or array.shape[1:] == (contract.height, contract.width):
        return array
    out = np.empty(contract.shape, dtype=np.float32)
    out[...] = fill_values(contract).reshape(-1, 1, 1)
    return pad_into(array, out, left, top)
