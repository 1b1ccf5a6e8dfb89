"""CIFAR-shaped training data made on the spot: 32x32 RGB, 10 classes, in the CIFAR-10 "python version" layout.

The training comparison of ``gpu_check`` must run on a machine with no network
and no datasets (a lent GPU server). What it measures is speed by precision
mode, which depends on the tensor shapes, not on the pictures; the classes are
still learnable (each has its own stripe orientation and frequency, colour
tint and noise), so the final accuracies say whether a mode trained at all.
Written as ``data_batch_1..5`` + ``test_batch`` + ``batches.meta``, it goes
through the same loader as the real CIFAR-10 (``trtkit.data``).
"""

import os
import pickle

import numpy as np

from trtkit.fileio import write_bytes

CLASSES = 10
SIZE = 32
TRAIN_FILES = 5


def make_images(count, seed):
    """(uint8 rows (count, 3072) in CIFAR's channel-major order, int labels (count,))."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, CLASSES, size=count)
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    angles = np.arange(CLASSES) * np.pi / CLASSES
    freqs = 2.0 + (np.arange(CLASSES) % 3) * 1.5
    tints = np.random.RandomState(1234).uniform(0.3, 1.0, size=(CLASSES, 3)).astype(np.float32)
    rows = np.empty((count, 3 * SIZE * SIZE), dtype=np.uint8)
    for start in range(0, count, 2048):
        part = labels[start:start + 2048]
        n = part.shape[0]
        phase = rng.uniform(0, 2 * np.pi, size=(n, 1, 1)).astype(np.float32)
        along = np.cos(angles[part])[:, None, None] * x + np.sin(angles[part])[:, None, None] * y
        stripes = 0.5 + 0.5 * np.sin(2 * np.pi * freqs[part][:, None, None] * along + phase)
        pixels = stripes[:, None, :, :] * tints[part][:, :, None, None]
        pixels += rng.normal(0.0, 0.12, size=pixels.shape).astype(np.float32)
        rows[start:start + n] = (np.clip(pixels, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8).reshape(n, -1)
    return rows, labels


def write_cifar_like(folder, train=10000, test=2000, seed=0):
    """Write ``train`` training and ``test`` held-out images into ``folder``; returns ``folder``."""
    if not os.path.isdir(folder):
        os.makedirs(folder)
    rows, labels = make_images(train + test, seed)
    bounds = np.linspace(0, train, TRAIN_FILES + 1).astype(int)
    for index in range(TRAIN_FILES):
        lo, hi = bounds[index], bounds[index + 1]
        _write_batch(os.path.join(folder, "data_batch_{}".format(index + 1)), rows[lo:hi], labels[lo:hi],
                     "training batch {} of {}".format(index + 1, TRAIN_FILES))
    _write_batch(os.path.join(folder, "test_batch"), rows[train:], labels[train:], "testing batch 1 of 1")
    meta = {b"label_names": [("class{}".format(i)).encode("ascii") for i in range(CLASSES)],
            b"num_cases_per_batch": int(bounds[1] - bounds[0]), b"num_vis": 3 * SIZE * SIZE}
    write_bytes(os.path.join(folder, "batches.meta"), pickle.dumps(meta, protocol=2))
    return folder


def _write_batch(path, rows, labels, label):
    batch = {b"batch_label": label.encode("ascii"), b"labels": [int(v) for v in labels], b"data": rows,
             b"filenames": [("synthetic_{}.png".format(i)).encode("ascii") for i in range(len(labels))]}
    write_bytes(path, pickle.dumps(batch, protocol=2))
