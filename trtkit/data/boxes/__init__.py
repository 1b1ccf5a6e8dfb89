"""Object boxes beside images, in the formats people have: COCO JSON, YOLO txt, Pascal VOC XML, ``.npz``.

``read_boxes(path)`` recognises the format (``box_format``) and returns a
``BoxSet`` of ``BoxRecord`` (one per image: float32 xyxy boxes in the image's
own pixels, int64 class indices, crowd/difficult flags, image id and size)::

    boxes = read_boxes("coco/annotations/instances_val2017.json", contract=contract)
    for record in boxes.labels_reader().read(positions, contract):  # beside the images of a batch
        in_model = input_boxes(record, contract)                        # the input's pixels
    back = boxes_to_original(predicted, record.size, placement(record.size, contract))

Geometry (``geometry``): boxes follow the pixels through ``preprocess.placement``
for every resize mode (crop, pad, height, letterbox, stretch), and back exactly.

Orientation: boxes are on the image as the model sees it (the contract's
``exif_orientation``), as masks are. Annotation tools and ultralytics (which
reads with OpenCV and sizes images by ``exif_size``) annotate photos upright;
for photos with a turning EXIF tag pass ``exif_orientation="apply"``. A recorded
image size (COCO's width/height, VOC's <size>) that is the image's across is
refused with that hint rather than read turned.

Errors: every bad entry is one ``InputError`` naming the file and the entry,
raised before anything is returned (``record``: the tolerance of 1 pixel outside
the image, clipped; non-positive sizes refused). Readers parse annotations only
and open each image's header once for its size: no image is decoded.

Modules, one job each: ``record`` (the types, the shared checks), ``geometry``,
``coco``, ``yolo``, ``voc``, ``npz`` (one reader per format), ``names``
(classes.txt, data.yaml).
"""

import os

from trtkit.data.boxes.geometry import boxes_to_input, boxes_to_original, clip_boxes, input_boxes
from trtkit.data.boxes.record import EDGE_TOLERANCE, BoxLabels, BoxRecord, BoxSet
from trtkit.errors import InputError

FORMATS = ("coco", "yolo", "voc", "npz")
_HINT = ("give a COCO instances .json, a folder with images/ + labels/ (YOLO), Annotations/ + JPEGImages/ (VOC) "
         "or annotations/instances_*.json (COCO), or an .npz with boxes")

__all__ = ["read_boxes", "box_format", "BoxRecord", "BoxSet", "BoxLabels", "boxes_to_input", "boxes_to_original",
           "clip_boxes", "input_boxes", "EDGE_TOLERANCE", "FORMATS"]


def _coco_files(folder):
    """COCO instances files in ``folder`` or its ``annotations/``, sorted."""
    from trtkit.data.boxes.coco import is_coco
    found = []
    for where in (folder, os.path.join(folder, "annotations")):
        if os.path.isdir(where):
            found.extend(os.path.join(where, f) for f in sorted(os.listdir(where))
                         if f.startswith("instances_") and is_coco(os.path.join(where, f)))
    return found


def box_format(path):
    """'coco', 'yolo', 'voc' or 'npz' for a file or folder of boxes, None when it holds none."""
    from trtkit.data.boxes import coco, npz, voc, yolo
    if os.path.isfile(path):
        return "coco" if coco.is_coco(path) else "npz" if npz.is_box_npz(path) else None
    if not os.path.isdir(path):
        return None
    if voc.is_voc(path):
        return "voc"
    if yolo.is_yolo(path):
        return "yolo"
    return "coco" if _coco_files(path) else None


def _coco_file(folder, split):
    """The instances file of ``split`` in a COCO folder: train*/val* by name, the only one for 'all'."""
    files = _coco_files(folder)
    stems = [os.path.basename(f)[len("instances_"):] for f in files]
    if split != "all":
        prefix = "train" if split == "train" else "val"
        chosen = [f for f, s in zip(files, stems) if s.startswith(prefix)]
        if chosen:
            return chosen[0], True
    if len(files) == 1:
        return files[0], False
    raise InputError("{} has {} COCO files ({}): which split is meant?".format(
        folder, len(files), ", ".join(os.path.basename(f) for f in files)),
        hint="give the .json file itself, or split train / heldout")


def read_boxes(path, split="all", class_names=None, contract=None, images=None, tolerance=EDGE_TOLERANCE):
    """The ``BoxSet`` of ``path`` (a file or folder, ``box_format``).

    ``split``: 'train', 'heldout' or 'all': a format's own splits (COCO's instances_train*/val* files,
    YOLO's images/train + images/val, VOC's ImageSets/Main) when it has them (``BoxSet.own_split``), else
    every image. ``class_names``: the names the class indices are of (YOLO, VOC; COCO's come from its
    categories). ``contract``: the model's InputContract (its EXIF orientation sizes the images).
    ``images``: COCO's image folder when it is not found beside the JSON. ``tolerance``: pixels a box may
    reach outside its image and be clipped.
    """
    from trtkit.data.boxes import coco, npz, voc, yolo
    path = os.path.expanduser(str(path))
    kind = box_format(path)
    if kind is None:
        raise InputError("no boxes found in {}".format(path) if os.path.exists(path) else
                         "data not found: {}".format(path), hint=_HINT)
    if kind == "npz":
        return npz.read_npz(path, tolerance)
    if kind == "voc":
        return voc.read_voc(path, split, class_names, contract, tolerance)
    if kind == "yolo":
        return yolo.read_yolo(path, split, class_names, contract, tolerance)
    own = True
    if os.path.isdir(path):
        path, own = _coco_file(path, split)
    box_set = coco.read_coco(path, images, contract, tolerance)
    box_set.own_split = box_set.own_split and own
    return box_set
