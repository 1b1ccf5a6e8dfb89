"""Timing statistics and stop rules; the instability warning on a deliberately noisy function (fake clock)."""

import numpy as np
import pytest

from bench_fakes import FakeClock
from trtkit.bench import timing


def test_stats_figures():
    stats = timing.Stats([1.0, 2.0, 3.0, 4.0, 100.0], max_cv=0.1)
    assert stats.median == 3.0 and stats.min == 1.0 and stats.max == 100.0
    assert stats.mean == pytest.approx(22.0)
    assert stats.p90 > stats.median and stats.p99 > stats.p90
    assert stats.cv == pytest.approx(np.std([1, 2, 3, 4, 100]) / 22.0)
    assert stats.unstable and "coefficient of variation" in stats.warning()
    as_ms = stats.to_dict(1000.0)
    assert as_ms["median"] == 3000.0 and as_ms["cv"] == pytest.approx(stats.cv) and as_ms["count"] == 5


def test_steady_samples_do_not_warn():
    stats = timing.Stats([0.010, 0.0101, 0.0099, 0.010])
    assert not stats.unstable and stats.warning() is None


def test_noisy_runner_fires_the_warning():
    clock = FakeClock()
    calls = []

    def noisy():  # alternates a no-op and a 4 ms stall: a CV of 100 %
        calls.append(1)
        if len(calls) % 2:
            clock.advance(0.004)

    stats = timing.measure_latency(noisy, warmup_seconds=0.0, min_seconds=0.0, min_iterations=12, clock=clock)
    assert stats.count == 12
    assert stats.cv == pytest.approx(1.0) and stats.warning() is not None
    assert stats.median == pytest.approx(0.002) and stats.max == pytest.approx(0.004) and stats.min == 0


def test_steady_function_does_not_warn():
    clock = FakeClock()
    tick = 1 / 256.0  # exact in binary, so the stop rule's sums are too
    stats = timing.measure_latency(lambda: clock.advance(tick), warmup_seconds=0.01, min_seconds=10 * tick,
                                   min_iterations=2, clock=clock)
    assert clock() == 13 * tick  # 3 warm-up calls reach 0.01 s, then 10 samples reach min_seconds
    assert stats.count == 10 and stats.median == tick and stats.cv == 0 and stats.warning() is None


def test_latency_stops_on_count_and_on_time_cap():
    count = [0]

    def fn():
        count[0] += 1

    stats = timing.measure_latency(fn, warmup_seconds=0.0, min_seconds=0.0, min_iterations=7, max_iterations=7)
    assert stats.count == 7
    # a slow call: the time cap (max_seconds) ends it before min_iterations
    clock = FakeClock()
    slow = timing.measure_latency(lambda: clock.advance(0.02), warmup_seconds=0.0, min_seconds=0.01,
                                  min_iterations=1000, max_seconds=0.05, clock=clock)
    assert slow.count == 3  # 0.02, 0.04, then 0.06 >= the 0.05 s cap


def test_throughput_rounds_with_one_sync_each():
    syncs = [0]
    calls = [0]

    def sync():
        syncs[0] += 1

    def fn():
        calls[0] += 1

    stats, per_round = timing.measure_throughput(fn, timing.HostTimer(sync=sync), calls_per_round=5,
                                                 warmup_seconds=0.0, min_seconds=0.0, min_rounds=4, max_rounds=4)
    assert per_round == 5 and stats.count == 4
    assert calls[0] == 1 + 20  # one warm-up call (always at least one), then 4 rounds of 5
    assert syncs[0] == 1 + 2 * 4  # the warm-up's, then start and stop of each round, never per call


def test_quick_throughput_and_make_batch():
    class Echo(object):
        def infer(self, batch):
            return batch[:, :1]

    images = np.zeros((3, 1, 2, 2), dtype=np.float32)
    assert timing.make_batch(images, 8).shape == (8, 1, 2, 2)
    assert timing.quick_throughput(Echo(), images, batch_size=4, seconds=0.01) > 0
