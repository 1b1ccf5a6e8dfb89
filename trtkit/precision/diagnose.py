"""Which quantized tensors hurt INT8, and why: a per-tensor diagnosis of one calibration.

A plain INT8 variant that loses points says nothing about where they went: on
MobileNet-family models a few groups of activations (hard-swish outputs most)
lose 2-9 agreement points each while the weights alone in INT8 keep almost
everything. The diagnosis lists, for every tensor the Q/DQ writer quantizes:

* ``sqnr_db``: signal-to-quantization-noise ratio of the tensor quantized
  exactly as the writer would (the calibrated range, the encoding's scale and
  zero point, QuantizeLinear's rounding and saturation) against its FP32
  values, 10 log10(sum x^2 / sum (x - q(x))^2), on ``SQNR_IMAGES`` tune images
  streamed through the FP32 graph (no runtime for INT8 needed, no tensor kept
  past its batch). Each bit of resolution is about 6 dB: a well-ranged tensor
  is over 30 dB, one under 20 dB loses decisions;
* ``clipped``: the share of its values outside the range (the range rule cut
  them, or the tune images go further than the calibration images did);
* ``rule``: the rule that chose the range (``entropy``, ``mse`` where the KL cut
  was degenerate, ``percentile``, ``minmax``; weights: ``per-channel max``);
* ``spread`` (weights): max over min of the per-channel amax, how unequal the
  output channels are (a per-tensor scale would waste that many steps);
* ``drop``: agreement points lost against FP32, by the model's own decision
  rule (top-1, pixels, detection F1: ``search.tune``), when *only this
  tensor* is quantized (``qdq.write_qdq_of``: every other tensor float). One
  ONNX Runtime pass of the tune images per tensor, so only the ``scored``
  activations and the ``scored`` weights with the lowest SQNR are scored; the
  others say ``None``.

Rows are sorted worst first: by drop, then by SQNR. The summary adds what the
whole INT8 graph, its activations alone and its weights alone lose, so the
rows can be read against the total (the parts need not add up: errors
compound, or cancel).
"""

import math
import time

import numpy as np

from trtkit.errors import InputError
from trtkit.keywords import Field, Options

DEFAULT_SCORED = 16   # of each kind, one tune-split pass each: 32 passes of 64 images, under a minute for a MobileNet
DEFAULT_IMAGES = 64   # tune images for the agreement figures (one image: 1.6 points)
SQNR_IMAGES = 16      # of those, streamed through the FP32 graph for SQNR and clipping
PRINTED_ROWS = 20
LEGEND = ("drop: agreement points lost when only this tensor is INT8 (-: not scored); SQNR: dB of FP32 over INT8 "
          "error, higher is better (6 dB a bit; under 20 hurts); clipped: share of values outside the range; "
          "spread: max/min channel amax of a weight; rule: how the range was chosen")


class DiagnosisOptions(Options):
    """Whether and how a calibration is diagnosed: ``enabled`` (``--report``), ``scored`` (activations, and as
    many layers' weights, whose agreement cost is measured: the lowest SQNR first; 0: SQNR and clipping only),
    ``images`` (tune images for the agreement figures; SQNR uses the first ``SQNR_IMAGES`` of them)."""

    def __init__(self, enabled=False, scored=DEFAULT_SCORED, images=DEFAULT_IMAGES):
        self.enabled = bool(enabled)
        self.scored = int(scored)
        self.images = int(images)
        if self.scored < 0:
            raise InputError("--report-layers must be 0 or more, got {}".format(scored))
        if self.images < 1:
            raise InputError("--report-images must be at least 1, got {}".format(images))

    GROUP = ("diagnosis (--report)", "which quantized tensors cost INT8 its agreement with FP32, and why")
    FIELDS = (
        Field("report", "enabled", action="store_true",
              help="diagnose the calibration: per quantized tensor (activations, and weights per layer) its SQNR "
                   "against FP32, the share of values its range clips, the range rule, a weight's channel "
                   "spread, and the agreement points lost when only that tensor is INT8 (ONNX Runtime, "
                   "the model's own decision rule); prints the worst {} and writes OUT/NAME.diagnosis.json "
                   "(every tensor; a build: NAME.int8-METHOD.diagnosis.json, and a summary in each INT8 "
                   "variant's manifest record)".format(PRINTED_ROWS)),
        Field("report_layers", "scored", type=int, metavar="N",
              help="--report: activations, and layers' weights, scored by agreement: the N of each with the "
                   "lowest SQNR (one pass of the tune images each; default: {}; 0: SQNR and clipping "
                   "only)".format(DEFAULT_SCORED)),
        Field("report_images", "images", type=int, metavar="N",
              help="--report: tune images (train split, seed 1) for the agreement figures; SQNR uses the first "
                   "{} (default: {})".format(SQNR_IMAGES, DEFAULT_IMAGES)),
    )

    def to_dict(self):
        return {"scored": self.scored, "images": self.images}


