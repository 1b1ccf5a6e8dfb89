"""Timing loops: time-based warm-up, then iterations until enough time or count.

``interleaved_throughput`` gives the build table's figures (every variant in
rotating rounds, so the precision search compares like with like). The full
benchmarker builds on ``measure_latency`` (one synchronized call per sample)
and ``measure_throughput`` (rounds of many calls in flight, one sync per
round), both returning a ``Stats`` of per-call seconds with the percentiles
users compare and a coefficient of variation that flags unstable figures.

GPU work is asynchronous: a clock read before the device finished measures
only the launch. Callers pass ``sync`` (a runner's ``synchronize``) or a
``timer`` of device time (a runner's ``device_timer()``, e.g. CUDA events),
never a bare host clock.

Every loop reads time through ``clock`` (default ``time.perf_counter``), so
tests can drive the stop rules and the statistics with a fake clock that the
timed function advances: figures that do not depend on how busy the machine is.
"""

import time

import numpy as np

# Coefficient of variation (std / mean) above which a result is flagged unstable.
DEFAULT_MAX_CV = 0.10


def warm_up(fn, seconds, sync=None, min_calls=1, clock=None):
    """Call ``fn`` for ``seconds`` (at least ``min_calls`` times): caches, allocators, autotuners, clocks."""
    clock = clock or time.perf_counter
    end = clock() + seconds
    calls = 0
    while True:
        fn()
        calls += 1
        if sync:
            sync()
        if calls >= min_calls and clock() >= end:
            return calls


def interleaved_throughput(runners, images, batch_size=8, seconds=1.0, rounds=4, clock=None):
    """{key: [images per second, one per round]} of every runner in ``runners`` ({key: runner}).

    Why interleaved: on a shared machine a neighbour's busy spell lasts seconds.
    Timed one after the other, the candidate that happens to run during it looks
    slow, and a choice between runners that differ by 10-40% (the precision
    search's) becomes a coin flip. Here each runner gets ``seconds`` in total,
    split into ``rounds`` windows; every round times each runner once, the order
    rotating, so a slow spell falls on all of them alike. Callers compare the
    medians of the rounds (``median_rate``).
    """
    batch = make_batch(images, batch_size)
    keys = list(runners)
    figures = dict((key, []) for key in keys)
    rounds = max(1, int(rounds))
    window = float(seconds) / rounds
    for index in range(rounds):
        shift = index % len(keys) if keys else 0
        for key in keys[shift:] + keys[:shift]:
            runner = runners[key]
            stats = measure_latency(lambda: runner.infer(batch), warmup_seconds=0.2 if index == 0 else 0.05,
                                    min_seconds=window, min_iterations=3, clock=clock)
            figures[key].append(batch_size / stats.median)
    return figures


def median_rate(values):
    """The median of per-round rates (None for none)."""
    return float(np.median(values)) if values else None


def make_batch(images, batch_size):
    """The first ``batch_size`` images, repeated when there are fewer (float32, contiguous)."""
    batch = images[:batch_size]
    if batch.shape[0] < batch_size:
        reps = int(np.ceil(batch_size / float(batch.shape[0])))
        batch = np.concatenate([batch] * reps)[:batch_size]
    return np.ascontiguousarray(batch, dtype=np.float32)


class Stats(object):
    """Summary of per-call seconds: median, mean, p90, p99, min, max, std and CV."""

    FIELDS = ("median", "mean", "p90", "p99", "min", "max", "std", "cv")

    def __init__(self, samples, max_cv=DEFAULT_MAX_CV):
        samples = np.asarray(samples, dtype=np.float64)
        if samples.size == 0:
            raise ValueError("no timing samples")
        self.samples = samples
        self.count = int(samples.size)
        self.median = float(np.median(samples))
        self.mean = float(np.mean(samples))
        self.p90 = float(np.percentile(samples, 90))
        self.p99 = float(np.percentile(samples, 99))
        self.min = float(np.min(samples))
        self.max = float(np.max(samples))
        self.std = float(np.std(samples))
        self.cv = self.std / self.mean if self.mean > 0 else 0.0
        self.max_cv = max_cv
        self.unstable = self.cv > max_cv

    def warning(self):
        """A sentence when the spread is too large to trust the median, else None."""
        if not self.unstable:
            return None
        return "unstable: coefficient of variation {:.0%} > {:.0%} over {} samples".format(
            self.cv, self.max_cv, self.count)

    def to_dict(self, scale=1.0):
        """The figures (seconds times ``scale``; the CV is unitless) plus the sample count."""
        out = dict((k, getattr(self, k) * (1.0 if k == "cv" else scale)) for k in self.FIELDS)
        out["count"] = self.count
        out["unstable"] = bool(self.unstable)
        return out


