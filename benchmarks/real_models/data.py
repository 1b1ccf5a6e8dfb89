"""Seeded generators of labelled images that look like each catalogued model's users' data.

Why generated: no data set may be downloaded here, and the models were trained
on data we do not have. Each generator draws what the model's package is
used on (text lines, document pages, board squares, digits) with PIL and the
fonts matplotlib ships inside its wheel (DejaVu, STIX, Computer Modern), so
the pixels depend only on the seed and the pinned matplotlib fonts, never on
the machine's installed fonts.

Every image gets its own RandomState from (seed, split, class, index), so
asking for more images adds images and never changes the earlier ones.

Written as trtkit's folder layout: ``ROOT/train/<NN_class>/*.png`` (INT8
calibration reads the train split) and ``ROOT/val/<NN_class>/*.png`` (the
held-out split verification reads). ``NN_`` keeps the sorted folder order equal
to the model's output order.
"""

import os

import numpy as np

from .catalog import MODELS

WORDS = ("the quick brown fox jumps over lazy dog invoice total amount date name address phone number order item "
         "price quantity receipt page report table summary account balance payment due customer service delivery "
         "note reference contract section chapter figure result method value tax shipping discount").split()
TEXT_FONTS = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSerif-Bold.ttf",
              "cmr10.ttf", "STIXGeneral.ttf", "DejaVuSans-Oblique.ttf")
DIGIT_FONTS = TEXT_FONTS + ("cmss10.ttf", "DejaVuSerif-Italic.ttf", "cmti10.ttf", "STIXGeneralItalic.ttf")
CHESS_FONTS = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Oblique.ttf")
# (light, dark) square colours of common Lichess board themes (brown, blue, green, olive, grey, plain)
BOARD_THEMES = (((240, 217, 181), (181, 136, 99)), ((222, 227, 230), (140, 162, 173)),
                ((255, 255, 221), (134, 166, 102)), ((235, 236, 208), (119, 149, 86)),
                ((232, 235, 239), (125, 135, 150)), ((255, 255, 255), (200, 200, 200)))
# Unicode's outlined ("white") chess glyphs; the solid ("black") one is 6 code points further
OUTLINE_GLYPH = {"K": 0x2654, "Q": 0x2655, "R": 0x2656, "B": 0x2657, "N": 0x2658, "P": 0x2659}
SPLITS = {"train": 1, "val": 2}
# part of the cached data folders' names: bump it when a generator draws differently
DATA_VERSION = 1


def font_path(name):
    """A font file from matplotlib's wheel (the same bytes on every machine with the same matplotlib)."""
    import matplotlib
    path = os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf", name)
    if not os.path.exists(path):
        raise RuntimeError("matplotlib has no font {} (needed to draw the real-model data)".format(name))
    return path


def _font(name, size):
    from PIL import ImageFont
    return ImageFont.truetype(font_path(name), int(size))


def _pick(rng, items):
    return items[rng.randint(len(items))]


def _colour(rng, low, high):
    return tuple(int(v) for v in rng.randint(low, high, size=3))


# ------------------------------------------------------------------ text lines (text-direction classifiers)

def text_line(rng):
    """A tightly cropped line of dark text on a light background, as an OCR text detector crops it."""
    from PIL import Image, ImageDraw
    words = [_pick(rng, WORDS) for _ in range(rng.randint(1, 7))]
    if rng.rand() < 0.3:
        words.append(str(rng.randint(0, 100000)))
    style = rng.rand()
    if style < 0.3:
        words = [w.capitalize() for w in words]
    elif style < 0.45:
        words = [w.upper() for w in words]
    text = " ".join(words)
    font = _font(_pick(rng, TEXT_FONTS), rng.randint(20, 41))
    left, top, right, bottom = font.getbbox(text)
    pad = rng.randint(2, 9, size=4)
    image = Image.new("RGB", (right - left + pad[0] + pad[1], bottom - top + pad[2] + pad[3]), _colour(rng, 200, 256))
    ImageDraw.Draw(image).text((pad[0] - left, pad[2] - top), text, font=font, fill=_colour(rng, 0, 70))
    return image


def text_lines(rng, label, names, **_):
    """Class '0': an upright line; class '180': the same kind of line turned upside down."""
    image = text_line(rng)
    return image.rotate(180) if names[label] == "180" else image


# ------------------------------------------------------------------ document pages (page-orientation classifiers)

