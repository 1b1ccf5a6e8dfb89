"""COCO instances JSON (``instances_val2017.json``): ``images``, ``annotations``, ``categories``.

Each annotation's ``bbox`` is ``[x, y, width, height]`` in continuous pixels
(top-left corner; ``x + width`` is the right edge), converted to x1, y1, x2, y2.
Category ids need not be contiguous (COCO's run 1..90 with gaps): they are sorted
and numbered 0..K-1, the ids kept per index (``BoxSet.category_ids``) so results
are written back as the file's ids. ``iscrowd`` is kept (COCO evaluation ignores
crowd regions); an image listed without annotations has no objects. An image's
``width``/``height`` must be its file's (as the model reads it, ``record.check_declared``).

The images' folder, unless given: for ``annotations/instances_val2017.json`` the
first of ``val2017/``, ``images/val2017/``, ``images/`` beside ``annotations/``,
then the JSON's own folder and its ``images/``, that holds the first listed file.
"""

import json
import os

import numpy as np

from trtkit.data.boxes.record import (EDGE_TOLERANCE, BoxRecord, BoxSet, check_declared, checked_box,
                                      contract_or_default, image_size, number)
from trtkit.errors import InputError

HINT = "see cocodataset.org/#format-data: images, annotations (bbox [x, y, width, height]) and categories"


def is_coco(path):
    """Whether ``path`` is a JSON file that looks like COCO instances (by name, or by its first bytes)."""
    if not path.lower().endswith(".json") or not os.path.isfile(path):
        return False
    if os.path.basename(path).startswith("instances_"):
        return True
    with open(path, "rb") as handle:
        head = handle.read(4096)
    return b'"images"' in head or b'"annotations"' in head or b'"categories"' in head


def images_folder(path, images, data):
    """The folder the listed ``file_name``s are relative to (module doc)."""
    if images is not None:
        return images
    here = os.path.dirname(os.path.abspath(path))
    split = os.path.splitext(os.path.basename(path))[0].replace("instances_", "", 1)
    above = os.path.dirname(here)
    candidates = [os.path.join(above, split), os.path.join(above, "images", split), os.path.join(above, "images"),
                  here, os.path.join(here, "images"), os.path.join(here, split)]
    listed = data.get("images") or []
    first = listed[0].get("file_name") if listed and isinstance(listed[0], dict) else None
    if not isinstance(first, str):
        return here
    for folder in candidates:
        if os.path.isfile(os.path.join(folder, first)):
            return folder
    raise InputError("{}: image {} (the first listed) is in none of {}".format(
        os.path.basename(path), first, ", ".join(candidates)), hint="give the images' folder")


def _load(path, name):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except ValueError as exc:  # json.JSONDecodeError (3.5+) is a ValueError
        raise InputError("{}: not valid JSON ({})".format(name, exc), hint=HINT)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("cannot read {} ({})".format(path, exc.__class__.__name__))
    if not isinstance(data, dict):
        raise InputError("{}: a COCO file is a JSON object, not a {}".format(name, type(data).__name__), hint=HINT)
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key, []), list):
            raise InputError("{}: '{}' must be a list".format(name, key), hint=HINT)
    if not data.get("categories"):
        raise InputError("{}: no categories".format(name), hint=HINT)
    return data


