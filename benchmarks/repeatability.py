#!/usr/bin/env python3
"""Do two runs of the same benchmark agree? Runs the matrix twice and prints the spread of each figure.

The target is under 10 % between runs on the median (FPS and latency p50).
Prints one line per variant and batch, then the worst spread; exits 1 above
the target.

By default it leaves the OS one core (``--threads`` = usable cores - 1, pinned),
the setting trtkit recommends for figures you want to compare across runs:
with as many threads as cores, every parallel kernel waits for its slowest
thread, so any other work on the machine (the OS, a neighbour on a shared VM)
stalls every call. ``--threads all`` measures that case too.

    python benchmarks/repeatability.py [--manifest build/engines] [--runs 2] [--seconds 2]
        [--backends onnxruntime,torch] [--batch-sizes 1,8] [--threads all|N] [--repeats 3]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.bench.device import describe, device_record  # noqa: E402
from trtkit.bench.matrix import run_matrix  # noqa: E402
from trtkit.bench.plan import BenchOptions, load_bench_images, plan_from_manifest, usable_cores  # noqa: E402
from trtkit.pipeline.manifest import open_build  # noqa: E402

TARGET = 0.10


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", default=os.path.join("build", "engines"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--backends", default="onnxruntime,torch")
    parser.add_argument("--torch-modes", default="fp32")
    parser.add_argument("--threads", default=None,
                        help="CPU threads, or 'all' (default: the usable cores - 1, at least 1)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved windows per figure (default: 3)")
    args = parser.parse_args()
    build = open_build(args.manifest)
    manifest = build.manifest
    cores = usable_cores()
    if args.threads == "all":
        threads = cores
    elif args.threads:
        threads = int(args.threads)
    else:
        threads = max(1, cores - 1)
    options = BenchOptions(batch_sizes=[int(b) for b in args.batch_sizes.split(",")], seconds=args.seconds,
                           warmup=0.5, min_iterations=20, agree_images=0,
                           threads=threads, repeats=args.repeats)
    images, _ = load_bench_images(manifest, count=64)
    device = device_record()
    print("device: " + describe(device))
    print("threads: {} of {} usable cores{}".format(threads, cores, "" if threads < cores else
                                                    " (none left to the OS: expect more spread)"))
    runs = []
    for _ in range(args.runs):
        variants = plan_from_manifest(build, options, backends=args.backends.split(","),
                                      torch_modes=args.torch_modes.split(","))
        result = run_matrix(variants, images, options, device=device, progress_label="run {}".format(len(runs) + 1))
        runs.append(dict(((r["variant"], r["batch"]), r) for r in result["results"] if r["status"] == "ok"))
    worst = 0.0
    print("{:32s} {:>5s}  {:>28s}  {:>8s}  {:>28s}  {:>8s}".format(
        "variant", "batch", "FPS per run", "spread", "latency p50 ms per run", "spread"))
    for key in sorted(runs[0]):
        if not all(key in run for run in runs):
            continue
        fps = [run[key]["fps"] for run in runs]
        p50 = [run[key]["latency_ms"]["median"] for run in runs]
        spreads = [(max(v) - min(v)) / (sum(v) / len(v)) for v in (fps, p50)]
        worst = max(worst, max(spreads))
        print("{:32s} {:5d}  {:>28s}  {:7.1%}  {:>28s}  {:7.1%}".format(
            key[0], key[1], " ".join("{:.1f}".format(v) for v in fps), spreads[0],
            " ".join("{:.2f}".format(v) for v in p50), spreads[1]))
    print("worst spread between runs: {:.1%} (target < {:.0%}): {}".format(
        worst, TARGET, "OK" if worst < TARGET else "ABOVE TARGET (is the machine busy?)"))
    return 0 if worst < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
