"""What AdaRound needs of a layer's inputs: their second moments, from rows sampled on the calibration images.

AdaRound's loss for one layer is ``||W x - W~ x||^2`` summed over the layer's output channels and averaged over
its input rows ``x`` (a conv's input patches, one per output position; a Gemm/MatMul's input rows). With
``D = W - W~`` that is ``trace(D H D^T)``, ``H = E[x x^T]`` the rows' second-moment matrix. So the optimisation
needs ``H`` only, never the rows: memory is ``K x K`` numbers per group of the layer (``K`` the weights a
output channel has: ``C_in/groups * kh * kw``), whatever the number of images or rows, and each step costs
``C_out x K^2`` instead of ``rows x K x C_out``. A depthwise conv has ``C`` groups of ``K = kh * kw``.

The rows are the FP32 graph's own tensors (the layer's input as the FP32 model computes it, fetched from ONNX
Runtime), sampled at ``ROWS`` random output positions per layer over the images, in batches; every
``CHECK_EVERY``-th batch (every ``CHECK_EVERY``-th image when there are fewer batches: a fixed-batch model) goes
to a second, held-out matrix (``check``) on which the learned rounding must beat nearest rounding before it is
kept. Layers are fetched in groups whose matrices fit ``MATRIX_BYTES`` (one pass of the images per group); every
layer's matrices are kept until the layers are learned, so memory is their sum, whatever the number of images;
a layer whose own matrices pass ``MATRIX_BYTES`` (K = 4608 for a 3x3 conv of 512 channels: 324 MiB) keeps
nearest rounding (``adaround._layers`` says which).
"""

import numpy as np

from trtkit.deps import require

ROWS = 4096              # sampled input rows per layer (fit and check together)
CHECK_EVERY = 4          # every fourth batch of images is held out for the check
BATCH = 4
MATRIX_BYTES = 256 << 20  # the second-moment matrices of one group of layers


class LayerInputs(object):
    """One layer's input moments: ``fit`` and ``check`` (groups x K x K, float64, each the mean of ``x x^T``
    over its rows), ``rows`` (fit, check) counts. ``spec`` says how rows are cut from the input tensor."""

    def __init__(self, spec, groups, k):
        self.spec = spec
        self.fit = np.zeros((groups, k, k), np.float64)
        self.check = np.zeros((groups, k, k), np.float64)
        self.rows = [0, 0]

    def add(self, rows, held_out):
        """Add ``rows`` (groups x R x K) to the fit or the check matrix."""
        rows = rows.astype(np.float32)
        gram = np.matmul(rows.transpose(0, 2, 1), rows).astype(np.float64)
        if held_out:
            self.check += gram
            self.rows[1] += rows.shape[1]
        else:
            self.fit += gram
            self.rows[0] += rows.shape[1]

    def finish(self):
        self.fit /= max(self.rows[0], 1)
        self.check /= max(self.rows[1], 1)
        if not self.rows[1]:  # too few images for a held-out batch: the check is on the fitted rows
            self.check = self.fit


