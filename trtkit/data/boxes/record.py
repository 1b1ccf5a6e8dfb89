"""The typed result of every box reader, and the checks every reader applies to each box.

``BoxRecord``: one image's objects, boxes in the image's own pixels.
``BoxSet``: the records of a data set with its class names (and COCO's ids).
``BoxLabels``: the reader a listing streams beside its images (``read(items,
contract)``, as ``masks.MaskFiles``): annotations are small and parsed once,
images are never held, so memory grows with the number of boxes only.

Tolerance (``EDGE_TOLERANCE``): real COCO and VOC boxes reach past their image
by a fraction of a pixel (COCO's are rounded from polygons); a box up to 1 pixel
outside is clipped to the image, further outside it is an error. A box with
non-positive width or height, before or after clipping, is an error. Every error
is one ``InputError`` naming the file and the entry, raised before any record
is returned: a data set is read whole or not at all.
"""

import math
import os

import numpy as np

from trtkit.errors import InputError

EDGE_TOLERANCE = 1.0  # pixels a box may reach outside its image and be clipped rather than refused
BOX_HINT = "fix or remove the entry; a box lies inside its image with positive width and height"
EXIF_HINT = ("annotations are read on the image as the model sees it: --exif-orientation apply turns photos "
             "upright by their EXIF tag (as annotation tools and ultralytics show them), ignore reads them as stored")


class BoxRecord(object):
    """One image's objects.

    ``image``: its path relative to the set's ``root`` (``file.npz[3]`` for a row); ``image_id``: int (COCO's
    id, else the image's position in the sorted listing); ``size``: (w, h) of the image as the model sees it;
    ``boxes``: float32 (M, 4) x1, y1, x2, y2 in its pixels (``geometry``); ``labels``: int64 (M,) contiguous
    class indices; ``iscrowd``: bool (M,) COCO's crowd regions; ``difficult``: bool (M,) VOC's difficult
    objects. Evaluation ignores both (``ignore``), as COCO's and VOC's evaluators do.
    """

    __slots__ = ("image", "image_id", "size", "boxes", "labels", "iscrowd", "difficult")

    def __init__(self, image, image_id, size, boxes, labels, iscrowd=None, difficult=None):
        self.image = image
        self.image_id = int(image_id)
        self.size = (int(size[0]), int(size[1]))
        self.boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        self.labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        count = len(self.boxes)
        self.iscrowd = _flags(iscrowd, count)
        self.difficult = _flags(difficult, count)
        if len(self.labels) != count:
            raise ValueError("{} boxes but {} labels".format(count, len(self.labels)))

    @property
    def ignore(self):
        """bool (M,): objects an evaluation neither needs found nor counts when found (crowd, difficult)."""
        return self.iscrowd | self.difficult

    def __len__(self):
        return len(self.boxes)

    def __repr__(self):
        return "BoxRecord({}, id {}, {}x{}, {} boxes)".format(self.image, self.image_id, self.size[0],
                                                             self.size[1], len(self))


def _flags(values, count):
    if values is None:
        return np.zeros(count, dtype=bool)
    values = np.asarray(values, dtype=bool).reshape(-1)
    if len(values) != count:
        raise ValueError("{} boxes but {} flags".format(count, len(values)))
    return values


class BoxSet(object):
    """The records of a data set. ``root``: the folder the records' ``image`` paths are relative to (or the
    .npz); ``class_names``: per class index; ``category_ids``: the COCO category id per class index (None
    for other formats), so results are written back with the file's own ids; ``format``: 'coco', 'yolo',
    'voc' or 'npz'; ``annotations``: the file or folder read; ``exif_orientation``: how images were sized
    (the contract's); ``own_split``: the records are one split the data set defines (COCO's instances_val,
    YOLO's images/val, VOC's ImageSets), not the whole set."""

    def __init__(self, records, class_names, root, format, annotations, category_ids=None,
                 exif_orientation="ignore", own_split=False):
        self.records = list(records)
        self.class_names = list(class_names)
        self.root = root
        self.format = format
        self.annotations = annotations
        self.category_ids = list(category_ids) if category_ids is not None else None
        self.exif_orientation = exif_orientation
        self.own_split = bool(own_split)

    def __len__(self):
        return len(self.records)

    @property
    def images(self):
        """The records' image paths (relative to ``root``), in order: a listing's items."""
        return [record.image for record in self.records]

    def category_id(self, label):
        """The id a class index is written back as: COCO's category id, else the index itself."""
        return self.category_ids[int(label)] if self.category_ids is not None else int(label)

    def labels_reader(self):
        """The ``BoxLabels`` that streams these records beside their images."""
        return BoxLabels(self)

    def __repr__(self):
        return "BoxSet({}, {}: {} images, {} boxes, {} classes)".format(
            self.format, self.annotations, len(self), sum(len(r) for r in self.records), len(self.class_names))


