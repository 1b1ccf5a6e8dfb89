"""Array sources: ``.npy``/``.npz`` files and the sample digits, read row by row.

uint8 arrays are pixels (N, H, W, C), (N, C, H, W) with C = 1 or 3 (RGB), or
(N, H, W) grayscale, and go through ``preprocess`` like image files. Float
arrays are taken as already preprocessed and must be (N, C, H, W) of the
contract's (C, H, W) exactly (or (N, H, W) for a 1-channel model), or (N, H, W, C)
for a model whose own input is NHWC (``contract.float_to_chw``).

A ``.npy`` file is memory-mapped (``np.load(mmap_mode="r")``) and a ``.npz``
member is read from its zip stream in row order, so a large array file is never
read into memory whole: rows are read as the chosen items are streamed.
"""

import hashlib
import os
import zipfile

import numpy as np

from trtkit.data.preprocess import preprocess
from trtkit.errors import InputError

IMAGE_KEYS = ("images", "x", "data", "arr_0")
LABEL_KEYS = ("labels", "y", "targets")
DIGITS_VERSION = 2  # 2: digits as uint8 'L' images (0..16 -> 0..255) through preprocess


class RowReader(object):
    """Rows of an array (uint8 pixels or preprocessed floats) -> model inputs, in item order.

    ``rows(indices)`` yields the rows at ascending ``indices``; ``stamp`` is what
    identifies the array's content without reading it (file name, size, mtime).
    """

    def __init__(self, label, shape, dtype, rows, stamp, kind="array"):
        self.kind = kind
        self.label = label
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._rows = rows
        self.stamp = stamp
        self.layout = _layout(label, self.shape, self.dtype)

    @property
    def count(self):
        return self.shape[0]

    def name(self, item):
        return "{}[{}]".format(self.label, item)

    def fingerprint(self, items):
        digest = hashlib.sha1(self.stamp.encode("utf-8"))
        digest.update(np.asarray(items, dtype=np.int64).tobytes())
        return digest.hexdigest()

    def check(self, contract):
        """InputError unless the rows can become ``contract``'s input (float rows must match it exactly)."""
        if self.layout != "float":
            return
        from trtkit.contract import float_to_chw
        shape = self.shape[1:] if len(self.shape) == 4 else (1,) + self.shape[1:]
        shape = float_to_chw(np.zeros(shape, dtype=np.uint8), contract).shape  # the model's own NHWC as given
        if shape != contract.shape:
            own = "" if contract.layout != "nhwc" else " (C x H x W), or {}x{}x{} (H x W x C) as its own input".format(
                contract.height, contract.width, contract.channels)
            raise InputError("{} holds preprocessed (float) images of shape {}; the model expects {}{}".format(
                self.label, "x".join(str(s) for s in shape), "x".join(str(s) for s in contract.shape), own),
                hint="save raw uint8 pixels to let trtkit preprocess them, or preprocess at the model's size")

    def read(self, items, contract, workers=None):
        """(float32 CHW, None) per item, in order (array rows are never unreadable)."""
        for row in self._rows(items):
            yield self.prepare(np.asarray(row), contract), None

    def prepare(self, row, contract):
        if self.layout == "float":
            from trtkit.contract import check_float_input, float_to_chw
            if row.ndim == 2:  # (H, W): a one-channel image without its channel axis
                row = row[None]
            row = np.ascontiguousarray(float_to_chw(row, contract)).astype(np.float32)
            check_float_input(row, contract, self.label)
            return row
        if self.layout == "nchw":
            row = row.transpose(1, 2, 0)
        return preprocess(row, contract)


def _layout(label, shape, dtype):
    """'float', 'nhw', 'nhwc' or 'nchw'; InputError for arrays that are no images."""
    if dtype.kind == "f":
        if len(shape) not in (3, 4):
            raise InputError("{} holds a float array of shape {}; expected preprocessed images (N, C, H, W)".format(
                label, shape))
        return "float"
    if dtype != np.uint8:
        raise InputError("{} holds {} values; expected uint8 pixels or float preprocessed images".format(
            label, dtype), hint="convert pixels with .astype(np.uint8), or preprocessed inputs to float32")
    if len(shape) == 3:
        return "nhw"
    if len(shape) != 4:
        raise InputError("{} holds an array of shape {}; expected images (N, H, W, C) or (N, C, H, W)".format(
            label, shape))
    if shape[3] in (1, 3) and shape[1] not in (1, 3):
        return "nhwc"
    if shape[1] in (1, 3):
        return "nchw"
    if shape[3] in (1, 3):
        return "nhwc"
    raise InputError("{} holds images with {} channels (shape {}); trtkit reads 1 or 3 channels".format(
        label, min(shape[1], shape[3]), shape), hint="convert the images to RGB or grayscale")