def _integer(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _categories(entries, name):
    """(sorted ids, names): ids must be distinct integers, names strings."""
    found = {}
    for position, entry in enumerate(entries):
        ident = _integer(entry.get("id")) if isinstance(entry, dict) else None
        label = entry.get("name") if isinstance(entry, dict) else None
        if ident is None or not isinstance(label, str):
            raise InputError("{}: category #{} has no integer id and name ({})".format(name, position, entry),
                             hint=HINT)
        if ident in found:
            raise InputError("{}: category {} is listed twice ('{}', '{}')".format(name, ident, found[ident], label),
                             hint="give each category its own id")
        found[ident] = label
    ids = sorted(found)
    return ids, [found[i] for i in ids]


def read_coco(path, images=None, contract=None, tolerance=EDGE_TOLERANCE):
    """The ``BoxSet`` of a COCO instances file ``path``; ``images``: the images' folder (default: found, module
    doc); ``contract``: the model's InputContract (how images are oriented; default: as stored)."""
    name = os.path.basename(path)
    data = _load(path, name)
    contract = contract_or_default(contract)
    category_ids, class_names = _categories(data["categories"], name)
    index_of = dict((ident, index) for index, ident in enumerate(category_ids))
    root = images_folder(path, images, data)
    listed, order = {}, []
    for position, entry in enumerate(data.get("images", [])):
        ident = _integer(entry.get("id")) if isinstance(entry, dict) else None
        file_name = entry.get("file_name") if isinstance(entry, dict) else None
        if ident is None or not isinstance(file_name, str):
            raise InputError("{}: image #{} has no integer id and file_name".format(name, position), hint=HINT)
        if ident in listed:
            raise InputError("{}: image {} is listed twice ({}, {})".format(name, ident, listed[ident][0], file_name),
                             hint="give each image its own id")
        where = "{}: image {} ({})".format(name, ident, file_name)
        size = image_size(os.path.join(root, file_name), contract, where)
        check_declared(where, (_integer(entry.get("width")) or 0, _integer(entry.get("height")) or 0), size)
        listed[ident] = (file_name, size, [], [], [])
        order.append(ident)
    for position, entry in enumerate(data.get("annotations", [])):
        _annotation(entry, position, name, listed, index_of, category_ids, tolerance)
    records = [BoxRecord(listed[i][0], i, listed[i][1], listed[i][2], listed[i][3], listed[i][4]) for i in order]
    split = os.path.splitext(name)[0].replace("instances_", "", 1)
    return BoxSet(records, class_names, root, "coco", path, category_ids, contract.exif_orientation,
                  own_split=name.startswith("instances_") and split.rstrip("0123456789") in ("train", "val"))


def _annotation(entry, position, name, listed, index_of, category_ids, tolerance):
    if not isinstance(entry, dict):
        raise InputError("{}: annotation #{} is not an object".format(name, position), hint=HINT)
    ident = entry.get("id", "#{}".format(position))
    image = entry.get("image_id")
    where = "{}: annotation {} (image {})".format(name, ident, image)
    if _integer(image) is None or image not in listed:
        raise InputError("{}: annotation {} is for image {}, which is not listed".format(name, ident, image),
                         hint="list the image under 'images' or remove the annotation")
    category = entry.get("category_id")
    if category not in index_of or _integer(category) is None:
        raise InputError("{}: category_id {} is not among the categories ({}..{}, {} of them)".format(
            where, category, category_ids[0], category_ids[-1], len(category_ids)),
            hint="add the category under 'categories' or fix the annotation")
    bbox = entry.get("bbox")
    values = [number(v) if isinstance(v, (int, float)) else None for v in bbox] if isinstance(bbox, list) else []
    if len(values) != 4 or None in values:
        raise InputError("{}: bbox {} is not four numbers [x, y, width, height]".format(where, bbox), hint=HINT)
    crowd = entry.get("iscrowd", 0)
    if crowd not in (0, 1):
        raise InputError("{}: iscrowd {} is not 0 or 1".format(where, crowd), hint=HINT)
    x, y, w, h = values
    shown = "[{}]".format(", ".join("{:g}".format(v) for v in values))
    box = checked_box((x, y, x + w, y + h), listed[image][1], where, shown, ("x", "y", "x + width", "y + height"),
                      tolerance=tolerance)
    listed[image][2].append(box)
    listed[image][3].append(index_of[category])
    listed[image][4].append(bool(crowd))


def coco_bboxes(boxes, decimals=None):
    """x1 y1 x2 y2 rows -> COCO's ``bbox`` lists ``[x, y, width, height]`` of floats (the inverse of what
    ``read_coco`` does to a file's boxes), each value rounded to ``decimals`` when given: the one place
    trtkit writes the format (COCO results files, the evaluators' in-memory datasets)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    rows = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
    if decimals is not None:
        rows = np.round(rows, int(decimals))
    return rows.tolist()
