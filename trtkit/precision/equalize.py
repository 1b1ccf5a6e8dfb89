"""Cross-layer equalization of an FP32 graph before INT8: each conv's output channels rescaled into the next conv.

An activation is quantized with one range for all its channels (per tensor), so a channel whose values stay
ten times smaller than its neighbours' keeps a tenth of the INT8 grid. Depthwise convs make this common (each
output channel is one input channel filtered on its own: their ranges spread over decades). For a chain
``conv A -> [activation] -> [zero Pad] -> conv B``, multiplying A's output channel i (its weights and bias) by
``t_i`` and dividing B's input channel i by ``t_i`` computes the same function when the activation commutes with
a positive scale: ReLU does (``relu(t x) = t relu(x)``), a zero Pad does, no activation does. The
weights are quantized per output channel, so A's rescaling costs it nothing; B's columns shrink where the
activation grows, so the scale balances the two, as SmoothQuant does (``ALPHA``): ``t_i = (A / a_i) ** ALPHA *
(w_i / W) ** (1 - ALPHA)``, ``a_i`` the activation channel's measured range (``A`` the largest), ``w_i`` B's
largest weight on that input channel (``W`` the largest), bounded to ``[1 / MAX_SCALE, MAX_SCALE]``.

ReLU6 (``Clip(0, c)``) and hard-swish are *not* scale-equivariant: ``clip(t x, 0, c) = t clip(x, 0, c / t)``
moves the clip. Hard-swish chains are left alone. ReLU6 is equalized channel by channel where the clip is not
active: a channel whose pre-activation reached ``c / MARGIN`` on the calibration images keeps ``t = 1`` (its clip
must stay where it is), and every other channel's scale is bounded so the channel's largest value times ``t``
stays ``MARGIN`` below ``c`` (the clip stays inactive after the scaling too). The result equals the FP32 graph on
the calibration images up to float rounding, and on an image whose values exceed ``MARGIN`` times what
calibration saw in such a channel it clips where the original did not (``Equalization.record`` counts these
channels). Grouped convs other than depthwise are not equalized into.

Statistics: one pass of the calibration images through ONNX Runtime, each A's output fetched, keeping per
channel its largest and smallest value (bounded memory: two numbers per channel). Why before calibration and
not on the Q/DQ graph: the ranges must be those of the equalized activations.
"""

import time

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError

RULES = ("off", "cle")
DEFAULT_RULE = "off"
ALPHA = 0.5          # migration strength between the activation's range and the next weights' (SmoothQuant's 0.5)
MAX_SCALE = 16.0     # no channel is scaled by more than this, either way
MARGIN = 1.25        # a ReLU6 channel stays this far below its clip after scaling (and is kept if within it before)
IMAGES = 96          # calibration images read: scales from two thirds, the guard's check on the rest
BATCH = 8



def check_rule(rule):
    """``rule`` when it is one of ``RULES``, else an InputError naming them."""
    if rule not in RULES:
        raise InputError("unknown --int8-equalize '{}'".format(rule), hint="use " + ", ".join(RULES))
    return rule


class Pair(object):
    """One chain ``first -> [between...] -> second``: ``first``/``second`` the conv nodes, ``tensor`` first's
    output, ``clip`` the upper bound of a Clip(0, c) in between (None: no clip), ``relu``: a Relu is between,
    ``depthwise``: second is."""

    def __init__(self, first, second, tensor, clip, relu, depthwise):
        self.first, self.second, self.tensor, self.clip = first, second, tensor, clip
        self.relu, self.depthwise = relu, depthwise


class Equalization(object):
    """The equalized ModelProto (``model``) and its ``record`` for the manifest."""

    def __init__(self, model, record):
        self.model = model
        self.record = record


