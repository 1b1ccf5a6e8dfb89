"""INT8 right on every x86 CPU: with VNNI (32-bit sums) and without (16-bit saturating pairs, vpmaddubsw).

This machine's ISA is printed in the pytest header (conftest). A CPU without VNNI cannot be run here, so
the saturation is emulated exactly where it happens: the pairwise u8 x s8 products of real activations and
real weights of the sample model, summed into int16 as vpmaddubsw does. 8-bit weights saturate there; the
7-bit weights trtkit writes for such CPUs cannot.
"""

import json
import os

import numpy as np
import pytest

from trtkit.cpuinfo import _cpuid_flags, check_artifact, isa_from_flags, mismatch, resolve_target, this_cpu, weight_type

# recorded /proc/cpuinfo flag lines (the ISA-relevant part) of the CPUs this project's machines had
ICE_LAKE = ("fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512cd avx512bw avx512vl "
            "avx512ifma avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq")
ZEN4 = ("fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512ifma avx512cd avx512bw "
        "avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg")
ZEN3 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi1 bmi2 sha_ni vaes vpclmulqdq"


def test_the_three_cpus_met_read_right():
    for flags, vnni, avx512 in ((ICE_LAKE, True, True), (ZEN4, True, True), (ZEN3, False, False)):
        isa = isa_from_flags(flags)
        assert (isa.vnni, isa.avx512, isa.avx2) == (vnni, avx512, True)
        assert isa.target == ("vnni" if vnni else "avx2")
    assert isa_from_flags("fp asimd", arch="aarch64").target == "aarch64"  # a Jetson: no x86 saturation
    assert weight_type("vnni") == "int8" and weight_type("avx2") == "uint8"


def test_cpuid_outranks_proc_cpuinfo_where_they_differ():
    # qemu -cpu EPYC-Milan on a Zen 4 host: /proc/cpuinfo is the host's, CPUID (what the kernels see) is Zen 3
    zen3_cpuid = {"AVX2": True, "AVX512F": False, "AVX512VNNI": False}
    assert isa_from_flags(_cpuid_flags(ZEN4.split(), zen3_cpuid)).target == "avx2"
    zen4_cpuid = {"AVX2": True, "AVX512F": True, "AVX512VNNI": True}
    assert isa_from_flags(_cpuid_flags(ZEN3.split(), zen4_cpuid)).target == "vnni"
    # AVX-VNNI (Alder Lake) has no NumPy name: /proc/cpuinfo tells it, under a CPUID that has AVX2
    alder_lake = ZEN3 + " avx_vnni"
    assert isa_from_flags(_cpuid_flags(alder_lake.split(), {"AVX2": True, "AVX512F": False})).target == "vnni"
    assert isa_from_flags(_cpuid_flags(alder_lake.split(), {"AVX2": False})).target == "avx2"
    # no CPUID reading (old NumPy, not x86): /proc/cpuinfo as it is
    assert isa_from_flags(_cpuid_flags(ZEN4.split(), {})).target == "vnni"


def test_a_vnni_artifact_on_a_cpu_without_vnni_is_warned_about(monkeypatch, capsys):
    monkeypatch.setenv("TRTKIT_CPU_FLAGS", ZEN3)
    assert this_cpu().target == "avx2" and resolve_target("auto") == "avx2"
    assert "saturate" in mismatch("vnni") and mismatch("avx2") is None
    check_artifact(json.dumps({"encoding": "cpu", "target": "vnni", "weight_type": "int8"}), "m.int8.onnx")
    assert "m.int8.onnx: this INT8 artifact was made for CPUs with VNNI" in capsys.readouterr().err
    monkeypatch.setenv("TRTKIT_CPU_FLAGS", ZEN4)
    check_artifact(json.dumps({"encoding": "cpu", "target": "avx2", "weight_type": "uint8"}), "m.int8.onnx")
    err = capsys.readouterr().err  # uint8 weights are right everywhere, only slower where VNNI is
    assert "made for CPUs without VNNI (uint8 weights): right here, but slower" in err and "saturate" not in err
    assert "slower" in mismatch("avx2") and mismatch("vnni") is None


def _im2col(x, kernel, stride, pad):
    n, c, h, w = x.shape
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    cols = [x[:, ci, i:i + stride * oh:stride, j:j + stride * ow:stride]
            for ci in range(c) for i in range(kernel) for j in range(kernel)]
    return np.stack(cols, -1).reshape(-1, c * kernel * kernel)


