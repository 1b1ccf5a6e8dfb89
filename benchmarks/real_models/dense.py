"""Dense (segmentation) data and reference for the text detector: document images with text-line masks.

Why generated: like the classifiers' data (``data.py``, whose fonts, words and
colour helpers this reuses), no data set may be downloaded here. A text
detector's users feed it photos or scans of documents: a light paper with
some texture and noise, several dark lines of text in assorted sizes, slightly
turned. Each image comes with a mask of the text the detector is meant to
find, class 1 on text and 0 elsewhere.

Which text mask: DB (PP-OCR's detector) is trained to output a *shrunk*
kernel of each text box (PaddleOCR's MakeShrinkMap, shrink ratio 0.4) and its
post-processing (``DBPostProcess``: ``pred > thresh``, then unclip 1.6) grows
the kernels back into boxes. What the package treats as text on the
probability map is therefore ``pred > 0.3``: the mask is what that map should
be. ``mask="box"`` marks the whole bounding box of each line's ink;
``mask="kernel"`` shrinks that box by DB's own offset
``D = area * (1 - r**2) / perimeter`` on each side first (see ``kernel_box``; DB
trains with r = 0.4 on annotated boxes, looser than ink boxes: r = 0.55 here);
``docs/real-models.md`` gives the IoU of both against the model's FP32 map and
which one the catalogue uses.

Written as trtkit's mask folder: ``ROOT/images/NNNNN.png`` and
``ROOT/masks/NNNNN.png`` (grey levels = class indices). trtkit has no
train/val sub-folders for masks: it splits the listing 80/20 by seed
(``trtkit.data.sources.split_positions``), calibration on the 80, verification
on the 20. Each image has its own RandomState from (seed, index), so more
images only add files.
"""

import os

import numpy as np

from .data import TEXT_FONTS, WORDS, _colour, _font, _pick

# PaddleOCR's DB training labels shrink each *annotated* box with ratio 0.4 (MakeShrinkMap); an annotated box is
# looser than the ink's bounding box drawn here, so the same kernel is a milder shrink of the ink box. 0.55 is
# the ratio whose masks the model's FP32 map matches best of 0.4, 0.55 and 0.7 (docs/real-models.md)
DB_SHRINK_RATIO = 0.4
SHRINK_RATIO = 0.55


def kernel_box(left, top, right, bottom, ratio=SHRINK_RATIO):
    """The box DB is trained to mark for text box (left, top, right, bottom): shrunk on every side by
    ``area * (1 - ratio**2) / perimeter`` (PaddleOCR MakeShrinkMap, a rectangle's polygon offset)."""
    width, height = float(right - left), float(bottom - top)
    if width <= 0 or height <= 0:
        return left, top, left, top
    offset = width * height * (1.0 - ratio ** 2) / (2.0 * (width + height))
    return left + offset, top + offset, right - offset, bottom - offset


def _line_text(rng, font, room):
    """Random words that fit into ``room`` pixels (at least one word, cut to fit when one is too wide)."""
    words = []
    while True:
        word = _pick(rng, WORDS)
        style = rng.rand()
        word = word.capitalize() if style < 0.25 else (word.upper() if style < 0.35 else word)
        if rng.rand() < 0.1:
            word = str(rng.randint(0, 100000))
        if font.getlength(" ".join(words + [word])) > room:
            break
        words.append(word)
        if len(words) >= rng.randint(2, 9):
            break
    text = " ".join(words) or _pick(rng, WORDS)
    while len(text) > 1 and font.getlength(text) > room:
        text = text[:-1]
    return text


