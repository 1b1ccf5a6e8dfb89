"""The segmentation sample data ('shapes'): coloured circles, squares and triangles on textured backgrounds,
with their class-index masks, drawn here from a seed.

Why drawn rather than shipped: no data may be downloaded, and a fixed seed gives every machine the same
images. Each 96x96 image has a striped, noisy grey-ish background and one to three shapes (radius 12-24 px,
rotated, overlapping), each in its class's hue family (circle red, square green, triangle blue; saturation
and brightness vary), so the sample model learns real boundaries and reaches a real mIoU (about 0.9) in a
minute of CPU training. Classes: 0 background, 1 circle, 2 square, 3 triangle. ``shapes_source()`` gives the
rows and masks as a ``.npz`` would (``arrays.RowReader`` and ``masks.MaskRows``).
"""

import math

import numpy as np

SHAPES_SIZE = 96
SHAPES_COUNT = 2000
SHAPES_SEED = 1
SHAPES_VERSION = 1  # bump when the drawing changes, so cached sample models retrain
CLASS_NAMES = ("background", "circle", "square", "triangle")
_HUES = {1: 0.0, 2: 0.33, 3: 0.62}


def textured_background(rng, size):
    """A ``size`` x ``size`` uint8 RGB background: two grey-ish tones in sine stripes at a random angle and
    frequency, plus pixel noise (so a model cannot find shapes by a flat background alone)."""
    grid_y, grid_x = np.mgrid[0:size, 0:size] / float(size)
    low, high = [np.clip(rng.randint(0, 256) + rng.randint(-25, 26, 3), 0, 255) for _ in range(2)]
    angle, frequency = rng.uniform(0, 2 * math.pi), rng.uniform(2, 8)
    stripes = 0.5 + 0.5 * np.sin(2 * math.pi * frequency * (grid_x * math.cos(angle) + grid_y * math.sin(angle)))
    background = low * stripes[..., None] + high * (1 - stripes[..., None]) + rng.normal(0, 12, (size, size, 3))
    return np.clip(background, 0, 255).astype(np.uint8)


def shape_colour(rng, cls):
    """An RGB colour in class ``cls``'s hue family (hue jittered, saturation and brightness varied)."""
    import colorsys
    hue = (_HUES[cls] + rng.uniform(-0.06, 0.06)) % 1.0
    return tuple(int(255 * v) for v in colorsys.hsv_to_rgb(hue, rng.uniform(0.5, 1.0), rng.uniform(0.45, 1.0)))


def shape_outline(cls, cx, cy, radius, turn):
    """("ellipse", box) for a circle (class 1), ("polygon", corners) for a square (2) or triangle (3): the
    shape inscribed in the circle of ``radius`` around (cx, cy), turned by ``turn`` radians."""
    if cls == 1:
        return "ellipse", [cx - radius, cy - radius, cx + radius, cy + radius]
    corners = 4 if cls == 2 else 3
    return "polygon", [(cx + radius * math.cos(turn + 2 * math.pi * k / corners),
                        cy + radius * math.sin(turn + 2 * math.pi * k / corners)) for k in range(corners)]


def draw_outline(draw, outline, fill):
    """Fill ``outline`` (``shape_outline``'s) on a PIL ``ImageDraw``: PIL fills without antialiasing, so an
    image and its masks drawn with the same outline agree pixel for pixel."""
    kind, where = outline
    if kind == "ellipse":
        draw.ellipse(where, fill=fill)
    else:
        draw.polygon(where, fill=fill)


def draw_shapes(count, size=SHAPES_SIZE, seed=SHAPES_SEED):
    """(uint8 images [count, size, size, 3], uint8 masks [count, size, size]) drawn from ``seed``."""
    from trtkit.data.preprocess import _pil
    Image = _pil()
    from PIL import ImageDraw
    rng = np.random.RandomState(seed)
    images = np.empty((count, size, size, 3), np.uint8)
    masks = np.empty((count, size, size), np.uint8)
    for index in range(count):
        image = Image.fromarray(textured_background(rng, size))
        mask = Image.new("L", (size, size), 0)
        paint, label = ImageDraw.Draw(image), ImageDraw.Draw(mask)
        for _ in range(rng.randint(1, 4)):
            cls = rng.randint(1, 4)
            radius = rng.uniform(0.12, 0.25) * size
            cx, cy = rng.uniform(radius, size - radius, 2)
            turn = rng.uniform(0, 2 * math.pi)
            outline = shape_outline(cls, cx, cy, radius, turn)
            draw_outline(paint, outline, shape_colour(rng, cls))
            draw_outline(label, outline, cls)
        images[index] = np.asarray(image)
        masks[index] = np.asarray(mask)
    return images, masks


class _Rows(object):
    """Rows of an in-memory array at ascending indices, as a .npz member gives them (``masks.MaskRows``)."""

    def __init__(self, array):
        self.array = array

    def rows(self, indices):
        from trtkit.data.arrays import _ascending
        for i in _ascending(indices):
            yield self.array[i]


_DRAWN = {}


def shapes_source():
    """(RowReader of the images, MaskRows of the masks, class names) of the shapes sample (2000 images, 74 MB;
    drawn once per machine, ``data.drawn``, and read once per process)."""
    from trtkit.data.arrays import RowReader
    from trtkit.data.masks import MaskRows
    if not _DRAWN:
        from trtkit.data.drawn import drawn_arrays

        def draw():
            images, masks = draw_shapes(SHAPES_COUNT)
            return {"images": images, "masks": masks}
        _DRAWN.update(drawn_arrays("shapes", SHAPES_VERSION, SHAPES_COUNT, SHAPES_SEED, draw))
    images, masks = _DRAWN["images"], _DRAWN["masks"]
    reader = RowReader("sample shapes", images.shape, images.dtype, _Rows(images).rows,
                       "sample:shapes:v{}".format(SHAPES_VERSION), kind="sample")
    return reader, MaskRows(_Rows(masks)), list(CLASS_NAMES)