def _stamp(path, key=""):
    stat = os.stat(path)
    return "{}:{}:{}:{}".format(os.path.abspath(path), key, stat.st_size, stat.st_mtime_ns)


def _ascending(indices):
    previous = -1
    for i in indices:
        i = int(i)
        if i <= previous:
            raise ValueError("rows are read in ascending order")
        previous = i
        yield i


def array_file(path):
    """(RowReader, labels or None) of a .npy or .npz file, reading no image row; for [N, H, W] masks
    (a segmentation set) the labels are ``(MaskRows,)``."""
    try:
        if path.endswith(".npz"):
            return _npz(path)
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except InputError:
        raise
    except Exception as exc:
        raise InputError("cannot read {} ({})".format(path, exc.__class__.__name__),
                         hint="the file is corrupt or not a numpy array file")
    reader = RowReader(path, array.shape, array.dtype,
                       lambda items: (array[i] for i in _ascending(items)), _stamp(path))
    return reader, None


def _npz(path):
    with np.load(path, allow_pickle=False) as archive:
        keys = list(archive.keys())
        image_key = next((k for k in IMAGE_KEYS if k in keys), None)
        label_key = next((k for k in LABEL_KEYS if k in keys), None)
        if image_key is None:
            raise InputError("{} has no 'images' (or 'x') array; it has {}".format(path, ", ".join(keys) or "none"))
        labels = archive[label_key] if label_key else None
    member = _NpzMember(path, image_key)
    reader = RowReader(path, member.shape, member.dtype, member.rows, _stamp(path, image_key))
    if labels is not None and labels.ndim == 3:  # [N, H, W] class-index masks (data.masks)
        if labels.shape[0] != reader.count:
            raise InputError("{}: {} images but {} masks".format(path, reader.count, labels.shape[0]))
        from trtkit.data.masks import MaskRows
        return reader, (MaskRows(_NpzMember(path, label_key)),)
    if labels is not None:
        labels = np.asarray(labels).astype(np.int64).reshape(-1)
        if labels.shape[0] != reader.count:
            raise InputError("{}: {} images but {} labels".format(path, reader.count, labels.shape[0]))
    return reader, labels


class _NpzMember(object):
    """One array inside a .npz, read from its zip stream in row order (numpy cannot map a zip member)."""

    def __init__(self, path, key):
        self.path = path
        self.key = key
        with zipfile.ZipFile(path) as archive, archive.open(key + ".npy") as stream:
            header = _read_header(stream)
        if header is None:  # a header numpy writes rarely (fortran order, format 3): read it whole
            self._whole = np.load(path, allow_pickle=False)[key]
            self.shape, self.dtype = self._whole.shape, self._whole.dtype
        else:
            self._whole = None
            self.shape, self.dtype = header

    def rows(self, indices):
        if self._whole is not None:
            for i in _ascending(indices):
                yield self._whole[i]
            return
        row_shape = self.shape[1:]
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * self.dtype.itemsize
        with zipfile.ZipFile(self.path) as archive, archive.open(self.key + ".npy") as stream:
            _read_header(stream)
            position = 0
            for i in _ascending(indices):
                _skip(stream, (i - position) * row_bytes)
                data = stream.read(row_bytes)
                if len(data) != row_bytes:
                    raise InputError("{} is truncated (row {} of {})".format(self.path, i, self.shape[0]))
                yield np.frombuffer(data, dtype=self.dtype).reshape(row_shape)
                position = i + 1


def _read_header(stream):
    """(shape, dtype) from a .npy header, or None where rows cannot be streamed in C order."""
    fmt = np.lib.format
    version = fmt.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran, dtype = fmt.read_array_header_2_0(stream)
    else:
        return None
    if fortran or dtype.hasobject or not shape:
        return None
    return shape, dtype


def _skip(stream, count, chunk=1 << 20):
    while count > 0:
        data = stream.read(min(chunk, count))
        if not data:
            return
        count -= len(data)


def digits():
    """(uint8 images (N, 8, 8) in 0..255, int64 labels) of scikit-learn's digits.

    The 0..16 grey levels become ``round(v * 255 / 16)``: digit image files
    written from these arrays (as 'L' PNGs) preprocess exactly as the sample does.
    """
    from trtkit.deps import require
    datasets = require("sklearn.datasets", "the 'sample' data (scikit-learn's digits)")
    data = datasets.load_digits()
    images = np.round(data.images * (255.0 / 16.0)).astype(np.uint8)
    return images, data.target.astype(np.int64)


def sample_reader():
    """(RowReader, labels, class names) of the sample digits."""
    images, labels = digits()
    reader = RowReader("sample digits", images.shape, images.dtype,
                       lambda items: (images[i] for i in _ascending(items)),
                       "sample:digits:v{}".format(DIGITS_VERSION), kind="sample")
    return reader, labels, [str(i) for i in range(10)]
