"""What a source holds, by listing only: file names, labels, class names, splits and seeded subsets.

Nothing here decodes a pixel. A folder is walked (names, sorted); labels come
from the class sub-folders; class names from the folder names, CIFAR-10's
``batches.meta`` or the model's contract. Splits (``train`` for calibration and
training, ``heldout`` for verification, ``all``) come from ``train/`` +
``val/`` sub-folders, CIFAR-10's batch files, or a seeded 80/20 split of the
listing, so calibration and verification never share an image. A subset of
``limit`` items is drawn from the listing by seed, so only the chosen files are
ever opened, whatever the folder's size.
"""

import os

import numpy as np

from trtkit import log
from trtkit.data.arrays import array_file, sample_reader
from trtkit.data.cifar import cifar_reader, is_cifar_folder
from trtkit.data.decode import FileReader
from trtkit.data.shape_boxes import SHAPE_BOXES  # the detection sample's name
from trtkit.data.folders import IMAGE_EXTENSIONS, SPLIT_DIRS  # noqa: F401  (IMAGE_EXTENSIONS: read from here too)
from trtkit.errors import InputError

SPLITS = ("train", "heldout", "all")
SHAPES = "shapes"  # the segmentation sample (data.shapes)
HELDOUT_FRACTION = 0.2
SPLIT_SEED = 0
_IGNORED_FILES = ("thumbs.db", "desktop.ini")
_SOURCES_HINT = ("give a folder of class sub-folders of images (or images/ + masks/), a CIFAR-10 folder, a .npy/.npz "
                 "file, data with boxes (COCO JSON, YOLO images/ + labels/, VOC), 'sample', 'shapes' or 'shape-boxes'")


class Listing(object):
    """The items of one split of a source, known without decoding.

    ``items``: what ``reader.read`` takes (paths relative to the folder, or row
    indices); ``labels``: int64 per item or None; ``ignored``: (count, examples)
    of non-image files left out of a folder.
    """

    def __init__(self, source, reader, items, labels=None, class_names=None, ignored=(0, ()), annotations=None,
                 own_split=False):
        self.source = source
        self.own_split = bool(own_split)  # train/ + val/ folders, CIFAR-10's batches: not a seeded 80/20 cut
        # per-image annotations: (reader, one item per image) whose read(items, contract) gives a batch's labels:
        # masks (data.masks) or a BoxRecord per image (data.boxes)
        self.annotations = annotations
        self.reader = reader
        self.items = items
        self.labels = labels
        self.class_names = list(class_names) if class_names else None
        self.ignored = ignored

    def __len__(self):
        return len(self.items)


def list_source(source, split="all"):
    """The Listing of ``split`` of ``source``: 'sample' (digits), 'shapes' (the segmentation sample),
    'shape-boxes' (the detection sample), a folder, data with boxes (``data.boxes``),
    a CIFAR-10 folder, a .npy/.npz file."""
    if split not in SPLITS:
        raise InputError("unknown split '{}'".format(split), hint="use one of " + ", ".join(SPLITS))
    if source is None or source == "sample":
        reader, labels, names = sample_reader()
        return _split_rows("sample", reader, labels, names, split)
    if source == SHAPES:
        from trtkit.data.shapes import shapes_source
        reader, masks, names = shapes_source()
        listing = _split_rows(SHAPES, reader, None, names, split)
        listing.annotations = (masks, listing.items)
        return listing
    if source == SHAPE_BOXES:
        from trtkit.data.shape_boxes import shape_boxes_reader
        reader, boxes, names = shape_boxes_reader()
        listing = _split_rows(SHAPE_BOXES, reader, None, names, split)
        listing.annotations = (boxes, listing.items)
        return listing
    path = os.path.expanduser(str(source))
    if not os.path.exists(path):
        raise InputError("data not found: {}".format(source), hint=_SOURCES_HINT)
    from trtkit.data.boxes import box_format
    if box_format(path) is not None:
        return _box_listing(path, split)
    if is_cifar_folder(path):
        reader, labels, names = cifar_reader(path, split)
        return Listing(path, reader, np.arange(reader.count), labels, names, own_split=True)
    if os.path.isdir(path):
        return _folder(path, split)
    if path.endswith((".npy", ".npz")):
        reader, labels = array_file(path)
        if isinstance(labels, tuple):  # [N, H, W] masks: rows read beside the images'
            listing = _split_rows(path, reader, None, None, split)
            listing.annotations = (labels[0], listing.items)
            return listing
        return _split_rows(path, reader, labels, None, split)
    raise InputError("cannot read data from {}".format(source), hint=_SOURCES_HINT)


