"""The detection sample data ('shape-boxes'): the shapes of ``data.shapes`` at many sizes, with their boxes,
drawn here from a seed.

Why drawn: no data may be downloaded, and a seed gives every machine the same images, so the sample detector
trains to the same held-out mAP everywhere. Each 128x128 image has ``data.shapes``' striped, noisy background
and one to six objects (circle, square, triangle: classes 0, 1, 2, in their hue families), each inscribed in a
circle whose diameter is drawn log-uniformly from 8 px to half the image (so small objects are as common per
octave as large ones), turned at random, fully inside the image. Objects are drawn in order and may cover one
another.

The boxes are of what is seen: an object's box tightly encloses its visible pixels (``x2 = last column + 1``,
COCO's continuous pixel edges), and an object with less than half of its pixels visible (``MIN_VISIBLE``) has
no box at all: mostly hidden, it is neither asked for nor counted when found. PIL fills shapes without
antialiasing, so the pixels that define the boxes are exactly the drawn ones.

``shape_boxes_source()`` gives (uint8 images NHWC, one ``BoxRecord`` per image, class names);
``write_shape_boxes(folder)`` writes them as a COCO instances JSON and PNG files that ``data.boxes.read_boxes``
reads back, for tests that need real files.
"""

import json
import math
import os

import numpy as np

from trtkit.data.shapes import draw_outline, shape_colour, shape_outline, textured_background

SHAPE_BOXES = "shape-boxes"
SHAPE_BOXES_SIZE = 128
SHAPE_BOXES_COUNT = 2000
SHAPE_BOXES_SEED = 3
SHAPE_BOXES_VERSION = 1  # bump when the drawing changes, so cached sample detectors retrain
MIN_EXTENT = 8  # pixels: the smallest object's diameter; the largest is half the image
MAX_OBJECTS = 6
MIN_VISIBLE = 0.5  # an object with less of its pixels visible is dropped (no box)
BOX_CLASS_NAMES = ("circle", "square", "triangle")


def _draw_one(rng, size, Image, ImageDraw):
    """(image, owner, objects) of one drawn image: ``owner`` [size, size] uint8 says which object (1..n, 0
    none) each pixel shows; ``objects`` one dict per drawn object: ``index`` (its owner value), ``label``,
    ``extent`` (diameter, px), ``area`` (its pixels drawn alone), ``visible`` (its pixels in ``owner``),
    ``box`` (of its visible pixels; None when dropped, ``MIN_VISIBLE``)."""
    image = Image.fromarray(textured_background(rng, size))
    owner = Image.new("L", (size, size), 0)
    paint, owned = ImageDraw.Draw(image), ImageDraw.Draw(owner)
    objects = []
    for index in range(1, rng.randint(1, MAX_OBJECTS + 1) + 1):
        cls = rng.randint(1, 4)
        radius = 0.5 * math.exp(rng.uniform(math.log(MIN_EXTENT), math.log(size / 2.0)))
        cx, cy = rng.uniform(radius, size - radius, 2)
        outline = shape_outline(cls, cx, cy, radius, rng.uniform(0, 2 * math.pi))
        draw_outline(paint, outline, shape_colour(rng, cls))
        draw_outline(owned, outline, index)
        alone = Image.new("L", (size, size), 0)
        draw_outline(ImageDraw.Draw(alone), outline, 1)
        objects.append({"index": index, "label": cls - 1, "extent": 2 * radius,
                        "area": int(np.count_nonzero(np.asarray(alone)))})
    owner = np.asarray(owner)
    for entry in objects:
        ys, xs = np.nonzero(owner == entry["index"])
        entry["visible"] = len(xs)
        entry["box"] = [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)] \
            if entry["area"] and len(xs) >= MIN_VISIBLE * entry["area"] else None
    return np.asarray(image), owner, objects


def draw_shape_objects(count, size=SHAPE_BOXES_SIZE, seed=SHAPE_BOXES_SEED):
    """(uint8 images [count, size, size, 3], uint8 owners [count, size, size], objects per image): every
    drawn object, kept or dropped, and the pixels it shows (``_draw_one``), to check the boxes against."""
    from trtkit.data.preprocess import _pil
    Image = _pil()
    from PIL import ImageDraw
    rng = np.random.RandomState(seed)
    images = np.empty((count, size, size, 3), np.uint8)
    owners = np.empty((count, size, size), np.uint8)
    objects = []
    for index in range(count):
        images[index], owners[index], drawn = _draw_one(rng, size, Image, ImageDraw)
        objects.append(drawn)
    return images, owners, objects


