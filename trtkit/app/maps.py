"""A segmentation model's score maps back on the original image: one class index per original pixel.

The model saw the image through the build's input contract (resize, centre
crop or padding: ``trtkit.data.preprocess.placement``), so its map covers the
model input, not the photo. ``to_original`` undoes that geometry: each pixel of
the original image is followed to its place in the model input and from there
into the score map (which may be smaller than the input, e.g. a stride-8 head),
the scores are sampled there bilinearly (half-pixel centres, as PIL and
torchvision resize) and only then decided (arg-max over the classes, or a
single channel's logit > 0 / probability > 0.5: the output kind's rule).
Interpolating scores rather than class indices keeps class borders smooth and
never invents a class between two others.

Pixels the model never saw (the parts of the image a centre crop cut off) get
``UNSEEN``: 255 in a uint8 mask (Pascal VOC's "void"), -1 in the int32 mask of
a model with 255 classes or more. Class fractions count the seen pixels only.

Memory: the map is resampled a stripe of rows at a time, so a 20-megapixel
photo needs a few megabytes beside its mask, whatever the class count.
"""

import numpy as np

UNSEEN = 255          # the value of unseen pixels in a uint8 mask (Pascal VOC's void / ignore index)
UNSEEN_WIDE = -1      # ... in the int32 mask of a model with 255 classes or more
STRIPE_ELEMENTS = 1 << 21  # floats resampled at once (classes x rows x width)


def mask_dtype(classes):
    """uint8 for fewer than 255 classes (255 is ``UNSEEN``), int32 otherwise."""
    return np.uint8 if classes is None or classes < UNSEEN else np.int32


def unseen_value(dtype):
    return UNSEEN if np.dtype(dtype) == np.uint8 else UNSEEN_WIDE


def _axis(length, resized, offset, inputs, cells):
    """Sampling along one axis: for each of ``length`` original pixels, resized to ``resized`` and shifted by
    ``offset`` into an input of ``inputs`` pixels whose map has ``cells``: (low, high, weight of high, seen)."""
    centres = (np.arange(length, dtype=np.float64) + 0.5) * (float(resized) / length) - offset  # input coords
    seen = (centres >= 0) & (centres < inputs)
    position = np.clip(centres * (float(cells) / inputs) - 0.5, 0, cells - 1)
    low = np.floor(position).astype(np.int64)
    high = np.minimum(low + 1, cells - 1)
    return low, high, (position - low).astype(np.float32), seen


def to_original(scores, kind, contract=None, size=None):
    """One image's scores (C, h, w) -> its mask (H, W) of class indices at ``size`` (w, h), the original image's.

    ``kind``: the output kind (``trtkit.outputs``) whose rule decides; ``contract``: the InputContract that put
    the image into the model (``size`` None: the image was the model input itself, the mask is the input's
    size). Unseen pixels are ``unseen_value(mask.dtype)``.
    """
    from trtkit.outputs import OutputKind
    kind = OutputKind.parse(kind)
    scores = np.asarray(scores, dtype=np.float32)
    channels, cells_h, cells_w = scores.shape
    if size is None:
        width, height = (contract.width, contract.height) if contract is not None else (cells_w, cells_h)
        geometry = (width, height, 0, 0)
        inputs = (height, width)
    else:
        from trtkit.data.preprocess import placement
        width, height = int(size[0]), int(size[1])
        geometry = placement((width, height), contract)
        inputs = (contract.height, contract.width)
    new_w, new_h, left, top = geometry
    rows = _axis(height, new_h, top, inputs[0], cells_h)
    cols = _axis(width, new_w, left, inputs[1], cells_w)
    dtype = mask_dtype(kind.classes(channels))
    mask = np.empty((height, width), dtype=dtype)
    stripe = max(1, STRIPE_ELEMENTS // max(1, channels * width))
    for start in range(0, height, stripe):
        part = slice(start, start + stripe)
        weight = rows[2][part][None, :, None]
        band = scores[:, rows[0][part], :] * (1 - weight) + scores[:, rows[1][part], :] * weight
        weight = cols[2][None, None, :]
        band = band[:, :, cols[0]] * (1 - weight) + band[:, :, cols[1]] * weight
        mask[part] = kind.decide_maps(band[None])[0]
    unseen = ~(rows[3][:, None] & cols[3][None, :])
    if unseen.any():
        mask[unseen] = unseen_value(dtype)
    return mask


def class_fractions(mask, classes=None):
    """The share of the seen pixels of ``mask`` in each of ``classes`` classes (None: up to the largest class in
    it): float64 (classes,), summing to 1 (all zeros when no pixel was seen)."""
    mask = np.asarray(mask)
    values = mask[mask != unseen_value(mask.dtype)].astype(np.int64).ravel()
    counts = np.bincount(values, minlength=classes or 0)
    counts = (counts[:classes] if classes else counts).astype(np.float64)
    total = counts.sum()
    return counts / total if total else counts


def coverage(mask):
    """The share of ``mask``'s pixels the model saw (1.0 unless a centre crop cut some off)."""
    mask = np.asarray(mask)
    return float(np.mean(mask != unseen_value(mask.dtype))) if mask.size else 0.0


def top_classes(fractions, top_k, class_names=None):
    """``(class_index, class_name, fraction)`` of the ``top_k`` largest non-zero fractions, largest first."""
    order = np.argsort(-np.asarray(fractions), kind="stable")[:top_k]
    return [(int(i), class_names[i] if class_names and i < len(class_names) else None, float(fractions[i]))
            for i in order if fractions[i] > 0]