def _box_listing(path, split):
    """The Listing of a data set with boxes (COCO, YOLO, VOC, .npz; ``data.boxes``): its images (files, or an
    .npz's rows), each with its ``BoxRecord`` as the annotation. A format's own split (COCO's instances_val,
    YOLO's images/val, VOC's ImageSets) is used as it is; otherwise the seeded 80/20 cut of every image."""
    from trtkit.data.boxes import read_boxes
    box_set = read_boxes(path, split)
    if not len(box_set):
        raise InputError("{} lists no images".format(path), hint="check the annotations point at the images")
    positions = np.arange(len(box_set)) if box_set.own_split else split_positions(len(box_set), split)
    if box_set.format == "npz":
        reader, _ = array_file(path)
        items = positions
    else:
        reader, images = FileReader(box_set.root), box_set.images
        items = [images[i] for i in positions]
    return Listing(path, reader, items, None, box_set.class_names, annotations=(box_set.labels_reader(), positions),
                   own_split=box_set.own_split)


def split_positions(count, split, seed=SPLIT_SEED):
    """Sorted positions of ``split`` among ``count`` items: a seeded 80/20 cut ('all': every one)."""
    if split == "all":
        return np.arange(count)
    order = np.random.RandomState(seed).permutation(count)
    cut = int(round(count * HELDOUT_FRACTION))
    return np.sort(order[:cut] if split == "heldout" else order[cut:])


def choose(count, limit=None, seed=0):
    """Sorted positions of a seeded subset of ``limit`` among ``count`` items (all of them when fewer)."""
    if not limit or limit >= count:
        return np.arange(count)
    return np.sort(np.random.RandomState(seed).permutation(count)[:limit])


def _split_rows(source, reader, labels, names, split):
    positions = split_positions(reader.count, split)
    return Listing(source, reader, positions, labels[positions] if labels is not None else None, names)


# ------------------------------------------------------------------ folders

def _entries(folder):
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        raise InputError("cannot read folder {} ({})".format(folder, exc.strerror or exc.__class__.__name__),
                         hint="check that it exists and that you may read it")


def _subfolders(folder):
    return [e for e in _entries(folder) if not e.startswith(".") and os.path.isdir(os.path.join(folder, e))]


def _files(folder):
    """Paths relative to ``folder`` of every file below it, sorted; InputError for an unreadable sub-folder."""
    def fail(exc):
        raise InputError("cannot read folder {} ({})".format(exc.filename, exc.strerror or exc.__class__.__name__),
                         hint="check that you may read it")
    found = []
    for current, dirs, names in os.walk(folder, onerror=fail):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        relative = os.path.relpath(current, folder)
        for name in sorted(names):
            if not name.startswith(".") and name.lower() not in _IGNORED_FILES:
                found.append(name if relative == "." else os.path.join(relative, name))
    return found


class _Tally(object):
    """Non-image files seen while listing: a count and a few examples."""

    def __init__(self):
        self.images = 0
        self.others = 0
        self.examples = []

    def keep_images(self, folder, names):
        kept = [n for n in names if n.lower().endswith(IMAGE_EXTENSIONS)]
        self.images += len(kept)
        others = len(names) - len(kept)
        if others:
            self.others += others
            self.examples.extend(os.path.join(folder, n) for n in names[:50]
                                 if not n.lower().endswith(IMAGE_EXTENSIONS))
            del self.examples[3:]
        return kept


