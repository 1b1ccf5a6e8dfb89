"""YOLO txt labels (ultralytics' layout): ``images/**/NAME.jpg`` beside ``labels/**/NAME.txt``.

One object per line, ``class cx cy w h``, the centre and size normalized by the
image's width and height (so a label needs its image's size, read from the image
header as the model sees it: ultralytics reads images upright by their EXIF tag,
pass a contract with ``exif_orientation="apply"`` for such photos). A line of
more than 5 numbers is a polygon ``class x1 y1 x2 y2 ...`` (ultralytics'
segment labels) and its box is the polygon's extent. An image without a label
file, or with an empty one, has no objects; a label file without its image is an
error. ``images/train`` + ``images/val`` (or ``valid``, ``test``) are the splits.

Class names: given, else ``classes.txt`` / ``obj.names`` / ``data.yaml`` in the
folder (or above it), else ``0..K-1`` for the largest class seen.
"""

import os

from trtkit.data.boxes.names import class_names_beside
from trtkit.data.boxes.record import (EDGE_TOLERANCE, BoxRecord, BoxSet, checked_box, contract_or_default,
                                      image_size, number)
from trtkit.errors import InputError

HINT = "each line is 'class cx cy w h': an integer class and four numbers normalized to 0..1"


def is_yolo(root):
    return os.path.isdir(os.path.join(root, "images")) and os.path.isdir(os.path.join(root, "labels"))


def _walk(folder):
    """Sorted paths relative to ``folder`` of the files below it (hidden ones left out)."""
    found = []
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        relative = os.path.relpath(current, folder)
        for name in sorted(names):
            if not name.startswith("."):
                found.append(name if relative == "." else os.path.join(relative, name))
    return found


def _split_folder(root, split):
    """The sub-folder of images/ (and labels/) holding ``split``, '' for all of it; own split or not."""
    from trtkit.data.folders import SPLIT_DIRS
    images = os.path.join(root, "images")
    heldout = [d for d in SPLIT_DIRS["heldout"] if os.path.isdir(os.path.join(images, d))]
    if split == "all" or not (os.path.isdir(os.path.join(images, "train")) and heldout):
        return "", False
    return ("train" if split == "train" else heldout[0]), True


def read_yolo(root, split="all", class_names=None, contract=None, tolerance=EDGE_TOLERANCE):
    """The ``BoxSet`` of a YOLO folder ``root`` (module doc); ``split``: 'train', 'heldout' (the folder's own
    sub-folders, when it has them; otherwise all images, ``own_split`` False) or 'all'."""
    from trtkit.data.folders import IMAGE_EXTENSIONS
    contract = contract_or_default(contract)
    part, own = _split_folder(root, split)
    images_dir, labels_dir = os.path.join(root, "images", part), os.path.join(root, "labels", part)
    names_file = None
    if class_names is None:
        class_names, names_file = class_names_beside(root, labels_dir, os.path.dirname(os.path.abspath(root)))
    images = [f for f in _walk(images_dir) if f.lower().endswith(IMAGE_EXTENSIONS)]
    by_stem = dict((os.path.splitext(f)[0], f) for f in images)
    for label in _walk(labels_dir):
        if label.endswith(".txt") and os.path.splitext(label)[0] not in by_stem and \
                os.path.basename(label) not in ("classes.txt",):
            raise InputError("{}: a label file for no image (no {}.* in {})".format(
                os.path.join("labels", part, label), os.path.splitext(label)[0], os.path.join("images", part)),
                hint="add its image or remove the label file")
    records, largest = [], -1
    for index, image in enumerate(images):
        label = os.path.join("labels", part, os.path.splitext(image)[0] + ".txt")
        path = os.path.join(images_dir, image)
        size = image_size(path, contract, label)
        boxes, labels = _read_label(os.path.join(root, label), label, size, class_names, names_file, tolerance)
        largest = max([largest] + labels)
        records.append(BoxRecord(os.path.join("images", part, image), index, size, boxes, labels))
    if class_names is None:
        class_names = [str(i) for i in range(largest + 1)]
    return BoxSet(records, class_names, root, "yolo", os.path.join(root, "labels", part),
                  exif_orientation=contract.exif_orientation, own_split=own)


def _read_label(path, shown_path, size, class_names, names_file, tolerance):
    """(boxes, class indices) of one label file; none when it is absent."""
    if not os.path.isfile(path):
        return [], []
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("cannot read {} ({})".format(shown_path, exc.__class__.__name__), hint=HINT)
    boxes, labels = [], []
    width, height = size
    for number_, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        where = "{} line {}".format(shown_path, number_)
        fields = text.split()
        values = [number(v) for v in fields[1:]]
        if len(fields) < 5 or None in values or (len(fields) > 5 and len(values) % 2):
            raise InputError("{}: expected 'class cx cy w h' (or a polygon 'class x1 y1 x2 y2 ...'), got '{}'".format(
                where, text[:80]), hint=HINT)
        if not fields[0].isdigit():
            raise InputError("{}: class '{}' is not a class index (0, 1, ...)".format(where, fields[0]), hint=HINT)
        label = int(fields[0])
        if class_names is not None and label >= len(class_names):
            raise InputError("{}: class {} but {} {} classes".format(
                where, label, os.path.basename(names_file) + " names" if names_file else "the class names given list",
                len(class_names)), hint="fix the class index or add the class name")
        if len(values) == 4:
            cx, cy, w, h = values
            box = ((cx - w / 2.0) * width, (cy - h / 2.0) * height, (cx + w / 2.0) * width, (cy + h / 2.0) * height)
        else:
            xs, ys = values[0::2], values[1::2]
            box = (min(xs) * width, min(ys) * height, max(xs) * width, max(ys) * height)
        edges = ("left edge", "top edge", "right edge", "bottom edge")
        boxes.append(checked_box(box, size, where, "'{}'".format(text[:80]), edges, tolerance=tolerance))
        labels.append(label)
    return boxes, labels
