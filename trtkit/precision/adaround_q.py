"""What the quantized-input AdaRound (``--int8-rounding adaround-q``) needs of one layer's inputs: the moments
of its FP32 input ``x`` and of the input ``x~`` it really sees in the INT8 graph.

The loss is AIMET's "asymmetric" reconstruction ``||W x - W~ x~||^2``: ``x`` the layer's input in the FP32 graph,
``x~`` the same position's input when every earlier layer runs in INT8 (activations quantized with the
calibrated ranges, earlier layers' weights on their already learned integers). Expanded, it needs three
second moments per group of the layer (``K x K`` each): ``E[x x^T]``, ``E[x x~^T]`` and ``E[x~ x~^T]``
(``Moments``), so memory is one layer's matrices whatever the number of images or rows; a step costs what the
FP32-input one does.

``x~`` is the Q/DQ graph's own tensor: the graph is written by the caller's writer (``write``: trtkit's
placement, the build's ranges and encoding) from the FP32 graph as rounded so far, cut (``keep_outputs``) to the
layer's input as the layer reads it (the DequantizeLinear output, or the float tensor where the writer left it
float), and run by ONNX Runtime beside the FP32 graph cut to the same tensor; both are sampled at the same
images and positions. One such pair of passes per layer, in graph order: layer ``n``'s inputs depend on the
integers learned for the layers before it.
"""

import numpy as np

from trtkit.deps import require
from trtkit.precision.adaround_inputs import BATCH, ROWS, feed_batches


class Moments(object):
    """One layer's moments over its rows, fit and check: ``ff`` = E[x x^T], ``fq`` = E[x x~^T], ``qq`` =
    E[x~ x~^T] (groups x K x K, float64), ``rows`` (fit, check) counts."""

    def __init__(self, groups, k):
        shape = (groups, k, k)
        self.fit = [np.zeros(shape, np.float64) for _ in range(3)]
        self.check = [np.zeros(shape, np.float64) for _ in range(3)]
        self.rows = [0, 0]

    def add(self, fp, q, held_out):
        """Add paired rows ``fp`` and ``q`` (groups x R x K)."""
        fp, q = fp.astype(np.float32), q.astype(np.float32)
        target = self.check if held_out else self.fit
        for index, (a, b) in enumerate(((fp, fp), (fp, q), (q, q))):
            target[index] += np.matmul(a.transpose(0, 2, 1), b).astype(np.float64)
        self.rows[1 if held_out else 0] += fp.shape[1]

    def finish(self):
        for matrices, count in ((self.fit, self.rows[0]), (self.check, self.rows[1])):
            for m in matrices:
                m /= max(count, 1)
        if not self.rows[1]:  # too few images for a held-out batch: the check is on the fitted rows
            self.check = self.fit
        self.fit, self.check = tuple(self.fit), tuple(self.check)


def layer_moments(fp32, rounded, layer, tensor, spec, write, images, seed=0, rows=ROWS, batch=BATCH):
    """``Moments`` of ``layer`` (its node name; ``tensor`` its input in ``fp32``) whose rows ``spec`` cuts:
    ``fp32`` the FP32 ModelProto (trained weights), ``rounded`` the same graph with the earlier layers' learned
    weights, ``write(model)`` its Q/DQ ModelProto, over ``images`` (NCHW float32)."""
    onnx = require("onnx", "AdaRound")
    from trtkit.onnx.load import keep_outputs
    written = write(rounded)
    nodes = [n for n in written.graph.node if n.name == layer]
    if not nodes:
        raise ValueError("the Q/DQ graph has no layer named {!r}".format(layer))
    quantized = nodes[0].input[0]
    keep_outputs(written, [quantized])
    cut = onnx.ModelProto.FromString(fp32.SerializeToString())
    keep_outputs(cut, [tensor])
    sessions = [_session(m) for m in (cut, written)]
    feed = sessions[0].get_inputs()[0]
    rng = np.random.RandomState(seed)
    moments = Moments(spec.groups, spec.k)
    for chunk, count, parts in feed_batches(images, feed, batch, rows):
        fp, q = (np.asarray(s.run(None, {feed.name: chunk})[0], np.float32)[:count] for s in sessions)
        for part, held, share in parts:
            state = rng.get_state()  # the same images and positions in both tensors
            fp_rows = spec.rows(fp[part], share, rng)
            rng.set_state(state)
            moments.add(fp_rows, spec.rows(q[part], share, rng), held)
    moments.finish()
    return moments


def _session(model):
    ort = require("onnxruntime", "AdaRound")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