class BoxLabels(object):
    """``read(items, contract)`` -> the ``BoxRecord`` of each item (a position in the set), in order: what a
    listing reads per batch beside its images, as ``masks.MaskFiles`` reads masks. Records keep the original
    image's pixels; ``geometry.input_boxes(record, contract)`` puts them in the model input."""

    holds = "boxes"  # what a listing's annotations are (Selection.holds)

    def __init__(self, box_set):
        self.box_set = box_set

    def read(self, items, contract):
        if contract is not None and contract.exif_orientation != self.box_set.exif_orientation:
            raise InputError("the boxes of {} were sized with EXIF orientation '{}' but the model reads its images "
                             "with '{}'".format(self.box_set.annotations, self.box_set.exif_orientation,
                                                contract.exif_orientation),
                             hint="read the annotations with the model's contract")
        return [self.box_set.records[int(item)] for item in items]


# ------------------------------------------------------------------ checks shared by the readers

def number(value):
    """``value`` as a finite float, or None (a string, None, NaN, inf, a bool)."""
    if isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def checked_box(box, size, where, shown, edges=("left", "top", "right", "bottom"), values=None,
                tolerance=EDGE_TOLERANCE):
    """``box`` (x1, y1, x2, y2 floats in pixels) of an image of ``size`` (w, h), clipped to it: float64 (4,).

    InputError (one line: ``where``, then ``shown``, the box as the file writes it) when its width or height
    is not positive, an edge lies more than ``tolerance`` pixels outside the image (``edges`` and ``values``:
    the edges' names and values as the file writes them), or it is empty once clipped.
    """
    x1, y1, x2, y2 = [float(v) for v in box]
    values = values if values is not None else (x1, y1, x2, y2)
    for axis, low, high in (("width", x1, x2), ("height", y1, y2)):
        if not high > low:
            raise InputError("{}: box {} has non-positive {}".format(where, shown, axis), hint=BOX_HINT)
    width, height = size
    limits = ((x1, -tolerance, None, width, "wide"), (y1, -tolerance, None, height, "high"),
              (x2, None, width + tolerance, width, "wide"), (y2, None, height + tolerance, height, "high"))
    for index, (value, low, high, side, dimension) in enumerate(limits):
        if (low is not None and value < low) or (high is not None and value > high):
            raise InputError("{}: {} {} {:g} is outside the {}-pixel-{} image".format(
                where, shown, edges[index], values[index], side, dimension),
                hint=BOX_HINT + " (boxes up to {:g} pixel outside are clipped)".format(tolerance))
    clipped = np.clip(np.array([x1, y1, x2, y2]), 0.0, [width, height, width, height])
    if not (clipped[2] > clipped[0] and clipped[3] > clipped[1]):
        raise InputError("{}: box {} is empty once clipped to the {}x{} image".format(where, shown, width, height),
                         hint=BOX_HINT)
    return clipped


def image_size(path, contract, where):
    """(w, h) of the image at ``path`` as ``contract`` reads it (upright when it applies EXIF orientation), from
    its header alone; InputError naming ``where`` when it is missing or unreadable."""
    from trtkit.data.decode import describe_error, upright_size
    from trtkit.data.preprocess import _pil
    if not os.path.isfile(path):
        raise InputError("{}: image {} is listed but missing".format(where, path),
                         hint="add the image or remove its entry from the annotations")
    try:
        with _pil().open(path) as image:
            return upright_size(image, contract)
    except Exception as exc:  # PIL: OSError, SyntaxError... for a broken file
        raise InputError("{}: cannot read image {} ({})".format(where, path, describe_error(exc)),
                         hint="remove or re-encode the broken file")


def check_declared(where, declared, seen):
    """InputError unless an annotation's recorded image size ``declared`` (w, h) is the image's ``seen`` size;
    a declared size of 0 (VOC files written without one) is taken as unknown."""
    if not declared or not all(declared) or tuple(declared) == tuple(seen):
        return
    across = tuple(declared) == (seen[1], seen[0])
    raise InputError("{}: the annotation is for a {}x{} image but the image is {}x{}{}".format(
        where, declared[0], declared[1], seen[0], seen[1], " as read (turned by its EXIF tag?)" if across else ""),
        hint=EXIF_HINT if across else "annotate the images as they are, or restore the annotated images")


def contract_or_default(contract):
    if contract is not None:
        return contract
    from trtkit.contract import InputContract
    return InputContract()
