"""How sure a figure is: 95% confidence intervals for every agreement, accuracy and drop trtkit reports.

A verification figure is an estimate from a sample of images: 160 held-out
images that all agree with FP32 say the true agreement is at least 97.6% (the
lower end of its 95% interval), not that it is 100%. This module is the one place that turns counts into intervals
(numpy only, so every step and ``bench`` can use it):

- ``wilson``: a proportion (agreement, accuracy) of ``successes`` in ``n``
  independent images: Wilson's score interval (Brown, Cai and DasGupta 2001
  recommend it over Wald's; it never leaves [0, 1] and is not degenerate at 0
  or n: 160 of 160 gives [97.66%, 100%]);
- ``paired_difference``: the accuracy a variant loses against FP32 on the *same*
  images, from the 2x2 table of who was right: Newcombe's hybrid score interval
  for paired proportions (his method 10, Stat. Med. 1998), which uses that the
  two are measured on the same images (a variant that is right and wrong
  exactly where FP32 is has a narrow interval, an unpaired one would not);
- ``Bootstrap``: figures that are not a proportion of independent units (a
  segmentation model's pixel agreement and mIoU: pixels of one image are not
  independent) get an interval over images by the Poisson bootstrap, which is
  streamed: each image is counted in each replicate a Poisson(1) number of
  times, so the replicates are kept as running sums and memory does not grow
  with the data (Hanley and MacGibbon 2006; Chamandy et al. 2012);
- ``images_to_resolve``: how many images the same figures would need for an
  interval to fit inside a budget.

Written here rather than taken from scipy/statsmodels: ``import trtkit`` needs
only numpy (Jetson images rarely carry scipy), and the formulas are a few lines.
"""

import math

import numpy as np

CONFIDENCE = 0.95
Z = 1.959963984540054  # the two-sided 95% normal quantile
BOOTSTRAP_REPLICATES = 1000
_BOOTSTRAP_SEED = 20261126


def wilson(successes, n, z=Z):
    """(low, high) of the Wilson score interval of ``successes`` out of ``n`` (None when ``n`` is 0).
    Counts may be fractional (``images_to_resolve`` scales them)."""
    n = float(n)
    if n <= 0:
        return None
    p = min(max(float(successes) / n, 0.0), 1.0)
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denominator
    low = 0.0 if p == 0.0 else max(0.0, centre - half)
    high = 1.0 if p == 1.0 else min(1.0, centre + half)
    return low, high


def paired_difference(both, first_only, second_only, neither, z=Z):
    """(low, high) of p1 - p2 where p1 = (both + first_only) / n and p2 = (both + second_only) / n are measured
    on the same n images (Newcombe's method 10); None when n is 0. For an accuracy drop: ``first_only`` counts
    images FP32 got right and the variant wrong, ``second_only`` the reverse."""
    a, b, c, d = (float(v) for v in (both, first_only, second_only, neither))
    n = a + b + c + d
    if n <= 0:
        return None
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson(a + b, n, z)
    l2, u2 = wilson(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(margins) if margins > 0 else 0.0
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2.0 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2.0 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    difference = p1 - p2
    return max(-1.0, difference - delta), min(1.0, difference + epsilon)


def images_to_resolve(upper_at, n, budget, limit=10 ** 8):
    """The fewest images at which ``upper_at(m)`` (the upper bound of a drop with the same observed rates at
    ``m`` images) is within ``budget``; None when no number of images would do (the observed drop itself is
    at or over the budget) or it would take more than ``limit``."""
    n = max(int(n), 1)
    if upper_at(float(limit)) > budget:
        return None
    low, high = n, n
    while upper_at(float(high)) > budget:
        low, high = high, high * 2
    while low < high:  # the bound shrinks as images are added: bisect to the first m that fits
        middle = (low + high) // 2
        if upper_at(float(middle)) <= budget:
            high = middle
        else:
            low = middle + 1
    return int(high)


def proportion_upper_to_resolve(failures, n, budget):
    """``images_to_resolve`` for a drop that is a proportion of independent images (1 - agreement): the
    images at which ``failures / n`` observed at that rate has its Wilson upper bound within ``budget``."""
    rate = float(failures) / n if n else 0.0
    return images_to_resolve(lambda m: 1.0 - wilson(m * (1.0 - rate), m)[0], n, budget)


def paired_upper_to_resolve(both, first_only, second_only, neither, budget):
    """``images_to_resolve`` for an accuracy drop measured on paired images (``paired_difference``)."""
    n = float(both + first_only + second_only + neither)
    if n <= 0:
        return None
    shares = [float(v) / n for v in (both, first_only, second_only, neither)]
    return images_to_resolve(lambda m: paired_difference(*[s * m for s in shares])[1], int(n), budget)


def spread_to_resolve(estimate, upper, n, budget):
    """``images_to_resolve`` for a bootstrap interval: its upper distance from the estimate shrinks as
    1/sqrt(images)."""
    if estimate >= budget:
        return None
    spread = max(upper - estimate, 0.0)
    if spread <= budget - estimate:
        return int(n)
    return int(math.ceil(n * (spread / (budget - estimate)) ** 2))


class Bootstrap(object):
    """The Poisson bootstrap over images, streamed: ``weights(count)`` gives each of the next ``count`` images
    its (replicates, count) multiplicities. Every comparison of one verification pass makes its own with the
    same seed and sees the same images in the same order, so all variants (and FP32's own figures against the
    masks) are resampled alike: the interval of a *difference* between two of them is paired."""

    def __init__(self, replicates=BOOTSTRAP_REPLICATES, seed=_BOOTSTRAP_SEED):
        self.replicates = int(replicates)
        self._random = np.random.RandomState(seed)

    def weights(self, count):
        return self._random.poisson(1.0, size=(self.replicates, int(count))).astype(np.float64)


def percentile_interval(values):
    """(low, high): the 2.5th and 97.5th percentiles of bootstrap replicate ``values`` (None values left out;
    None when none is left)."""
    kept = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if kept.size == 0:
        return None
    tail = 50.0 * (1.0 - CONFIDENCE)
    return float(np.percentile(kept, tail)), float(np.percentile(kept, 100.0 - tail))


def rounded(interval, digits=6):
    """An interval as the JSON records keep it: a [low, high] list of rounded floats, or None."""
    if interval is None:
        return None
    return [round(float(interval[0]), digits), round(float(interval[1]), digits)]


def format_low(value, interval):
    """A fraction with the lower end of its 95% interval, as tables print it: ``100.00% (>= 97.6%)``; left out
    when there is none."""
    if value is None:
        return "-"
    if not interval:
        return "{:.2%}".format(value)
    return "{:.2%} (>= {:.1%})".format(value, _floor(interval[0]))


def format_range(value, interval):
    """A fraction with its 95% interval: ``93.10% [91.2, 94.7]`` (points)."""
    if value is None:
        return "-"
    if not interval:
        return "{:.2%}".format(value)
    return "{:.2%} [{:.1f}, {:.1f}]".format(value, 100.0 * _floor(interval[0]), 100.0 * _ceil(interval[1]))


def _floor(fraction):
    """A lower bound rounded down to the printed 0.1 point: 97.66% prints as 97.6%, never as more."""
    return math.floor(round(fraction * 1000.0, 6)) / 1000.0


def _ceil(fraction):
    return math.ceil(round(fraction * 1000.0, 6)) / 1000.0