def saturated_pairs(cols, weights):
    """How many vpmaddubsw pair sums (u8 x s8 + u8 x s8 into int16) leave the int16 range."""
    k = cols.shape[1] - cols.shape[1] % 2
    products = cols[:, None, :k].astype(np.int32) * weights[None, :, :k].astype(np.int32)
    pairs = products[:, :, 0::2] + products[:, :, 1::2]
    return int(np.sum((pairs > 32767) | (pairs < -32768)))


@pytest.mark.extended  # why AVX2 gets uint8 weights; what it gets is the landing tier's (the AVX2 build, emulation)
def test_int8_weights_saturate_16_bit_pairs_on_real_tensors(sample, tmp_path):
    """Why an AVX2 target gets uint8 weights: the u8 x s8 kernels of CPUs without VNNI (vpmaddubsw) sum pairs
    of products in 16 bits, and the sample's real activations with its int8 weights overflow some of them."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper
    from trtkit.data import select
    from trtkit.onnx.export import export_onnx
    from trtkit.precision.calibrate import calibrate
    from trtkit.precision.qdq import cpu_range, quantize_weight
    from trtkit.precision.stats import _instrumented_session
    model = sample[0]
    path = str(tmp_path / "sample.onnx")
    export_onnx(model, path, contract=model.input_contract)
    graph = onnx.load(path)
    images = select("sample", model.input_contract, split="train", limit=64, seed=0)
    ranges = calibrate(path, images, "entropy", use_cache=False).ranges
    weights = dict((i.name, numpy_helper.to_array(i)) for i in graph.graph.initializer)
    convs = [n for n in graph.graph.node if n.op_type == "Conv" and n.input[1] in weights]
    names = sorted(set(n.input[0] for n in convs))
    session = _instrumented_session(graph, names)
    batch = images.load(progress=False).images[:8]
    activations = dict(zip(names, session.run(names, {session.get_inputs()[0].name: batch})))
    saturated = 0
    for node in convs:
        w = weights[node.input[1]]
        attrs = dict((a.name, onnx.helper.get_attribute_value(a)) for a in node.attribute)
        rmin, rmax = cpu_range(ranges[node.input[0]])
        rmin, rmax = min(rmin, 0.0), max(rmax, 0.0)
        scale = (rmax - rmin) / 255.0
        u8 = np.clip(np.round(activations[node.input[0]] / scale) + np.round(-rmin / scale), 0, 255)
        cols = _im2col(u8, w.shape[2], attrs.get("strides", [1])[0], attrs.get("pads", [0])[0])[:600]
        q, _ = quantize_weight(w, 0)
        assert np.abs(q).max() <= 127
        saturated += saturated_pairs(cols, q.reshape(q.shape[0], -1))
    assert saturated > 0, "int8 weights should saturate some 16-bit pairs of the sample's real tensors"


def test_an_avx2_build_writes_uint8_weights_keeps_its_gate_and_records_its_target(tmp_path):
    onnx = pytest.importorskip("onnx")
    import trtkit
    from onnx import numpy_helper
    from trtkit.precision.int8_target import int8_target
    isa = this_cpu().describe()
    result = trtkit.build(precision="fp32,int8", backend="onnxruntime", out=str(tmp_path / "b"), bench_seconds=0,
                          cpu_isa="avx2")
    int8 = result.artifact("int8")
    assert int8["isa"]["target"] == "avx2" and int8["isa"]["weight_type"] == "uint8"
    assert int8["status"] == "ok" and int8["verify"]["top1_agreement"] >= 0.98, (isa, int8["verify"])
    graph = onnx.load(os.path.join(result.dir, int8["onnx"]))
    assert int8_target(graph) == {"encoding": "cpu", "target": "avx2", "weight_type": "uint8"}
    inits = dict((i.name, i) for i in graph.graph.initializer)
    weights = [n for n in graph.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
               and len(inits[n.input[0]].dims) == 4]
    assert weights, "no quantized conv weights"
    for node in weights:  # every conv weight: uint8 around a zero point of 128, all 8 bits used
        q = numpy_helper.to_array(inits[node.input[0]])
        zero = numpy_helper.to_array(inits[node.input[2]])
        assert q.dtype == np.uint8 and zero.dtype == np.uint8 and np.all(zero == 128), node.name
    spread = max(int(np.abs(numpy_helper.to_array(inits[n.input[0]]).astype(np.int32) - 128).max()) for n in weights)
    assert spread >= 126, spread  # not 7-bit: the full signed range around the zero point
