"""CPU pinning: the benchmark's threads, including ones started before, run on the cores it states."""

import os
import threading

import numpy as np
import pytest

from bench_fakes import FakeClock, FakeRunner
from trtkit.bench import affinity
from trtkit.bench.matrix import run_matrix
from trtkit.bench.plan import BenchOptions, Variant
from trtkit.bench.report import markdown_report

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(affinity.usable_cores()) < 2,
                                    reason="needs Linux CPU affinity and at least 2 usable cores")


def test_choose_cores_leaves_cpu0_to_the_os():
    assert affinity.choose_cores(1, [0, 1, 2, 3]) == [3]
    assert affinity.choose_cores(3, [3, 0, 1, 2]) == [1, 2, 3]
    assert affinity.choose_cores(8, [0, 1]) == [0, 1]


def _mask_of_every_thread():
    return dict((int(t), frozenset(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task"))


@needs_affinity
def test_pinned_moves_every_thread_and_restores_them():
    original = os.sched_getaffinity(0)
    release = threading.Event()
    seen = {}

    def wait():  # a pool thread that exists before the benchmark starts (like torch's OpenMP workers)
        release.wait(10)

    before = threading.Thread(target=wait)
    before.start()
    try:
        with affinity.pinned(1) as cores:
            assert cores == [max(original)]
            inside = threading.Thread(target=lambda: seen.setdefault("inside", os.sched_getaffinity(0)))
            inside.start()
            inside.join()
            masks = _mask_of_every_thread()
        assert set(masks.values()) == {frozenset(cores)} and len(masks) >= 2
        assert seen["inside"] == set(cores)
        assert set(_mask_of_every_thread().values()) == {frozenset(original)}
    finally:
        release.set()
        before.join()


def test_not_pinned_with_as_many_threads_as_cores():
    original = affinity.usable_cores()
    with affinity.pinned(len(original)) as cores:
        assert cores is None
        assert affinity.usable_cores() == original
    with affinity.pinned(1, enabled=False) as cores:
        assert cores is None


class AffinityRecorder(FakeRunner):
    """Records the cores each call ran on (timings come from a fake clock)."""

    seen = set()

    def _infer(self, batch):
        AffinityRecorder.seen |= os.sched_getaffinity(0)
        return FakeRunner._infer(self, batch)


@needs_affinity
def test_benchmark_runs_on_the_cores_it_states():
    AffinityRecorder.seen = set()
    clock = FakeClock()
    options = BenchOptions(batch_sizes=[1], threads=1, seconds=0.02, warmup=0.0, min_iterations=2, agree_images=0,
                           min_rounds=2, round_seconds=0.01, clock=clock)
    result = run_matrix([Variant("m", "fake", "fp32", lambda: AffinityRecorder(clock), "fake")],
                        np.zeros((2, 3, 8, 8), np.float32), options, device={"cpu": {}, "software": {}, "slug": "test"})
    cores = result["options"]["cpu_cores"]
    assert cores == [max(affinity.usable_cores())] and AffinityRecorder.seen == set(cores)
    assert "CPU threads: 1 (pinned to core {})".format(cores[0]) in markdown_report(result)
