"""Clipping ranges (amax) from |x| histograms: entropy (KL), MSE, percentile or min-max.

* ``minmax``: the largest |x| seen. Never clips, wastes resolution on outliers.
* ``mse``: the amax whose INT8 quantize-dequantize (symmetric, scale amax/127,
  as the Q/DQ graphs quantize) loses the least: clipping error above amax plus
  rounding error below it, summed over the histogram (``quantization_mse``).
  Right for every shape of distribution, including the ones KL gets wrong.
* ``percentile``: the |x| below which ``percentile`` % of the values fall.
* ``entropy``: TensorRT's EntropyCalibration2 rule. For every candidate
  threshold bin i (128 .. 2048), P is the histogram cut at i with the clipped
  outliers folded into the last kept bin, Q is P squeezed into 128 levels
  (INT8's positive half) and spread back over P's non-empty bins; the
  threshold minimizing KL(P || Q) wins: amax = (i + 0.5) bin widths, as TensorRT
  computes it. Bin 0 (exact zeros after a ReLU, often half of all values)
  counts like its neighbour, as NVIDIA's pytorch-quantization does: left as is,
  the zero spike dominates P and the search clips far too much.

  KL alone is unsound where the values never come near zero (a hardsigmoid
  output in [0.1, 0.7], an all-negative pre-activation): every cut just above
  the data folds all of it into one bin, P and Q are then the same spike and
  KL(P || Q) is zero, so the search would pick a cut that clips everything.
  ``entropy`` therefore keeps TensorRT's cut where it is sound (it clips a thin
  tail: at most ``ENTROPY_MAX_CLIPPED`` of the values) and takes the MSE-optimal
  amax where it is degenerate; each tensor records which rule won. Measured on
  synthetic tensors: sound KL cuts clip under 0.2 % of the values (outliers,
  heavy tails, ReLU spikes), degenerate ones 99.8-100 % (offset, all-negative,
  bimodal) with 10^4 times the quantization error of the best amax. A KL cut
  that clips outliers MSE would keep is TensorRT's intent, and stays.

Every method returns amax >= 0 per tensor and the rule that gave it; the Q/DQ
writers turn amax (and the tensor's observed min/max) into scales.
"""

import numpy as np

from trtkit.errors import InputError

METHODS = ("entropy", "mse", "percentile", "minmax")
DEFAULT_METHOD = "entropy"
DEFAULT_PERCENTILE = 99.99
QUANT_LEVELS = 128
INT8_MAX = 127          # symmetric INT8: scale = amax / 127, as the Q/DQ writers quantize
ENTROPY_MAX_CLIPPED = 0.01  # a KL cut clipping more of the values than this is degenerate
_SUBSAMPLES = 4         # points per histogram bin in the error estimate (bins may be wider than a step)
_CANDIDATES = 400       # amax candidates, geometrically spaced from one bin to the whole histogram


def check_method(method):
    if method not in METHODS:
        raise InputError("unknown calibration method '{}'".format(method), hint="use one of " + ", ".join(METHODS))
    return method


def compute_amax(histograms, method=DEFAULT_METHOD, percentile=DEFAULT_PERCENTILE):
    """{name: amax} for {name: AbsHistogram} with ``method`` (``compute_ranges`` also says which rule won)."""
    return dict((name, amax) for name, (amax, _) in compute_ranges(histograms, method, percentile).items())


def compute_ranges(histograms, method=DEFAULT_METHOD, percentile=DEFAULT_PERCENTILE):
    """{name: (amax, rule)} for {name: AbsHistogram}: ``rule`` is the method that gave amax (for ``entropy``,
    ``mse`` where the guard replaced a KL cut; ``zero`` for a tensor that is always zero)."""
    check_method(method)
    if method == "percentile" and not 0.0 < percentile <= 100.0:
        raise InputError("percentile must be in (0, 100], got {}".format(percentile), hint="e.g. 99.99")
    result = {}
    for name, hist in histograms.items():
        absmax = hist.absmax
        if absmax <= 0.0 or hist.upper <= 0.0:
            result[name] = (0.0, "zero")
        elif method == "minmax":
            result[name] = (absmax, "minmax")
        elif method == "percentile":
            result[name] = (min(absmax, percentile_amax(hist.counts, hist.upper, percentile)), "percentile")
        elif method == "mse":
            result[name] = (min(absmax, mse_amax(hist.counts, hist.upper)), "mse")
        else:
            result[name] = guarded_entropy(hist.counts, hist.upper, absmax)
    return result


def guarded_entropy(counts, upper, absmax):
    """(amax, rule): TensorRT's KL cut, unless it clips more than ``ENTROPY_MAX_CLIPPED`` of the values (a
    degenerate cut below the bulk of the data): then the MSE-optimal amax, rule ``mse``."""
    kl = min(absmax, entropy_amax(counts, upper))
    if clipped_fraction(counts, upper, kl) <= ENTROPY_MAX_CLIPPED:
        return kl, "entropy"
    return min(absmax, mse_amax(counts, upper)), "mse"


def clipped_fraction(counts, upper, amax):
    """The share of a |x| histogram's values above ``amax`` (whole bins past the one amax falls in)."""
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return 0.0
    first = int(np.floor(amax * len(counts) / upper)) + 1 if upper > 0 else len(counts)
    return float(counts[min(first, len(counts)):].sum() / total)


