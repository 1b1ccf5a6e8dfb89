"""How sure a difference of two mAPs is: the paired bootstrap over images of ``mAP(first) - mAP(second)``.

Two detectors (a variant and FP32, or trtkit's choice and NNCF's INT8) scored on the same images differ in
mAP by a figure like 0.002; whether that is a difference or the luck of these images is what the interval
says. mAP is not a mean over independent units (the matching pools every image's detections per class), so
neither Wilson's nor Newcombe's interval applies (``trtkit.intervals``); the images are the independent
units, so they are resampled: each replicate draws as many images as there are, with replacement, and both
mAPs are computed on the *same* draw (paired: an image that is hard for both moves both), by the same maintained
COCO evaluator as the figures themselves (``CocoMap.resampled``). The interval is the 2.5th and 97.5th
percentiles of the replicates' differences (Efron's percentile interval).

Why not streamed like the segmentation bootstrap (``intervals.Bootstrap``): the evaluator must see a
replicate's images at once, and its per-image matching is not readable from Python (faster-coco-eval keeps
it in C++), so each replicate is a full evaluation: 0.19 s per map for 400 images of 63 detections each
(faster-coco-eval 1.8, a quiet 2-core EPYC); the sample detector's 200 replicates of two maps took 471 s while
other sessions used 70% of the CPU (``seconds`` in the record says what a run took). That is why the build's
verification does not pay for it and benchmarks do (``replicates`` sets the cost, and how far the interval's
ends move with the seed).
"""

import numpy as np

from trtkit.errors import InputError

DEFAULT_REPLICATES = 200
_SEED = 20261128


def paired_map_difference(first, second, replicates=DEFAULT_REPLICATES, seed=_SEED, key="map", progress=True):
    """{"difference", "interval" [low, high], "replicates", "images", "metric", "method", "share_below_zero",
    "seconds"}
    for ``first.result()[key] - second.result()[key]`` where ``first`` and ``second`` are ``CocoMap``s fed the
    same images in the same order (InputError otherwise). ``progress``: a bar with rate and ETA (``log.Progress``).
    Replicates in which either mAP is undefined (no ground truth drawn) are left out and counted."""
    if list(first.keys) != list(second.keys):
        raise InputError("the two mAPs were not measured on the same images in the same order",
                         hint="feed both CocoMaps the same images, one call each per image")
    if replicates < 20:
        raise InputError("a bootstrap of {} replicates cannot place a 95% interval".format(replicates),
                         hint="use at least 20 (200 by default)")
    from trtkit.intervals import CONFIDENCE, percentile_interval, rounded
    count = len(first)
    a, b = first.result().get(key), second.result().get(key)
    record = {"metric": key, "images": count, "confidence": CONFIDENCE, "difference": None, "interval": None,
              "replicates": 0, "undefined_replicates": 0,
              "method": "paired bootstrap over images, percentile interval (both maps on each draw)"}
    if a is None or b is None or count < 2:
        return record
    record["difference"] = round(a - b, 6)
    import time
    from trtkit.log import Progress
    start = time.time()
    random = np.random.RandomState(seed)
    differences, undefined = [], 0
    with Progress("mAP bootstrap", total=replicates, unit="replicate", shown=progress) as bar:
        for _ in range(replicates):
            draw = random.randint(0, count, size=count)
            x = first.resampled(draw).result().get(key)
            y = second.resampled(draw).result().get(key)
            if x is None or y is None:
                undefined += 1
            else:
                differences.append(x - y)
            bar.update()
    record.update(replicates=len(differences), undefined_replicates=undefined,
                  interval=rounded(percentile_interval(differences)),
                  share_below_zero=round(float(np.mean(np.asarray(differences) < 0.0)), 4) if differences else None,
                  seconds=round(time.time() - start, 1))
    return record


def describe(record, first="first", second="second"):
    """One line for a table's verdict: ``mAP 0.344 - 0.346 = -0.002 (95% interval -0.006..+0.002, 200 paired
    bootstrap replicates over 400 images): not distinguishable``."""
    if record.get("difference") is None:
        return "{} - {}: no mAP to compare".format(first, second)
    low, high = record["interval"] or (None, None)
    if low is None:
        return "{} - {} = {:+.4f} (no interval)".format(first, second, record["difference"])
    if low > 0:
        word = "{} higher".format(first)
    elif high < 0:
        word = "{} lower".format(first)
    else:
        word = "not distinguishable on these images"
    return "{} - {} = {:+.4f} ({:.0%} interval {:+.4f}..{:+.4f}, {} paired bootstrap replicates over {} images): " \
           "{}".format(first, second, record["difference"], record["confidence"], low, high, record["replicates"],
                       record["images"], word)
