"""INT8 calibration: ranges from real images, cached, turned into Q/DQ ONNX and a TensorRT cache.

``calibrate(onnx_path, imageset, method)`` is the Python entry point: one pass
of histograms over every float activation (``stats``), then amax per tensor by
the method asked (``ranges``). Both are cached under ``cache_dir("calib")``:

* statistics, keyed by the model graph's hash and the calibration pixels
  (their identity, count and a digest of the preprocessed array, so the
  preprocessing is part of the key);
* ranges, keyed by the statistics key plus the method (and percentile).

A second run with the same inputs reuses the ranges (nothing is recomputed);
another method reuses the histograms and recomputes only the ranges; another
model or data recomputes everything. A cache file that fails to load or does
not fit the model is reported and recomputed, never trusted.

The build's INT8 step (calibrate -> Q/DQ ONNX -> TensorRT cache -> report)
is ``pipeline.variants.VariantMaker.int8``: the one place that recipe is
written; it hands the backend the ``Int8Calibration`` defined here.
"""

import hashlib
import json
import os
import shutil
import tempfile
import time

import numpy as np

from trtkit import log
from trtkit.errors import InputError
from trtkit.fileio import atomic_path, cache_dir, read_json, write_json
from trtkit.precision.config import DEFAULT_CALIB_BATCH, DEFAULT_CALIB_IMAGES
from trtkit.precision.ranges import DEFAULT_METHOD, DEFAULT_PERCENTILE, check_method, compute_ranges
from trtkit.precision.stats import NUM_BINS, AbsHistogram, activation_tensors, collect_stats, instrumented_file

STATS_FORMAT = 2  # bump when the statistics change meaning; old cache entries then miss
RANGES_FORMAT = 2  # bump when a method's ranges change (2: entropy guarded by quantization error, rule per tensor)


class CalibrationResult(object):
    """Per-tensor ranges of one calibration and the report describing it.

    ``ranges``: {tensor name: {"amax", "min", "max"}} for every float activation
    of the FP32 ONNX (graph input included), in graph order.
    """

    def __init__(self, ranges, report):
        self.ranges = ranges
        self.report = report

    @property
    def method(self):
        return self.report["method"]

    @property
    def reused(self):
        return self.report["cache"]["reused"]

    def amax(self):
        return dict((name, r["amax"]) for name, r in self.ranges.items())


# ------------------------------------------------------------------ keys

def graph_hash(model):
    """sha256 of the graph (nodes, weights, I/O), not of producer metadata or doc strings.

    The digest of the graph's deterministic bytes, fed field by field (protobuf writes fields in number order:
    the fields before the initializers, each initializer, the fields after) so the weights are never copied
    whole: a copy of the graph and its bytes held two more copies of a VGG19's 548 MB."""
    from trtkit.onnx.write import INITIALIZER_FIELD, split_fields, varint
    head, tail = split_fields(model.graph, INITIALIZER_FIELD)
    tail.doc_string = ""
    for node in head.node:
        node.doc_string = ""
    digest = hashlib.sha256(head.SerializeToString(deterministic=True))
    for tensor in model.graph.initializer:
        data = tensor.SerializeToString(deterministic=True)
        digest.update(varint(INITIALIZER_FIELD << 3 | 2) + varint(len(data)))  # the field's tag, its length
        digest.update(data)
    digest.update(tail.SerializeToString(deterministic=True))
    for entry in sorted((e.domain, e.version) for e in model.opset_import):
        digest.update(repr(entry).encode("utf-8"))
    return digest.hexdigest()


def data_digest(images):
    """sha1 of the preprocessed pixels: changes with the images, their order and the preprocessing."""
    digest = hashlib.sha1(repr((images.shape, str(images.dtype))).encode("utf-8"))
    digest.update(np.ascontiguousarray(images).data)
    return digest.hexdigest()[:16]


def _key(*parts):
    return hashlib.sha256("|".join(str(p) for p in parts).encode("utf-8")).hexdigest()[:24]


# ------------------------------------------------------------------ checks

