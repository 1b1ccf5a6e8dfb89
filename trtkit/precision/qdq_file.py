"""The Q/DQ graph of an FP32 ONNX file, its FP32 model gone before ONNX Runtime's quantizer loads the weights.

Why a function of its own: with upb protobuf (current onnx wheels) a model's
memory is given back only when every reference to the model is dropped;
clearing its initializers frees nothing. ``qdq.write_qdq`` takes a model its
caller holds, so while ONNX Runtime's quantizer ran (``cpu`` encoding) the FP32
weights were in memory twice: the caller's model and the quantizer's. Here the
model is loaded, prepared and written to the quantizer's folder inside one call
that returns only the job (``qdq_ort.OrtQuantizerJob``), so it is freed before
the quantizer runs (VGG19: the Q/DQ step's peak 2.0 -> 1.5 GB). The ``tensorrt``
encoding, and ONNX Runtime versions whose quantizer cannot take given ranges,
get ``write_qdq`` on the loaded model, as before; the bytes are the same.
"""

from trtkit.deps import require
from trtkit.precision.qdq import (_cpu_job, _finish_cpu, _for_target, _kept, prepared, _record_target, _write_qdq,
                                  check_encoding)


def write_qdq_file(path, ranges, encoding, target=None, float_depthwise=False):
    """``qdq.write_qdq`` of the FP32 ONNX at ``path`` (no layers kept float but ``float_depthwise``'s)."""
    check_encoding(encoding)
    started = _started(path, ranges, encoding, float_depthwise)
    written = _finish_cpu(started) if isinstance(started, tuple) else started
    written = _for_target(written, encoding, target)
    _record_target(written, encoding, target)
    return written


def _started(path, ranges, encoding, float_depthwise):
    """The quantizer's job and the logits (``qdq._cpu_job``), the model loaded here dropped with this frame; or
    the Q/DQ ModelProto written in memory where there is no job to run."""
    onnx = require("onnx", "writing the INT8 ONNX")
    model = prepared(onnx.load(path), copy=False)
    if encoding == "cpu":
        started = _cpu_job(model, ranges, _kept(model, (), float_depthwise))
        if started is not None:
            return started
    return _write_qdq(model, ranges, encoding, (), float_depthwise=float_depthwise, copy=False)