def draw_shape_boxes(count, size=SHAPE_BOXES_SIZE, seed=SHAPE_BOXES_SEED):
    """(uint8 images [count, size, size, 3], one ``BoxRecord`` per image) drawn from ``seed``: the boxes of
    the objects not dropped, in drawing order. Record ``i`` is named ``shape-boxes[i]`` with image id ``i``;
    its labels index ``BOX_CLASS_NAMES``."""
    from trtkit.data.boxes.record import BoxRecord
    images, _, objects = draw_shape_objects(count, size, seed)
    records = []
    for index, drawn in enumerate(objects):
        kept = [entry for entry in drawn if entry["box"] is not None]
        records.append(BoxRecord("{}[{}]".format(SHAPE_BOXES, index), index, (size, size),
                                 [entry["box"] for entry in kept], [entry["label"] for entry in kept]))
    return images, records


_DRAWN = {}


def shape_boxes_source(count=SHAPE_BOXES_COUNT, seed=SHAPE_BOXES_SEED):
    """(uint8 images [N, 128, 128, 3], list of ``BoxRecord``, class names) of the detection sample (2000 images,
    98 MB; drawn once per machine, ``data.drawn``, and read once per process and count/seed). Splits: ``data.sources.split_positions`` as for every
    row source."""
    key = (count, seed)
    if key not in _DRAWN:
        from trtkit.data.drawn import drawn_arrays

        def draw():
            return _as_arrays(*draw_shape_boxes(count, seed=seed))
        _DRAWN[key] = _from_arrays(drawn_arrays(SHAPE_BOXES, SHAPE_BOXES_VERSION, count, seed, draw))
    images, records = _DRAWN[key]
    return images, records, list(BOX_CLASS_NAMES)


def _as_arrays(images, records):
    """``draw_shape_boxes``' result as flat arrays (the images, every box and label in record order, and each
    record's box count) for the drawn cache (``data.drawn``)."""
    boxes = [record.boxes.reshape(-1, 4) for record in records]
    return {"images": images, "boxes": np.concatenate(boxes).astype(np.float32),
            "labels": np.concatenate([record.labels.reshape(-1) for record in records]).astype(np.int64),
            "counts": np.array([len(b) for b in boxes], np.int64)}


def _from_arrays(arrays):
    """(images, records) back from ``_as_arrays``: the records ``draw_shape_boxes`` makes."""
    from trtkit.data.boxes.record import BoxRecord
    images = arrays["images"]
    size = images.shape[1]
    ends = np.cumsum(arrays["counts"])
    records = []
    for index, (end, count) in enumerate(zip(ends.tolist(), arrays["counts"].tolist())):
        records.append(BoxRecord("{}[{}]".format(SHAPE_BOXES, index), index, (size, size),
                                 arrays["boxes"][end - count:end].tolist(),
                                 arrays["labels"][end - count:end].tolist()))
    return images, records


def shape_boxes_reader():
    """(RowReader of the images, ``BoxLabels`` of their records, class names): the detection sample as a data
    source ('shape-boxes', ``data.sources``), its rows read like an .npz's."""
    from trtkit.data.arrays import RowReader
    from trtkit.data.boxes.record import BoxSet
    from trtkit.data.shapes import _Rows
    images, records, names = shape_boxes_source()
    reader = RowReader("sample shape-boxes", images.shape, images.dtype, _Rows(images).rows,
                       "sample:shape-boxes:v{}".format(SHAPE_BOXES_VERSION), kind="sample")
    return reader, BoxSet(records, names, SHAPE_BOXES, "npz", SHAPE_BOXES).labels_reader(), names


def write_shape_boxes(folder, count=64, seed=SHAPE_BOXES_SEED, size=SHAPE_BOXES_SIZE):
    """Write ``count`` drawn images as ``folder/images/NNNNN.png`` and ``folder/annotations/instances_all.json``
    (COCO instances: ``bbox`` as [x, y, width, height], category ids 1..3 in ``BOX_CLASS_NAMES`` order,
    ``area`` the box's). Returns the JSON's path; ``data.boxes.read_boxes`` reads it back to the same boxes."""
    from trtkit.data.preprocess import _pil
    from trtkit.fileio import atomic_path
    Image = _pil()
    images, records = draw_shape_boxes(count, size=size, seed=seed)
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    os.makedirs(os.path.join(folder, "annotations"), exist_ok=True)
    listed, annotations = [], []
    for image, record in zip(images, records):
        name = "{:05d}.png".format(record.image_id)
        Image.fromarray(image).save(os.path.join(folder, "images", name))
        listed.append({"id": record.image_id, "file_name": name, "width": size, "height": size})
        for box, label in zip(record.boxes.tolist(), record.labels.tolist()):
            width, height = box[2] - box[0], box[3] - box[1]
            annotations.append({"id": len(annotations) + 1, "image_id": record.image_id, "category_id": label + 1,
                                "bbox": [box[0], box[1], width, height], "area": width * height, "iscrowd": 0})
    categories = [{"id": k + 1, "name": name} for k, name in enumerate(BOX_CLASS_NAMES)]
    path = os.path.join(folder, "annotations", "instances_all.json")
    with atomic_path(path) as tmp:
        with open(tmp, "w") as handle:
            json.dump({"images": listed, "annotations": annotations, "categories": categories}, handle)
    return path
