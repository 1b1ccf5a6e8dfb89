"""Activation statistics of an FP32 ONNX graph, gathered in one pass over the calibration images.

Every float activation (the graph input and every node output) is made a
graph output and run through ONNX Runtime batch by batch. For each tensor we
keep its min, its max and a histogram of |x| with a fixed number of bins over
``[0, R]``. ``R`` starts at the first batch's largest |x|; when a later batch
goes further, ``R`` doubles as often as needed and adjacent bins are merged
pairwise, so the edges stay aligned and no sample is ever dropped or counted
twice. The ranges of every method (entropy, percentile, minmax) are then
computed from these histograms without touching the images again.
"""

import os
import shutil
import tempfile

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError

NUM_BINS = 2048
_FLOAT = 1  # onnx.TensorProto.FLOAT
# Every activation of a sub-batch is returned at once: its images are chosen so that all of their
# activations fit in about this much memory (ResNet18 at 224 has ~22 MB per image: 4 images a run).
ACTIVATION_BUDGET_BYTES = 96 << 20


class AbsHistogram(object):
    """Histogram of |x| over [0, upper] with ``bins`` bins that grows its range by merging bins."""

    def __init__(self, bins=NUM_BINS):
        self.bins = int(bins)
        self.counts = np.zeros(self.bins, dtype=np.int64)
        self.upper = 0.0
        self.minimum = float("inf")
        self.maximum = float("-inf")

    @property
    def absmax(self):
        return max(abs(self.minimum), abs(self.maximum)) if self.count else 0.0

    @property
    def count(self):
        return int(self.counts.sum())

    def update(self, values):
        values = np.asarray(values, dtype=np.float32).ravel()
        if values.size == 0:
            return
        low, high = float(values.min()), float(values.max())
        if not (np.isfinite(low) and np.isfinite(high)):  # a NaN makes both NaN, an inf one of them
            raise InputError("the FP32 model produces non-finite values (NaN/inf) on the calibration images",
                             hint="check the model and the preprocessing of the calibration data")
        self.minimum = min(self.minimum, low)
        self.maximum = max(self.maximum, high)
        absolute = np.abs(values)  # the one float copy; scaled in place below
        top = max(-low, high)  # the largest |x|, without another pass
        if self.upper <= 0.0:
            self.upper = top if top > 0.0 else 0.0
        elif top > self.upper:
            self._grow(top)
        if self.upper <= 0.0:  # everything so far is exactly zero
            self.counts[0] += absolute.size
            return
        np.multiply(absolute, self.bins / self.upper, out=absolute)
        index = absolute.astype(np.int32)  # int32, not int64: bins fit, and it halves the transient memory
        del absolute
        np.minimum(index, self.bins - 1, out=index)
        self.counts += np.bincount(index, minlength=self.bins)

    def _grow(self, top):
        factor = 1
        while self.upper * factor < top:
            factor *= 2
        if factor >= self.bins:
            merged = np.zeros(self.bins, dtype=np.int64)
            merged[0] = self.counts.sum()
        else:
            merged = np.zeros(self.bins, dtype=np.int64)
            merged[:self.bins // factor] = self.counts.reshape(self.bins // factor, factor).sum(axis=1)
        self.counts = merged
        self.upper *= factor

    def to_arrays(self):
        return self.counts, np.array([self.upper, self.minimum, self.maximum], dtype=np.float64)

    @classmethod
    def from_arrays(cls, counts, info):
        hist = cls(bins=len(counts))
        hist.counts = np.asarray(counts, dtype=np.int64).copy()
        hist.upper, hist.minimum, hist.maximum = [float(v) for v in info]
        return hist


def activation_tensors(model):
    """Names of the float activations of ``model``: the graph inputs, then node outputs in graph order."""
    from trtkit.onnx.types import elem_types
    types = elem_types(model)
    initializers = set(i.name for i in model.graph.initializer)
    names = [i.name for i in model.graph.input if i.name not in initializers and types.get(i.name) == _FLOAT]
    for node in model.graph.node:
        if node.op_type == "Constant":
            continue
        for out in node.output:
            if out and types.get(out) == _FLOAT and out not in names:
                names.append(out)
    return names


def instrumented_file(model, names, folder):
    """Write ``model`` with every tensor in ``names`` as an output to ``folder``; returns the file's path. The
    outputs are added to ``model`` itself for as long as it takes to write it (no copy of the weights). A caller
    that loaded ``model`` for this drops it before opening the session (``collect_stats`` on the path): with upb
    protobuf a model's memory is given back only when the model itself goes, so the session then holds the
    weights alone."""
    onnx = require("onnx", "INT8 calibration")
    from trtkit.onnx.write import save
    present = set(o.name for o in model.graph.output)
    outputs = len(model.graph.output)
    for name in names:
        if name not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, _FLOAT, None))
    path = os.path.join(folder, "instrumented.onnx")
    try:
        save(model, path)
    finally:
        del model.graph.output[outputs:]
    return path