def _input_spec(model):
    from trtkit.onnx.load import graph_inputs
    inputs = graph_inputs(model)
    if len(inputs) != 1:
        raise InputError("INT8 calibration handles single-input models; this one has {}".format(len(inputs)))
    dims = []
    for d in inputs[0].type.tensor_type.shape.dim:
        dims.append(int(d.dim_value) if d.HasField("dim_value") else None)
    return inputs[0].name, dims


def check_image_shape(model, chw):
    """InputError unless images of shape ``chw`` fit the model input; returns its fixed batch or None."""
    name, dims = _input_spec(model)
    if len(dims) != 4:
        return None
    for axis, what in ((1, "channels"), (2, "height"), (3, "width")):
        if dims[axis] is not None and dims[axis] != chw[axis - 1]:
            raise InputError("calibration images are {}x{}x{} (CxHxW); the model input '{}' is {}".format(
                chw[0], chw[1], chw[2], name, "x".join(str(d) if d else "?" for d in dims[1:])),
                hint="calibrate with the model's preprocessing (trtkit.data.load_images with its contract)")
    return dims[0]


def check_images(model, images, batch_size):
    """InputError unless ``images`` fit the model input and fill at least one batch; returns the batch size."""
    if batch_size < 1:
        raise InputError("the calibration batch size must be at least 1, got {}".format(batch_size))
    if images.ndim != 4:
        raise InputError("calibration images have shape {}; expected (N, C, H, W)".format(images.shape))
    fixed = check_image_shape(model, images.shape[1:])
    if fixed:
        batch_size = fixed  # a fixed-batch ONNX runs only that batch size
    if not np.all(np.isfinite(images)):
        raise InputError("calibration images contain NaN or inf", hint="check the data source")
    if images.shape[0] < batch_size:
        raise InputError("only {} calibration image(s), fewer than one batch of {}".format(
            images.shape[0], batch_size),
            hint="give more images (--calib-images, a bigger --calib-data) or a smaller --calib-batch-size")
    return batch_size


# ------------------------------------------------------------------ cache

def _stats_path(root, key):
    return os.path.join(root, key + ".stats.npz")


def _ranges_path(root, key, method, percentile):
    suffix = method + ("-{:g}".format(percentile) if method == "percentile" else "")
    return os.path.join(root, "{}.r{}.{}.ranges.json".format(key, RANGES_FORMAT, suffix))


def _save_stats(path, histograms, meta):
    names = list(histograms)
    counts = np.stack([histograms[n].to_arrays()[0] for n in names]) if names else np.zeros((0, NUM_BINS))
    info = np.stack([histograms[n].to_arrays()[1] for n in names]) if names else np.zeros((0, 3))
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, names=np.array(names), counts=counts, info=info, meta=np.array(json.dumps(meta)))


def _load_stats(path, expected_names):
    """{name: AbsHistogram} from the cache, or None (with a warning) when it is unusable."""
    if not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = [str(n) for n in archive["names"]]
            counts = archive["counts"]
            info = archive["info"]
        if names != list(expected_names):
            raise ValueError("its tensors do not match the model")
        if counts.shape != (len(names), NUM_BINS) or info.shape != (len(names), 3):
            raise ValueError("unexpected array shapes")
        if (counts < 0).any() or not np.all(np.isfinite(info)):
            raise ValueError("negative counts or non-finite ranges")
        return dict((n, AbsHistogram.from_arrays(c, i)) for n, c, i in zip(names, counts, info))
    except Exception as exc:
        log.warn("calibration cache {} is unusable ({}); recomputing".format(path, exc))
        _remove(path)
        return None


def _load_ranges(path, expected_names):
    if not os.path.isfile(path):
        return None
    try:
        data = read_json(path)
        ranges = data["ranges"]
        if list(ranges) != list(expected_names):
            raise ValueError("its tensors do not match the model")
        for r in ranges.values():
            values = [float(r["amax"]), float(r["min"]), float(r["max"])]
            if not isinstance(r.get("rule"), str):
                raise ValueError("a range without its rule")
            if not all(np.isfinite(values)) or values[0] < 0:
                raise ValueError("a non-finite or negative range")
        return ranges
    except Exception as exc:
        log.warn("calibration range cache {} is unusable ({}); recomputing".format(path, exc))
        _remove(path)
        return None


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


