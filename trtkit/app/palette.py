"""Masks as pictures: Pascal VOC's colour palette, palette PNGs and colour overlays on the photo.

The palette is the one every VOC tool and torchvision's segmentation reference
draw with, fixed (no random colours, so the same class is the same colour in
every picture and every run): class ``i``'s colour spreads the bits of ``i``
over the high bits of red, green and blue (0 black background, 1 (128, 0, 0),
2 (0, 128, 0), 3 (128, 128, 0), 4 (0, 0, 128), ... 15 person (192, 128, 128)),
and 255, the "void" of unseen pixels, is (224, 224, 192).

``mask_image`` writes a mask as a palette image (mode ``P``): its pixel values
stay the class indices (``numpy.asarray(Image.open(path))`` gives the mask
back), viewers show the colours. ``overlay`` blends the colours into the photo.
"""

import numpy as np

from trtkit.deps import require

OVERLAY_OPACITY = 0.5


def voc_palette(count=256):
    """(count, 3) uint8: Pascal VOC's colour of each class index."""
    colours = np.zeros((count, 3), dtype=np.uint8)
    for index in range(count):
        value, red, green, blue = index, 0, 0, 0
        for shift in range(7, -1, -1):
            red |= (value & 1) << shift
            green |= ((value >> 1) & 1) << shift
            blue |= ((value >> 2) & 1) << shift
            value >>= 3
        colours[index] = (red, green, blue)
    return colours


PALETTE = voc_palette()


def mask_image(mask):
    """A mask (H, W) of class indices -> a PIL image: mode ``P`` with the VOC palette (uint8 masks), else a
    16-bit grey image (``I;16``, unseen 65535) for models of 255 classes or more."""
    Image = require("PIL.Image", "writing masks")
    mask = np.asarray(mask)
    if mask.dtype == np.uint8:
        image = Image.frombytes("P", (mask.shape[1], mask.shape[0]), np.ascontiguousarray(mask).tobytes())
        image.putpalette(PALETTE.ravel().tolist())
        return image
    wide = np.where(mask < 0, 65535, mask).astype(np.uint16)
    return Image.frombytes("I;16", (mask.shape[1], mask.shape[0]), wide.astype("<u2").tobytes())


def encode_png(image):
    """The bytes of a PNG file of a PIL image."""
    import io
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def overlay(image, mask, opacity=OVERLAY_OPACITY):
    """The photo (a PIL image or uint8 array of the mask's size) with each pixel's class colour blended in at
    ``opacity``, as an RGB PIL image. Class 0 (the background, black in VOC's palette) and unseen pixels are
    left as they are, so the photo stays readable."""
    Image = require("PIL.Image", "drawing overlays")
    from trtkit.app.maps import unseen_value
    from trtkit.data.preprocess import to_pil
    from trtkit.errors import InputError
    mask = np.asarray(mask)
    photo = to_pil(image).convert("RGB")
    if photo.size != (mask.shape[1], mask.shape[0]):
        raise InputError("the mask is {}x{} but the image {}x{}".format(mask.shape[1], mask.shape[0], *photo.size),
                         hint="overlay a mask on the image it was predicted for (predict returns the image's size)")
    pixels = np.asarray(photo, dtype=np.float32)
    painted = (mask > 0) & (mask != unseen_value(mask.dtype))
    colours = PALETTE[mask.astype(np.int64) % len(PALETTE)].astype(np.float32)
    blend = pixels * (1 - opacity) + colours * opacity
    out = np.where(painted[:, :, None], blend, pixels)
    return Image.fromarray(np.clip(np.rint(out), 0, 255).astype(np.uint8), "RGB")
