#!/usr/bin/env python3
"""The standard benchmark matrix, with results committed per device under benchmarks/results/<device>/.

Builds the sample ResNet18 (FP32, FP16 and INT8 when this trtkit can make it)
unless --manifest names a build, then runs 'trtkit bench' on it at the
standard batch sizes with longer timings than the default, and writes
bench.md / bench.csv / bench.json / bench.png plus device.json into
benchmarks/results/<device slug>/ (e.g. cpu-intel-xeon-2c, jetson-nano-maxn).

    python benchmarks/run_matrix.py [--manifest BUILD] [--batch-sizes 1,8,32] [--seconds 3]
    python benchmarks/run_matrix.py --sweep --max-batch 256     # GPU: batch sweep until out of memory
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from trtkit import log  # noqa: E402
from trtkit.cli import script_main  # noqa: E402


def build_sample(out, precisions):
    from trtkit.pipeline import BuildOptions, build
    for wanted in (precisions, "fp32,fp16"):
        try:
            return build(BuildOptions(out=out, precisions=wanted, throughput_seconds=0))
        except Exception as exc:  # INT8 needs the calibration module; fall back to fp32,fp16
            if wanted == "fp32,fp16":
                raise
            log.warn("building {} failed ({}); trying fp32,fp16".format(wanted, exc))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", help="an existing build (default: build the sample into build/matrix)")
    parser.add_argument("--precisions", default="fp32,fp16,int8")
    parser.add_argument("--batch-sizes", default="1,8,32")
    parser.add_argument("--seconds", default="3")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--max-batch", default="256")
    parser.add_argument("--results", default=os.path.join(HERE, "results"), help="results root folder")
    args, rest = parser.parse_known_args()
    manifest = args.manifest
    if not manifest:
        manifest = os.path.join("build", "matrix")
        if not os.path.isfile(os.path.join(manifest, "manifest.json")):
            build_sample(manifest, args.precisions)
    from trtkit.bench.device import device_record
    from trtkit.fileio import write_json
    record = device_record()
    out = os.path.join(args.results, record["slug"])
    write_json(os.path.join(out, "device.json"), record)
    argv = ["--manifest", manifest, "--out", out, "--batch-sizes", args.batch_sizes, "--seconds", args.seconds,
            "--warmup", "1", "--min-iterations", "20", "--title", "resnet18 64x64 (sample build)"]
    if args.sweep:
        argv += ["--sweep", "--max-batch", args.max_batch]
    return script_main("trtkit.commands.bench", argv + rest)


if __name__ == "__main__":
    sys.exit(main())
