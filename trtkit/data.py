"""Image sources -> float32 NCHW batches with a model's preprocessing.

Every step of trtkit (verification, calibration, benchmarking, training) reads
images through ``load_images``, so they all see the same pixels. Sources:

* ``sample``: scikit-learn's handwritten digits (ships with the package, no
  download), resized and made 3-channel. Deterministic train / held-out split.
* a folder of class sub-folders of images (JPEG/PNG/BMP). If it has ``train/``
  and ``val/`` (or ``test/``) sub-folders, those are the splits; otherwise a
  seeded 80/20 split of the files keeps calibration and verification disjoint.
* a CIFAR-10 "python version" folder (``data_batch_1..5``, ``test_batch``).
* ``.npy`` (images) or ``.npz`` (``images``/``x`` and optional ``labels``/``y``):
  uint8 arrays are raw pixels (resized, normalized); float arrays are taken as
  already preprocessed and must match the model's input shape exactly.

Splits: ``train`` (calibration, training), ``heldout`` (verification), ``all``.
"""

import hashlib
import os
import pickle

import numpy as np

from trtkit.errors import InputError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
SPLITS = ("train", "heldout", "all")
HELDOUT_FRACTION = 0.2
SPLIT_SEED = 0
_IGNORED_FILES = (".ds_store", "thumbs.db", "desktop.ini")


class ImageSet(object):
    """Preprocessed images (float32 NCHW), optional int64 labels, and where they came from.

    ``identity`` is a short string that changes whenever the pixels would: it
    keys caches (calibration ranges) and is recorded in reports.
    """

    def __init__(self, images, labels, identity, class_names=None, source=None):
        self.images = images
        self.labels = labels
        self.identity = identity
        self.class_names = class_names
        self.source = source

    def __len__(self):
        return int(self.images.shape[0])

    def subset(self, count, seed=0):
        """A deterministic random subset of ``count`` images (all of them when fewer)."""
        if count is None or count >= len(self):
            return self
        order = np.random.RandomState(seed).permutation(len(self))[:count]
        order.sort()
        labels = self.labels[order] if self.labels is not None else None
        return ImageSet(self.images[order], labels, "{}|subset{}s{}".format(self.identity, count, seed),
                        self.class_names, self.source)

    def batches(self, batch_size):
        """Yield (images, labels-or-None) in order; the last batch may be smaller."""
        for start in range(0, len(self), batch_size):
            end = start + batch_size
            yield self.images[start:end], (self.labels[start:end] if self.labels is not None else None)


def load_images(source, contract, split="all", limit=None, seed=0):
    """Read ``source`` into an ImageSet preprocessed for ``contract`` (an InputContract)."""
    if split not in SPLITS:
        raise InputError("unknown split '{}'".format(split), hint="use one of " + ", ".join(SPLITS))
    if source is None or source == "sample":
        result = _load_sample(contract, split)
    else:
        path = os.path.expanduser(str(source))
        if not os.path.exists(path):
            raise InputError("data not found: {}".format(source),
                             hint="give a folder of class sub-folders, a CIFAR-10 folder, a .npy/.npz file, or 'sample'")
        if is_cifar_folder(path):
            result = _load_cifar(path, contract, split)
        elif os.path.isdir(path):
            result = _load_folder(path, contract, split)
        elif path.endswith((".npy", ".npz")):
            result = _load_array_file(path, contract, split)
        else:
            raise InputError("cannot read data from {}".format(source),
                             hint="give a folder of images, a CIFAR-10 folder, a .npy/.npz file, or 'sample'")
    if len(result) == 0:
        raise InputError("no images in split '{}' of {}".format(split, source or "sample"),
                         hint="add images, or use split 'all'")
    return result.subset(limit, seed) if limit else result


# ------------------------------------------------------------------ helpers