def mask_folder(root):
    """(image paths, mask paths) relative to ``root`` of an ``images/`` + ``masks/`` folder, paired by stem;
    None when ``root`` is not one. InputError when an image has no mask."""
    images_dir, masks_dir = os.path.join(root, "images"), os.path.join(root, "masks")
    if not (os.path.isdir(images_dir) and os.path.isdir(masks_dir)):
        return None
    images = sorted(f for f in os.listdir(images_dir) if f.lower().endswith(IMAGE_EXTENSIONS))
    masks = dict((os.path.splitext(f)[0], f) for f in os.listdir(masks_dir) if f.lower().endswith(IMAGE_EXTENSIONS))
    if not images:
        raise InputError("no images in {}".format(images_dir), hint="put the images in images/, their masks in masks/")
    missing = [f for f in images if os.path.splitext(f)[0] not in masks]
    if missing:
        raise InputError("{} of {} images in {} have no mask in {} (e.g. {})".format(
            len(missing), len(images), images_dir, masks_dir, missing[0]),
            hint="each images/NAME.* needs masks/NAME.png with its class indices")
    return ([os.path.join("images", f) for f in images],
            [os.path.join("masks", masks[os.path.splitext(f)[0]]) for f in images])


def _folder(root, split):
    from trtkit.data.masks import MaskFiles
    paired = mask_folder(root)
    if paired is not None:  # images/ + masks/: a segmentation data set
        positions = split_positions(len(paired[0]), split)
        images = [paired[0][i] for i in positions]
        return Listing(root, FileReader(root), images,
                       annotations=(MaskFiles(root), [(paired[0][i], paired[1][i]) for i in positions]))
    tally = _Tally()
    heldout_dirs = [d for d in SPLIT_DIRS["heldout"] if os.path.isdir(os.path.join(root, d))]
    if os.path.isdir(os.path.join(root, "train")) and heldout_dirs:
        parts = {"train": ["train"], "heldout": heldout_dirs, "all": ["train"] + heldout_dirs}[split]
        classes = sorted(set(c for part in ["train"] + heldout_dirs for c in _subfolders(os.path.join(root, part))))
        items, labels = [], []
        for part in parts:
            part_items, part_labels = _class_files(root, part, classes, tally)
            items.extend(part_items)
            labels.extend(part_labels)
    else:
        classes = _subfolders(root)
        items, labels = _class_files(root, ".", classes, tally)
    _check_images(root, tally)
    if split != "all" and not (os.path.isdir(os.path.join(root, "train")) and heldout_dirs):
        positions = split_positions(len(items), split)
        items = [items[i] for i in positions]
        labels = [labels[i] for i in positions]
    label_array = np.asarray(labels, dtype=np.int64) if classes else None
    return Listing(root, FileReader(root), items, label_array, classes, (tally.others, tuple(tally.examples)),
                   own_split=bool(os.path.isdir(os.path.join(root, "train")) and heldout_dirs))