def find_pairs(model):
    """The chains of ``model`` that can be equalized (see the module's doc), in graph order."""
    g = model.graph
    inits = dict((i.name, i) for i in g.initializer)
    users = {}
    for node in g.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    outputs = set(o.name for o in g.output)
    constants = _constants(model)
    weight_users = {}
    for node in g.node:
        for name in node.input[1:]:
            weight_users[name] = weight_users.get(name, 0) + 1

    def own_weights(node):
        return all(name in inits and weight_users.get(name) == 1 for name in node.input[1:] if name)

    pairs = []
    for node in g.node:
        if node.op_type != "Conv" or len(node.input) < 2 or not own_weights(node):
            continue
        tensor, clip, relu, step = node.output[0], None, False, node.output[0]
        while True:
            after = users.get(step, [])
            if step in outputs or len(after) != 1:
                after = None
                break
            nxt = after[0]
            if nxt.op_type == "Relu":
                relu, step = True, nxt.output[0]
            elif nxt.op_type == "Clip" and clip is None:
                bounds = _clip_bounds(nxt, constants)
                if bounds is None or bounds[0] != 0.0 or not bounds[1] > 0.0:
                    after = None
                    break
                clip, step = bounds[1], nxt.output[0]
            elif nxt.op_type == "Pad" and _zero_pad(nxt, constants):
                step = nxt.output[0]
            else:
                break
        if not after or after[0].op_type != "Conv" or after[0].input[0] != step or not own_weights(after[0]):
            continue
        second = after[0]
        group = _attr(second, "group", 1)
        w2 = inits[second.input[1]]
        channels = inits[node.input[1]].dims[0]
        depthwise = group > 1 and group == channels and w2.dims[0] == channels and w2.dims[1] == 1
        if group > 1 and not depthwise:
            continue
        if not depthwise and w2.dims[1] != channels:
            continue
        pairs.append(Pair(node, second, tensor, clip, relu, depthwise))
    return pairs


def equalize(model, images, rule="cle", write=None, method="entropy"):
    """An ``Equalization`` of a copy of ``model`` (rule ``cle``) measured on ``images`` (an NCHW float array);
    None for ``off``. ``write``: (FP32 ModelProto, ranges) -> its Q/DQ ModelProto, the writer the INT8 graph
    will be made by; given, the guard runs: the scales and ``method``'s ranges come from the first two thirds of
    the images, and the equalized graph is kept only when its INT8 outputs agree better with the original FP32
    outputs (SQNR) on the last third than the original's INT8 do (a clip the scaling moved counts there too;
    the record says why not, and the model is then ``model`` unchanged)."""
    if check_rule(rule) == "off":
        return None
    started = time.time()
    images = np.asarray(images, dtype=np.float32)
    fitted = images[:max(1, (2 * len(images)) // 3)] if write is not None else images
    done = _equalized(model, fitted, rule)
    if write is not None and done.record["channels"]:
        held = images[len(fitted):]
        if not len(held):
            held = fitted
        before, after = (int8_sqnr(m, fitted, held, write, method, model) for m in (model, done.model))
        done.record["sqnr_db"] = {"before": before, "after": after, "images": len(held)}
        done.record["kept"] = bool(after > before)
        if not done.record["kept"]:
            onnx = require("onnx", "INT8 equalization")
            done.model = onnx.ModelProto.FromString(model.SerializeToString())
            done.record["why_not"] = "INT8 output SQNR {:.2f} dB equalized, {:.2f} dB not".format(after, before)
    else:
        done.record["kept"] = bool(done.record["channels"])
    done.record["seconds"] = round(time.time() - started, 2)
    return done


def int8_sqnr(model, fitted, held, write, method, reference=None):
    """dB of FP32 over INT8 error of ``model``'s outputs on ``held``, its INT8 graph written by ``write`` with
    ``method``'s ranges on ``fitted``; the FP32 outputs are ``reference``'s (default: ``model``'s)."""
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    dims = model.graph.input[0].type.tensor_type.shape.dim
    fixed = dims[0].dim_value if len(dims) and dims[0].dim_value > 0 else None  # a fixed-batch graph
    hists = collect_stats(model, fitted, batch_size=fixed or BATCH, progress_label="equalization check",
                          fixed_batch=fixed)
    ranges = dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum, "rule": rule})
                  for n, (a, rule) in compute_ranges(hists, method).items())
    signal = noise = 0.0
    runs = [_session(m) for m in (reference or model, write(model, ranges))]
    feed = runs[0].get_inputs()[0].name
    for batch in _batches(held, runs[0].get_inputs()[0].shape):
        outs = [r.run(None, {feed: batch}) for r in runs]
        for ref, out in zip(*outs):
            ref = np.asarray(ref, dtype=np.float64)
            signal += float((ref ** 2).sum())
            noise += float(((ref - np.asarray(out, dtype=np.float64)) ** 2).sum())
    return round(float(10.0 * np.log10(max(signal, 1e-30) / max(noise, 1e-30))), 3)


