"""Segmentation masks: class-index maps beside images, read in step with them.

Sources (listed by ``sources.mask_folder``): a folder with ``images/`` and ``masks/`` whose files share their stems
(``images/0001.jpg`` and ``masks/0001.png``), each mask a PNG with a palette or
grey levels whose values are class indices; or a ``.npz`` whose ``y`` (or
``masks``) is ``[N, H, W]`` beside ``x`` (``[N, H, W, C]`` images). Pixels equal
to the ignore index (255, Pascal VOC's border value) count in no metric.

A mask follows its image through the same geometry (``preprocess.placement``:
resize, centre crop, padding or letterbox) but resized with nearest neighbour, so class indices are
never blended, and padding is filled with the ignore index. Masks are read per
batch, like the images: memory does not grow with the data set.
"""

import os

import numpy as np

from trtkit.data.decode import upright_size
from trtkit.data.preprocess import PADDED, _pil, pad_into, placement
from trtkit.errors import InputError

IGNORE_INDEX = 255
MASK_KEYS = ("y", "masks", "labels")


def preprocess_mask(mask, contract, ignore_index=IGNORE_INDEX):
    """A class-index map (PIL image in mode P/L/I, or an HxW integer array) -> int64 (H, W) of ``contract``'s
    size, aligned with ``preprocess`` of its image."""
    Image = _pil()
    if isinstance(mask, np.ndarray):
        if mask.ndim != 2:
            raise InputError("a mask must be one class index per pixel (H, W), got shape {}".format(mask.shape))
        values = mask.astype(np.int64)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise InputError("mask values must be class indices (0..65535), got {}..{}".format(
                int(values.min()), int(values.max())))
        mask = Image.fromarray(values.astype(np.int32), mode="I")
    elif mask.mode not in ("P", "L", "I", "I;16"):
        raise InputError("a mask image must hold class indices (a palette or grey-level PNG), not mode {}".format(
            mask.mode), hint="save masks as PNG with one class index per pixel")
    new_w, new_h, left, top = (int(round(v)) for v in placement(mask.size, contract))  # asymmetric letterbox: floats
    if mask.size != (new_w, new_h):
        mask = mask.resize((new_w, new_h), Image.NEAREST)
    if contract.resize == "crop":
        mask = mask.crop((left, top, left + contract.width, top + contract.height))
    values = np.asarray(mask).astype(np.int64)
    if contract.resize not in PADDED or values.shape == (contract.height, contract.width):
        return values
    return pad_into(values, np.full((contract.height, contract.width), ignore_index, dtype=np.int64), left, top)


def map_follows(rows, columns, size_hw):
    """True when a map of ``rows`` x ``columns`` is an image of ``size_hw`` (H, W) at one stride (within 10%: a
    valid convolution's edges), as a strided score map is."""
    if rows < 2 or columns < 2:
        return False
    down, across = size_hw[0] / float(rows), size_hw[1] / float(columns)
    return abs(down - across) <= 0.1 * max(down, across)


def masks_for_map(masks, map_shape):
    """``masks`` (N, H, W) for decision maps of ``map_shape`` (N, h, w): as they are when the shapes agree,
    resized (nearest, with a warning) when the map is the image at a stride (MTCNN's PNet: 55x75 for 120x160),
    else None (the caller refuses them)."""
    masks = np.asarray(masks)
    if masks.shape == tuple(map_shape):
        return masks
    if masks.ndim != 3 or masks.shape[0] != map_shape[0] or map_shape[1] > masks.shape[1] \
            or map_shape[2] > masks.shape[2] or not map_follows(map_shape[1], map_shape[2], masks.shape[1:]):
        return None
    from trtkit import log
    log.warn_once("the model's output maps are {}x{} for {}x{} inputs: the masks are resized to them (nearest) to "
                  "score mIoU".format(map_shape[1], map_shape[2], masks.shape[1], masks.shape[2]))
    return masks_to_map_size(masks, map_shape[1], map_shape[2])


def masks_to_map_size(masks, height, width):
    """int64 (N, H, W) masks resized (nearest neighbour, pixel centres) to a model's smaller or larger output
    map of ``height`` x ``width``: a strided map (MTCNN's PNet gives 55x75 for 120x160 images) is scored
    against the masks at its own size."""
    masks = np.asarray(masks)
    rows = np.minimum(((np.arange(height) + 0.5) * masks.shape[1] / float(height)).astype(np.int64), masks.shape[1] - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * masks.shape[2] / float(width)).astype(np.int64), masks.shape[2] - 1)
    return masks[:, rows][:, :, cols]


class MaskFiles(object):
    """The masks of a folder listing: ``read(pairs, contract)`` -> int64 (N, H, W) for (image, mask) relative
    paths, each mask checked to have its image's size."""

    holds = "masks"  # what a listing's annotations are (Selection.holds)

    def __init__(self, root):
        self.root = root

    def read(self, pairs, contract):
        Image = _pil()
        out = np.empty((len(pairs), contract.height, contract.width), dtype=np.int64)
        for index, (image_path, mask_path) in enumerate(pairs):
            path = os.path.join(self.root, mask_path)
            try:
                with Image.open(os.path.join(self.root, image_path)) as image:
                    size = upright_size(image, contract)  # as the model sees it: upright when it turns it
                with Image.open(path) as mask:
                    mask.load()
                    if mask.size != size:
                        raise InputError("mask {} is {}x{} but its image is {}x{}".format(
                            path, mask.size[0], mask.size[1], size[0], size[1]),
                            hint="each mask must have its image's size (one class index per pixel)")
                    out[index] = preprocess_mask(mask, contract)
            except InputError:
                raise
            except Exception as exc:  # PIL: OSError, SyntaxError... for a broken file
                raise InputError("cannot read mask {} ({})".format(path, exc.__class__.__name__),
                                 hint="masks must be readable PNG images")
        return out


class MaskRows(object):
    """The masks of a .npz: rows of an [N, H, W] member, read in row order (``arrays._NpzMember``)."""

    holds = "masks"

    def __init__(self, member):
        self.member = member

    def read(self, rows, contract):
        out = np.empty((len(rows), contract.height, contract.width), dtype=np.int64)
        for index, row in enumerate(self.member.rows(list(rows))):
            out[index] = preprocess_mask(np.asarray(row), contract)
        return out
