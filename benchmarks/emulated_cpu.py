#!/usr/bin/env python3
"""INT8 on a CPU without VNNI, measured on an emulated one (issue 21, point 9).

On an AMD Zen 3 (AVX2, no AVX-512, no VNNI) the test suite once failed: INT8 agreement fell where 8-bit
weights met large activations, because the AVX2 INT8 kernels add pairs of u8 x s8 products into saturating
16-bit integers (``vpmaddubsw``). This machine has VNNI, so the models of those tests are run here under
``qemu-x86_64 -cpu EPYC-Milan`` (Zen 3's CPUID: ONNX Runtime picks its AVX2 kernels, and qemu carries out their
saturation as the silicon does). Each model's INT8 is built natively twice, for ``--cpu-isa vnni`` (int8
weights) and ``--cpu-isa avx2`` (uint8 weights, zero point 128: ONNX Runtime's U8U8 kernels), and its top-1 agreement with native FP32 is measured on the
same held-out images natively (VNNI kernels) and emulated (AVX2 kernels).

Models: the sample ResNet18 (64x64 digits), the MobileNetV3-style module of ``tests/test_onnx_styles.py``
(trained briefly on digits: depthwise, hardswish, squeeze-excite) and the nine ONNX Model Zoo Caffe2 replicas
of ``tests/test_onnx_zoo.py`` (random features, a head fitted to digits, minmax ranges as that test builds
them): the models whose tests failed on a real Zen 3. Emulation runs about a hundred times slower than the CPU, so ``--images`` stays small: 64 images
resolve agreement to 1.6 points. No figure is a speed.

Writes benchmarks/results/<device>/emulated_cpu.{json,md}.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the zoo replicas: tests/onnx_zoo.py

TARGETS = ("vnni", "avx2")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", default="EPYC-Milan", help="qemu's CPU model to emulate (default: EPYC-Milan, Zen 3)")
    parser.add_argument("--images", type=int, default=64, help="held-out images per model (default: 64)")
    parser.add_argument("--models", default="sample,mobilenet,zoo",
                        help="any of sample, mobilenet, zoo (default: all three)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("JOBS_JSON", "RESULT_JSON"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def worker(jobs_path, result_path):
    """Under emulation: the top-1 class of every image from every artifact (ONNX Runtime, trtkit's runner)."""
    import numpy as np
    from trtkit.backends import get_backend
    from trtkit.cpuinfo import this_cpu
    with open(jobs_path) as handle:
        jobs = json.load(handle)
    result = {"cpu": this_cpu().to_dict(), "top1": {}}
    for job in jobs:
        images = np.load(job["images"])
        runner = get_backend("onnxruntime").runner(job["path"], {"threads": 2}).activate()
        result["top1"][job["key"]] = np.concatenate(
            [runner.infer(images[i:i + 1]) for i in range(len(images))]).reshape(len(images), -1).argmax(1).tolist()
        runner.deactivate()
        print("emulated: {} done".format(job["key"]), file=sys.stderr, flush=True)
    with open(result_path, "w") as handle:
        json.dump(result, handle)


def native_top1(path, images):
    import numpy as np
    from trtkit.backends import get_backend
    runner = get_backend("onnxruntime").runner(path, {"threads": 2}).activate()
    try:
        return np.concatenate([runner.infer(images[i:i + 1]) for i in range(len(images))]
                              ).reshape(len(images), -1).argmax(1)
    finally:
        runner.deactivate()


def sources(names, work):
    """[(key, trtkit.build keywords)] of the models asked for."""
    from trtkit.contract import InputContract
    from trtkit.data import load_images
    found = []
    if "sample" in names:
        found.append(("sample_resnet18", {}))
    if "zoo" in names or "mobilenet" in names:
        digits = load_images("sample", InputContract(size=64), split="train", limit=800)
    if "mobilenet" in names:  # tests/test_onnx_styles.py's trained module, exported by trtkit (dynamo)
        from zoo_models import mobilenet_v3_style, train_briefly
        module = train_briefly(mobilenet_v3_style(10), digits.images, digits.labels, epochs=4)
        found.append(("mobilenet_v3_style", {"model": module, "input_size": 64, "calib_method": "minmax",
                                               "calib_images": 256}))
    if "zoo" in names:
        import onnx_zoo
        for name in onnx_zoo.CAFFE2_MODELS:
            path = onnx_zoo.save(onnx_zoo.fit_head(onnx_zoo.caffe2_zoo(name), digits.images[:400],
                                                   digits.labels[:400]), os.path.join(work, name + ".onnx"))
            found.append(("zoo_" + name, {"onnx": path, "calib_method": "minmax", "calib_images": 256}))
    return found


def builds(names, work, count):
    """{model: {"fp32": path, "vnni": path, "avx2": path, "images": npy path}} built natively."""
    import numpy as np
    import trtkit
    from trtkit.contract import InputContract
    from trtkit.data import select
    heldout = select("sample", InputContract(size=64), split="heldout", limit=count).load(progress=False).images
    made = {}
    for key, keywords in sources(names, work):
        entry = {"images": os.path.join(work, key + ".images.npy")}
        for target in TARGETS:
            result = trtkit.build(out=os.path.join(work, key, target), precision="fp32,int8", backend="onnxruntime",
                                  bench_seconds=0, verify_images=count, cpu_isa=target, **keywords)
            entry[target] = os.path.join(result.dir, result.artifact("int8")["path"])
            entry["fp32"] = os.path.join(result.dir, result.artifact("fp32")["path"])
        np.save(entry["images"], heldout)
        made[key] = entry
    return made


def measure(args, work):
    import numpy as np
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        raise SystemExit("qemu-x86_64 not found: apt-get install qemu-user")
    made = builds([m.strip() for m in args.models.split(",")], work, args.images)
    jobs = [{"key": "{}|{}".format(key, target), "path": entry[target], "images": entry["images"]}
            for key, entry in made.items() for target in TARGETS]
    jobs_path, result_path = os.path.join(work, "jobs.json"), os.path.join(work, "emulated.json")
    with open(jobs_path, "w") as handle:
        json.dump(jobs, handle)
    start = time.time()
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="2")
    env.pop("TRTKIT_CPU_FLAGS", None)
    done = subprocess.run([qemu, "-cpu", args.cpu, sys.executable, os.path.abspath(__file__), "--worker", jobs_path,
                           result_path], env=env, stderr=subprocess.PIPE, universal_newlines=True)
    if done.returncode != 0:
        raise SystemExit("the emulated run failed:\n" + done.stderr[-3000:])
    emulated_seconds = time.time() - start
    with open(result_path) as handle:
        emulated = json.load(handle)
    rows = []
    for key, entry in made.items():
        images = np.load(entry["images"])
        reference = native_top1(entry["fp32"], images)
        row = {"model": key, "images": int(len(images))}
        for target in TARGETS:
            row["native_" + target] = round(float(np.mean(native_top1(entry[target], images) == reference)), 4)
            row["emulated_" + target] = round(float(np.mean(
                np.array(emulated["top1"]["{}|{}".format(key, target)]) == reference)), 4)
        rows.append(row)
    return {"emulated_cpu": args.cpu, "emulated_isa": emulated["cpu"], "emulated_seconds": round(emulated_seconds),
            "rows": rows}


def markdown(record):
    lines = ["# INT8 on an emulated CPU without VNNI", "",
             "- date: {}; command: `{}`".format(record["when"], record["command"]),
             "- host CPU: {}".format(record["cpu"]),
             "- emulated: `qemu-x86_64 -cpu {}`, which trtkit reads as {} ({} s emulated)".format(
                 record["emulated_cpu"], record["emulated_isa"], record["emulated_seconds"]),
             "- top-1 agreement of each INT8 with native FP32 on the same held-out images; vnni: int8 weights, "
             "avx2: uint8 weights, zero point 128 (what `--cpu-isa auto` makes on such a CPU)", "",
             "| model | images | vnni INT8, native | vnni INT8, emulated Zen 3 | avx2 INT8, native | avx2 INT8, "
             "emulated Zen 3 |", "|---|---:|---:|---:|---:|---:|"]
    for row in record["rows"]:
        lines.append("| {} | {} | {:.1%} | {:.1%} | {:.1%} | {:.1%} |".format(
            row["model"], row["images"], row["native_vnni"], row["emulated_vnni"], row["native_avx2"],
            row["emulated_avx2"]))
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    from benchmarks.common import cpu_description, describe_cpu, save_results, versions
    work = tempfile.mkdtemp(prefix="trtkit-emulated-")
    try:
        record = {"benchmark": "emulated_cpu", "command": " ".join(["python", "benchmarks/emulated_cpu.py"] + list(
            argv if argv is not None else sys.argv[1:])), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "cpu": describe_cpu(cpu_description()), "versions": versions("trtkit", "onnxruntime", "numpy")}
        record.update(measure(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = markdown(record)
    print("\n" + text)
    if not args.no_save:
        save_results(args.out, "emulated_cpu", record, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