def _paper(rng, height, width):
    """A light paper: a base colour, a smooth shading and fine grain (float 0-255, H x W x 3)."""
    from PIL import Image
    base = np.asarray(_colour(rng, 205, 250), dtype=np.float32)
    coarse = rng.normal(0.0, 1.0, size=(max(2, height // 32), max(2, width // 32))).astype(np.float32)
    shade = np.asarray(Image.fromarray(coarse, mode="F").resize((width, height), Image.BICUBIC))
    paper = base[None, None, :] + (shade * rng.uniform(2.0, 7.0))[:, :, None]
    return paper + rng.normal(0.0, rng.uniform(1.0, 5.0), size=(height, width, 1)).astype(np.float32)


def text_page(rng, size=(320, 320), mask="kernel", max_angle=3.0):
    """(image RGB, mask L) of one document-like image of ``size`` (H, W): 2-7 dark text lines of random words
    in 16-40 px fonts on light textured paper, the whole page turned by up to ``max_angle`` degrees; the mask
    is 1 on each line's box (``mask``: "box" or "kernel", see the module docstring), 0 elsewhere."""
    from PIL import Image, ImageDraw
    height, width = size
    ink = Image.new("L", (width, height), 0)
    labels = Image.new("L", (width, height), 0)
    y = rng.randint(4, 24)
    for _ in range(rng.randint(2, 8)):
        font = _font(_pick(rng, TEXT_FONTS), rng.randint(16, 41))
        left = rng.randint(4, max(5, width // 4))
        text = _line_text(rng, font, width - left - 6)
        box = font.getbbox(text)
        if y + box[3] - box[1] > height - 4:
            break
        line = Image.new("L", (width, height), 0)
        ImageDraw.Draw(line).text((left - box[0], y - box[1]), text, font=font, fill=int(rng.randint(170, 256)))
        bounds = line.getbbox()
        if bounds is None:
            continue
        ink.paste(line, mask=line)
        if mask == "kernel":
            bounds = kernel_box(*bounds)
        ImageDraw.Draw(labels).rectangle([int(round(bounds[0])), int(round(bounds[1])),
                                          int(round(bounds[2])) - 1, int(round(bounds[3])) - 1], fill=1)
        y += int((box[3] - box[1]) * rng.uniform(1.4, 2.2)) + rng.randint(0, 12)
    angle = rng.uniform(-max_angle, max_angle)
    ink = ink.rotate(angle, resample=Image.BILINEAR)
    labels = labels.rotate(angle, resample=Image.NEAREST)
    paper = _paper(rng, height, width)
    colour = np.asarray(_colour(rng, 0, 70), dtype=np.float32)
    alpha = np.asarray(ink, dtype=np.float32)[:, :, None] / 255.0
    pixels = paper * (1.0 - alpha) + colour[None, None, :] * alpha
    image = Image.fromarray(np.clip(np.round(pixels), 0, 255).astype(np.uint8), mode="RGB")
    return image, labels


def page(index, seed=0, **options):
    """Image ``index`` of the data set of ``seed``: (PIL RGB image, PIL L mask)."""
    return text_page(np.random.RandomState([seed, 7, index]), **options)


def write_pages(root, count, seed=0, **options):
    """``root/images/NNNNN.png`` and ``root/masks/NNNNN.png`` for ``count`` pages; existing files are kept."""
    for folder in ("images", "masks"):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
    for index in range(count):
        name = "{:05d}.png".format(index)
        targets = [os.path.join(root, "images", name), os.path.join(root, "masks", name)]
        if all(os.path.exists(t) for t in targets):
            continue
        for target, picture in zip(targets, page(index, seed, **options)):
            partial = target + ".part.png"
            picture.save(partial)
            os.replace(partial, target)
    return root


# ------------------------------------------------------------------ the package's own preprocessing and rule

def ppocr_det_input(image, limit_side_len=736, limit_type="min"):
    """rapidocr_onnxruntime ch_ppocr_v3_det/utils.py DetPreProcess on a PIL image: BGR (as cv2 reads it),
    resize so the short side is at least ``limit_side_len`` ("min"; "max": the long side at most), each side
    rounded to a multiple of 32 (bilinear: cv2.resize's default, PIL here), x/255, ImageNet mean/std applied to
    the B, G, R channels in that order, HWC -> CHW. float32 (3, H, W)."""
    from PIL import Image
    bgr = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])
    height, width = bgr.shape[:2]
    if limit_type == "max":
        ratio = float(limit_side_len) / max(height, width) if max(height, width) > limit_side_len else 1.0
    else:
        ratio = float(limit_side_len) / min(height, width) if min(height, width) < limit_side_len else 1.0
    new_h = int(round(int(height * ratio) / 32.0) * 32)
    new_w = int(round(int(width * ratio) / 32.0) * 32)
    if (new_h, new_w) != (height, width):
        bgr = np.asarray(Image.fromarray(bgr).resize((new_w, new_h), Image.BILINEAR))
    mean = np.asarray([0.485, 0.456, 0.406], dtype=np.float32)
    std = np.asarray([0.229, 0.224, 0.225], dtype=np.float32)
    return ((bgr.astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1).astype(np.float32)


def text_iou(onnx_file, root, limit_side_len=736, thresh=0.3, files=None, threads=2):
    """IoU of the text class (and the mIoU of text and background) of the FP32 model's ``pred > thresh`` map
    (``DBPostProcess``'s bitmap, before its 2x2 dilation), fed by the package's own preprocessing, against the
    masks under ``root`` (each mask resized to the map's size, nearest). Returns a dict."""
    import onnxruntime as ort
    from PIL import Image
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])
    names = files if files is not None else sorted(os.listdir(os.path.join(root, "images")))
    counts = np.zeros((2, 2), dtype=np.int64)
    for name in names:
        with Image.open(os.path.join(root, "images", name)) as image:
            x = ppocr_det_input(image, limit_side_len)
        with Image.open(os.path.join(root, "masks", os.path.splitext(name)[0] + ".png")) as mask:
            truth = np.asarray(mask.resize((x.shape[2], x.shape[1]), Image.NEAREST)).astype(np.int64)
        pred = session.run(None, {session.get_inputs()[0].name: x[None]})[0][0, 0] > thresh
        counts += np.bincount(truth.ravel() * 2 + pred.ravel().astype(np.int64), minlength=4).reshape(2, 2)
    hits = np.diag(counts).astype(np.float64)
    union = counts.sum(0) + counts.sum(1) - hits
    ious = hits / np.maximum(union, 1)
    return {"text_iou": float(ious[1]), "background_iou": float(ious[0]), "miou": float(ious.mean()),
            "images": len(names), "text_share": float(counts[1].sum()) / counts.sum(),
            "predicted_share": float(counts[:, 1].sum()) / counts.sum()}
