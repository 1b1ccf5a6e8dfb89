"""Boxes in a ``.npz`` beside its images, padded to one array (no pickled objects).

Layout (N images, at most M boxes each, K classes)::

    x        [N, H, W, C] uint8 images (any layout ``arrays`` reads: 'images',
             'x', 'data' or 'arr_0'; [N, H, W] grey, [N, C, H, W])
    boxes    [N, M, 4] float  x1, y1, x2, y2 in the image's pixels (continuous:
             a box over a whole image is [0, 0, W, H])
    classes  [N, M]    int    class index per box
    counts   [N]       int    boxes of image i: the first counts[i] rows (the rest is padding)
    iscrowd  [N, M]    bool   optional: regions evaluation ignores
    class_names [K]    str    optional: names per class index (default '0'..'K-1')
    image_ids   [N]    int    optional: default 0..N-1

The box classes are 'classes', not 'labels': 'labels' are one class per image
(classification) in every trtkit array file. Only the small arrays are loaded;
image rows are streamed by ``arrays`` as for any .npz.
"""

import os

import numpy as np

from trtkit.data.arrays import IMAGE_KEYS, _NpzMember
from trtkit.data.boxes.record import EDGE_TOLERANCE, BoxRecord, BoxSet, checked_box
from trtkit.errors import InputError

BOX_KEYS = ("boxes", "classes", "counts")
HINT = "an .npz of boxes holds x [N, H, W, C], boxes [N, M, 4] xyxy pixels, classes [N, M] and counts [N]"


def is_box_npz(path):
    if not (path.lower().endswith(".npz") and os.path.isfile(path)):
        return False
    try:
        with np.load(path, allow_pickle=False) as archive:
            return "boxes" in archive.files
    except Exception:
        return False


def _row_size(shape, dtype):
    """(w, h) of one image row of an images array of ``shape``."""
    from trtkit.data.arrays import _layout
    layout = _layout("images", shape, np.dtype(dtype))
    if layout in ("float", "nchw") and len(shape) == 4:
        return int(shape[3]), int(shape[2])
    return int(shape[2]), int(shape[1])


def read_npz(path, tolerance=EDGE_TOLERANCE):
    """The ``BoxSet`` of a box .npz (module doc); its records' images are ``file.npz[i]``."""
    name = os.path.basename(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = list(archive.files)
            missing = [k for k in BOX_KEYS if k not in keys]
            if missing:
                raise InputError("{}: no {} array{}".format(name, "/".join(missing), "s" if len(missing) > 1 else ""),
                                 hint=HINT)
            if "labels" in keys:
                raise InputError("{}: 'labels' is one class per image; box classes go in 'classes'".format(name),
                                 hint="rename the array to 'classes'")
            small = dict((k, archive[k]) for k in BOX_KEYS + ("iscrowd", "class_names", "image_ids") if k in keys)
    except InputError:
        raise
    except Exception as exc:  # a broken zip, a pickled object array
        raise InputError("cannot read {} ({})".format(path, exc.__class__.__name__), hint=HINT)
    image_key = next((k for k in IMAGE_KEYS if k in keys), None)
    if image_key is None:
        raise InputError("{}: no images ('x' or 'images')".format(name), hint=HINT)
    member = _NpzMember(path, image_key)
    count = member.shape[0]
    boxes, classes, counts = small["boxes"], small["classes"], small["counts"]
    crowd = small.get("iscrowd")
    if boxes.ndim != 3 or boxes.shape[0] != count or boxes.shape[2] != 4 or boxes.dtype.kind not in "fiu" or \
            classes.shape != boxes.shape[:2] or classes.dtype.kind not in "iu" or counts.shape != (count,) or \
            counts.dtype.kind not in "iu" or (crowd is not None and crowd.shape != classes.shape):
        raise InputError("{}: boxes {}, classes {}, counts {} for {} images".format(
            name, boxes.shape, classes.shape, counts.shape, count), hint=HINT)
    names = [str(n) for n in small["class_names"]] if "class_names" in small else None
    ids = small.get("image_ids", np.arange(count))
    size = _row_size(member.shape, member.dtype)
    records, largest = [], -1
    for row in range(count):
        where = "{}: image {}".format(name, row)
        used = int(counts[row])
        if not 0 <= used <= boxes.shape[1]:
            raise InputError("{}: counts {} is not in 0..{}".format(where, used, boxes.shape[1]), hint=HINT)
        kept = []
        for index in range(used):
            label = int(classes[row, index])
            if label < 0 or (names is not None and label >= len(names)):
                raise InputError("{} box {}: class {} is not among the {} class names".format(
                    where, index, label, len(names) if names is not None else 0), hint="fix classes or class_names")
            box = boxes[row, index].astype(np.float64)
            if not np.isfinite(box).all():
                raise InputError("{} box {}: {} is not four numbers".format(where, index, box.tolist()), hint=HINT)
            shown = "[{}]".format(", ".join("{:g}".format(v) for v in box))
            kept.append(checked_box(box, size, "{} box {}".format(where, index), shown, tolerance=tolerance))
            largest = max(largest, label)
        records.append(BoxRecord("{}[{}]".format(path, row), int(ids[row]), size, kept, classes[row, :used],
                                 crowd[row, :used] if crowd is not None else None))
    return BoxSet(records, names if names is not None else [str(i) for i in range(largest + 1)], path, "npz", path)