def document_page(rng, width=620, height=877):
    """An A4-ratio page: a title, then paragraphs of justified-ish lines, in one font."""
    from PIL import Image, ImageDraw
    page = Image.new("RGB", (width, height), _colour(rng, 235, 256))
    draw = ImageDraw.Draw(page)
    face = _pick(rng, TEXT_FONTS)
    left, right = rng.randint(30, 71), width - rng.randint(30, 71)
    y = rng.randint(30, 71)
    title_font = _font(face, rng.randint(24, 35))
    title = " ".join(_pick(rng, WORDS).capitalize() for _ in range(rng.randint(2, 6)))
    draw.text((left, y), title, font=title_font, fill=(0, 0, 0))
    y += title_font.size + 20
    body = _font(face, rng.randint(13, 20))
    while y < height - 60:
        if rng.rand() < 0.1:  # paragraph break
            y += body.size
            continue
        line = []
        while True:
            word = _pick(rng, WORDS)
            word = word.capitalize() if rng.rand() < 0.1 else word
            if body.getlength(" ".join(line + [word])) > right - left:
                break
            line.append(word)
        if rng.rand() < 0.15:  # a paragraph's last, short line
            line = line[:max(1, len(line) // 2)]
        draw.text((left, y), " ".join(line), font=body, fill=_colour(rng, 0, 60))
        y += int(body.size * rng.uniform(1.3, 1.7))
    return page


def document_pages(rng, label, names, **_):
    """Class k ('0', '90', '180', '270'): the page turned 90*k degrees clockwise."""
    angle = int(names[label])
    return document_page(rng).rotate(-angle, expand=True)


# ------------------------------------------------------------------ chess board squares

def chess_square(rng, piece, size=64, scale=(0.8, 0.95)):
    """One board square: 'empty' or e.g. 'wN' drawn with DejaVu's chess glyphs on a Lichess-like colour.

    White pieces: the outlined glyph's inside filled white, then the outline in
    black. Black pieces: the same filled black, then the solid glyph over it.
    """
    from PIL import Image, ImageDraw, ImageFilter
    light, dark = _pick(rng, BOARD_THEMES)
    image = Image.new("RGB", (size, size), light if rng.rand() < 0.5 else dark)
    if piece == "empty":
        return image
    font = _font(_pick(rng, CHESS_FONTS), size * rng.uniform(*scale))
    outline = chr(OUTLINE_GLYPH[piece[1]])
    solid = chr(OUTLINE_GLYPH[piece[1]] + 6)
    left, top, right, bottom = font.getbbox(solid)
    x = (size - (right - left)) / 2.0 - left + rng.uniform(-2, 2)
    y = (size - (bottom - top)) / 2.0 - top + rng.uniform(-2, 2)
    stroke = Image.new("L", (size, size), 0)
    ImageDraw.Draw(stroke).text((x, y), outline, font=font, fill=255)
    # the body = what a flood fill from the corner does not reach; white pieces close small gaps first
    closed = stroke.point(lambda v: 255 if v > 100 else 0).filter(ImageFilter.MaxFilter(3 if piece[0] == "w" else 1))
    outside = closed.convert("RGB")
    ImageDraw.floodfill(outside, (0, 0), (9, 9, 9))
    body = Image.fromarray(((np.asarray(outside)[:, :, 0] != 9) * 255).astype(np.uint8))
    image.paste((255, 255, 255) if piece[0] == "w" else (0, 0, 0), mask=body)
    draw = ImageDraw.Draw(image)
    draw.text((x, y), outline, font=font, fill=(0, 0, 0))
    if piece[0] == "b":
        draw.text((x, y), solid, font=font, fill=(0, 0, 0))
    return image


def chess_squares(rng, label, names, size=64, scale=(0.8, 0.95)):
    return chess_square(rng, names[label], size=size, scale=scale)


# ------------------------------------------------------------------ MNIST-like digits

def mnist_digit(rng, digit):
    """A font digit made to look like MNIST: white on black, fit into 20x20, centred by mass in 28x28."""
    from PIL import Image, ImageDraw, ImageFilter
    canvas = Image.new("L", (140, 140), 0)
    ImageDraw.Draw(canvas).text((30, 10), str(digit), font=_font(_pick(rng, DIGIT_FONTS), 80), fill=255)
    canvas = canvas.rotate(rng.uniform(-12, 12), resample=Image.BILINEAR)
    if rng.rand() < 0.5:  # pen strokes are thicker than most font strokes
        canvas = canvas.filter(ImageFilter.MaxFilter(int(_pick(rng, (3, 5, 7)))))
    canvas = canvas.crop(canvas.getbbox())
    width, height = canvas.size
    factor = 20.0 / max(width, height)
    canvas = canvas.resize((max(1, int(round(width * factor))), max(1, int(round(height * factor)))), Image.LANCZOS)
    ink = np.asarray(canvas, dtype=np.float64)
    rows, cols = np.mgrid[:ink.shape[0], :ink.shape[1]]
    cy, cx = (ink * rows).sum() / ink.sum(), (ink * cols).sum() / ink.sum()
    image = Image.new("L", (28, 28), 0)
    image.paste(canvas, (int(round(14 - cx)), int(round(14 - cy))))
    return image


def mnist_digits(rng, label, names, **_):
    return mnist_digit(rng, int(names[label]))


GENERATORS = {"text_lines": text_lines, "document_pages": document_pages, "chess_squares": chess_squares,
              "mnist_digits": mnist_digits}


def image(name, split, label, index, seed=0):
    """Image ``index`` of class ``label`` of ``split`` for model ``name`` (a PIL image)."""
    model = MODELS[name]
    rng = np.random.RandomState([seed, SPLITS[split], label, index])
    return GENERATORS[model.generator](rng, label, model.class_names, **model.generator_options)


def write_dataset(name, root, count, train_count=None, seed=0):
    """Write ``count`` held-out images (``root/val``) and ``train_count`` (default ``count``) train images.

    Classes get ``count // classes`` images each, the first ``count % classes``
    one more. Existing files of the same name are kept (the images are
    deterministic), so a larger count only adds files. Returns ``root``.
    """
    model = MODELS[name]
    classes = len(model.class_names)
    for split, total in (("val", count), ("train", count if train_count is None else train_count)):
        for label, folder in enumerate(model.class_folders):
            path = os.path.join(root, split, folder)
            os.makedirs(path, exist_ok=True)
            for index in range(total // classes + (1 if label < total % classes else 0)):
                target = os.path.join(path, "{:05d}.png".format(index))
                if not os.path.exists(target):
                    partial = target + ".part.png"
                    image(name, split, label, index, seed).save(partial)
                    os.replace(partial, target)
    return root


def write_class_names(name, path):
    """The model's class names, one per line in output order (trtkit's ``--class-names`` file)."""
    from .catalog import find
    with open(path, "w") as handle:
        handle.write("\n".join(find(name).class_names) + "\n")
    return path
