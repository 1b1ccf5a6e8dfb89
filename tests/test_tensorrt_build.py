"""Real TensorRT-RTX engines of the sample ResNet18, built on this CPU-only machine, and their sidecars.

TensorRT-RTX builds ahead of time without a GPU, so these builds are real;
running them needs a GPU (tests marked ``gpu`` are skipped without one).
"""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import run_script
from trtkit.backends import get_backend, select_backend
from trtkit.backends.base import BuildInputs
from trtkit.backends.tensorrt import gpu as gpu_probe
from trtkit.backends.tensorrt.options import TensorRTOptions
from trtkit.backends.tensorrt.sidecar import REQUIRED, check_compatible, read_sidecar
from trtkit.deps import available
from trtkit.errors import DeviceUnavailable, EngineMismatch, InputError, MissingDependency
from trtkit.versions import parse_version

pytestmark = pytest.mark.skipif(not available("tensorrt_rtx"), reason="tensorrt-rtx-cu12 is not installed")
NO_GPU = gpu_probe.probe() is None


@pytest.fixture(scope="module")
def rtx_build(sample, tmp_path_factory):
    """build_engine.py --backend tensorrt-rtx --precision fp32,fp16,int8 on the sample ResNet18: (out, manifest)."""
    out = str(tmp_path_factory.mktemp("rtx") / "engines")
    args = ["--backend", "tensorrt-rtx", "--precision", "fp32,fp16,int8", "--calib-images", "64",
            "--verify-images", "16", "--bench-seconds", "0", "--batch", "1:4:16", "--out", out, "--json"]
    result = run_script("build_engine.py", args)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(os.path.join(out, "manifest.json")) as handle:
        return out, json.load(handle)


def _artifact(manifest, precision):
    return [a for a in manifest["artifacts"] if a["precision"] == precision][0]


def test_rtx_engines_exist_with_complete_sidecars(rtx_build):
    out, manifest = rtx_build
    assert manifest["backend"]["name"] == "tensorrt-rtx"
    for artifact in manifest["artifacts"]:
        path = os.path.join(out, artifact["path"])
        assert path.endswith(".{}.engine".format(artifact["precision"])) and os.path.getsize(path) > 1000000
        info = artifact["backend_info"]
        assert info["flavour"] == "tensorrt-rtx" and info["sidecar"] == artifact["path"] + ".json"
        record = read_sidecar(path)
        assert all(record.get(key) is not None for key in REQUIRED)
        assert record["precision"] == artifact["precision"] and record["engine_bytes"] == artifact["bytes"]
        assert record["tensorrt_version"] == info["tensorrt_version"] and record["strongly_typed"] is True
        assert record["inputs"][0]["shape"] == [-1, 3, 64, 64] and record["outputs"][0]["shape"] == [-1, 10]
        assert record["profile"]["input"] == [[1, 3, 64, 64], [4, 3, 64, 64], [16, 3, 64, 64]]
        if NO_GPU:
            assert artifact["status"] == "built" and "no NVIDIA GPU" in artifact["status_detail"]


def test_engine_sizes_follow_precision(rtx_build):
    _, manifest = rtx_build
    fp32, fp16 = _artifact(manifest, "fp32")["bytes"], _artifact(manifest, "fp16")["bytes"]
    assert 0.4 < fp16 / float(fp32) < 0.6
    assert _artifact(manifest, "int8")["bytes"] < 0.75 * fp16
    assert _artifact(manifest, "int8")["int8_encoding"] == "tensorrt"