def _open_instrumented(path):
    ort = require("onnxruntime", "INT8 calibration")
    from trtkit.onnx.weights import give_back_memory
    give_back_memory()  # what was freed before the session's own copies come
    options = ort.SessionOptions()
    # no graph rewrites: the tensors must be exactly the ones of the FP32 graph
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _instrumented_session(model, names):
    """An ONNX Runtime session of ``model`` with every tensor in ``names`` as an output."""
    folder = tempfile.mkdtemp(prefix="trtkit-calib-")
    try:
        return _open_instrumented(instrumented_file(model, names, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def collect_stats(model, images, batch_size=32, bins=NUM_BINS, progress_label="calibration statistics",
                  fixed_batch=None, total=None, names=None):
    """{tensor name: AbsHistogram} over every float activation of ``model`` for ``images``: an (N, C, H, W)
    array, or an iterable of such batches (a stream: ``total`` images in all).

    ``model`` is an onnx.ModelProto. One pass over the images, in order. Each batch
    runs as sub-batches sized so that their activations (all returned at once) stay
    within ``ACTIVATION_BUDGET_BYTES``: the first image alone measures the size per
    image. Memory is then bounded whatever the model, the input size or
    ``batch_size``; the result is deterministic for given images. A model whose
    batch is fixed (``fixed_batch``) runs exactly that many images a run. ``model`` may also be the path of
    its ``instrumented_file`` (then ``names`` are the ones it was written with); ``names``: the caller's
    ``activation_tensors(model)``, when it has them.
    """
    from trtkit import log
    if isinstance(model, str):
        session = _open_instrumented(model)
    else:
        names = activation_tensors(model) if names is None else names
        session = _instrumented_session(model, names)
    histograms = dict((n, AbsHistogram(bins)) for n in names)
    chunks = images
    if isinstance(images, np.ndarray):
        total = images.shape[0]
        chunks = (images[s:s + batch_size] for s in range(0, total, batch_size))
    with log.Progress(progress_label, total=total, unit="img") as bar:
        for count, values in activation_stream(session, names, chunks, fixed_batch):
            for index, name in enumerate(names):
                histograms[name].update(values[index])
                values[index] = None  # release each activation once counted
            bar.update(count)
    return histograms


def activation_stream(session, names, chunks, fixed_batch=None):
    """Yield (images, [array per name in ``names``]) for each sub-batch of ``chunks`` (an iterable of NCHW
    batches) run through ``session`` (``_instrumented_session``): sub-batches are sized so that their
    activations (all returned at once) stay within ``ACTIVATION_BUDGET_BYTES``, the first image alone measuring
    the size per image, so memory is bounded whatever the model, the input size or the batch size. A model
    whose batch is fixed (``fixed_batch``) runs exactly that many images a run (a last, smaller one is left
    out). The caller may drop each array as soon as it has used it."""
    input_name = session.get_inputs()[0].name
    per_image = None
    for chunk in chunks:
        start, stop = 0, len(chunk)
        while start < stop:
            if fixed_batch:
                step = fixed_batch
            elif per_image is None:
                step = 1
            else:
                step = max(1, min(stop - start, ACTIVATION_BUDGET_BYTES // per_image))
            batch = np.ascontiguousarray(chunk[start:start + step], dtype=np.float32)
            if fixed_batch and len(batch) != fixed_batch:
                break  # a fixed-batch model takes whole batches only
            values = session.run(names, {input_name: batch})
            if per_image is None:
                per_image = max(1, sum(v.nbytes for v in values) // len(batch))
            yield len(batch), values
            start += step
