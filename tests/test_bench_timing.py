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


def test_make_batch_repeats_a_short_set():
    images = np.arange(3, dtype=np.float32).reshape(3, 1, 1, 1)
    batch = timing.make_batch(images, 8)
    assert batch.shape == (8, 1, 1, 1) and list(batch.ravel()) == [0, 1, 2, 0, 1, 2, 0, 1]


class _Slowed(object):
    """A runner whose call costs ``cost`` seconds of the fake clock, three times that during the machine's
    busy spell (``spell`` = (start, end) on the clock), as when a neighbour takes the CPU."""

    def __init__(self, clock, cost, spell, log, name):
        self.clock, self.cost, self.spell, self.log, self.name = clock, cost, spell, log, name

    def infer(self, batch):
        busy = self.spell[0] <= self.clock() < self.spell[1]
        self.clock.advance(self.cost * (3 if busy else 1))
        if not self.log or self.log[-1] != self.name:
            self.log.append(self.name)


def test_interleaved_rounds_rank_runners_right_through_a_busy_spell():
    images = np.zeros((8, 3, 4, 4), dtype=np.float32)

    def rates(rounds):
        clock, log = FakeClock(), []
        spell = (0.25, 1.25)  # lands on the first runner when they are timed one after the other
        runners = {"fast": _Slowed(clock, 0.001, spell, log, "fast"), "slow": _Slowed(clock, 0.0012, spell, log, "slow")}
        figures = timing.interleaved_throughput(runners, images, batch_size=8, seconds=1.0, rounds=rounds,
                                                clock=clock)
        return dict((k, timing.median_rate(v)) for k, v in figures.items()), figures, log

    one_after_other, _, _ = rates(rounds=1)
    assert one_after_other["fast"] < one_after_other["slow"]  # the spell makes the faster one look slower
    interleaved, figures, log = rates(rounds=4)
    assert all(len(v) == 4 for v in figures.values())
    assert interleaved["fast"] > interleaved["slow"]
    # the order rotates (fast slow | slow fast | fast slow | slow fast): a runner ends one round and starts the next
    assert log == ["fast", "slow", "fast", "slow", "fast"]
    assert timing.median_rate([]) is None


def test_a_rows_stability_warnings_are_said_once_with_each_figure():
    """On the H200 every GPU row had up to four warning lines (thirty for twelve rows): now one per row."""
    from trtkit.bench.report import markdown_table
    row = {"model": "resnet18", "variant": "FP32 PyTorch (eager)", "batch": 1, "status": "ok", "fps": 504.0,
           "latency_ms": {"median": 2.41, "p99": 2.71, "cv": 0.12, "unstable": True},
           "throughput_ms_per_batch": {"cv": 0.23, "unstable": True},
           "device_latency_ms": {"cv": 0.05, "unstable": False},
           "warnings": ["latency unstable: coefficient of variation 12% > 10% over 213 samples",
                        "throughput unstable: coefficient of variation 23% > 10% over 6 samples"]}
    _, notes = markdown_table({"results": [row], "options": {"max_cv": 0.1}, "device": {}})
    lines = [n for n in notes if n.startswith("- (!) resnet18 FP32")]  # the model too: gpu_check times two
    assert lines == ["- (!) resnet18 FP32 PyTorch (eager) batch 1: unstable: coefficient of variation latency 12%, "
                     "throughput 23% (limit 10%)"]


def test_the_build_times_within_its_budget_a_model_whose_one_call_outlasts_it():
    """VGG19's timing took 275 s at --bench-seconds 1 (4 rounds of a warm-up and 3 calls of a 4 s batch)."""
    from trtkit.pipeline.verification import timing_plan
    assert timing_plan(0.01, 1.0, 4, runners=3) == (4, 3)  # a small model: the usual plan
    assert timing_plan(0.3, 1.0, 4, runners=3) == (3, 1)  # one call per round, as many rounds as fit
    assert timing_plan(10.0, 1.0, 4, runners=3) == (1, 1)  # one call, whatever the budget
    assert timing_plan(10.0, 1.0, 1, runners=1) == (1, 1)
    assert timing_plan(0.3, 30.0, 4, runners=3) == (4, 3)


def test_the_build_plans_its_timing_from_a_warm_call_not_the_first():
    """A runtime's first call allocates and picks kernels (the sample detector on OpenVINO, busy machine: 0.4 s;
    quiet: 2.5-3x the next call); planned from it, a whole auto build went to one call per round."""
    import time
    from trtkit.pipeline.verification import timing_plan, warm_call_seconds

    class FirstCallSlow(object):
        calls = 0

        def infer(self, batch):
            self.calls += 1
            if self.calls == 1:
                time.sleep(0.4)

        def synchronize(self):
            pass

    runner = FirstCallSlow()
    seconds = warm_call_seconds(runner, np.zeros((8, 3, 4, 4), np.float32))
    assert runner.calls == 2 and seconds < 0.2
    assert timing_plan(seconds, 1.0, 4, runners=10) == (4, 3)
