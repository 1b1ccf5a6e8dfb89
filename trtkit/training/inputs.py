"""Where the training images live and how each batch reaches the model: the training input path.

Why this is its own module: on a large GPU the input path, not the model, set the training speed. Measured
on an H200 (ResNet50, 224x224, batch 128): gathering float32 numpy images and copying them from pageable
memory took 32 ms per batch, a ceiling of about 3,960 images/s, below the 4,620 that PyTorch reaches in AMP
with the batch already on the GPU; a uint8 training set kept on the GPU gives a batch in 0.64 ms.

So the images are stored as the uint8 pixels they were made from (a quarter of float32's bytes) whenever
the preprocessed floats are exactly pixels under the model's normalization (``encode`` checks every value;
otherwise they stay float32 and the same code runs with an identity normalization). Where they live
(``placement``):

- ``device``: on the GPU (``auto`` picks it when the set takes at most ``DEVICE_SHARE`` of the free GPU
  memory). A batch is one gather on the GPU that does the selection, the random crop (reflect padding
  folded into the indices) and the flip at once; then the normalization, fused into one multiply-add.
- ``host``: in host memory. On a GPU each batch is gathered into a pinned buffer and copied on a side stream
  one step ahead of the loop (buffers reused only after their copy finished), so the copy overlaps the previous
  step's compute; crop, flip and normalization then run on the GPU as above. ``HOST_WORKER`` makes the batches
  in a worker thread instead (``prefetched``), a variant measured but not yet shown better (its comment). On a
  CPU the same gather runs in place, with no copy at all.

An epoch's order, crop offsets and flips are drawn from the run's numpy generator once per epoch and sent
to the device once, so no step waits on the host: the loop's loss check is its only synchronisation.
The crops are the same as ``F.pad(images, mode="reflect")`` followed by a crop (a test checks it).
"""

import threading

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError

PLACEMENTS = ("auto", "device", "host")
DEVICE_SHARE = 0.25  # of the free GPU memory a training set may take to be kept there under 'auto'
ENCODE_VALUES = 2 ** 23  # float values checked and converted at a time (bounds the temporaries to tens of MB)
EXACT = 1e-3  # a float whose pixel value is this close to an integer in 0..255 is that pixel
HOST_AHEAD = 2  # batches the host path's worker prepares ahead of the loop (pinned buffers: this + 2)
# Where the host path makes its batches: False (the default), in the loop's own thread one step ahead; True, in
# a worker thread (``prefetched``) up to HOST_AHEAD steps ahead, gathering with numpy. Measured on an H200 (AMP,
# 224, batch 128; each row against the on-GPU placement of its own session): in the loop's thread ResNet18 80%,
# ResNet50 65%; in a worker thread gathering with torch (an OpenMP team of its own: 16 more threads spinning on 16
# cores beside the launching thread) ResNet18 49%, ResNet50 85%. No run has compared them side by side yet, so
# the default stays the one measured first; ``benchmarks/train_speed.py --host-worker both`` times both in one run.
HOST_WORKER = False


def pixel_affine(contract):
    """(scale, shift) per channel with ``float = pixel * scale + shift`` for ``contract``'s normalization
    (pixels 0..255 scaled to 0..pixel_scale, then ``(x - mean) / std``)."""
    std = np.asarray(contract.std, dtype=np.float64)
    mean = np.asarray(contract.mean, dtype=np.float64)
    scale = float(contract.pixel_scale) / 255.0 / std
    return scale.astype(np.float32), (-mean / std).astype(np.float32)