@pytest.fixture(scope="module")
def qdq_onnx(sample_build, tmp_path_factory):
    """A TensorRT-style Q/DQ INT8 ONNX (symmetric s8, per-channel weights, float bias) made with ONNX Runtime."""
    quant = pytest.importorskip("onnxruntime.quantization")
    src_dir, manifest = sample_build
    fp32 = os.path.join(src_dir, _artifact(manifest, "fp32")["path"])
    out = str(tmp_path_factory.mktemp("qdq") / "resnet18.int8.onnx")

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            rng = np.random.RandomState(0)
            self.batches = iter([{"input": rng.rand(4, 3, 64, 64).astype(np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.batches, None)

    quant.quantize_static(fp32, out, Reader(), quant_format=quant.QuantFormat.QDQ, per_channel=True,
                          activation_type=quant.QuantType.QInt8, weight_type=quant.QuantType.QInt8,
                          extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                         "QuantizeBias": False})
    return out


def test_int8_engine_from_a_qdq_onnx_is_smallest(qdq_onnx, rtx_build, tmp_path):
    _, manifest = rtx_build
    out = str(tmp_path / "resnet18.int8.engine")
    info = get_backend("tensorrt-rtx").build(qdq_onnx, "int8", out,
                                             BuildInputs(tensorrt=TensorRTOptions(compute_capabilities="8.6,8.9")))
    assert info["int8_path"] == "qdq" and info["precision_built"] == "int8"
    assert os.path.getsize(out) < 0.75 * _artifact(manifest, "fp16")["bytes"]
    record = read_sidecar(out)
    assert record["compute_capabilities"] == ["8.6", "8.9"] and record["builder_flags"] == []


def test_implicit_int8_is_refused_on_tensorrt_rtx(qdq_onnx, tmp_path):
    with pytest.raises(InputError) as info:
        get_backend("tensorrt-rtx").build(qdq_onnx, "int8", str(tmp_path / "x.engine"),
                                          BuildInputs(tensorrt=TensorRTOptions(int8_path="implicit")))
    assert "no INT8 calibrators" in str(info.value)
    assert not os.path.exists(str(tmp_path / "x.engine"))


def _copy_engine(rtx_build, tmp_path, precision="fp16"):
    out, manifest = rtx_build
    name = _artifact(manifest, precision)["path"]
    for suffix in ("", ".json"):
        shutil.copyfile(os.path.join(out, name + suffix), str(tmp_path / (name + suffix)))
    return str(tmp_path / name)


def test_engine_from_another_tensorrt_version_is_refused(rtx_build, tmp_path):
    engine = _copy_engine(rtx_build, tmp_path)
    record = read_sidecar(engine)
    record["tensorrt_version"] = "1.0.0.21"
    with open(engine + ".json", "w") as handle:
        json.dump(record, handle)
    with pytest.raises(EngineMismatch) as info:
        get_backend("tensorrt-rtx").runner(engine).activate()
    message = str(info.value)
    assert "1.0.0.21" in message and "rebuild it on this device" in message


def test_engine_for_another_gpu_is_refused(rtx_build, tmp_path):
    record = read_sidecar(_copy_engine(rtx_build, tmp_path))
    version = parse_version(record["tensorrt_version"], length=None)
    orin = {"name": "Orin", "compute_capability": "8.7"}
    record["gpu"] = {"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6"}
    with pytest.raises(EngineMismatch) as info:
        check_compatible(record, "tensorrt-rtx", version, orin)
    assert "RTX 3090" in str(info.value) and "8.7" in str(info.value)
    record["compute_capabilities"] = ["8.6", "8.9"]
    with pytest.raises(EngineMismatch) as info:
        check_compatible(record, "tensorrt-rtx", version, orin)
    assert "targets compute capability 8.6, 8.9" in str(info.value)
    check_compatible(record, "tensorrt-rtx", version, {"name": "RTX 4090", "compute_capability": "8.9"})
    with pytest.raises(EngineMismatch):
        check_compatible(record, "tensorrt", version, None)


def test_truncated_engine_gives_a_clear_error(rtx_build, tmp_path):
    engine = _copy_engine(rtx_build, tmp_path)
    with open(engine, "r+b") as handle:
        handle.truncate(os.path.getsize(engine) // 2)
    with pytest.raises(InputError) as info:
        get_backend("tensorrt-rtx").runner(engine).activate()
    assert "truncated" in str(info.value)


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU behaviour")
def test_no_gpu_runner_is_unavailable_and_auto_picks_onnxruntime(rtx_build, tmp_path):
    engine = _copy_engine(rtx_build, tmp_path)
    runner = get_backend("tensorrt-rtx").runner(engine)
    assert [t.name for t in runner.inputs()] == ["input"] and runner.outputs()[0].shape == (None, 10)
    with pytest.raises(DeviceUnavailable):
        runner.activate()
    backend, why = select_backend("auto")
    assert backend.name == "onnxruntime" and "tensorrt" in why


def test_bad_tensorrt_options_are_input_errors(qdq_onnx, tmp_path):
    for options, words in (({"batch": "8:4:16"}, "MIN:OPT:MAX"), ({"compute_capabilities": "eight"}, "8.6,8.9"),
                           ({"via": "tf"}, "--via"), ({"dla_core": 0, "batch": "1:8:16"}, "fixed batch"),
                           ({"workspace_mib": 0}, "--workspace"), ({"int8_path": "calibrated"}, "--int8-path")):
        with pytest.raises(InputError) as info:
            TensorRTOptions(**options)
        assert words in str(info.value)
    backend = get_backend("tensorrt-rtx")
    with pytest.raises(InputError) as info:  # TensorRT-RTX has no DLA
        backend.build(qdq_onnx, "int8", str(tmp_path / "x.engine"), BuildInputs(tensorrt=TensorRTOptions(dla_core=0)))
    assert "DLA core 0" in str(info.value)
    with pytest.raises(InputError) as info:  # DLA runs FP16/INT8 only
        backend.build(qdq_onnx, "fp32", str(tmp_path / "x.engine"), BuildInputs(tensorrt=TensorRTOptions(dla_core=0)))
    assert "FP16 and INT8 layers only" in str(info.value)
    assert os.listdir(str(tmp_path)) == []


def test_profile_shapes_take_the_batch_profile_and_the_contracts_image_size():
    from trtkit.backends.tensorrt.builder import profile_shapes
    batch = (1, 8, 32)
    assert profile_shapes([("input", (-1, 3, 64, 64))], batch, (3, 64, 64)) == {
        "input": [[1, 3, 64, 64], [8, 3, 64, 64], [32, 3, 64, 64]]}
    # paddle2onnx's [-1, 3, ?, ?]: H and W at the contract's 48x192, min = opt = max
    assert profile_shapes([("x", (-1, 3, -1, -1))], batch, (3, 48, 192)) == {
        "x": [[1, 3, 48, 192], [8, 3, 48, 192], [32, 3, 48, 192]]}
    assert profile_shapes([("x", (1, 3, -1, -1))], batch, (3, 48, 192)) == {"x": [[1, 3, 48, 192]] * 3}
    assert profile_shapes([("x", (4, 3, 48, 192))], batch, (3, 48, 192)) is None  # nothing dynamic: no profile
    assert profile_shapes([("x", (-1, 3, 48, 192))], (4, 4, 4), None) == {"x": [[4, 3, 48, 192]] * 3}
    with pytest.raises(InputError, match="dynamic dims"):
        profile_shapes([("x", (-1, 3, -1, -1))], batch, None)  # no contract: no size to build at
    with pytest.raises(InputError, match="tokens"):
        profile_shapes([("tokens", (-1, -1))], batch, (3, 48, 192))  # not an image: no size to take


def test_a_refusal_hint_follows_tensorrts_reason():
    from trtkit.backends.tensorrt.builder import refusal_hint
    assert "--workspace" in refusal_hint("")
    said = "ERROR: Error Code 4: API Usage Error (?: Input dimensions with this name have different constant values)"
    assert "names them apart" in refusal_hint(said)
    assert "TensorRT's own" in refusal_hint("ERROR: reshape changes volume")


def test_dla_profile_is_fixed_at_opt():
    assert TensorRTOptions(dla_core=1).profile((1, 8, 32)) == (8, 8, 8)
    assert TensorRTOptions().profile((1, 8, 32)) == (1, 8, 32)
    assert TensorRTOptions(batch="4").profile((1, 8, 32)) == (4, 4, 4)


@pytest.mark.skipif(available("torch2trt"), reason="torch2trt is installed")
def test_via_torch2trt_says_how_to_install_it(tmp_path):
    with pytest.raises(MissingDependency) as info:
        get_backend("tensorrt").build(None, "fp16", str(tmp_path / "x.engine"),
                                      BuildInputs(tensorrt=TensorRTOptions(via="torch2trt")))
    assert "NVIDIA-AI-IOT/torch2trt" in str(info.value)


@pytest.mark.gpu
@pytest.mark.skipif(NO_GPU, reason="needs an NVIDIA GPU")
def test_rtx_engine_runs_and_agrees_on_a_gpu(rtx_build, sample_build):
    out, manifest = rtx_build
    runner = get_backend("tensorrt-rtx").runner(os.path.join(out, _artifact(manifest, "fp16")["path"]))
    images = np.random.RandomState(0).rand(5, 3, 64, 64).astype(np.float32)
    with runner:
        logits = runner.infer(images)
        assert logits.shape == (5, 10) and np.isfinite(logits).all()
        with pytest.raises(InputError):
            runner.infer(np.zeros((17, 3, 64, 64), np.float32))


def test_int8_without_fast_int8_falls_back_to_fp16(sample_build, tmp_path, capsys):
    """Jetson Nano (SM 5.3) has no fast INT8: the FP16 variant is built instead, with a warning."""
    import tensorrt_rtx
    from trtkit.backends.tensorrt.builder import _source_and_mode
    src_dir, manifest = sample_build
    inputs = BuildInputs(fp32_onnx=os.path.join(src_dir, _artifact(manifest, "fp32")["path"]), work_dir=str(tmp_path))
    nano = {"fp16": gpu_probe.fast_fp16("5.3"), "int8": gpu_probe.fast_int8("5.3")}
    assert nano == {"fp16": True, "int8": False}
    source, built, int8_path, note = _source_and_mode(tensorrt_rtx, "tensorrt-rtx", "unused.int8.onnx", "int8",
                                                      inputs, TensorRTOptions(), nano)
    assert built == "fp16" and int8_path is None and "no fast INT8" in note
    assert os.path.isfile(source) and source.endswith(".fp16.onnx")
    assert "building FP16 instead of INT8" in capsys.readouterr().err


def test_a_refused_build_says_tensorrts_reason_in_one_line(tmp_path):
    """TensorRT says why it refuses an engine only through its logger: the refusal quotes it (a graph whose
    Reshape fixes a volume the 48x192 profile contradicts; it parses, and the builder refuses it for real)."""
    pytest.importorskip("tensorrt_rtx")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from conftest import partial_files, run_cli
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])
    inits = [numpy_helper.from_array(np.array([0, 3072], np.int64), "shape"),
             numpy_helper.from_array(np.random.RandomState(0).randn(3072, 10).astype(np.float32), "w")]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "w"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "flat32", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = str(tmp_path / "flat32.onnx")
    onnx.save(model, path)
    out = str(tmp_path / "out")
    proc = run_cli(["build", "--onnx", path, "--backend", "tensorrt-rtx", "--input-size", "48x192",
                    "--precision", "fp32", "--bench-seconds", "0", "--verify-images", "8", "--out", out])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "could not build an engine from flat32.fp32.onnx" in last
    assert "ERROR" in last and "reshape changes volume" in last.lower(), last
    assert not os.path.exists(os.path.join(out, "manifest.json")) and not partial_files(str(tmp_path))
