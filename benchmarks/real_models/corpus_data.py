"""Data for the INT8 corpus (``corpus.py``), cut from real photos the way each package's users feed it, and each
package's own preprocessing (the FP32 reference trtkit's input contract is checked against).

Why real photos: a face parser or a hand model on drawn shapes says nothing
about its INT8 on faces and hands. The photos are the ones the face detectors'
data is made of (``detectors.FACE_SOURCES``: images inside scikit-image's
wheel and insightface's sdist, fetched with pip, hash-checked, never
committed). ``HANDS`` adds the centres of 7 hands in insightface's t1.jpg.
Few people, so every cut is jittered (position, size, a turn, a mirror, light):
the figures are about agreement with FP32 on these pictures, not accuracy.

Unlabelled: written as ``ROOT/train/NNNNN.png`` (calibration) and
``ROOT/val/NNNNN.png`` (held out), the images directly in each split; each
image has its own RandomState from (seed, split, index).
"""

import os

import numpy as np

SPLITS = {"train": 1, "val": 2}
CORPUS_DATA_VERSION = 2
# (x, y) centres of hands in insightface 0.7.3's t1.jpg (1280x886), read off the photo
HANDS = ((220, 466), (328, 645), (628, 476), (718, 544), (1004, 460), (1198, 600), (920, 634))
_PHOTOS = {}


def _photos():
    """{"faces": [(RGB PIL photo, face boxes)] of FACE_SOURCES, "scenes": those with room around the faces,
    "t1": the group photo}, fetched once per process."""
    if not _PHOTOS:
        from .det_data import _asset
        from .detectors import FACE_SOURCES
        _PHOTOS["faces"] = [(_asset(s), s.faces) for s in FACE_SOURCES.values()]
        _PHOTOS["t1"] = _asset(FACE_SOURCES["group_t1"])
        # photos with room around their faces (not the 112x112 aligned crop): frames and portraits
        _PHOTOS["scenes"] = [(p, f) for p, f in _PHOTOS["faces"] if min(p.size) >= 256]
    return _PHOTOS


def _relight(rng, image):
    x = np.asarray(image, dtype=np.float32)
    x = (x - 128) * rng.uniform(0.75, 1.2) + 128 + rng.uniform(-25, 25)
    from PIL import Image
    return Image.fromarray(np.clip(np.round(x), 0, 255).astype(np.uint8))


def _cut(rng, photo, cx, cy, width, height, max_turn, flip=True):
    """The (width x height) box centred on (cx, cy) of ``photo``, turned by up to ``max_turn`` degrees around its
    centre (edge pixels past the photo's border), maybe mirrored, re-lit; a PIL image at the box's size."""
    from PIL import Image
    reach = int(np.ceil(0.75 * max(width, height))) + 2
    left, top = int(round(cx)) - reach, int(round(cy)) - reach
    arr = np.asarray(photo)
    rows = np.clip(np.arange(top, top + 2 * reach), 0, arr.shape[0] - 1)
    cols = np.clip(np.arange(left, left + 2 * reach), 0, arr.shape[1] - 1)
    patch = Image.fromarray(np.ascontiguousarray(arr[rows][:, cols]))
    patch = patch.rotate(rng.uniform(-max_turn, max_turn), resample=Image.BILINEAR)
    ox, oy = cx - left, cy - top
    piece = patch.crop((int(round(ox - width / 2.0)), int(round(oy - height / 2.0)),
                        int(round(ox - width / 2.0)) + int(round(width)),
                        int(round(oy - height / 2.0)) + int(round(height))))
    if flip and rng.rand() < 0.5:
        piece = piece.transpose(Image.FLIP_LEFT_RIGHT)
    return _relight(rng, piece)


def face_crops(rng, style):
    """A face cut as a package's face detector hands it over.

    ``fer``: fer's box made square (tosquare), grown by its (10, 10) offsets, grey.
    ``box``: an SSD face detector's box (the face box, a little looser), RGB; half of them with a drawn mask.
    ``portrait``: a CelebAMask-HQ-like square portrait, 1.8-2.6 face heights wide.
    """
    photos = _photos()["faces"] if style != "portrait" else _photos()["scenes"]
    photo, faces = photos[rng.randint(len(photos))]
    x, y, w, h = faces[rng.randint(len(faces))]
    cx, cy = x + w / 2.0 + rng.uniform(-0.08, 0.08) * w, y + h / 2.0 + rng.uniform(-0.08, 0.08) * h
    w, h = w * rng.uniform(0.9, 1.1), h * rng.uniform(0.9, 1.1)
    if style == "fer":
        side = max(w, h) + 20
        return _cut(rng, photo, cx, cy, side, side, 10).convert("L")
    if style == "box":
        face = _cut(rng, photo, cx, cy, w * 1.1, h * 1.1, 10)
        return _mask_on(rng, face) if rng.rand() < 0.5 else face
    side = h * rng.uniform(1.8, 2.6)
    return _cut(rng, photo, cx, cy + rng.uniform(0.0, 0.15) * side, side, side, 10)