def _session(model):
    ort = require("onnxruntime", "INT8 equalization")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _equalized(model, images, rule):
    """The Equalization of a copy of ``model`` with its scales from ``images`` (no guard)."""
    onnx = require("onnx", "INT8 equalization")
    numpy_helper = require("onnx.numpy_helper")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    untied = _untie_biases(model)
    pairs = find_pairs(model)
    record = {"rule": rule, "pairs": len(pairs), "biases_untied": untied, "alpha": ALPHA, "max_scale": MAX_SCALE, "margin": MARGIN,
              "channels": 0, "of_channels": 0, "clip_kept": 0, "clip_bounded": 0}
    if not pairs:
        return Equalization(model, record)
    highs, lows = channel_extremes(model, [p.tensor for p in pairs], images)
    inits = dict((i.name, i) for i in model.graph.initializer)
    for pair, high, low in zip(pairs, highs, lows):
        w1 = numpy_helper.to_array(inits[pair.first.input[1]]).astype(np.float32)
        w2 = numpy_helper.to_array(inits[pair.second.input[1]]).astype(np.float32)
        # a depthwise second conv quantizes each input channel on its own scale: its side costs nothing
        weights = np.ones(len(high)) if pair.depthwise else _input_ranges(w2)
        scale, kept, bounded = channel_scales(high, low, pair.clip, pair.relu, weights)
        record["clip_kept"] += kept
        record["clip_bounded"] += bounded
        record["of_channels"] += len(scale)
        record["channels"] += int((np.abs(scale - 1.0) > 1e-3).sum())
        shape = (-1,) + (1,) * (w1.ndim - 1)
        _set(inits, pair.first.input[1], w1 * scale.reshape(shape))
        if len(pair.first.input) > 2 and pair.first.input[2]:
            _set(inits, pair.first.input[2], numpy_helper.to_array(inits[pair.first.input[2]]) * scale)
        axis_shape = [1] * w2.ndim
        axis_shape[0 if pair.depthwise else 1] = -1
        _set(inits, pair.second.input[1], w2 / scale.reshape(axis_shape))
    return Equalization(model, record)


def _untie_biases(model):
    """Give each Conv its own copy of a bias it shares with other nodes (in place; how many). Converters merge
    equal constants (tf2onnx: 28 of the 63 Convs of MediaPipe's palm detector share 4 bias tensors), and a
    shared bias cannot take one conv's channel scales: ``find_pairs`` found no pair on it before."""
    onnx = require("onnx", "INT8 equalization")
    inits = dict((i.name, i) for i in model.graph.initializer)
    uses = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    untied = 0
    for index, node in enumerate(model.graph.node):
        if node.op_type != "Conv" or len(node.input) < 3 or uses.get(node.input[2], 0) < 2 or \
                node.input[2] not in inits:
            continue
        own = onnx.TensorProto()
        own.CopyFrom(inits[node.input[2]])
        own.name = "{}_of_{}".format(node.input[2], node.name or "conv{}".format(index))
        model.graph.initializer.append(own)
        uses[node.input[2]] -= 1
        node.input[2] = own.name
        untied += 1
    return untied


def channel_scales(high, low, clip, relu, weight_range):
    """(per-channel scale ``t``, channels kept at 1 by an active clip, channels whose scale the clip bounded) of
    one chain: ``high``/``low`` the pre-activation's per-channel extremes, ``clip`` the Clip's upper bound or
    None, ``relu``: a Relu is between (with neither, ``low`` counts too), ``weight_range`` the next conv's largest
    weight per input channel."""
    high = np.asarray(high, dtype=np.float64)
    low = np.asarray(low, dtype=np.float64)
    if clip is not None or relu:
        act_range = np.clip(high, 0.0, np.inf if clip is None else clip)
    else:
        act_range = np.maximum(np.abs(high), np.abs(low))
    weight_range = np.asarray(weight_range, dtype=np.float64)
    live = (act_range > 0) & (weight_range > 0)
    scale = np.ones(len(high))
    if not live.any():
        return scale, 0, 0
    big_act, big_w = act_range[live].max(), weight_range[live].max()
    scale[live] = (big_act / act_range[live]) ** ALPHA * (weight_range[live] / big_w) ** (1.0 - ALPHA)
    scale = np.clip(scale, 1.0 / MAX_SCALE, MAX_SCALE)
    kept = bounded = 0
    if clip is not None:
        active = high * MARGIN >= clip
        kept = int(active.sum())
        scale[active] = 1.0
        limit = np.where(high > 0, clip / (MARGIN * np.maximum(high, 1e-30)), MAX_SCALE)
        over = (~active) & (scale > limit)
        bounded = int(over.sum())
        scale[over] = np.maximum(limit[over], 1.0 / MAX_SCALE)
    return scale.astype(np.float32), kept, bounded


