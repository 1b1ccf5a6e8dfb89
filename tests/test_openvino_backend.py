"""The OpenVINO backend: builds and verifies the sample, answers the Runner contract truthfully,
names its extra when OpenVINO is missing, and is never picked by ``--backend auto``."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run_cli
from trtkit.deps import available

needs_openvino = pytest.mark.skipif(not available("openvino"),
                                    reason="openvino is not installed (pip install 'trtkit[openvino]')")


@pytest.fixture(scope="module")
def openvino_build(tmp_path_factory, sample):
    """``trtkit build --backend openvino`` of the sample at FP32, FP16 and INT8: (out dir, manifest)."""
    if not available("openvino"):
        pytest.skip("openvino is not installed")
    out = str(tmp_path_factory.mktemp("openvino_build"))
    result = run_cli(["build", "--backend", "openvino", "--precision", "fp32,fp16,int8", "--out", out,
                      "--bench-seconds", "0.2"])
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(out, "manifest.json")) as handle:
        return out, json.load(handle)


@needs_openvino
def test_build_verifies_every_precision_on_openvino(openvino_build):
    import openvino
    _, manifest = openvino_build
    assert manifest["backend"]["name"] == "openvino"
    artifacts = dict((a["precision"], a) for a in manifest["artifacts"])
    assert sorted(artifacts) == ["fp16", "fp32", "int8"]
    assert artifacts["fp32"]["verify"]["top1_agreement"] == 1.0
    assert artifacts["fp16"]["verify"]["top1_agreement"] >= 0.98
    assert artifacts["int8"]["verify"]["top1_agreement"] >= 0.98
    assert artifacts["int8"]["int8_encoding"] == "cpu"  # the encoding the backend asks for
    for artifact in artifacts.values():
        assert artifact["status"] == "ok" and artifact["backend"] == "openvino"
        assert artifact["path"].endswith(".onnx")  # the artifact is the ONNX variant itself
        ran_on = artifact["ran_on"]
        assert ran_on["backend"] == "openvino" and ran_on["device"] == "cpu"
        assert ran_on["openvino_version"] == str(openvino.get_version())
        assert ran_on["inference_precision"] == "f32"  # not OpenVINO's BF16 default
        assert ran_on["execution_devices"] == ["CPU"]
        assert artifact["throughput_ips"] > 0


@needs_openvino
def test_bench_times_openvino_artifacts(openvino_build, tmp_path):
    out, _ = openvino_build
    bench = str(tmp_path / "bench")
    result = run_cli(["bench", "--manifest", out, "--no-torch", "--batch-sizes", "2", "--seconds", "0.1",
                      "--warmup", "0.05", "--repeats", "1", "--mode", "latency", "--threads", "1", "--no-png",
                      "--out", bench])
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(bench, "bench.json")) as handle:
        rows = json.load(handle)["results"]
    timed = dict((r["precision"], r) for r in rows if r["backend"] == "openvino")
    assert sorted(timed) == ["fp16", "fp32", "int8"]
    for row in timed.values():
        assert row["status"] == "ok" and row["fps"] > 0 and row["threads"] == 1
        assert row["variant"].endswith("OpenVINO")


@pytest.fixture(scope="module")
def fp32_onnx(sample_build):
    from trtkit.pipeline.manifest import open_build
    build = open_build(sample_build[0])
    return [build.path(a) for a in build.manifest.artifacts if a.precision == "fp32"][0]


@needs_openvino
def test_runner_matches_onnxruntime_and_describes_what_ran(fp32_onnx):
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    from trtkit.backends.openvino import OpenVINORunner
    batch = np.random.RandomState(0).standard_normal((3, 3, 64, 64)).astype(np.float32)
    with OnnxRuntimeRunner(fp32_onnx, providers=["CPUExecutionProvider"]) as ort:
        expected = ort.infer(batch)
    with OpenVINORunner(fp32_onnx, threads=1) as runner:
        assert runner.device == "cpu" and runner.stages_on_device is False
        assert runner.batch_range() is None  # the sample is exported with a dynamic batch
        got = runner.infer(batch)
        assert got.dtype == np.float32 and np.allclose(got, expected, atol=1e-3)
        assert np.array_equal(runner.run_staged(runner.stage(batch)), got)
        record = runner.describe()
    assert record["backend"] == "openvino" and record["path"] == os.path.basename(fp32_onnx)
    assert record["threads"] == 1 and record["streams"] == 1 and record["performance_hint"] == "LATENCY"
    assert record["inputs"][0]["shape"] == [None, 3, 64, 64] and record["inputs"][0]["dtype"] == "float32"
    assert record["outputs"][0]["shape"] == [None, 10]
    json.dumps(record)  # goes into the manifest as it is


@needs_openvino
def test_fixed_batch_onnx_gives_a_fixed_batch_range(fp32_onnx, tmp_path):
    import onnx
    from trtkit.backends.openvino import OpenVINORunner
    from trtkit.backends.base import run_batches
    model = onnx.load(fp32_onnx)
    for value in list(model.graph.input) + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 4
    fixed = str(tmp_path / "fixed4.onnx")
    onnx.save(model, fixed)
    images = np.random.RandomState(1).standard_normal((6, 3, 64, 64)).astype(np.float32)
    with OpenVINORunner(fixed, threads=1) as runner:
        assert runner.batch_range() == (4, 4, 4) and runner.accepted_batch(8) == 4
        logits = run_batches(runner, images, 8)  # 4 + 2 padded to 4
    with OpenVINORunner(fp32_onnx, threads=1) as dynamic:
        assert np.allclose(logits, dynamic.infer(images), atol=1e-3)


@needs_openvino
def test_runner_options_are_checked_and_a_bad_file_is_an_input_error(fp32_onnx, tmp_path):
    from trtkit.backends import get_backend
    from trtkit.errors import InputError
    backend = get_backend("openvino")
    with pytest.raises(InputError) as info:
        backend.runner(fp32_onnx, {"performance_hint": "fastest"})
    assert "LATENCY" in info.value.hint
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(InputError):
        backend.runner(str(broken)).activate()
    with pytest.raises(InputError):
        backend.build(str(broken), "fp32", str(tmp_path / "out.onnx"))
    assert not (tmp_path / "out.onnx").exists()  # a failed build leaves no file
    with backend.runner(fp32_onnx, {"threads": 1, "performance_hint": "throughput"}) as runner:
        assert runner.describe()["performance_hint"] == "THROUGHPUT"


def test_auto_never_picks_openvino_even_when_it_is_the_only_backend(monkeypatch):
    import trtkit.backends as backends
    from trtkit.errors import MissingDependency
    assert "openvino" in backends.backend_names()
    backend = backends.get_backend("openvino")
    assert backend.auto_selectable is False and backend.int8_encoding == "cpu"
    assert backends.select_backend("auto")[0].name != "openvino"
    monkeypatch.setattr(backends, "REGISTRY", [r for r in backends.REGISTRY if r[0] == "openvino"])
    with pytest.raises(MissingDependency) as info:
        backends.select_backend("auto")
    assert "openvino: optional runtime" in str(info.value)


def test_missing_openvino_names_the_extra():
    code = """
import sys
sys.modules['openvino'] = None  # importing it now raises ImportError, as where it is not installed
sys.modules['nncf'] = None
from trtkit.backends import get_backend, select_backend
from trtkit.deps import install_hint
from trtkit.errors import InputError, MissingDependency
backend = get_backend('openvino')
usable, reason = backend.availability()
assert not usable and "trtkit[openvino]" in reason, reason
try:
    backend.runner('model.onnx').activate()
    raise SystemExit('no error')
except MissingDependency as exc:
    assert "pip install 'trtkit[openvino]'" in str(exc), str(exc)
try:
    select_backend('openvino')
    raise SystemExit('no error')
except InputError as exc:
    assert "trtkit[openvino]" in str(exc), str(exc)
assert "trtkit[openvino]" in install_hint('nncf')
print('OK')
"""
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr
