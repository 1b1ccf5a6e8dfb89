#!/usr/bin/env python3
"""Peak memory and time of a build of a big classifier, step by step: what a build costs beyond its weights.

A VGG19 (torchvision's architecture from its own source, ``tests/torchvision_source.py``, seeded random weights,
1000 classes: a 548 MB ONNX, the size of the ONNX Model Zoo's VGG19) is exported once, then

    trtkit build --onnx vgg19.onnx --data sample --input-size 224 --precision P --backend onnxruntime ...

runs in a child process whose resident memory (VmRSS) is sampled every 0.1 s. Each sample is charged to the
build step whose log line came last (loading the ONNX, FP16, calibration statistics, ranges, verification,
timing), so the table says which step holds how many copies of the weights. The target (issue: a plain
``fp32,fp16,int8`` build within 2 GB, a few copies of the weights, whatever the image counts) is printed
beside the peak; the figures are of this machine and its ONNX Runtime only.

    python benchmarks/build_memory.py [--precision fp32,fp16,int8] [--calib-images 32] [--verify-images 32]
"""

import argparse
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
TARGET_MB = 2048
STEPS = (("loading and normalizing the ONNX", ("backend:",)),  # a step's log line comes when it is done
         ("FP32 variant", ("building", "fp32 ...")), ("FP16 variant", ("building", "fp16 ...")),
         ("INT8: calibration statistics, ranges", ("calibration statistics",)),
         ("INT8: Q/DQ graph", ("calibration (",)), ("verification: FP32 reference", ("verifying: reference",)),
         ("verification: variants", ("verifying",)), ("timing", ("timing ",)))  # the first match wins


def vgg19_onnx(path, classes=1000):
    """The VGG19 ONNX at ``path`` (exported once: torchvision's source, seed 0, opset 13, dynamic batch)."""
    if os.path.isfile(path):
        return path
    import torch
    import torchvision_source
    with torchvision_source.imported(torchvision_source.find_wheel() or torchvision_source.download()):
        __import__("torchvision.models.vgg")
        torch.manual_seed(0)
        model = sys.modules["torchvision.models.vgg"].vgg19(num_classes=classes).eval()
    partial = path + ".tmp"
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), partial, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=13, dynamo=False)
    os.replace(partial, path)
    return path


def _rss_mb(pid):
    try:
        with open("/proc/{}/status".format(pid)) as handle:
            for line in handle:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        return None
    return None


def _step_of(line, current):
    for name, needles in STEPS:
        if all(n in line for n in needles):
            return name
    return current


def profile(command, env):
    """[{"step", "seconds", "peak_mb"}] of the build ``command`` and its exit code, its log's last lines."""
    start = time.time()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                             env=env)
    state = {"step": STEPS[0][0], "since": start}
    steps = {}
    order = []

    def charge(rss):
        record = steps.setdefault(state["step"], {"step": state["step"], "seconds": 0.0, "peak_mb": 0})
        if state["step"] not in order:
            order.append(state["step"])
        if rss is not None:
            record["peak_mb"] = max(record["peak_mb"], rss)

    def switch(step):  # a step may come back (each variant verified, then timed): its seconds add up
        now = time.time()
        charge(None)
        steps[state["step"]]["seconds"] += now - state["since"]
        state["step"], state["since"] = step, now

    def sample():
        while child.poll() is None:
            charge(_rss_mb(child.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    tail = []
    for line in child.stdout:
        charge(_rss_mb(child.pid))
        step = _step_of(line, state["step"])
        if step != state["step"]:
            switch(step)
        tail = (tail + [line.rstrip()])[-12:]
    child.wait()
    sampler.join()
    switch(None)
    end = time.time() - start
    rows = [steps[name] for name in order]
    for row in rows:
        row["seconds"] = round(row["seconds"], 1)
    return rows, child.returncode, tail, round(end, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", default="fp32,fp16,int8")
    parser.add_argument("--calib-images", type=int, default=32)
    parser.add_argument("--verify-images", type=int, default=32)
    parser.add_argument("--bench-seconds", type=float, default=1.0)
    parser.add_argument("--model", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "trtkit-vgg19.onnx"))
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    from benchmarks.common import cpu_description, describe_cpu, save_results, versions
    model = vgg19_onnx(args.model)
    out = os.path.join(os.path.dirname(args.model), "trtkit-vgg19-build")
    command = [sys.executable, "-m", "trtkit", "build", "--onnx", model, "--data", "sample", "--input-size", "224",
               "--precision", args.precision, "--backend", "onnxruntime", "--calib-images", str(args.calib_images),
               "--verify-images", str(args.verify_images), "--bench-seconds", str(args.bench_seconds),
               "--no-calib-cache", "--out", out]  # no ranges from an earlier run: the statistics pass is measured
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows, code, tail, seconds = profile(command, env)
    peak = max(r["peak_mb"] for r in rows)
    weights_mb = os.path.getsize(model) / 2.0 ** 20
    cpu = cpu_description()
    lines = ["# Build memory: VGG19 ({:.0f} MB ONNX), --precision {}".format(weights_mb, args.precision), "",
             "command: `python benchmarks/build_memory.py --precision {} --calib-images {} --verify-images {} "
             "--bench-seconds {:g}` | {}".format(args.precision, args.calib_images, args.verify_images,
                                                args.bench_seconds, time.strftime("%Y-%m-%dT%H:%M:%S%z")),
             "CPU: {}; load average at the end: {}".format(describe_cpu(cpu), os.getloadavg()),
             "versions: {}".format(", ".join("{} {}".format(k, v) for k, v in sorted(
                 versions("onnx", "onnxruntime", "torch").items()))), "",
             "| step | seconds | peak RSS (MB) | copies of the weights |", "|---|---:|---:|---:|"]
    for row in rows:
        lines.append("| {} | {} | {} | {:.1f} |".format(row["step"], row["seconds"], row["peak_mb"],
                                                         row["peak_mb"] / weights_mb))
    verdict = "within" if peak <= TARGET_MB else "OVER"
    lines += ["", "peak {} MB ({:.1f} copies of the weights), {} the {} MB target; build {} s, exit {}".format(
        peak, peak / weights_mb, verdict, TARGET_MB, seconds, code)]
    text = "\n".join(lines) + "\n"
    print(text)
    if code != 0:
        print("\n".join(tail))
    if not args.no_save:
        record = {"model": "vgg19 (torchvision source, random weights)", "weights_mb": round(weights_mb, 1),
                  "precision": args.precision, "calib_images": args.calib_images,
                  "verify_images": args.verify_images, "bench_seconds": args.bench_seconds, "steps": rows,
                  "peak_mb": peak, "target_mb": TARGET_MB, "seconds": seconds, "exit": code, "cpu": cpu}
        save_results(args.out, "build_memory", record, text)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