# ------------------------------------------------------------------ calibrate

def calibrate(onnx_path, imageset, method=DEFAULT_METHOD, batch_size=DEFAULT_CALIB_BATCH,
              percentile=DEFAULT_PERCENTILE, use_cache=True, cache_root=None):
    """Calibrate the FP32 ONNX at ``onnx_path`` on ``imageset``: a trtkit.data.ImageSet (in memory) or a
    ``Selection`` (streamed: decoded batch by batch, so the calibration set need not fit in memory; its
    identity, which covers the files and the preprocessing, keys the cache instead of a pixel digest).

    Returns a CalibrationResult; ``result.ranges`` has amax/min/max of every
    float activation, ``result.report`` is the JSON-ready report.
    """
    from trtkit.onnx.load import load_onnx
    check_method(method)
    start = time.time()
    model = load_onnx(onnx_path, check=False)
    from trtkit.data import ImageSet
    streamed = not isinstance(imageset, ImageSet)
    if streamed:
        count = len(imageset)
        shape = (count,) + tuple(imageset.contract.shape)
        fixed = check_image_shape(model, shape[1:])
        batch_size = fixed or int(batch_size)
        if count < batch_size:
            raise InputError("only {} calibration image(s), fewer than one batch of {}".format(count, batch_size),
                             hint="give more images (--calib-images, a bigger --calib-data){}".format(
                                 "" if fixed else " or a smaller --calib-batch-size"))
        images, digest = None, None
    else:
        images = imageset.images
        batch_size = check_images(model, images, int(batch_size))
        if _input_spec(model)[1][:1] == [batch_size] and images.shape[0] % batch_size:
            images = images[:images.shape[0] - images.shape[0] % batch_size]  # a fixed-batch ONNX: full batches
            log.info("calibration: the model's batch is fixed at {}; using {} images".format(batch_size, len(images)))
        count, shape = images.shape[0], images.shape
        digest = data_digest(images)
    names = activation_tensors(model)
    model_hash = graph_hash(model)
    stats_key = _key(STATS_FORMAT, NUM_BINS, model_hash, imageset.identity, digest, shape)
    root = cache_root or cache_dir("calib")
    stats_file = _stats_path(root, stats_key)
    ranges_file = _ranges_path(root, stats_key, method, percentile)

    stats_state, ranges_state = "computed", "computed"
    stats_seconds = ranges_seconds = 0.0
    ranges = _load_ranges(ranges_file, names) if use_cache else None
    if ranges is not None:
        stats_state = ranges_state = "reused"
    else:
        histograms = _load_stats(stats_file, names) if use_cache else None
        if histograms is not None:
            stats_state = "reused"
        else:
            t0 = time.time()
            fixed = _input_spec(model)[1][:1]
            fixed = fixed[0] if fixed else None
            if streamed:
                images = (b for b, _ in imageset.batches(batch_size, progress=False))
            folder = tempfile.mkdtemp(prefix="trtkit-calib-")
            try:
                instrumented = instrumented_file(model, names, folder)
                del model  # loaded here: gone before the session reads the weights (see stats.instrumented_file)
                histograms = collect_stats(instrumented, images, batch_size, fixed_batch=fixed,
                                           total=count if streamed else None, names=names)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            stats_seconds = time.time() - t0
            if use_cache:
                _save_stats(stats_file, histograms, {"model": model_hash, "data": imageset.identity})
        t0 = time.time()
        computed = compute_ranges(histograms, method, percentile)
        ranges_seconds = time.time() - t0
        ranges = dict((n, {"amax": float(computed[n][0]), "min": float(histograms[n].minimum),
                           "max": float(histograms[n].maximum), "rule": computed[n][1]}) for n in names)
        if use_cache:
            write_json(ranges_file, {"method": method, "percentile": percentile, "ranges": ranges})
    total = time.time() - start
    report = {
        "method": method,
        "percentile": percentile if method == "percentile" else None,
        "images": int(count),
        "batch_size": batch_size,
        "data": {"source": imageset.source, "identity": imageset.identity, "digest": digest},
        "model": {"onnx": os.path.basename(onnx_path), "graph_sha256": model_hash},
        "cache": {"reused": ranges_state == "reused", "statistics": stats_state, "ranges": ranges_state,
                  "key": stats_key, "dir": root if use_cache else None},
        "seconds": {"total": round(total, 3), "statistics": round(stats_seconds, 3),
                    "ranges": round(ranges_seconds, 3)},
        "tensors": dict((n, dict(r, scale=r["amax"] / 127.0)) for n, r in ranges.items()),
        "rules": rule_counts(ranges),
    }
    log.info("calibration ({}, {} images{}): statistics {}, ranges {} in {:.1f}s".format(
        method, count, ", streamed" if streamed else "", stats_state, ranges_state, total))
    return CalibrationResult(ranges, report)