MASK_COLOURS = ((170, 205, 230), (235, 238, 240), (40, 40, 45), (120, 150, 200), (200, 200, 200))


def _mask_on(rng, face):
    """A face mask drawn over the lower face of a face box cut (the face fills the middle 1/1.1 of it): a
    rounded polygon from the nose bridge to under the chin in a surgical/cloth mask's colour, with a shade
    and pleats; how the masked half of common face-mask training sets was made (masks pasted onto faces)."""
    from PIL import Image, ImageDraw, ImageFilter
    width, height = face.size
    top = height * rng.uniform(0.45, 0.55)
    bottom = height * rng.uniform(0.92, 1.0)
    left, right = width * rng.uniform(0.08, 0.16), width * rng.uniform(0.84, 0.92)
    middle = (left + right) / 2.0
    outline = [(left, top + 0.1 * (bottom - top)), (middle, top - 0.05 * height),
               (right, top + 0.1 * (bottom - top)), (right - 0.05 * width, bottom - 0.2 * (bottom - top)),
               (middle, bottom), (left + 0.05 * width, bottom - 0.2 * (bottom - top))]
    shape = Image.new("L", face.size, 0)
    ImageDraw.Draw(shape).polygon(outline, fill=255)
    shape = shape.filter(ImageFilter.GaussianBlur(1.0))
    colour = np.asarray(MASK_COLOURS[rng.randint(len(MASK_COLOURS))], dtype=np.float32) * rng.uniform(0.85, 1.05)
    rows = np.linspace(1.0, rng.uniform(0.75, 0.95), height, dtype=np.float32)[:, None, None]
    cloth = np.clip(colour[None, None, :] * rows + rng.normal(0, 3, (height, width, 1)), 0, 255)
    layer = Image.fromarray(cloth.astype(np.uint8))
    draw = ImageDraw.Draw(layer)
    for k in range(1, 4):  # pleats
        y = top + k * (bottom - top) / 4.5
        draw.line([(left + 0.05 * width, y), (right - 0.05 * width, y)], fill=tuple(int(v * 0.85) for v in colour),
                  width=max(1, width // 80))
    out = face.convert("RGB").copy()
    out.paste(layer, mask=shape)
    return out


def person_frames(rng, size=256):
    """A square frame with a person in it (2.5-5 face heights wide, the face in its upper half), at ``size``."""
    from PIL import Image
    photos = _photos()["scenes"]
    photo, faces = photos[rng.randint(len(photos))]
    x, y, w, h = faces[rng.randint(len(faces))]
    side = h * rng.uniform(2.5, 5.0)
    cx = x + w / 2.0 + rng.uniform(-0.2, 0.2) * side
    cy = y + h / 2.0 + rng.uniform(0.1, 0.3) * side
    return _cut(rng, photo, cx, cy, side, side, 5).resize((size, size), Image.BILINEAR)


def hand_crops(rng, size=224):
    """A square around one of t1.jpg's hands as MediaPipe's ROI cuts it, turned, maybe mirrored, at ``size``."""
    from PIL import Image
    cx, cy = HANDS[rng.randint(len(HANDS))]
    side = rng.uniform(140, 220)
    cx, cy = cx + rng.uniform(-0.1, 0.1) * side, cy + rng.uniform(-0.1, 0.1) * side
    return _cut(rng, _photos()["t1"], cx, cy, side, side, 25).resize((size, size), Image.BILINEAR)


GENERATORS = {"face_crops": face_crops, "person_frames": person_frames, "hand_crops": hand_crops}


def image(name, split, index, seed=0):
    """Image ``index`` of ``split`` for corpus model ``name`` (a PIL image)."""
    from .catalog import CORPUS
    model = CORPUS[name]
    rng = np.random.RandomState([seed, SPLITS[split], index])
    return GENERATORS[model.generator](rng, **model.generator_options)


def write_unlabelled(name, root, count, train_count=None, seed=0):
    """``root/val/NNNNN.png`` (``count``) and ``root/train/NNNNN.png`` (``train_count``, default ``count``);
    existing files are kept (the images are deterministic). Returns ``root``."""
    for split, total in (("val", count), ("train", count if train_count is None else train_count)):
        folder = os.path.join(root, split)
        os.makedirs(folder, exist_ok=True)
        for index in range(total):
            target = os.path.join(folder, "{:05d}.png".format(index))
            if not os.path.exists(target):
                image(name, split, index, seed).save(target + ".part.png")
                os.replace(target + ".part.png", target)
    return root


# ------------------------------------------------------------------ each package's own preprocessing

def cv2_linear(array, width, height):
    """cv2.resize(..., INTER_LINEAR) of a uint8 H x W (x C) array, in OpenCV's own integer arithmetic
    (OpenCV is not installed here): source positions at half-pixel centres clamped to the border, weights in
    11 bits, the horizontal pass in 32-bit sums, the vertical one as OpenCV's SIMD path rounds it
    ((a >> 4) * w >> 16 per row, + 2 >> 2). Equal to OpenCV 5.0's on every pixel of the corpus' grey face
    crops, and on 99.9 % of the colour ones (the rest one level off)."""
    src = np.asarray(array)
    in_h, in_w = src.shape[:2]

    def axis(out, size):
        position = (np.arange(out) + 0.5) * (float(size) / out) - 0.5
        low = np.floor(position).astype(np.int64)
        fraction = (position - low).astype(np.float32)
        fraction[low < 0], low[low < 0] = 0, 0
        fraction[low >= size - 1], low[low >= size - 1] = 0, size - 1
        first = np.round((1.0 - fraction) * 2048).astype(np.int64)
        return low, np.minimum(low + 1, size - 1), first, 2048 - first

    r0, r1, b0, b1 = axis(height, in_h)
    c0, c1, a0, a1 = axis(width, in_w)
    pixels = src.astype(np.int64)
    tail = (1,) * (src.ndim - 2)
    rows = pixels[:, c0] * a0.reshape((1, -1) + tail) + pixels[:, c1] * a1.reshape((1, -1) + tail)
    value = (((rows[r0] >> 4) * b0.reshape((-1, 1) + tail)) >> 16) + \
        (((rows[r1] >> 4) * b1.reshape((-1, 1) + tail)) >> 16)
    return np.clip((value + 2) >> 2, 0, 255).astype(np.uint8)


def _fer(image):
    """fer.py: grey (cv2 BGR2GRAY of a grey PNG read as BGR = the grey level), cv2.resize 64x64, x/255, -0.5, *2;
    NHWC (1 channel)."""
    grey = np.asarray(image.convert("L"))
    return ((cv2_linear(grey, 64, 64).astype(np.float32) / 255.0 - 0.5) * 2.0)[:, :, None]


def _face_mask(image):
    """lib.py: BGR->RGB, cv2.resize 224x224, preprocess_input (x/127.5 - 1); NHWC."""
    rgb = np.asarray(image.convert("RGB"))
    return cv2_linear(rgb, 224, 224).astype(np.float32) / 127.5 - 1.0


def _mediapipe(size):
    def run(image):
        """ImageToTensorCalculator on a frame already at the model's size: RGB x/255, NHWC."""
        rgb = image.convert("RGB")
        if rgb.size != (size, size):
            rgb = rgb.resize((size, size), 2)  # the data is written at the model's size; a bilinear warp else
        return np.asarray(rgb, dtype=np.float32) / 255.0
    return run


def _bisenet(image):
    """HairSegmentator.get_parsing: PIL resize 512x512 BILINEAR, ToTensor, ImageNet mean/std; CHW."""
    from PIL import Image
    x = np.asarray(image.convert("RGB").resize((512, 512), Image.BILINEAR), dtype=np.float32) / 255.0
    mean = np.asarray([0.485, 0.456, 0.406], dtype=np.float32)
    std = np.asarray([0.229, 0.224, 0.225], dtype=np.float32)
    return ((x - mean) / std).transpose(2, 0, 1)


PACKAGE_INPUT = {"fer_emotion": _fer, "face_mask_mobilenetv2": _face_mask, "mediapipe_selfie": _mediapipe(256),
                 "mediapipe_handedness": _mediapipe(224), "bisenet_face_parsing": _bisenet}


def package_decisions(name, onnx_file, files, threads=1):
    """The package's own answer per file: its preprocessing, ONNX Runtime on the source ONNX, its decision rule
    (arg-max, or score > 0.5 for one channel); int64 (N,) for a classifier, (N, H, W) for a segmenter."""
    import onnxruntime as ort
    from PIL import Image
    from .catalog import CORPUS
    model = CORPUS[name]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    decisions = []
    for path in files:
        with Image.open(path) as picture:
            x = PACKAGE_INPUT[name](picture)
        out = session.run([model.output_name if model.output_name in names else names[0]],
                          {session.get_inputs()[0].name: x[None]})[0][0]
        if model.task == "segmentation" and out.ndim == 3 and out.shape[-1] < out.shape[0]:
            out = out.transpose(2, 0, 1)  # an NHWC map (MediaPipe's) to C, H, W
        if out.shape[0] == 1:
            decisions.append((out[0] > 0.5).astype(np.int64))
        else:
            decisions.append(np.argmax(out, axis=0).astype(np.int64))
    return np.asarray(decisions)