def normalize(images01, contract):
    """(N, C, H, W) floats in [0, 1] -> normalized float32 with the contract's mean/std."""
    mean = np.asarray(contract.mean, dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(contract.std, dtype=np.float32).reshape(1, -1, 1, 1)
    return ((images01.astype(np.float32) - mean) / std).astype(np.float32)


def _interp_matrix(n_in, n_out):
    """Bilinear weights (n_out, n_in), half-pixel centres like PIL/torch align_corners=False."""
    scale = float(n_in) / n_out
    centres = (np.arange(n_out) + 0.5) * scale - 0.5
    centres = np.clip(centres, 0, n_in - 1)
    low = np.floor(centres).astype(int)
    high = np.minimum(low + 1, n_in - 1)
    frac = centres - low
    weights = np.zeros((n_out, n_in), dtype=np.float32)
    weights[np.arange(n_out), low] += 1.0 - frac
    weights[np.arange(n_out), high] += frac
    return weights


def resize_bilinear(images, size):
    """Resize (N, C, H, W) float images to ``size`` ((H, W), or N for N x N) with separable bilinear weights."""
    n, c, h, w = images.shape
    out_h, out_w = (size, size) if isinstance(size, int) else size
    if (h, w) == (out_h, out_w):
        return images.astype(np.float32)
    wy = _interp_matrix(h, out_h)
    wx = _interp_matrix(w, out_w)
    # two matrix products (BLAS); a three-operand einsum without optimize loops in C instead, ~180x slower
    return np.matmul(wy, np.matmul(images.astype(np.float32, copy=False), wx.T))


def _to_channels(images01, channels, what):
    """Grayscale -> 3 channels by repetition; anything else must match."""
    c = images01.shape[1]
    if c == channels:
        return images01
    if c == 1 and channels == 3:
        return np.repeat(images01, 3, axis=1)
    raise InputError("{} has {} channels; the model expects {}".format(what, c, channels),
                     hint="convert the images to RGB")


def _split_indices(count, split, seed=SPLIT_SEED):
    if split == "all":
        return np.arange(count)
    order = np.random.RandomState(seed).permutation(count)
    cut = int(round(count * HELDOUT_FRACTION))
    chosen = order[:cut] if split == "heldout" else order[cut:]
    return np.sort(chosen)


# ------------------------------------------------------------------ sample

def _load_sample(contract, split):
    from trtkit.deps import require
    datasets = require("sklearn.datasets", "the 'sample' data (scikit-learn's digits)")
    digits = datasets.load_digits()
    images = digits.images.astype(np.float32)[:, None, :, :] / 16.0
    labels = digits.target.astype(np.int64)
    index = _split_indices(len(labels), split)
    images = resize_bilinear(images[index], contract.size)
    images = _to_channels(images, contract.channels, "sample digits")
    identity = "sample:digits:v1:{}:{}:{}".format(split, contract.size, _contract_key(contract))
    names = [str(i) for i in range(10)]
    return ImageSet(normalize(images, contract), labels[index], identity, names, "sample")


def _contract_key(contract):
    return hashlib.sha1(contract.preprocessing_key().encode("utf-8")).hexdigest()[:10]


# ------------------------------------------------------------------ CIFAR-10

def is_cifar_folder(source):
    """True for a folder holding CIFAR-10 python batches (``data_batch_1`` or ``test_batch``)."""
    path = os.path.expanduser(str(source))
    return os.path.isdir(path) and (os.path.isfile(os.path.join(path, "data_batch_1")) or
                                    os.path.isfile(os.path.join(path, "test_batch")))


def _read_cifar_batch(file_path):
    try:
        with open(file_path, "rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
        data = batch[b"data"] if b"data" in batch else batch["data"]
        labels = batch[b"labels"] if b"labels" in batch else batch["labels"]
    except Exception as exc:
        raise InputError("{} is not a CIFAR-10 python batch ({})".format(file_path, exc.__class__.__name__),
                         hint="use the 'CIFAR-10 python version' archive, extracted")
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072:
        raise InputError("{} has rows of {} values, CIFAR-10 rows have 3072".format(file_path, data.shape[-1]))
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


def _load_cifar(path, contract, split):
    files = {"train": ["data_batch_{}".format(i) for i in range(1, 6)], "heldout": ["test_batch"]}
    names = files["train"] + files["heldout"] if split == "all" else files[split]
    present = [n for n in names if os.path.isfile(os.path.join(path, n))]
    if not present:
        raise InputError("CIFAR-10 folder {} has none of {}".format(path, ", ".join(names)),
                         hint="expected the extracted 'cifar-10-batches-py' folder")
    parts = [_read_cifar_batch(os.path.join(path, n)) for n in present]
    raw = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    images = resize_bilinear(raw.astype(np.float32) / 255.0, contract.size)
    class_names = None
    meta = os.path.join(path, "batches.meta")
    if os.path.isfile(meta):
        try:
            with open(meta, "rb") as handle:
                info = pickle.load(handle, encoding="bytes")
            class_names = [n.decode() if isinstance(n, bytes) else n for n in info.get(b"label_names", [])]
        except Exception:
            class_names = None
    identity = "cifar10:{}:{}:{}:{}".format(os.path.abspath(path), split, _files_fingerprint(
        [os.path.join(path, n) for n in present]), _contract_key(contract))
    return ImageSet(normalize(images, contract), labels, identity, class_names, path)


def _files_fingerprint(paths):
    digest = hashlib.sha1()
    for p in sorted(paths):
        stat = os.stat(p)
        digest.update("{}:{}:{}".format(os.path.basename(p), stat.st_size, int(stat.st_mtime)).encode("utf-8"))
    return digest.hexdigest()[:12]


# ------------------------------------------------------------------ image folders

def _scan_folder(root):
    """(files, labels, class names) of a folder of class sub-folders, or of loose images."""
    entries = sorted(os.listdir(root))
    classes = [e for e in entries if os.path.isdir(os.path.join(root, e)) and not e.startswith(".")]
    files, labels = [], []
    if classes:
        for index, name in enumerate(classes):
            for folder, _, names in sorted(os.walk(os.path.join(root, name))):
                for file_name in sorted(names):
                    files.append(os.path.join(folder, file_name))
                    labels.append(index)
        loose = [e for e in entries if os.path.isfile(os.path.join(root, e))]
    else:
        loose = []
        for e in entries:
            if os.path.isfile(os.path.join(root, e)):
                files.append(os.path.join(root, e))
                labels.append(-1)
    kept_files, kept_labels = [], []
    for file_path, label in zip(files, labels):
        base = os.path.basename(file_path)
        if base.startswith(".") or base.lower() in _IGNORED_FILES:
            continue
        if not base.lower().endswith(IMAGE_EXTENSIONS):
            raise InputError("not an image: {}".format(file_path),
                             hint="image folders may hold only {} files; move it out".format(
                                 "/".join(e.lstrip(".") for e in IMAGE_EXTENSIONS[:4])))
        kept_files.append(file_path)
        kept_labels.append(label)
    del loose
    return kept_files, kept_labels, classes


def _load_folder(root, contract, split):
    split_dirs = {"train": ["train"], "heldout": ["val", "valid", "validation", "test"]}
    has_split_dirs = os.path.isdir(os.path.join(root, "train")) and any(
        os.path.isdir(os.path.join(root, d)) for d in split_dirs["heldout"])
    if has_split_dirs:
        wanted = split_dirs["train"] + split_dirs["heldout"] if split == "all" else split_dirs[split]
        sets = [_load_folder(os.path.join(root, d), contract, "all") for d in wanted if os.path.isdir(os.path.join(root, d))]
        sets = [s for s in sets if s is not None]
        images = np.concatenate([s.images for s in sets])
        labels = np.concatenate([s.labels for s in sets]) if all(s.labels is not None for s in sets) else None
        return ImageSet(images, labels, "|".join(s.identity for s in sets), sets[0].class_names, root)
    files, labels, classes = _scan_folder(root)
    if not files:
        raise InputError("no images in {}".format(root),
                         hint="put images in class sub-folders (root/cat/1.jpg, root/dog/2.png, ...)")
    index = _split_indices(len(files), split)
    files = [files[i] for i in index]
    labels = [labels[i] for i in index]
    images = np.stack([_read_image(f, contract) for f in files]) if files else \
        np.zeros((0,) + contract.shape, dtype=np.float32)
    label_array = np.asarray(labels, dtype=np.int64) if classes else None
    identity = "folder:{}:{}:{}:{}".format(os.path.abspath(root), split, _files_fingerprint(files) if files else "empty",
                                           _contract_key(contract))
    return ImageSet(normalize(images, contract) if len(files) else images, label_array, identity,
                    classes or None, root)


def _read_image(path, contract):
    """Decode one image, resize its shorter side to size/0.875, centre-crop, scale to [0, 1] CHW."""
    from trtkit.deps import require
    Image = require("PIL.Image", "reading image files")
    try:
        with Image.open(path) as img:
            img = img.convert("RGB" if contract.channels == 3 else "L")
            th, tw = contract.size
            size = max(th, tw)
            short = int(round(size / 0.875)) if size >= 64 else size
            w, h = img.size
            scale = float(short) / min(w, h)
            img = img.resize((max(tw, int(round(w * scale))), max(th, int(round(h * scale)))), Image.BILINEAR)
            w, h = img.size
            left, top = (w - tw) // 2, (h - th) // 2
            img = img.crop((left, top, left + tw, top + th))
            array = np.asarray(img, dtype=np.float32) / 255.0
    except InputError:
        raise
    except Exception as exc:
        raise InputError("cannot decode image {} ({})".format(path, exc.__class__.__name__),
                         hint="the file is corrupt or not an image; remove it")
    if array.ndim == 2:
        array = array[:, :, None]
    return array.transpose(2, 0, 1)


# ------------------------------------------------------------------ arrays

def _load_array_file(path, contract, split):
    try:
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                keys = list(archive.keys())
                image_key = next((k for k in ("images", "x", "data", "arr_0") if k in keys), None)
                label_key = next((k for k in ("labels", "y", "targets") if k in keys), None)
                if image_key is None:
                    raise InputError("{} has no 'images' (or 'x') array; it has {}".format(path, ", ".join(keys)))
                images = archive[image_key]
                labels = archive[label_key] if label_key else None
        else:
            images = np.load(path, allow_pickle=False)
            labels = None
    except InputError:
        raise
    except Exception as exc:
        raise InputError("cannot read {} ({})".format(path, exc.__class__.__name__), hint="the file is corrupt")
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[:, None] if images.dtype != np.uint8 or images.shape[-1] not in (1, 3) else images[None]
    if images.ndim != 4:
        raise InputError("{} holds an array of shape {}; expected images (N, C, H, W) or (N, H, W, C)".format(
            path, images.shape))
    if labels is not None:
        labels = np.asarray(labels).astype(np.int64).reshape(-1)
        if labels.shape[0] != images.shape[0]:
            raise InputError("{}: {} images but {} labels".format(path, images.shape[0], labels.shape[0]))
    if images.dtype == np.uint8:
        if images.shape[-1] in (1, 3) and images.shape[1] not in (1, 3):
            images = images.transpose(0, 3, 1, 2)
        images01 = _to_channels(images.astype(np.float32) / 255.0, contract.channels, path)
        prepared = normalize(resize_bilinear(images01, contract.size), contract)
    else:
        if tuple(images.shape[1:]) != contract.shape:
            raise InputError("{} holds preprocessed images of shape {}; the model expects {}".format(
                path, tuple(images.shape[1:]), contract.shape),
                hint="save raw uint8 pixels to let trtkit resize them, or export at the matching --input-size")
        prepared = images.astype(np.float32)
    index = _split_indices(prepared.shape[0], split)
    with open(path, "rb") as handle:
        digest = hashlib.sha1(handle.read()).hexdigest()[:12]
    identity = "array:{}:{}:{}:{}".format(os.path.basename(path), digest, split, _contract_key(contract))
    return ImageSet(prepared[index], labels[index] if labels is not None else None, identity, None, path)


class _InterimSelection(object):
    """Interim stand-in for the streaming Selection (trtkit.data package): wraps an in-memory ImageSet."""

    def __init__(self, imageset):
        self._set = imageset
        self.labels = imageset.labels
        self.class_names = imageset.class_names
        self.identity = imageset.identity
        self.source = imageset.source
        self.skipped = []

    def __len__(self):
        return len(self._set)

    def batches(self, batch_size, progress=None):
        return self._set.batches(batch_size)

    def load(self):
        return self._set


def select(source, contract, split="all", limit=None, seed=0, max_unreadable=0.01):
    return _InterimSelection(load_images(source, contract, split, limit, seed))