def quantization_mse(counts, upper, amaxes, levels=INT8_MAX):
    """Mean squared error of symmetric INT8 quantize-dequantize (scale amax/levels, clip at +-levels) of the
    values a |x| histogram over [0, upper] describes, for each amax in ``amaxes``.

    Each non-empty bin stands for ``_SUBSAMPLES`` evenly spread values, so a bin as wide as a quantization
    step (or wider) is not mistaken for values sitting on the grid.
    """
    counts = np.asarray(counts, dtype=np.float64)
    bins = len(counts)
    filled = np.nonzero(counts)[0]
    amaxes = np.asarray(amaxes, dtype=np.float64)
    if filled.size == 0:
        return np.zeros(amaxes.shape)
    offsets = (np.arange(_SUBSAMPLES) + 0.5) / _SUBSAMPLES
    values = ((filled[:, None] + offsets[None, :]) * (upper / bins)).ravel()
    weights = np.repeat(counts[filled] / _SUBSAMPLES, _SUBSAMPLES)
    total = weights.sum()
    errors = np.empty(amaxes.shape)
    for start in range(0, len(amaxes), 32):  # (32 x values) at a time: bounded memory
        amax = np.maximum(amaxes[start:start + 32, None], 1e-30)
        step = amax / levels
        dequantized = np.minimum(np.round(values[None, :] / step), levels) * step
        errors[start:start + 32] = ((values[None, :] - dequantized) ** 2).dot(weights) / total
    return errors


def mse_amax(counts, upper):
    """The amax (among ``_CANDIDATES`` bin edges, geometrically spaced) with the least ``quantization_mse``."""
    bins = len(counts)
    edges = np.unique(np.round(np.geomspace(1, bins, _CANDIDATES)).astype(np.int64))
    candidates = edges * (upper / bins)
    return float(candidates[int(np.argmin(quantization_mse(counts, upper, candidates)))])


def percentile_amax(counts, upper, percentile):
    """Upper edge of the bin where the cumulative count reaches ``percentile`` %."""
    counts = np.asarray(counts, dtype=np.float64)
    cdf = np.cumsum(counts)
    target = cdf[-1] * percentile / 100.0
    index = int(np.searchsorted(cdf, target, side="left"))
    index = min(index, len(counts) - 1)
    return (index + 1) * upper / len(counts)


def entropy_amax(counts, upper, levels=QUANT_LEVELS):
    """The KL-optimal threshold (EntropyCalibration2 semantics) of a |x| histogram over [0, upper]."""
    counts = np.asarray(counts, dtype=np.float64).copy()
    bins = len(counts)
    if bins > 1:
        counts[0] = counts[1]  # the spike of exact zeros (after ReLU) would dominate the KL otherwise
    width = upper / bins
    # trailing empty bins change nothing: stop the search at the last non-empty bin
    nonzero = np.nonzero(counts)[0]
    if nonzero.size == 0:
        return 0.0
    last = int(nonzero[-1]) + 1
    if last <= levels:
        return last * width
    best_i = levels + int(np.argmin(_kl_all(counts, levels, last)))
    return min(upper, (best_i + 0.5) * width)


def _kl_all(counts, levels, last):
    """KL(P_i || Q_i) for every candidate cut i in [levels, last], all at once.

    Q is constant over the non-empty bins of each of the ``levels`` chunks, so
    every sum reduces to differences of cumulative sums at the chunk edges
    ((len x levels) arrays instead of a Python loop over i).
    """
    total = counts.sum()
    cut = np.arange(levels, last + 1)[:, None]                       # (n, 1)
    edges = (np.arange(levels + 1)[None, :] * cut + levels - 1) // levels  # chunk k = bins [edges_k, edges_k+1)
    csum = np.concatenate([[0.0], np.cumsum(counts)])
    nz = np.concatenate([[0.0], np.cumsum(counts > 0)])
    with np.errstate(divide="ignore", invalid="ignore"):
        clog = np.where(counts > 0, counts * np.log(np.where(counts > 0, counts, 1.0)), 0.0)
        hlog = np.concatenate([[0.0], np.cumsum(clog)])
        chunk_sum = csum[edges[:, 1:]] - csum[edges[:, :-1]]         # S_k
        chunk_nz = nz[edges[:, 1:]] - nz[edges[:, :-1]]              # N_k
        used = csum[cut[:, 0]]                                       # sum of the kept bins (Q's mass)
        i = cut[:, 0]
        last_count = counts[i - 1]
        p_last = last_count + (total - used)                         # outliers folded into the last bin
        # sum P log P
        plogp = hlog[i - 1] + np.where(p_last > 0, p_last * np.log(np.where(p_last > 0, p_last, 1.0)), 0.0)
        entropy_p = plogp / total - np.log(total)
        # sum P log Q over the kept bins: chunks as a whole, then the last bin corrected
        level_q = np.where(chunk_nz > 0, chunk_sum / np.maximum(chunk_nz, 1.0) / used[:, None], 1.0)
        cross = np.sum(np.where(chunk_nz > 0, chunk_sum * np.log(level_q), 0.0), axis=1)
        q_last = np.where(last_count > 0, level_q[:, -1], _EPS)
        cross += -last_count * np.log(level_q[:, -1]) * (last_count > 0) + p_last * np.log(q_last)
        return entropy_p - cross / total


_EPS = 1e-10
