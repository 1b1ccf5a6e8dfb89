"""A Selection: the chosen images of one split, streamed as batches or loaded when small.

``select`` lists the source, picks the split and a seeded subset from the
listing, and decodes nothing. ``Selection.batches`` decodes on the fly, in
order, a few images ahead of the reader, so peak memory is a few batches
whatever the selection's size; ``Selection.load`` keeps them all (calibration's
512 images, the sample). A corrupt image is skipped and recorded
(``selection.skipped``); more than ``max_unreadable`` of the selection
unreadable is an InputError. Every path gives the same arrays for the same
files: ``load`` is ``batches`` concatenated, and ``load_images`` is ``load``.
"""

import collections
import hashlib
import os

import numpy as np

from trtkit import log
from trtkit.contract import InputContract
from trtkit.data.sources import choose, list_source, reconcile_classes
from trtkit.errors import InputError

DEFAULT_MAX_UNREADABLE = 0.01
PROGRESS_FROM = 2000  # selections this long show a progress bar unless told otherwise


class ImageSet(object):
    """Preprocessed images in memory (float32 NCHW), optional int64 labels, and where they came from.

    ``identity`` is a short string that changes whenever the pixels would: it
    keys caches (calibration ranges) and is recorded in reports.
    """

    def __init__(self, images, labels, identity, class_names=None, source=None, skipped=()):
        self.images = images
        self.labels = labels
        self.identity = identity
        self.class_names = class_names
        self.source = source
        self.skipped = list(skipped)

    def __len__(self):
        return int(self.images.shape[0])

    def subset(self, count, seed=0):
        """A deterministic random subset of ``count`` images (all of them when fewer)."""
        if count is None or count >= len(self):
            return self
        order = choose(len(self), count, seed)
        labels = self.labels[order] if self.labels is not None else None
        return ImageSet(self.images[order], labels, "{}|subset{}s{}".format(self.identity, count, seed),
                        self.class_names, self.source, self.skipped)

    def batches(self, batch_size):
        """Yield (images, labels-or-None) in order; the last batch may be smaller."""
        for start in range(0, len(self), batch_size):
            end = start + batch_size
            yield self.images[start:end], (self.labels[start:end] if self.labels is not None else None)


class Selection(object):
    """The chosen items of one split of a source, for one contract; nothing decoded until asked.

    ``labels`` (int64 per item, or None) and ``class_names`` come from the
    listing. ``identity`` changes when the files (names, sizes, mtimes), the
    split or subset, or the contract's preprocessing change.
    """

    def __init__(self, listing, positions, contract, split, max_unreadable=DEFAULT_MAX_UNREADABLE, workers=None):
        self.source = listing.source
        self.contract = contract
        self.split = split
        self.max_unreadable = float(max_unreadable)
        self.workers = workers
        self._reader = listing.reader
        self.own_split = listing.own_split  # a source with train/ + val/ (or CIFAR-10's batches): see data.plan
        items = listing.items
        self._items = items[positions] if isinstance(items, np.ndarray) else [items[i] for i in positions]
        labels = listing.labels[positions] if listing.labels is not None else None
        self.class_names, self.labels = reconcile_classes(listing.class_names, labels, contract.class_names,
                                                          self.source)
        # per-image annotations read beside the images, yielded as each batch's labels: (N, H, W) masks
        # (data.masks) or a BoxRecord per image (data.boxes.BoxLabels)
        self.annotations, self._annotation_items = None, None
        if listing.annotations is not None:
            self.annotations = listing.annotations[0]
            self._annotation_items = [listing.annotations[1][i] for i in positions]
        self.ignored = listing.ignored
        self._skipped = collections.OrderedDict()
        self._reported = 0
        self._identity = None

    def __len__(self):
        return len(self._items)

    @property
    def names(self):
        """What each item is (a file path, 'file.npy[12]'), in order."""
        return [self._reader.name(item) for item in self._items]

    @property
    def holds(self):
        """What the selection's labels are: "classes" (an int64 per image), "masks", "boxes", or None."""
        if self.annotations is not None:
            return self.annotations.holds
        return "classes" if self.labels is not None else None

    def item_keys(self):
        """What identifies each chosen item in any split's listing of the same source (``select(exclude=)``)."""
        return [_key(item) for item in self._items]

    @property
    def skipped(self):
        """[(path, reason)] of the images found unreadable so far."""
        return list(self._skipped.items())

    @property
    def identity(self):
        if self._identity is None:
            digest = hashlib.sha1(self._reader.fingerprint(self._items).encode("utf-8"))
            digest.update("{}\0{}".format(self.split, self.contract.preprocessing_key()).encode("utf-8"))
            base = os.path.basename(os.path.normpath(str(self.source)))
            self._identity = "{}:{}:{}:{}:{}".format(self._reader.kind, base, self.split, len(self),
                                                     digest.hexdigest()[:12])
        return self._identity

    def batches(self, batch_size, progress=None):
        """Yield (float32 NCHW, int64 labels or None), in order; every batch full but the last.

        Unreadable images are skipped (``skipped``). ``progress``: None shows a
        bar with rate and ETA for long selections, a string labels it, False hides it.
        """
        if int(batch_size) < 1:
            raise InputError("the batch size must be at least 1, got {}".format(batch_size))
        batch_size = int(batch_size)
        shape, labels = self.contract.shape, self.labels
        images, rows = [], []
        with _progress(progress, len(self), self.source) as bar:
            for position, (array, reason) in enumerate(self._reader.read(self._items, self.contract, self.workers)):
                if array is None:
                    self._skip(position, reason)
                else:
                    images.append(array)
                    rows.append(position)
                if len(images) == batch_size or (position == len(self) - 1 and images):
                    batch = np.empty((len(images),) + shape, dtype=np.float32)
                    for index, array in enumerate(images):
                        batch[index] = array
                    bar.advance(position + 1)
                    if self.annotations is not None:
                        yield batch, self.annotations.read([self._annotation_items[r] for r in rows],
                                                           self.contract)
                    else:
                        yield batch, (labels[rows] if labels is not None else None)
                    images, rows = [], []
        self._report()

    def load(self, progress=None):
        """Every chosen image in memory: an ImageSet (float32 NCHW; labels: class indices, masks, or a list of
        BoxRecords)."""
        images = np.empty((len(self),) + self.contract.shape, dtype=np.float32)
        labels, count = [], 0
        for batch, batch_labels in self.batches(256, progress):
            images[count:count + len(batch)] = batch
            count += len(batch)
            if batch_labels is not None:
                labels.append(batch_labels)
        if count == 0:
            raise InputError("none of the {} images in {} is readable".format(len(self), self.source))
        if labels and isinstance(labels[0], list):  # a BoxRecord per image
            label_array = [record for batch_labels in labels for record in batch_labels]
        else:  # class indices, or (N, H, W) masks
            label_array = np.concatenate(labels) if labels else None
        return ImageSet(images[:count] if count < len(self) else images, label_array, self.identity,
                        self.class_names, self.source, self.skipped)

    def _skip(self, position, reason):
        self._skipped[self._reader.name(self._items[position])] = reason
        if len(self._skipped) > self.max_unreadable * len(self):
            name, why = next(iter(self._skipped.items()))
            raise InputError("{} of {} images in {} are unreadable, more than {:g}% (e.g. {}: {})".format(
                len(self._skipped), len(self), self.source, 100 * self.max_unreadable, name, why),
                hint="remove or re-encode the broken files")

    def _report(self):
        if len(self._skipped) > self._reported:  # once per new finding, not on every pass
            self._reported = len(self._skipped)
            name, why = next(iter(self._skipped.items()))
            log.warn("skipped {} unreadable image(s) of {} in {} (e.g. {}: {})".format(
                len(self._skipped), len(self), self.source, name, why))