# ------------------------------------------------------------------ quantization error

def fake_quantize(values, entry, encoding="tensorrt"):
    """(dequantized values, count of values outside the range): ``values`` as the ``encoding`` Q/DQ graph
    quantizes them with the calibrated ``entry`` ({"amax", "min", "max"}): QuantizeLinear's round half to
    even and saturation, the writer's own scale and zero point (``qdq``)."""
    from trtkit.precision.qdq import asymmetric_params, cpu_range, symmetric_scale
    values = np.asarray(values, dtype=np.float32)
    if encoding == "cpu":
        low, high = cpu_range(entry)
        scale, zero = asymmetric_params(low, high)
        levels = np.clip(np.round(values / np.float32(scale)) + zero, 0, 255)
        outside = (values < min(low, 0.0)) | (values > max(high, 0.0))
        return (levels - zero) * np.float32(scale), int(np.count_nonzero(outside))
    scale = np.float32(symmetric_scale(entry["amax"]))
    levels = np.clip(np.round(values / scale), -128, 127)
    return levels * scale, int(np.count_nonzero(np.abs(values) > entry["amax"]))


def sqnr_db(signal, noise):
    """10 log10(signal / noise) in dB; None where there is no error to speak of (an all-zero tensor, or
    values that sit on the INT8 grid)."""
    if noise <= 0.0 or signal <= 0.0:
        return None
    return round(10.0 * math.log10(signal / noise), 2)


class _Error(object):
    """Running sums of one tensor's quantization error over streamed batches."""

    def __init__(self):
        self.signal = self.noise = 0.0
        self.clipped = self.count = 0

    def add(self, values, entry, encoding):
        dequantized, outside = fake_quantize(values, entry, encoding)
        values = np.asarray(values, dtype=np.float64)
        self.signal += float(np.sum(values * values))
        self.noise += float(np.sum((values - dequantized) ** 2))
        self.clipped += outside
        self.count += values.size

    def figures(self):
        return {"sqnr_db": sqnr_db(self.signal, self.noise),
                "clipped": round(self.clipped / float(self.count), 6) if self.count else None}


