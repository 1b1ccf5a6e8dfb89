"""INT8 on a CPU without VNNI, run for real on an emulated one (issue 21, point 9).

``qemu-x86_64 -cpu EPYC-Milan`` (AMD Zen 3: AVX2 and FMA, no AVX-512, no VNNI; the CPU on which the suite
once failed) runs this very interpreter with that CPU's CPUID. ONNX Runtime and OpenVINO pick their kernels
from CPUID, so they run their AVX2 INT8 kernels, whose ``vpmaddubsw`` adds pairs of u8 x s8 products into
saturating 16-bit integers, and qemu carries out that saturation as the silicon does. The artifacts are built
natively (fast); only the inference runs emulated (about 100x slower), on 48 held-out images (the VNNI artifact,
there to be warned about, on its first batch of 16: ``emulated_int8.VNNI_IMAGES``).

qemu-user comes from Debian's ``qemu-user`` package (.ci/run installs it). Without it the test is skipped
locally and fails in CI, so that the check never passes by having nothing to check.
"""

import json
import os
import platform
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CPU_MODEL = "EPYC-Milan"  # qemu's name for AMD Zen 3 (EPYC 7xx3)
IMAGES = 48


def _qemu():
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("x86 emulation is checked on x86_64 hosts")
    path = shutil.which("qemu-x86_64")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("qemu-x86_64 is missing: .ci/run installs Debian's qemu-user for this test")
        pytest.skip("qemu-x86_64 not installed (apt-get install qemu-user)")
    return path


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """Both INT8 artifacts (made for VNNI and for AVX2), built natively, the held-out images, and native FP32's
    top-1 classes of them: (dict of ONNX paths by target, images .npy path, classes)."""
    _qemu()  # skip (or fail in CI) before building anything
    import trtkit
    from trtkit.backends import get_backend
    from trtkit.data import select
    from trtkit.backends.base import run_batches
    tmp_path = tmp_path_factory.mktemp("emulated")
    int8 = {}
    for target in ("vnni", "avx2"):  # the builds' own verification is not what is checked here: 64 images
        result = trtkit.build(precision="int8" if target == "vnni" else "fp32,int8", backend="onnxruntime",
                              out=str(tmp_path / target), bench_seconds=0, cpu_isa=target, verify_images=64)
        artifact = result.artifact("int8")
        assert artifact["isa"]["target"] == target
        int8[target] = os.path.join(result.dir, artifact["onnx"])
    contract = trtkit.contract.InputContract.from_dict(result.manifest["model"]["input"])
    images = select("sample", contract, split="heldout", limit=IMAGES).load(progress=False).images
    images_path = str(tmp_path / "images.npy")
    np.save(images_path, images)
    fp32 = get_backend("onnxruntime").runner(os.path.join(result.dir, result.artifact("fp32")["onnx"]),
                                             {"threads": 2}).activate()
    reference = run_batches(fp32, images, 16).argmax(1)
    fp32.deactivate()
    return int8, images_path, reference


def _emulated(qemu, runtime, artifacts):
    """(the emulated run's JSON, its ``warning:`` lines) for ``runtime``."""
    int8, images_path, _ = artifacts
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE), OMP_NUM_THREADS="2")
    env.pop("TRTKIT_CPU_FLAGS", None)  # the emulated CPU must be read from CPUID, as the kernels read it
    done = subprocess.run([qemu, "-cpu", CPU_MODEL, sys.executable, os.path.join(HERE, "emulated_int8.py"),
                           runtime, images_path, int8["vnni"], int8["avx2"]], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=900)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert done.returncode == 0, done.stderr[-2000:]
    emulated = json.loads(done.stdout.strip().splitlines()[-1])
    print("emulated {}: {}; emulated seconds {}".format(CPU_MODEL, emulated["cpu"], emulated["seconds"]))
    assert emulated["cpu"]["avx2"] and not emulated["cpu"]["vnni"] and not emulated["cpu"]["avx512"], emulated["cpu"]
    assert emulated["cpu"]["target"] == "avx2"
    return emulated, warnings


def _agreement(emulated, name, reference):
    return float(np.mean(np.array(emulated[name]) == reference[:len(emulated[name])]))


def test_int8_made_for_avx2_is_right_on_an_emulated_cpu_without_vnni_and_vnni_int8_is_warned_about(artifacts):
    emulated, warnings = _emulated(_qemu(), "onnxruntime", artifacts)
    int8, _, reference = artifacts
    # the artifact made for VNNI is named once as wrong for this CPU; the one made for AVX2 is not
    assert len(warnings) == 1 and "made for CPUs with VNNI" in warnings[0], warnings
    assert os.path.basename(int8["vnni"]) in warnings[0]
    assert len(emulated["onnxruntime_avx2"]) == IMAGES
    agreement = dict((name, _agreement(emulated, name, reference)) for name in ("onnxruntime_vnni", "onnxruntime_avx2"))
    print("top-1 agreement with native FP32 on the emulated CPU (VNNI: its first batch only): {}".format(agreement))
    assert agreement["onnxruntime_avx2"] >= 0.98, agreement


@pytest.mark.extended
def test_openvino_runs_the_avx2_int8_right_on_an_emulated_cpu_without_vnni(artifacts):
    """OpenVINO picks its own INT8 kernels from CPUID: the AVX2 artifact as an OpenVINO build writes it (int8
    weights, 7-bit in the first layer: ``precision.openvino_qdq``), emulated (32 s of the emulated run's 70: the
    extended tier). Its u8 x s8 kernels saturate on this CPU where ONNX Runtime's U8U8 ones do not."""
    import onnx
    from trtkit.backends.openvino import _int8_for_openvino
    int8, images_path, reference = artifacts
    model, changed = _int8_for_openvino(int8["avx2"])
    assert changed["int8_weights"]["seven_bit_layers"] >= 1
    openvino_path = int8["avx2"].replace(".onnx", ".openvino.onnx")
    onnx.save(model, openvino_path)
    emulated, _ = _emulated(_qemu(), "openvino", (dict(int8, avx2=openvino_path), images_path, reference))
    assert len(emulated["openvino_avx2"]) == IMAGES
    agreement = _agreement(emulated, "openvino_avx2", artifacts[2])
    print("OpenVINO's top-1 agreement with native FP32 on the emulated CPU: {}".format(agreement))
    assert agreement >= 0.98, agreement
