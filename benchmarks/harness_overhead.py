#!/usr/bin/env python3
"""What the timing harness itself costs: a runner that does nothing, timed the way every runner is.

Whatever this prints per call is included in every latency and FPS figure
trtkit reports, so it must stay far below the runners' own times (target:
under 50 us per call). Prints the figures and exits non-zero above the target.

    python benchmarks/harness_overhead.py [--seconds 2]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.backends.base import Runner, TensorSpec  # noqa: E402
from trtkit.bench.timing import HostTimer, measure_latency, measure_throughput  # noqa: E402

TARGET_US = 50.0


class NullRunner(Runner):
    """Returns its input unchanged: the cost left is Runner.infer's bookkeeping plus the harness."""

    backend = "null"

    def _activate(self):
        self._outputs = [TensorSpec("y", ("batch", 3, 8, 8), "float32")]

    def inputs(self):
        return self._outputs

    def outputs(self):
        return self._outputs

    def _infer(self, batch):
        return {"y": batch}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    batch = np.zeros((1, 3, 8, 8), dtype=np.float32)
    with NullRunner("null") as runner:
        fn = lambda: runner.infer(batch)  # noqa: E731
        latency = measure_latency(fn, HostTimer(), warmup_seconds=0.2, min_seconds=args.seconds, min_iterations=100)
        synced = measure_latency(fn, HostTimer(sync=lambda: None), warmup_seconds=0.2, min_seconds=args.seconds,
                                 min_iterations=100)
        throughput, per_round = measure_throughput(fn, HostTimer(), warmup_seconds=0.2, min_seconds=args.seconds)
    rows = [("latency mode (host clock per call)", latency), ("latency mode with a sync hook", synced),
            ("throughput mode ({} calls per round)".format(per_round), throughput)]
    worst = 0.0
    for name, stats in rows:
        us = stats.to_dict(1e6)
        worst = max(worst, us["median"])
        print("{:45s} median {:6.2f} us  p99 {:6.2f} us  min {:6.2f} us  ({} samples)".format(
            name, us["median"], us["p99"], us["min"], stats.count))
    verdict = "OK" if worst < TARGET_US else "TOO SLOW"
    print("per-call harness overhead: {:.2f} us (target < {:.0f} us): {}".format(worst, TARGET_US, verdict))
    return 0 if worst < TARGET_US else 1


if __name__ == "__main__":
    sys.exit(main())