def rule_counts(ranges):
    """{rule: number of tensors} of a calibration's ranges: which rule gave how many amax values (``entropy``
    and ``mse`` where the guard replaced a degenerate KL cut, ...)."""
    counts = {}
    for r in ranges.values():
        counts[r.get("rule", "?")] = counts.get(r.get("rule", "?"), 0) + 1
    return dict(sorted(counts.items()))


def load_calibration_images(source, contract, count=DEFAULT_CALIB_IMAGES, seed=0):
    """The calibration images: ``count`` drawn (seeded) from the *train* split of ``source``.

    The one loader of calibration images: the Q/DQ writers and TensorRT's
    implicit-INT8 calibrator both get the ImageSet it returns.
    """
    return calibration_selection(source, contract, count, seed).load(progress=False)


def calibration_selection(source, contract, count=DEFAULT_CALIB_IMAGES, seed=0):
    """The calibration images as a stream: ``count`` chosen (seeded) from the *train* split, decoded only
    while the statistics pass runs (``load_calibration_images`` holds the same images in memory)."""
    from trtkit.data import select
    if count is not None and count < 1:
        raise InputError("--calib-images must be at least 1, got {}".format(count))
    return select(source, contract, split="train", limit=count, seed=seed)


def save_qdq(fp32_onnx, ranges, encoding, dst, target=None, float_depthwise=False):
    """Write the ``encoding`` Q/DQ ONNX of ``fp32_onnx`` (a path, or a ModelProto: e.g. a bias-corrected graph,
    ``precision.biascorr``) with ``ranges`` to ``dst`` (atomically); ``target``: the CPU the ``cpu`` encoding is
    for (``trtkit.cpuinfo``); ``float_depthwise``: see ``qdq.write_qdq``."""
    from trtkit.onnx.write import save
    if isinstance(fp32_onnx, str):  # loaded and dropped inside: see precision.qdq_file
        from trtkit.precision.qdq_file import write_qdq_file
        model = write_qdq_file(fp32_onnx, ranges, encoding, target=target, float_depthwise=float_depthwise)
    else:
        from trtkit.precision.qdq import write_qdq
        model = write_qdq(fp32_onnx, ranges, encoding, target=target, float_depthwise=float_depthwise)
    with atomic_path(dst) as tmp:
        save(model, tmp)
    return dst


# ------------------------------------------------------------------ build step

class Int8Calibration(object):
    """What a build's INT8 step hands to the backend: the calibration (``result``: ranges and report),
    the images it used (``images``: a streamed Selection or an ImageSet) and the TensorRT calibration
    cache it wrote (``trt_cache``, a path)."""

    def __init__(self, result, images, trt_cache):
        self.result = result
        self.images = images
        self.trt_cache = trt_cache

    @property
    def method(self):
        return self.result.method

    def image_array(self):
        """The calibration images as one float32 NCHW array (TensorRT's implicit path and torch2trt take
        them so; ``--calib-images`` bounds their size)."""
        from trtkit.data import ImageSet
        loaded = self.images if isinstance(self.images, ImageSet) else self.images.load(progress=False)
        return loaded.images