class HostTimer(object):
    """Times one region with the host clock; ``sync`` (if any) runs before the clock stops.

    A device timer (``Runner.device_timer()``) has the same three members:
    ``start()``, ``stop()`` returning seconds, and ``sync`` for warm-up and rounds.
    """

    def __init__(self, sync=None, clock=None):
        self.sync = sync
        self.clock = clock or time.perf_counter

    def start(self):
        if self.sync:
            self.sync()
        self._t0 = self.clock()

    def stop(self):
        """End the region; returns its seconds."""
        if self.sync:
            self.sync()
        return self.clock() - self._t0


def _stop_rule(min_seconds, min_iterations, max_iterations, max_seconds):
    max_seconds = float("inf") if max_seconds is None else max(max_seconds, min_seconds)

    def done(count, elapsed):
        if count >= 1 and (count >= max_iterations or elapsed >= max_seconds):
            return True
        return count >= min_iterations and elapsed >= min_seconds
    return done


def measure_latency(fn, timer=None, warmup_seconds=0.5, min_seconds=2.0, min_iterations=20,
                    max_iterations=100000, max_seconds=None, max_cv=DEFAULT_MAX_CV, clock=None):
    """Latency mode: one call per sample, the device synchronized after each (via ``timer``).

    Stops when both ``min_seconds`` and ``min_iterations`` are reached, or at
    ``max_iterations`` / ``max_seconds`` (read on ``clock``). Returns Stats of seconds per call.
    """
    clock = clock or time.perf_counter
    timer = timer or HostTimer(clock=clock)
    warm_up(fn, warmup_seconds, timer.sync, clock=clock)
    done = _stop_rule(min_seconds, min_iterations, max_iterations, max_seconds)
    samples = []
    begin = clock()
    while not done(len(samples), clock() - begin):
        timer.start()
        fn()
        samples.append(timer.stop())
    return Stats(samples, max_cv)


def measure_throughput(fn, timer=None, calls_per_round=None, warmup_seconds=0.5, min_seconds=2.0, min_rounds=5,
                       max_rounds=10000, max_seconds=None, max_cv=DEFAULT_MAX_CV, round_seconds=0.1, clock=None):
    """Throughput mode: rounds of ``calls_per_round`` back-to-back calls and a single sync each.

    Many batches are in flight on an asynchronous device; only the round's
    end waits for them. ``calls_per_round`` defaults to what fills about
    ``round_seconds``. Returns (Stats of seconds per call, calls per round).
    """
    clock = clock or time.perf_counter
    timer = timer or HostTimer(clock=clock)
    calls = warm_up(fn, warmup_seconds, timer.sync, clock=clock)
    if calls_per_round is None:
        # size rounds from the warm-up pace: about round_seconds each, at least 2 calls
        per_call = max(warmup_seconds / float(calls), 1e-7) if warmup_seconds > 0 else None
        if per_call is None:
            timer.start()
            fn()
            per_call = max(timer.stop(), 1e-7)
        calls_per_round = int(min(max(2, round_seconds / per_call), 100000))
    done = _stop_rule(min_seconds, min_rounds, max_rounds, max_seconds)
    samples = []
    begin = clock()
    while not done(len(samples), clock() - begin):
        timer.start()
        for _ in range(calls_per_round):
            fn()
        samples.append(timer.stop() / calls_per_round)
    return Stats(samples, max_cv), calls_per_round
