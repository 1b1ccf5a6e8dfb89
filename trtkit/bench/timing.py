"""Timing loops: time-based warm-up, then iterations until enough time or count.

``quick_throughput`` is the short figure printed in the build table; the full
benchmarker (latency percentiles, batch sweeps, reports) builds on ``time_calls``.
"""

import time

import numpy as np


def time_calls(fn, warmup_seconds=0.2, min_seconds=1.0, min_iterations=5, max_iterations=10000, sync=None):
    """Call ``fn()`` repeatedly; returns per-call seconds (numpy array) after a warm-up.

    ``sync`` (optional) is called after each ``fn()`` inside the timed region,
    for devices whose work is asynchronous.
    """
    clock = time.perf_counter
    end = clock() + warmup_seconds
    while True:
        fn()
        if sync:
            sync()
        if clock() >= end:
            break
    samples = []
    start = clock()
    while len(samples) < max_iterations:
        t0 = clock()
        fn()
        if sync:
            sync()
        samples.append(clock() - t0)
        if len(samples) >= min_iterations and clock() - start >= min_seconds:
            break
    return np.asarray(samples)


def quick_throughput(runner, images, batch_size=8, seconds=1.0):
    """Images per second of ``runner`` at ``batch_size`` (median call time), for the build table."""
    batch = images[:batch_size]
    if batch.shape[0] < batch_size:
        reps = int(np.ceil(batch_size / float(batch.shape[0])))
        batch = np.concatenate([batch] * reps)[:batch_size]
    samples = time_calls(lambda: runner.infer(batch), warmup_seconds=0.2, min_seconds=seconds, min_iterations=3)
    return batch_size / float(np.median(samples))