def select(source, contract, split="all", limit=None, seed=0, max_unreadable=DEFAULT_MAX_UNREADABLE, workers=None,
           exclude=(), listing=None):
    """The Selection of ``split`` of ``source`` for ``contract``: ``limit`` items drawn by ``seed`` (None: all).

    ``contract``: an InputContract (or its ``to_dict()``). ``max_unreadable``:
    the fraction of the selection that may be unreadable before it is an error.
    ``workers``: decoding threads (default: up to 4 for image files). ``exclude``:
    Selections of the same source whose items this one leaves out (the images
    calibration took are never verified on); the splits of a source with its own
    (``train/`` + ``val/``, CIFAR-10, whose rows are numbered per split) never
    share an item, so only a selection of the same split counts there.
    ``listing``: the ``sources.list_source(source, split)`` already made (a
    caller selecting several times from one source lists it once).
    """
    if not isinstance(contract, InputContract):
        contract = InputContract.from_dict(dict(contract))
    if not 0.0 <= float(max_unreadable) <= 1.0:
        raise InputError("max_unreadable is a fraction between 0 and 1, got {}".format(max_unreadable))
    if limit is not None and int(limit) < 0:
        raise InputError("the number of images must be positive, got {}".format(limit))
    listing = listing if listing is not None else list_source(source, split)
    listing.reader.check(contract)
    if len(listing) == 0:
        raise InputError("no images in split '{}' of {}".format(split, source or "sample"),
                         hint="add images, or use split 'all'")
    candidates = np.arange(len(listing))
    if exclude:
        taken = set()
        for other in exclude:
            if not listing.own_split or other.split == split:
                taken.update(other.item_keys())
        candidates = np.asarray([i for i in candidates if _key(listing.items[i]) not in taken], dtype=np.int64)
        if len(candidates) == 0:
            raise InputError("no images of split '{}' of {} are left once those of the other steps are taken".format(
                split, source or "sample"), hint="give more images")
    positions = candidates[choose(len(candidates), limit, seed)]
    return Selection(listing, positions, contract, split, max_unreadable, workers)


def _key(item):
    """What identifies a listing's item across splits: its path, or its row (numpy integers as int)."""
    return item if isinstance(item, str) else int(item)


def load_images(source, contract, split="all", limit=None, seed=0):
    """Read ``source`` into an ImageSet preprocessed for ``contract``: ``select(...).load()``."""
    return select(source, contract, split=split, limit=limit, seed=seed).load()


class _Bar(object):
    """A log.Progress (images/s and ETA), or nothing."""

    def __init__(self, label, total):
        self._bar = log.Progress(label, total=total, unit="img") if label else None

    def __enter__(self):
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def advance(self, done):
        """``done`` images of the total read (decoded or skipped)."""
        if self._bar is None:
            return
        self._bar.update(done - self._bar.count)

    def __exit__(self, exc_type, exc, tb):
        if self._bar is not None:
            return self._bar.__exit__(exc_type, exc, tb)
        return False


def _progress(progress, total, source):
    if progress is False or (progress is None and total < PROGRESS_FROM):
        return _Bar(None, total)
    label = progress if isinstance(progress, str) else "reading {} images from {}".format(total, source)
    return _Bar(label, total)
