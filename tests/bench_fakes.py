"""A fake clock and fake runners for the benchmark tests: timings that do not depend on the machine's load.

Each fake runner advances the shared FakeClock by the seconds a call "takes"
instead of sleeping, and the timing loops read that clock (BenchOptions(clock=...)),
so every figure, spread and warning in the tests is exact and instant.
"""

import numpy as np

from trtkit.backends.base import Runner, TensorSpec
from trtkit.errors import DeviceUnavailable


class FakeClock(object):
    """A clock that only moves when told to."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeRunner(Runner):
    """A runner with no model: returns zeros and advances ``clock`` by ``cost()`` per call."""

    backend = "fake"

    def __init__(self, clock, seconds=0.001, batch_dim="batch"):
        super(FakeRunner, self).__init__("fake")
        self.clock = clock
        self.seconds = seconds
        self.batch_dim = batch_dim

    def _activate(self):
        pass

    def inputs(self):
        return [TensorSpec("x", (self.batch_dim, 3, 8, 8), "float32")]

    def outputs(self):
        return [TensorSpec("y", ("batch", 10), "float32")]

    def cost(self):
        return self.seconds

    def _infer(self, batch):
        self.clock.advance(self.cost())
        return {"y": np.zeros((batch.shape[0], 10), dtype=np.float32)}


class NoGpuRunner(FakeRunner):
    def _activate(self):
        raise DeviceUnavailable("TensorRT engines need an NVIDIA GPU; none is visible")


class SmallMemoryRunner(FakeRunner):
    def _infer(self, batch):
        if batch.shape[0] > 4:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return FakeRunner._infer(self, batch)


class NoisyRunner(FakeRunner):
    """Every other call stalls 4 ms (the rest take 0.5 ms): a coefficient of variation near 80 %."""

    def __init__(self, clock):
        super(NoisyRunner, self).__init__(clock)
        self.calls = 0

    def cost(self):
        self.calls += 1
        return 0.004 if self.calls % 2 else 0.0005


class SlowingRunner(FakeRunner):
    """Each activation (one per pass) is 2 ms slower than the last: a machine that got busy mid-run."""

    activations = 0

    def _activate(self):
        SlowingRunner.activations += 1

    def cost(self):
        return 0.002 * SlowingRunner.activations


class StagingGpuRunner(FakeRunner):
    """A GPU runner as the contract describes one: device "cuda", staged I/O, a peak-memory figure."""

    device = "cuda"
    stages_on_device = True

    def __init__(self, clock):
        super(StagingGpuRunner, self).__init__(clock, seconds=0.002)
        self.log = {"stage": 0, "run_staged": 0, "synchronize": 0, "reset": 0}

    def stage(self, batch):
        self.log["stage"] += 1
        return batch.shape[0]

    def run_staged(self, staged):
        self.log["run_staged"] += 1
        self.clock.advance(0.001)  # no copies: faster than infer
        return staged

    def synchronize(self):
        self.log["synchronize"] += 1

    def reset_peak_memory(self):
        self.log["reset"] += 1

    def peak_memory_bytes(self):
        return 12345
