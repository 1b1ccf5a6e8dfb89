"""Masks and boxes as pictures: Pascal VOC's colour palette, palette PNGs, colour overlays and labelled boxes.

The palette is the one every VOC tool and torchvision's segmentation reference
draw with, fixed (no random colours, so the same class is the same colour in
every picture and every run): class ``i``'s colour spreads the bits of ``i``
over the high bits of red, green and blue (0 black background, 1 (128, 0, 0),
2 (0, 128, 0), 3 (128, 128, 0), 4 (0, 0, 128), ... 15 person (192, 128, 128)),
and 255, the "void" of unseen pixels, is (224, 224, 192).

``mask_image`` writes a mask as a palette image (mode ``P``): its pixel values
stay the class indices (``numpy.asarray(Image.open(path))`` gives the mask
back), viewers show the colours. ``overlay`` blends the colours into the photo.
``draw_boxes`` draws detections on it, each class in ``box_colour``: the VOC
colour of the next index at twice the brightness, so that class 0 (a
RetinaNet's first class; black in VOC) shows, and the same class keeps its
colour in every picture.
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


def box_colour(label):
    """(r, g, b) of class ``label``'s boxes (see the module doc): bright and fixed per class."""
    colour = np.minimum(PALETTE[(int(label) + 1) % len(PALETTE)].astype(np.int64) * 2, 255)
    return tuple(int(c) for c in colour)


def draw_boxes(image, boxes, labels, texts, points=None):
    """The photo (PIL or uint8 array) as an RGB PIL image with each box (x1 y1 x2 y2 in its pixels) outlined in
    its label's colour and its text (e.g. "cat 0.93") on a filled band above it (inside, at the top edge);
    ``points`` ([D, K, 2] x y, a face detector's landmarks): a dot each, in the box's colour.
    Drawn last to first, so that where boxes overlap the first given (the best, as detections come) is on top;
    the line is thicker on larger pictures so that it stays visible when the picture is shown small."""
    require("PIL.Image", "drawing boxes")
    from PIL import ImageDraw
    from trtkit.data.preprocess import to_pil
    photo = to_pil(image).convert("RGB")
    draw = ImageDraw.Draw(photo)
    line = max(2, int(round(min(photo.size) / 250.0)))
    points = points if points is not None else [()] * len(boxes)
    for box, label, text, dots in reversed(list(zip(boxes, labels, texts, points))):
        x1, y1, x2, y2 = [float(v) for v in box]
        colour = box_colour(label)
        draw.rectangle([x1, y1, max(x1, x2 - 1), max(y1, y2 - 1)], outline=colour, width=line)
        for x, y in dots:
            draw.ellipse([x - line, y - line, x + line, y + line], fill=colour)
        left, top, right, bottom = draw.textbbox((0, 0), text)
        height = bottom - top + 4
        band_top = y1 - height if y1 - height >= 0 else y1
        draw.rectangle([x1, band_top, x1 + right - left + 4, band_top + height], fill=colour)
        dark = sum(c * w for c, w in zip(colour, (0.299, 0.587, 0.114))) > 140
        draw.text((x1 + 2 - left, band_top + 2 - top), text, fill=(0, 0, 0) if dark else (255, 255, 255))
    return photo
