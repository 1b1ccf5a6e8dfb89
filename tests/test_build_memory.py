"""A build's memory is bounded by a few copies of the model's weights (issue 35): in a child process building the
FP32, FP16 and INT8 variants of a synthetic 100 MB conv net, the FP16 step, the INT8 step (calibration, Q/DQ)
and verification must each stay under ``MAX_COPIES[step]`` times the weights above the resident set it starts
from (the peak resident set, ``VmHWM``, reset through ``/proc/self/clear_refs`` when the step starts). A model
this small has its artifacts verified together, all open at once, by design (``pipeline.verification``).

Measured on the 2-core AMD EPYC (onnx 1.23.2, onnxruntime 1.32.0), copies of the weights above each step's
start: main at b8652d0: FP16 4.7, INT8 3.5, verification 4.0; with ``onnx.write``, the FP16 chunks and the
FP32 model dropped before ONNX Runtime reads its weights (``precision.qdq_file``, calibration): 2.9, 3.0, 4.0.
``benchmarks/build_memory.py`` measures the same on VGG19 step by step.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.extended  # about a minute: an FP16 and an INT8 variant of 100 MB, verified

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_COPIES = {"fp16": 3.5, "int8": 3.3, "verification": 4.5}

CHILD = r"""
import json, sys
def status(key):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) / 1024.0
def reset():  # the peak resident set starts again from the current one
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
import numpy, onnx, onnxruntime
import trtkit.cli
import trtkit.pipeline.variants as variants
import trtkit.pipeline.verification as verification
steps = {}
def measured(name, function):
    def step(*args, **kwargs):  # this step's peak above the resident set it starts from
        reset()
        start = status("VmRSS")
        try:
            return function(*args, **kwargs)
        finally:
            steps[name] = status("VmHWM") - start
    return step
variants.VariantMaker.fp16 = measured("fp16", variants.VariantMaker.fp16)
variants.VariantMaker.int8 = measured("int8", variants.VariantMaker.int8)
verification.verify_all = measured("verification", verification.verify_all)
code = trtkit.cli.main(sys.argv[1:])
print(json.dumps({"steps": steps, "code": code}))
"""


def conv_net(path, hidden=768):
    """A seeded conv net of FP32 weights, most of them in one Gemm of 32768 x ``hidden`` (768: about 100 MB),
    input 3x32x32 (``benchmarks/build_identity.py`` builds it too)."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    rng = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rng.randn(32, 3, 3, 3).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.randn(32).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.randn(hidden, 32 * 32 * 32).astype(np.float32) * 0.01, "w2"),
             numpy_helper.from_array(rng.randn(hidden).astype(np.float32) * 0.1, "b2"),
             numpy_helper.from_array(rng.randn(10, hidden).astype(np.float32) * 0.1, "w3"),
             numpy_helper.from_array(rng.randn(10).astype(np.float32) * 0.1, "b3")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["g"]),
             helper.make_node("Gemm", ["g", "w3", "b3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", 1, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", 1, ["N", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return sum(i.ByteSize() for i in inits) / 2.0 ** 20


def measure(tmp_path, tree=ROOT):
    """({step: its peak above its start in MB} of the build's FP16 and INT8 steps and verification, in a child
    process with ``tree`` on its path; the weights in MB)."""
    pytest.importorskip("onnxruntime")
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("no /proc/self/clear_refs to reset the peak resident set with")
    model = str(tmp_path / "net.onnx")
    weights_mb = conv_net(model)
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    command = [sys.executable, "-c", CHILD, "build", "--onnx", model, "--data", "sample", "--input-size", "32",
               "--precision", "fp32,fp16,int8", "--backend", "onnxruntime", "--calib-images", "16",
               "--calib-batch-size", "8", "--verify-images", "16", "--bench-seconds", "0.1", "--no-calib-cache",
               "--quiet", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          cwd=str(tmp_path))  # not a tree's root: its trtkit would come first on the path
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["code"] == 0, done.stderr[-2000:]
    return figures["steps"], weights_mb


def test_build_steps_stay_within_a_few_copies_of_the_weights(tmp_path):
    steps, weights_mb = measure(tmp_path)
    assert weights_mb > 90
    copies = dict((name, above / weights_mb) for name, above in steps.items())
    assert set(copies) == set(MAX_COPIES)
    over = ["{} {:.1f} (at most {})".format(name, copies[name], MAX_COPIES[name]) for name in sorted(copies)
            if copies[name] > MAX_COPIES[name]]
    assert not over, "copies of the {:.0f} MB of weights a step held above its start: {}".format(
        weights_mb, ", ".join(over))


if __name__ == "__main__":  # python tests/test_build_memory.py TREE: the figures of another tree (e.g. main's)
    import pathlib
    import tempfile
    steps, weights_mb = measure(pathlib.Path(tempfile.mkdtemp()), sys.argv[1] if len(sys.argv) > 1 else ROOT)
    print(", ".join("{} {:.0f} MB ({:.1f} copies)".format(name, above, above / weights_mb)
                    for name, above in sorted(steps.items())))