def encode(images, contract=None):
    """(store, layout, scale, shift): ``images`` (float32 NCHW) as uint8 NHWC pixels when every value is one
    under ``contract``'s normalization; else the float32 array itself (no copy: the caller keeps it anyway),
    layout "nchw", with the identity (scale 1, shift 0). Checked and converted chunk by chunk; a resize that pads after normalization (``pad``, ``height``) gives floats that are
    no pixel, and so the float path."""
    channels = images.shape[1]
    if contract is not None and len(contract.std) == channels:
        scale, shift = pixel_affine(contract)
        step = max(1, ENCODE_VALUES // max(1, int(np.prod(images.shape[1:]))))
        # np.empty commits no memory until written: a set that fails early has cost a chunk, not a copy
        store = np.empty((images.shape[0],) + tuple(images.shape[2:]) + (channels,), np.uint8)
        for start in range(0, images.shape[0], step):
            pixels = _pixels(images[start:start + step], scale, shift)
            if pixels is None:
                break
            store[start:start + step] = pixels.transpose(0, 2, 3, 1)
        else:
            return store, "nhwc", scale, shift
    return images, "nchw", np.ones(channels, np.float32), np.zeros(channels, np.float32)


def _pixels(chunk, scale, shift):
    """The uint8 pixels (NCHW) ``chunk`` is made of under (scale, shift), or None when a value is not one."""
    pixels = (chunk - shift.reshape(1, -1, 1, 1)) / scale.reshape(1, -1, 1, 1)
    rounded = np.rint(pixels)
    if not (np.all(np.abs(pixels - rounded) < EXACT) and rounded.min() >= 0 and rounded.max() <= 255):
        return None  # NaN fails the first test too
    return rounded.astype(np.uint8)


def check_placement(placement):
    if placement not in PLACEMENTS:
        raise InputError("unknown --data-placement '{}'".format(placement), hint="use one of " + ", ".join(PLACEMENTS))
    return placement


def choose_placement(torch, placement, device, nbytes):
    """'device' or 'host' for a store of ``nbytes`` on ``device`` (always 'host' on a CPU)."""
    if not str(device).startswith("cuda"):
        return "host"
    if placement != "auto":
        return placement
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return "device" if nbytes <= DEVICE_SHARE * free else "host"


def reflect(index, size):
    """Indices past either edge mirrored back inside ``0..size-1`` (no edge repeat), as reflect padding."""
    index = index.abs()
    return (size - 1) - ((size - 1) - index).abs()


class BatchSource(object):
    """A labelled training set as batches on ``device`` for the loop: ``epoch(order, rng)`` yields
    (float32 images NCHW, int64 labels) per step, augmented with crops (shift up to ``pad``) and flips;
    ``channels_last``: the images come in that memory format (what a channels-last model takes)."""

    def __init__(self, images, labels, device, contract=None, placement="auto", pad=0, flip=False,
                 channels_last=False):
        self.torch = torch = require("torch", "training")
        store, self.layout, scale, shift = encode(images, contract)
        if self.layout == "nhwc":
            self.count, self.height, self.width, self.channels = store.shape
        else:
            self.count, self.channels, self.height, self.width = store.shape
        if pad >= min(self.height, self.width):
            pad = min(self.height, self.width) - 1  # reflect padding needs pad < size
        self.pad, self.flip, self.device = int(pad), bool(flip), torch.device(device)
        self.channels_last = bool(channels_last)
        self.cuda = self.device.type == "cuda"
        self.encoding = "uint8 pixels" if store.dtype == np.uint8 else "float32 (not pixels of the model's normalization)"
        self.placement = choose_placement(torch, check_placement(placement), device, store.nbytes)
        where = self.device if self.placement == "device" else torch.device("cpu")
        self.store = torch.from_numpy(store).to(where)
        self.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(where)
        self.scale = torch.from_numpy(scale).to(self.device).view(1, -1, 1, 1)
        self.shift = torch.from_numpy(shift).to(self.device).view(1, -1, 1, 1)
        self.rows = torch.arange(self.height, device=self.device)
        self.cols = torch.arange(self.width, device=self.device)
        self._staging = None

    def describe(self):
        where = {"device": "on the GPU", "host": "in host memory, copied ahead on a side stream from pinned "
                 "buffers" if self.cuda else "in memory"}[self.placement]
        return "{} images as {} ({:.0f} MB) {}".format(self.count, self.encoding, self.store.numel() *
                                                      self.store.element_size() / 2.0 ** 20, where)

    def epoch(self, order, rng, batch_size):
        """Yield (images, labels) for each step of one epoch over ``order`` (numpy positions); offsets and
        flips are drawn from ``rng`` here, once, in the epoch's order. Batches of fewer than 2 images are left
        out (BatchNorm needs two)."""
        torch = self.torch
        order = np.asarray(order, dtype=np.int64)
        offsets = rng.randint(0, 2 * self.pad + 1, size=(len(order), 2))
        flips = rng.rand(len(order)) < 0.5 if self.flip else np.zeros(len(order), bool)
        offsets = torch.from_numpy(offsets).to(self.device, non_blocking=self.cuda)
        flips = torch.from_numpy(flips).to(self.device, non_blocking=self.cuda)
        starts = [s for s in range(0, len(order), batch_size) if len(order) - s >= 2]
        if self.placement == "device" or not self.cuda:
            positions = torch.from_numpy(order).to(self.store.device)
            for start in starts:
                index = positions[start:start + batch_size]
                yield self._augment(self.store, index, offsets[start:start + batch_size],
                                    flips[start:start + batch_size]), self.labels[index]
            return
        main = torch.cuda.current_stream(self.device)  # the loop's stream: the batches are used there
        device_index = self.device.index if self.device.index is not None else torch.cuda.current_device()

        def make(number):
            return self._copy_ahead(order, starts[number], batch_size, number, main, HOST_WORKER)
        steps = prefetched(make, len(starts), HOST_AHEAD, device_index) if HOST_WORKER else \
            made_ahead(make, len(starts), 1)
        try:
            for start, (ready, (images, labels)) in zip(starts, steps):
                main.wait_event(ready)
                local = torch.arange(images.shape[0], device=self.device)
                yield self._augment(images, local, offsets[start:start + batch_size],
                                    flips[start:start + batch_size]), labels
        finally:
            steps.close()  # the worker stops with the epoch, however it ends

    def _augment(self, store, index, offsets, flips):
        """One gather from ``store`` (NHWC) doing selection, crop and flip (rows of C values picked by a flat
        index: measured on a CPU, 2.4 times faster than advanced indexing by three index tensors); then the
        normalization, in place on the one float copy. NCHW, or NCHW with channels-last strides when the model
        is channels-last."""
        torch = self.torch
        rows = reflect(self.rows[None] + (offsets[:, 0:1] - self.pad), self.height)
        cols = reflect(self.cols[None] + (offsets[:, 1:2] - self.pad), self.width)
        cols = torch.where(flips[:, None], cols.flip(1), cols)
        if self.layout == "nchw":  # float32 that are no pixels: gather each image's plane positions
            spatial = (rows[:, :, None] * self.width + cols[:, None, :]).reshape(index.shape[0], 1, -1)
            planes = store.reshape(store.shape[0], self.channels, -1).index_select(0, index)
            images = planes.gather(2, spatial.expand(-1, self.channels, -1)).view(
                index.shape[0], self.channels, self.height, self.width)
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            return images
        flat = (index[:, None, None] * (self.height * self.width) + rows[:, :, None] * self.width
                + cols[:, None, :]).reshape(-1)
        pixels = store.reshape(-1, self.channels).index_select(0, flat)
        images = pixels.view(index.shape[0], self.height, self.width, self.channels).permute(0, 3, 1, 2)
        if not self.channels_last:
            images = images.contiguous()
        return images.float().mul_(self.scale).add_(self.shift)

    def _copy_ahead(self, order, start, batch_size, number, main, in_worker=False):
        """Gather the images of one step into pinned buffer ``number % buffers`` and copy it on a side stream
        (in the loop's thread, or ``in_worker``: ``prefetched``'s, gathering with numpy); returns (copy-done
        event, (device images, device labels)), the device tensors marked as used on ``main``, the loop's stream."""
        torch = self.torch
        if self._staging is None:
            shape = (batch_size,) + tuple(self.store.shape[1:])
            self._staging = [(torch.empty(shape, dtype=self.store.dtype).pin_memory(),
                              torch.empty(batch_size, dtype=torch.int64).pin_memory(), None)
                             for _ in range(HOST_AHEAD + 2)]  # queued + being filled + in use by the loop
            self._stream = torch.cuda.Stream(self.device)
        slot = number % len(self._staging)
        images, labels, done = self._staging[slot]
        if done is not None:
            done.synchronize()  # the copy issued earlier from this buffer has finished: it may be refilled
        index = torch.from_numpy(order[start:start + batch_size])
        count = len(index)
        if not in_worker:
            torch.index_select(self.store, 0, index, out=images[:count])
        else:  # numpy's take: one thread, the GIL released, no second OpenMP team beside the loop's (HOST_WORKER)
            np.take(self.store.numpy(), index.numpy(), axis=0, out=images[:count].numpy())
        torch.index_select(self.labels, 0, index, out=labels[:count])
        with torch.cuda.stream(self._stream):
            on_device = images[:count].to(self.device, non_blocking=True)
            labels_on_device = labels[:count].to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        on_device.record_stream(main)  # allocated on the side stream, freed after the loop's use of it
        labels_on_device.record_stream(main)
        self._staging[slot] = (images, labels, done)
        return done, (on_device, labels_on_device)


_END = object()


def made_ahead(make, count, ahead):
    """``prefetched``'s items made in the caller's thread, ``ahead`` items before the consumer takes each."""
    import collections
    pending = collections.deque()
    for number in range(count):
        pending.append(make(number))
        if len(pending) > ahead:
            yield pending.popleft()
    while pending:
        yield pending.popleft()


def prefetched(make, count, ahead, device=None):
    """Yield ``make(0)`` .. ``make(count - 1)`` in order, each made in a worker thread up to ``ahead`` items
    before the consumer takes it. An exception in ``make`` is raised in the consumer at that item; a consumer
    that stops early (break, exception, garbage collection) stops the worker before this returns, so no
    thread outlives its loop. ``device``: the index of a CUDA device the worker makes current (its CUDA
    calls and streams then go there; a thread starts on device 0).

    Why a thread and not a process: the work is torch calls on shared tensors (a gather into pinned memory,
    an asynchronous copy) that release the GIL; a process would copy the batch once more."""
    import queue
    items = queue.Queue(maxsize=max(1, int(ahead)))
    stop = threading.Event()

    def offer(item):
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            if device is not None:
                import torch
                torch.cuda.set_device(device)
            for number in range(count):
                if stop.is_set() or not offer((None, make(number))):
                    return
            offer((None, _END))
        except BaseException as exc:  # handed to the consumer, raised there
            offer((exc, None))

    worker = threading.Thread(target=work, name="trtkit-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            error, item = items.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        worker.join()