def activation_errors(model, activations, ranges, images, encoding="tensorrt"):
    """{(tensor, range tensor): {"sqnr_db", "clipped"}} of ``activations`` ([(tensor, range tensor, ...)],
    ``qdq.quantization_plan``) in ``model`` over ``images`` (NCHW), streamed: each sub-batch's tensors are
    measured and dropped (``stats.activation_stream``)."""
    from trtkit.precision.stats import _instrumented_session, activation_stream
    names = list(dict.fromkeys(a[0] for a in activations))
    session = _instrumented_session(model, names)
    shape = session.get_inputs()[0].shape
    fixed = shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else None
    if fixed and len(images) % fixed:  # a fixed-batch graph runs whole batches: repeat images to fill the last
        images = np.resize(images, ((len(images) // fixed + 1) * fixed,) + images.shape[1:])
    errors = dict(((a[0], a[1]), _Error()) for a in activations)
    by_name = {}
    for tensor, source in errors:
        by_name.setdefault(tensor, []).append(source)
    for _, values in activation_stream(session, names, [images], fixed):
        for index, name in enumerate(names):
            for source in by_name[name]:
                errors[(name, source)].add(values[index], ranges[source], encoding)
            values[index] = None
    return dict((key, error.figures()) for key, error in errors.items())


def weight_errors(weights):
    """[{"layer", "op", "sqnr_db", "spread", "channels"}] of each layer's weights quantized as the writer does
    (symmetric per output channel, ``qdq.quantize_weight``)."""
    from trtkit.precision.qdq import quantize_weight
    rows = []
    for layer, op, weight, axis in weights:
        weight = weight.astype(np.float32)
        levels, scales = quantize_weight(weight, axis)
        shape = [1] * weight.ndim
        shape[axis] = -1
        error = _Error()
        error.signal = float(np.sum(weight.astype(np.float64) ** 2))
        error.noise = float(np.sum((weight - levels * scales.reshape(shape)).astype(np.float64) ** 2))
        amax = np.abs(np.moveaxis(weight, axis, 0).reshape(weight.shape[axis], -1)).max(axis=1)
        used = amax[amax > 0]
        rows.append({"layer": layer, "op": op, "sqnr_db": sqnr_db(error.signal, error.noise),
                     "spread": round(float(used.max() / used.min()), 2) if used.size else None,
                     "channels": int(amax.size), "zero_channels": int(amax.size - used.size)})
    return rows


# ------------------------------------------------------------------ diagnosis

def diagnose(fp32_model, ranges, tune, encoding="tensorrt", scored=DEFAULT_SCORED, sqnr_images=SQNR_IMAGES,
             target=None):
    """The diagnosis (a JSON-ready dict, ``rows`` worst first) of the calibration ``ranges`` ({tensor:
    {"amax", "min", "max", "rule"}}) of ``fp32_model`` (a ModelProto), with the tune set ``tune``
    (``search.tune.TuneSet``, whose decision rule scores agreement; its metric is set to agreement: the
    decisions kept, not the labels'); see the module doc. A weight row's ``tensor`` is its layer's name.
    ``target``: the CPU the ``cpu`` encoding is for (``trtkit.cpuinfo``): its weight type, as the build's
    variant has it (int8 weights run on a CPU without VNNI saturate where uint8 ones do not: a diagnosis
    without it would blame INT8 for what only the wrong weight type loses)."""
    from trtkit import log
    from trtkit.precision.qdq import by_ort_quantizer, quantization_plan, write_qdq, write_qdq_of
    from trtkit.search.tune import evaluate, score
    start = time.time()
    model, activations, weights = quantization_plan(fp32_model, encoding)
    if not activations:
        raise InputError("nothing to diagnose: the model has no layer trtkit quantizes (Conv, Gemm or MatMul with "
                         "constant weights, outside the output head)")
    missing = sorted(set(a[1] for a in activations) - set(ranges))
    if missing:
        raise InputError("the calibration has no range for {} quantized tensor(s) (e.g. {})".format(
            len(missing), missing[0]), hint="calibrate this exact ONNX file again")
    producers = dict((out, node.op_type) for node in model.graph.node for out in node.output)
    sqnr_set = tune.images[:max(1, int(sqnr_images))]
    errors = activation_errors(model, activations, ranges, sqnr_set, encoding)
    rows = []
    for tensor, source, consumers in activations:
        entry = ranges[source]
        rows.append(dict({"tensor": tensor, "kind": "activation", "made_by": producers.get(tensor, "input"),
                          "read_by": sorted(set(consumers)), "range_of": source if source != tensor else None,
                          "rule": entry.get("rule", "?"), "amax": round(float(entry["amax"]), 6), "spread": None,
                          "drop": None, "agreement": None}, **errors[(tensor, source)]))
    for found in weight_errors(weights):
        rows.append({"tensor": found["layer"], "kind": "weight", "made_by": found["op"], "read_by": [],
                     "range_of": None, "rule": "per-channel max", "amax": None, "clipped": 0.0, "drop": None,
                     "agreement": None, "sqnr_db": found["sqnr_db"], "spread": found["spread"]})
    reference = score(tune.reference, tune)
    tune.use_metric("agreement")

    def cost(tensors=(), layers=()):
        return evaluate(write_qdq_of(fp32_model, ranges, encoding, tensors, layers, target), tune, reference)

    everything = [a[0] for a in activations], [w[0] for w in weights]
    whole = write_qdq(fp32_model, ranges, encoding, target=target)
    summary = {"int8": evaluate(whole, tune, reference)["drop"],
               "activations_only": cost(everything[0])["drop"], "weights_only": cost((), everything[1])["drop"]}
    if by_ort_quantizer(whole):
        # the variant's graph is ONNX Runtime's placement; the rows can only be trtkit's own (one tensor at a
        # time): say what that placement loses whole, so the rows are read against their own total
        summary["int8_rows_placement"] = cost(everything[0], everything[1])["drop"]
    count = max(0, int(scored))
    worst = [r for kind in ("activation", "weight")
             for r in sorted((r for r in rows if r["kind"] == kind), key=_by_sqnr)[:count]]
    measured = {}
    with log.Progress("diagnosis: one tensor at a time", total=len(worst), unit="tensor") as bar:
        for row in worst:
            key = (row["kind"], row["tensor"])
            if key not in measured:
                measured[key] = cost([row["tensor"]]) if row["kind"] == "activation" else cost((), [row["tensor"]])
            row["drop"] = measured[key]["drop"]
            row["agreement"] = round(measured[key]["agreement"], 6)
            bar.update(1)
    rows.sort(key=lambda r: (-(r["drop"] if r["drop"] is not None else -1.0),) + _by_sqnr(r))
    return {"encoding": encoding, "target": target, "metric": "agreement", "images": {"sqnr": int(len(sqnr_set)),
                                                                     "agreement": int(len(tune.images))},
            "activations": len(activations), "weights": len(weights), "scored": len(worst),
            "drop": summary, "seconds": round(time.time() - start, 1), "legend": LEGEND, "rows": rows}


def _by_sqnr(row):
    """Lowest SQNR first; a tensor without error (None) last."""
    return (row["sqnr_db"] if row["sqnr_db"] is not None else float("inf"),)


def diagnose_calibration(maker, ranges, options, model_info=None):
    """The diagnosis of ``ranges`` of ``maker``'s FP32 graph (a ``pipeline.variants.VariantMaker``: its data,
    contract and encoding; ``tensorrt`` when it writes none) on ``options.images`` tune images drawn from the
    train split (seed 1: not the calibration images); ``model_info``: the model record (task, output kind)."""
    from trtkit.search.tune import load_tune_set
    info = model_info or {}
    tune = load_tune_set(maker.data, maker.contract, options.images, maker.fp32_onnx, kind=info.get("output_kind"),
                         task=info.get("task"), model_info=info)
    return diagnose(maker.fp32_model(), ranges, tune, maker.encoding or "tensorrt", options.scored,
                    target=maker.target)


def format_table(diagnosis, rows=PRINTED_ROWS):
    """The diagnosis as text: a summary line, the legend, then the ``rows`` worst tensors."""
    drop = diagnosis["drop"]
    what = "int8 loses {:.2f}".format(drop["int8"])
    if drop.get("int8_rows_placement") is not None:
        what = ("int8 as built (ONNX Runtime's quantizer) loses {:.2f}; the rows are trtkit's own cpu placement, "
                "whose int8 loses {:.2f}".format(drop["int8"], drop["int8_rows_placement"]))
    lines = ["INT8 diagnosis ({} encoding{}): {} agreement points on {} tune images, its activations alone {:.2f}, "
             "its weights alone {:.2f}; {} activations and {} layers' weights ({} scored by agreement: the lowest "
             "SQNR of each); SQNR on {} images; {:.0f}s".format(
                 diagnosis["encoding"], ", for {}".format(diagnosis["target"]) if diagnosis.get("target") else "",
                 what, diagnosis["images"]["agreement"], drop["activations_only"], drop["weights_only"],
                 diagnosis["activations"], diagnosis["weights"], diagnosis["scored"], diagnosis["images"]["sqnr"],
                 diagnosis["seconds"]),
             LEGEND,
             "{:>6} {:>7} {:>8} {:>6}  {:<15} {:>9}  {}".format("drop", "SQNR", "clipped", "spread", "rule", "amax",
                                                                "tensor (made by -> read by)")]
    for row in diagnosis["rows"][:rows]:
        what = "{} ({} -> {})".format(row["tensor"], row["made_by"], ",".join(row["read_by"])) \
            if row["kind"] == "activation" else "{} weights ({})".format(row["tensor"], row["made_by"])
        lines.append("{:>6} {:>7} {:>8} {:>6}  {:<15} {:>9}  {}".format(
            _fixed(row["drop"], 2), _fixed(row["sqnr_db"], 1, "inf"),
            "-" if row["clipped"] is None else "{:.3%}".format(row["clipped"]), _fixed(row["spread"], 1),
            row["rule"], "-" if row["amax"] is None else "{:.4g}".format(row["amax"]), what))
    hidden = len(diagnosis["rows"]) - rows
    if hidden > 0:
        lines.append("... {} more in the JSON".format(hidden))
    return "\n".join(lines)


def _fixed(value, digits, none="-"):
    return none if value is None else "{:.{}f}".format(value, digits)
