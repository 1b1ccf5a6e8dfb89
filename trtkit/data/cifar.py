"""CIFAR-10 "python version" folders: ``data_batch_1..5`` (train), ``test_batch`` (held out), ``batches.meta``.

Each batch is a pickle of 10,000 rows of 3072 uint8 values (3x32x32, RGB).
Listing reads the labels one batch at a time; streaming reads a batch again
only when the chosen rows reach it, so one batch (30 MB) is in memory at most.
"""

import os
import pickle

import numpy as np

from trtkit.data.arrays import RowReader
from trtkit.errors import InputError

TRAIN_FILES = tuple("data_batch_{}".format(i) for i in range(1, 6))
HELDOUT_FILES = ("test_batch",)


def is_cifar_folder(source):
    """True for a folder holding CIFAR-10 python batches (``data_batch_1`` or ``test_batch``)."""
    path = os.path.expanduser(str(source))
    return os.path.isdir(path) and (os.path.isfile(os.path.join(path, "data_batch_1")) or
                                    os.path.isfile(os.path.join(path, "test_batch")))


def _read_batch(file_path):
    """(uint8 rows (N, 3, 32, 32), int64 labels) of one batch file."""
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


def class_names(path):
    """The label names in ``batches.meta``, or None when it is absent or unreadable."""
    meta = os.path.join(path, "batches.meta")
    if not os.path.isfile(meta):
        return None
    try:
        with open(meta, "rb") as handle:
            info = pickle.load(handle, encoding="bytes")
        names = info.get(b"label_names", info.get("label_names"))
        return [n.decode() if isinstance(n, bytes) else str(n) for n in names] or None
    except Exception:
        return None


def cifar_reader(path, split):
    """(RowReader over the split's batches, labels, class names) of a CIFAR-10 folder."""
    wanted = {"train": TRAIN_FILES, "heldout": HELDOUT_FILES, "all": TRAIN_FILES + HELDOUT_FILES}[split]
    present = [os.path.join(path, n) for n in wanted if os.path.isfile(os.path.join(path, n))]
    if not present:
        raise InputError("CIFAR-10 folder {} has none of {}".format(path, ", ".join(wanted)),
                         hint="expected the extracted 'cifar-10-batches-py' folder")
    labels, starts = [], [0]
    for file_path in present:  # the labels, one batch in memory at a time
        labels.append(_read_batch(file_path)[1])
        starts.append(starts[-1] + len(labels[-1]))
    stamp = ";".join("{}:{}:{}".format(os.path.abspath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns)
                     for p in present)

    def rows(items):
        loaded, data = None, None
        for i in items:
            index = int(np.searchsorted(starts, i, side="right")) - 1
            if index != loaded:
                data, loaded = _read_batch(present[index])[0], index
            yield data[i - starts[index]]

    reader = RowReader("CIFAR-10 " + path, (starts[-1], 3, 32, 32), np.uint8, rows, stamp, kind="cifar10")
    return reader, np.concatenate(labels), class_names(path)