def channel_extremes(model, tensors, images):
    """([per-channel max], [per-channel min]) of each of ``tensors`` (NCHW or NC) over ``images``, in batches
    (two numbers per channel kept, never an activation)."""
    onnx = require("onnx", "INT8 equalization")
    from trtkit.onnx.load import keep_outputs
    cut = onnx.ModelProto.FromString(model.SerializeToString())
    keep_outputs(cut, list(tensors))
    session = _session(cut)
    feed = session.get_inputs()[0].name
    highs = [None] * len(tensors)
    lows = [None] * len(tensors)
    for batch in _batches(images, session.get_inputs()[0].shape):
        for index, value in enumerate(session.run(list(tensors), {feed: batch})):
            flat = np.moveaxis(np.asarray(value), 1, 0).reshape(value.shape[1], -1)
            high, low = flat.max(axis=1), flat.min(axis=1)
            highs[index] = high if highs[index] is None else np.maximum(highs[index], high)
            lows[index] = low if lows[index] is None else np.minimum(lows[index], low)
    if highs and highs[0] is None:
        raise InputError("no calibration images to equalize the INT8 graph with")
    return highs, lows


def _batches(images, shape):
    """NCHW float32 batches of the array ``images`` (whole batches for a fixed-batch graph, the last filled)."""
    fixed = shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else None
    step = fixed or BATCH
    for start in range(0, len(images), step):
        part = images[start:start + step]
        if fixed and len(part) < fixed:
            part = np.resize(part, (fixed,) + part.shape[1:])
        yield part


def _input_ranges(w2):
    """The largest |weight| of the (non-depthwise) second conv on each of its input channels."""
    moved = np.moveaxis(np.abs(w2), 1, 0)
    return moved.reshape(moved.shape[0], -1).max(axis=1)


def _set(inits, name, values):
    numpy_helper = require("onnx.numpy_helper")
    old = inits[name]
    old.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(values.astype(_dtype(old))), name))


def _dtype(init):
    return np.float16 if init.data_type == 10 else (np.float64 if init.data_type == 11 else np.float32)


def _attr(node, name, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return attribute.i if attribute.type == 2 else attribute.f
    return default


def _constants(model):
    """{name: array} of the initializers and Constant nodes' values."""
    numpy_helper = require("onnx.numpy_helper")
    values = dict((i.name, i) for i in model.graph.initializer)
    found = {}
    for name, init in values.items():
        if len(init.dims) <= 1 and (not init.dims or init.dims[0] <= 16):
            found[name] = numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    found[node.output[0]] = numpy_helper.to_array(attribute.t)
    return found


def _clip_bounds(node, constants):
    """(min, max) of a Clip as floats, or None when one is not a known constant."""
    if len(node.input) > 1:  # opset 11+: inputs
        values = []
        for index, default in ((1, -np.inf), (2, np.inf)):
            name = node.input[index] if len(node.input) > index else ""
            if not name:
                values.append(default)
            elif name in constants:
                values.append(float(np.asarray(constants[name]).reshape(-1)[0]))
            else:
                return None
        return tuple(values)
    return float(_attr(node, "min", -np.inf)), float(_attr(node, "max", np.inf))


def _zero_pad(node, constants):
    """A Pad of constant mode with value 0 (scales with its input)."""
    mode = b"constant"
    for attribute in node.attribute:
        if attribute.name == "mode":
            mode = attribute.s
        if attribute.name == "value" and attribute.f != 0.0:
            return False
    if mode != b"constant":
        return False
    if len(node.input) > 2 and node.input[2]:
        value = constants.get(node.input[2])
        return value is not None and float(np.asarray(value).reshape(-1)[0]) == 0.0
    return True
