"""Pascal VOC XML: ``Annotations/NAME.xml`` beside ``JPEGImages/`` (the VOC2007/VOC2012 folders' layout).

Coordinates: the VOC devkit's are 1-based pixel indices, inclusive at both ends
(its evaluation takes a box's width as ``xmax - xmin + 1``), so a box over a
whole W-pixel-wide image is ``xmin 1, xmax W``. In trtkit's continuous pixels
(``geometry``) that is ``[xmin - 1, ymin - 1, xmax, ymax]``, as detectron2 and
torchvision's VOC references read it. ``xmin == xmax`` is a one-pixel-wide box;
``xmax < xmin`` has non-positive width. ``difficult`` is kept (VOC evaluation
ignores difficult objects); ``<size>`` must be the image's when given (0 or
absent: unknown). ``ImageSets/Main/train.txt`` and ``val.txt`` (or
``test.txt``) are the splits when present. Only annotated images are listed
(VOC's JPEGImages/ holds other tasks' images too); an annotation whose image is
missing is an error.

Class names: given, else ``classes.txt`` beside ``Annotations/``, else VOC's 20
(in the devkit's order) when every name found is one of them, else the names
found in every file, sorted (all files, so the splits agree on the indices).

Files with a DTD (``<!DOCTYPE``/``<!ENTITY``) are refused before parsing: entity
expansion ("billion laughs") can exhaust memory with the expat of older Pythons,
and no VOC file needs one. The standard library's parser then fetches nothing
from outside the file, so defusedxml is not needed.
"""

import difflib
import os
import xml.etree.ElementTree as ElementTree

from trtkit.data.boxes.names import read_classes_txt
from trtkit.data.boxes.record import (EDGE_TOLERANCE, BoxRecord, BoxSet, check_declared, checked_box,
                                      contract_or_default, image_size, number)
from trtkit.errors import InputError

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
               "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")
HINT = "a VOC annotation has <object><name>, <difficult> and <bndbox> xmin, ymin, xmax, ymax (1-based pixels)"


def is_voc(root):
    return os.path.isdir(os.path.join(root, "Annotations")) and os.path.isdir(os.path.join(root, "JPEGImages"))


def _split_stems(root, split):
    """The stems ``split`` lists in ``ImageSets/Main`` (None: no such file, every annotation is taken)."""
    main = os.path.join(root, "ImageSets", "Main")
    choices = {"train": ("train.txt",), "heldout": ("val.txt", "test.txt")}.get(split, ())
    for name in choices:
        path = os.path.join(main, name)
        if os.path.isfile(path):
            return set(read_classes_txt(path))
    return None


def parse_xml(path, shown):
    """The root element of a VOC file; InputError naming ``shown`` for a DTD or malformed XML."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError("cannot read {} ({})".format(shown, exc.strerror or exc.__class__.__name__))
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise InputError("{}: has a DTD (<!DOCTYPE or <!ENTITY), refused".format(shown),
                         hint="VOC annotations need none; remove it")
    try:
        return ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        raise InputError("{}: malformed XML ({})".format(shown, exc), hint=HINT)


def _objects(element, shown):
    """[(name, difficult, (xmin, ymin, xmax, ymax), where)] of an annotation."""
    found = []
    for index, item in enumerate(element.findall("object"), 1):
        name = (item.findtext("name") or "").strip()
        where = "{} object {}{}".format(shown, index, " ({})".format(name) if name else "")
        if not name:
            raise InputError("{}: has no <name>".format(where), hint=HINT)
        box = item.find("bndbox")
        values = [number(box.findtext(k)) if box is not None else None for k in ("xmin", "ymin", "xmax", "ymax")]
        if None in values:
            raise InputError("{}: <bndbox> needs numbers xmin, ymin, xmax, ymax".format(where), hint=HINT)
        difficult = (item.findtext("difficult") or "0").strip()
        if difficult not in ("0", "1"):
            raise InputError("{}: <difficult> {} is not 0 or 1".format(where, difficult), hint=HINT)
        found.append((name, difficult == "1", values, where))
    return found


def _class_names(root, given, found):
    if given:
        return list(given), "the class names"
    path = os.path.join(root, "classes.txt")
    if os.path.isfile(path):
        return read_classes_txt(path), "classes.txt"
    if found and set(found) <= set(VOC_CLASSES):
        return list(VOC_CLASSES), "VOC's class names"
    return sorted(found), "the class names"


def read_voc(root, split="all", class_names=None, contract=None, tolerance=EDGE_TOLERANCE):
    """The ``BoxSet`` of a VOC folder ``root`` (module doc); ``split``: 'train', 'heldout' (from
    ``ImageSets/Main``; every annotation when it has no such list) or 'all'."""
    contract = contract_or_default(contract)
    annotations = os.path.join(root, "Annotations")
    files = sorted(f for f in os.listdir(annotations) if f.lower().endswith(".xml") and not f.startswith("."))
    stems = _split_stems(root, split)
    parsed = []
    for name in files:
        shown = os.path.join("Annotations", name)
        element = parse_xml(os.path.join(annotations, name), shown)
        parsed.append((name, shown, element, _objects(element, shown)))
    class_names, what = _class_names(root, class_names, set(o[0] for p in parsed for o in p[3]))
    index_of = dict((n, i) for i, n in enumerate(class_names))
    images = dict((os.path.splitext(f)[0], f) for f in os.listdir(os.path.join(root, "JPEGImages")))
    records = []
    for name, shown, element, objects in parsed:
        stem = os.path.splitext(name)[0]
        if stems is not None and stem not in stems:
            continue
        image = _image_file(root, element, stem, images, shown)
        size = image_size(os.path.join(root, "JPEGImages", image), contract, shown)
        declared = [number(element.findtext("size/" + k)) for k in ("width", "height")]
        check_declared(shown, tuple(int(v) if v else 0 for v in declared), size)
        boxes, labels, difficult = [], [], []
        for label, hard, values, where in objects:
            if label not in index_of:
                close = difflib.get_close_matches(label, class_names, n=1)
                raise InputError("{}: '{}' is not among {} ({} of them)".format(where, label, what, len(class_names)),
                                 hint="did you mean '{}'?".format(close[0]) if close else "fix the name")
            xmin, ymin, xmax, ymax = values
            shown_box = "<bndbox> [{}]".format(", ".join("{:g}".format(v) for v in values))
            if xmax < xmin or ymax < ymin:
                raise InputError("{}: {} has non-positive {}".format(
                    where, shown_box, "width (xmax < xmin)" if xmax < xmin else "height (ymax < ymin)"), hint=HINT)
            boxes.append(checked_box((xmin - 1, ymin - 1, xmax, ymax), size, where, "<bndbox>",
                                     ("xmin", "ymin", "xmax", "ymax"), values, tolerance))
            labels.append(index_of[label])
            difficult.append(hard)
        records.append(BoxRecord(os.path.join("JPEGImages", image), len(records), size, boxes, labels,
                                 difficult=difficult))
    return BoxSet(records, class_names, root, "voc", annotations, exif_orientation=contract.exif_orientation,
                  own_split=stems is not None)


def _image_file(root, element, stem, images, shown):
    """The file in JPEGImages/ an annotation is for: its <filename> when there, else its own stem's image."""
    named = (element.findtext("filename") or "").strip()
    if named and os.path.isfile(os.path.join(root, "JPEGImages", named)):
        return named
    if stem in images:
        return images[stem]
    raise InputError("{}: its image {} is not in JPEGImages/".format(shown, named or stem + ".*"),
                     hint="add the image or remove the annotation")
