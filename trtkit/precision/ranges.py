"""Clipping ranges (amax) from |x| histograms: entropy (KL), percentile or min-max.

* ``minmax``: the largest |x| seen. Never clips, wastes resolution on outliers.
* ``percentile``: the |x| below which ``percentile`` % of the values fall.
* ``entropy``: TensorRT's EntropyCalibration2 rule. For every candidate
  threshold bin i (128 .. 2048), P is the histogram cut at i with the clipped
  outliers folded into the last kept bin, Q is P squeezed into 128 levels
  (INT8's positive half) and spread back over P's non-empty bins; the
  threshold minimizing KL(P || Q) wins: amax = (i + 0.5) bin widths, as TensorRT
  computes it. Bin 0 (exact zeros after a ReLU, often half of all values)
  counts like its neighbour, as NVIDIA's pytorch-quantization does: left as is,
  the zero spike dominates P and the search clips far too much.

All three return amax >= 0 per tensor; the Q/DQ writers turn amax (and the
tensor's observed min/max) into scales.
"""

import numpy as np

from trtkit.errors import InputError

METHODS = ("entropy", "percentile", "minmax")
DEFAULT_METHOD = "entropy"
DEFAULT_PERCENTILE = 99.99
QUANT_LEVELS = 128


def check_method(method):
    if method not in METHODS:
        raise InputError("unknown calibration method '{}'".format(method), hint="use one of " + ", ".join(METHODS))
    return method


def compute_amax(histograms, method=DEFAULT_METHOD, percentile=DEFAULT_PERCENTILE):
    """{name: amax} for {name: AbsHistogram} with ``method``."""
    check_method(method)
    if method == "percentile" and not 0.0 < percentile <= 100.0:
        raise InputError("percentile must be in (0, 100], got {}".format(percentile), hint="e.g. 99.99")
    result = {}
    for name, hist in histograms.items():
        absmax = hist.absmax
        if absmax <= 0.0 or hist.upper <= 0.0:
            result[name] = 0.0
        elif method == "minmax":
            result[name] = absmax
        elif method == "percentile":
            result[name] = min(absmax, percentile_amax(hist.counts, hist.upper, percentile))
        else:
            result[name] = min(absmax, entropy_amax(hist.counts, hist.upper))
    return result


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