class ConvSpec(object):
    """How a Conv's input patches are cut: kernel, strides, dilations, pads (top, left, bottom, right),
    ``auto_pad``, groups."""

    def __init__(self, node, weight_shape, attr):
        self.kernel = tuple(weight_shape[2:])
        self.groups = int(attr(node, "group", 1))
        self.strides = tuple(_ints(node, "strides") or (1, 1))
        self.dilations = tuple(_ints(node, "dilations") or (1, 1))
        self.pads = tuple(_ints(node, "pads") or (0, 0, 0, 0))
        auto = [a.s for a in node.attribute if a.name == "auto_pad"]
        self.auto_pad = auto[0].decode() if auto else "NOTSET"
        self.k = int(np.prod(weight_shape[1:]))

    def padding(self, height, width):
        """(top, left, bottom, right) for an input of ``height`` x ``width``."""
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pads = []
            for size, k, s, d in zip((height, width), self.kernel, self.strides, self.dilations):
                out = -(-size // s)
                total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
                small = total // 2
                pads.append((small, total - small) if self.auto_pad == "SAME_UPPER" else (total - small, small))
            return pads[0][0], pads[1][0], pads[0][1], pads[1][1]
        if self.auto_pad == "VALID":
            return 0, 0, 0, 0
        return self.pads

    def rows(self, x, count, rng):
        """``count`` patches of ``x`` (N, C, H, W) at random output positions: groups x count x K."""
        top, left, bottom, right = self.padding(x.shape[2], x.shape[3])
        padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.strides, self.dilations
        out_h = (padded.shape[2] - dh * (kh - 1) - 1) // sh + 1
        out_w = (padded.shape[3] - dw * (kw - 1) - 1) // sw + 1
        n = rng.randint(0, x.shape[0], count)
        oh, ow = rng.randint(0, out_h, count) * sh, rng.randint(0, out_w, count) * sw
        rows_h = oh[:, None, None, None] + (np.arange(kh) * dh)[None, None, :, None]
        rows_w = ow[:, None, None, None] + (np.arange(kw) * dw)[None, None, None, :]
        channels = np.arange(x.shape[1])[None, :, None, None]
        patches = padded[n[:, None, None, None], channels, rows_h, rows_w]  # count x C x kh x kw
        return patches.reshape(count, self.groups, -1).transpose(1, 0, 2)


class RowSpec(object):
    """A Gemm/MatMul's input rows: the last axis, every leading position a row."""

    groups = 1

    def __init__(self, k):
        self.k = int(k)

    def rows(self, x, count, rng):
        flat = x.reshape(-1, x.shape[-1])
        return flat[rng.randint(0, flat.shape[0], count)][None]


def collect(model, specs, images, seed=0, rows=ROWS, batch=BATCH):
    """{layer name: LayerInputs} for ``specs`` ({layer name: (input tensor, ConvSpec or RowSpec)}) of
    ``model`` (the FP32 ModelProto, its inputs and the layers' as named there), over ``images`` (NCHW float32),
    in groups that fit ``MATRIX_BYTES`` (a pass is short beside the optimisation: no progress bar of its own)."""
    rng = np.random.RandomState(seed)
    found = {}
    group, size = [], 0
    for name in specs:
        spec = specs[name][1]
        need = matrix_bytes(spec)
        if group and size + need > MATRIX_BYTES:
            found.update(_one_pass(model, dict((n, specs[n]) for n in group), images, rng, rows, batch))
            group, size = [], 0
        group.append(name)
        size += need
    if group:
        found.update(_one_pass(model, dict((n, specs[n]) for n in group), images, rng, rows, batch))
    return found


def _one_pass(model, specs, images, rng, rows, batch):
    onnx = require("onnx", "AdaRound")
    ort = require("onnxruntime", "AdaRound")
    from trtkit.onnx.load import keep_outputs
    tensors = sorted(set(t for t, _ in specs.values()))
    cut = onnx.ModelProto.FromString(model.SerializeToString())
    keep_outputs(cut, tensors)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(cut.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    stats = dict((name, LayerInputs(spec, spec.groups, spec.k)) for name, (_, spec) in specs.items())
    for chunk, count, parts in feed_batches(images, feed, batch, rows):
        values = dict(zip(tensors, session.run(tensors, {feed.name: chunk})))
        for name, (tensor, spec) in specs.items():
            x = np.asarray(values[tensor], np.float32)[:count]
            for part, held, share in parts:
                stats[name].add(spec.rows(x[part], share, rng), held)
    for entry in stats.values():
        entry.finish()
    return stats


def feed_batches(images, feed, batch, rows):
    """(batch to feed, images of it that are real, [(image slice, held out, rows to draw)]) for each batch of
    ``images`` a session input ``feed`` takes: ``batch`` images, or the input's fixed batch (the last one padded
    by repeating images, which are then cut off); ``rows`` rows in all, spread over the batches
    (``held_out_split`` says which images check the fit)."""
    fixed = feed.shape[0] if feed.shape and isinstance(feed.shape[0], int) and feed.shape[0] > 0 else None
    step = fixed or batch
    starts = list(range(0, len(images), step))
    per_batch = max(1, -(-rows // len(starts)))
    for index, start in enumerate(starts):
        chunk = images[start:start + step]
        count = len(chunk)
        if fixed and count < fixed:
            chunk = np.resize(chunk, (fixed,) + chunk.shape[1:])
        parts = [(part, held, max(1, -(-per_batch * len(np.arange(count)[part]) // count)))
                 for part, held in held_out_split(index, start, count, len(starts))]
        yield np.ascontiguousarray(chunk, np.float32), count, parts


def matrix_bytes(spec):
    """Bytes of one layer's fit and check matrices (float64, groups x K x K each)."""
    return 2 * spec.groups * spec.k * spec.k * 8


def held_out_split(index, start, count, batches):
    """[(image slice, held out)] of a batch of ``count`` images from image ``start``, batch ``index`` of
    ``batches``: the whole batch, held out when it is every ``CHECK_EVERY``-th; with fewer batches than that (a
    fixed-batch model, a few images) its images are split one by one instead, so the check stays on images the
    rounding was not fitted to (with batches only, it had none and checked on the fitted rows)."""
    if batches >= CHECK_EVERY:
        return [(slice(0, count), index % CHECK_EVERY == CHECK_EVERY - 1)]
    held = (np.arange(start, start + count) % CHECK_EVERY) == CHECK_EVERY - 1
    return [(np.flatnonzero(held == flag), flag) for flag in (False, True) if (held == flag).any()]


def _ints(node, name):
    for a in node.attribute:
        if a.name == name:
            return list(a.ints)
    return None
