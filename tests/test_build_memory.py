"""A build's memory is bounded by a few copies of the model's weights (issue 35): the steps that make the FP32,
FP16 and INT8 variants of a synthetic 100 MB conv net (loading, normalizing, FP16, calibration, Q/DQ), in a
child process, must stay under ``MAX_COPIES`` times its weights above the child's resident set before the build
(its peak resident set, ``VmHWM``, read when verification starts: a model this small has its artifacts
verified together, all open at once, by design; see ``pipeline.verification``).

Measured on the 2-core AMD EPYC (onnx 1.23.2, onnxruntime 1.32.0): before the writers of ``onnx.write`` and
``weights.save_split`` (main at b8652d0) the build peaked at 7.0 copies above its start; after, at 3.1.
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
MAX_COPIES = 4.5

CHILD = r"""
import json, sys
def status(key):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) / 1024.0
import numpy, onnx, onnxruntime
import trtkit.cli
import trtkit.pipeline.verification as verification
marks = {}
verify_all = verification.verify_all
def marked(*args, **kwargs):  # the peak of the steps that make the variants, before verification opens them
    marks["variants"] = status("VmHWM")
    return verify_all(*args, **kwargs)
verification.verify_all = marked
before = status("VmRSS")
code = trtkit.cli.main(sys.argv[1:])
print(json.dumps({"before": before, "variants": marks.get("variants"), "peak": status("VmHWM"), "code": code}))
"""


def conv_net(path):
    """A seeded conv net of about 100 MB of FP32 weights (most of them in one Gemm), input 3x32x32."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    rng = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rng.randn(32, 3, 3, 3).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.randn(32).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.randn(768, 32 * 32 * 32).astype(np.float32) * 0.01, "w2"),
             numpy_helper.from_array(rng.randn(768).astype(np.float32) * 0.1, "b2"),
             numpy_helper.from_array(rng.randn(10, 768).astype(np.float32) * 0.1, "w3"),
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
    """(peak above the start until verification in MB, weights in MB) of the build in a child process with
    ``tree`` on its path."""
    pytest.importorskip("onnxruntime")
    if not os.path.isfile("/proc/self/status"):
        pytest.skip("no /proc/self/status to read the peak resident set from")
    model = str(tmp_path / "net.onnx")
    weights_mb = conv_net(model)
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    command = [sys.executable, "-c", CHILD, "build", "--onnx", model, "--data", "sample", "--input-size", "32",
               "--precision", "fp32,fp16,int8", "--backend", "onnxruntime", "--calib-images", "16",
               "--calib-batch-size", "8", "--verify-images", "16", "--bench-seconds", "0.1", "--no-calib-cache",
               "--quiet", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["code"] == 0, done.stderr[-2000:]
    return figures["variants"] - figures["before"], weights_mb


def test_build_stays_within_a_few_copies_of_the_weights(tmp_path):
    above, weights_mb = measure(tmp_path)
    assert weights_mb > 90
    assert above < MAX_COPIES * weights_mb, "the build's variant steps peaked {:.0f} MB above its start: {:.1f} copies of the " \
        "{:.0f} MB of weights (at most {})".format(above, above / weights_mb, weights_mb, MAX_COPIES)


if __name__ == "__main__":  # python tests/test_build_memory.py TREE: the figures of another tree (e.g. main's)
    import pathlib
    import tempfile
    above, weights_mb = measure(pathlib.Path(tempfile.mkdtemp()), sys.argv[1] if len(sys.argv) > 1 else ROOT)
    print("{:.0f} MB above the start until verification, {:.1f} copies of {:.0f} MB".format(
        above, above / weights_mb, weights_mb))