def _class_files(root, part, classes, tally):
    """(relative paths, labels) of the images under ``root/part``: one label per class sub-folder.

    With no class sub-folders the images directly in it are taken, unlabelled (-1).
    """
    folder = os.path.normpath(os.path.join(root, part))
    present = [c for c in classes if os.path.isdir(os.path.join(folder, c))]
    prefix = "" if part == "." else part
    if not present:
        names = tally.keep_images(folder, [e for e in _entries(folder) if os.path.isfile(os.path.join(folder, e))
                                           and not e.startswith(".") and e.lower() not in _IGNORED_FILES])
        return [os.path.join(prefix, n) for n in names], [-1] * len(names)
    loose = [e for e in _entries(folder) if not e.startswith(".") and os.path.isfile(os.path.join(folder, e))]
    if loose:
        log.warn("{} file(s) in {} lie outside its class sub-folders and are left out (e.g. {})".format(
            len(loose), folder, loose[0]))
    items, labels = [], []
    for name in present:
        class_folder = os.path.join(folder, name)
        files = _files(class_folder)
        kept = tally.keep_images(class_folder, files)
        if not kept:
            raise InputError("no images in class folder {}{}".format(
                class_folder, " (only {} other file(s), e.g. {})".format(len(files), files[0]) if files else ""),
                hint="add its images or remove the folder")
        items.extend(os.path.join(prefix, name, f) for f in kept)
        labels.extend([classes.index(name)] * len(kept))
    return items, labels


def _check_images(root, tally):
    if tally.images == 0 and tally.others == 0:
        raise InputError("no images in {}".format(root),
                         hint="put images in class sub-folders (root/cat/1.jpg, root/dog/2.png, ...)")
    if tally.others > tally.images:
        raise InputError("most files in {} are not images ({} of {}, e.g. {})".format(
            root, tally.others, tally.others + tally.images, tally.examples[0]),
            hint="point at a folder of images ({})".format(", ".join(e.lstrip(".") for e in IMAGE_EXTENSIONS[:4])))
    if tally.others:
        log.warn("{} non-image file(s) in {} left out (e.g. {})".format(tally.others, root, tally.examples[0]))


# ------------------------------------------------------------------ class names

def _is_id(folder):
    """A class folder named by an id rather than a word: ImageNet's synsets (n01440764) or a number."""
    return folder.isdigit() or (len(folder) == 9 and folder[0] == "n" and folder[1:].isdigit())


BACKGROUND_NAME = "__background__"  # an SSD's class 0 (torchvision's name for it): no data class is that


def reconcile_classes(found, labels, names, what):
    """(class names, labels) of data with class names ``found`` and ``labels``, given the model's ``names``.

    Folder names that are all among the model's names are mapped to their index
    there; otherwise the data's labels stand where the counts agree (ImageNet
    folders named by synset, the model's classes by word). Data whose classes
    cannot be the model's (another count, a label past its last class) is said
    so in a warning and loses its labels: agreement is still measured, accuracy
    is not (calibration never uses labels).
    """
    if not names:
        return found, labels
    names = list(names)
    if found and set(found) <= set(names):
        if labels is not None and found != names[:len(found)]:
            lookup = np.asarray([names.index(n) for n in found], dtype=np.int64)
            labels = np.where(labels >= 0, lookup[np.maximum(labels, 0)], -1)
        objects = [n for n in names if n != BACKGROUND_NAME]  # an SSD's background is no class data lacks
        if len(found) < len(objects):
            log.warn_once("{} has {} of the model's {} classes".format(what, len(found), len(objects)))
        return names, labels
    if found and len(found) != len(names):
        other = [n for n in found if n not in names][0]
        log.warn_once("{} has {} classes but the model's class names list {} ('{}' is not among them): its labels are "
                 "not used (check --class-names)".format(what, len(found), len(names), other))
        return names, None
    if labels is not None and len(labels) and int(labels.max()) >= len(names):
        log.warn_once("{} has label {} but the model's class names list only {}: its labels are not used "
                 "(check --class-names)".format(what, int(labels.max()), len(names)))
        return names, None
    if found and labels is not None and found != names and not all(_is_id(f) for f in found):
        # folders man/, woman/ for classes female, male (ImageNet's synset or numbered folders are the norm)
        pairs = ", ".join("{}={}".format(f, n) for f, n in list(zip(found, names))[:6])
        log.warn_once("{}'s class folders are not named as the model's classes: labels follow the folders' sorted "
                      "order ({}{}); if that is wrong, name the folders as the classes".format(
                          what, pairs, ", ..." if len(found) > 6 else ""))
    return names, labels
