"""ONNX Runtime's CUDA provider asked for but not in use (issue 23, item 7): labels follow the providers in
use, and ``--strict`` refuses.

Real on this machine: its onnxruntime has only CPUExecutionProvider, so a session asked for
CUDAExecutionProvider falls back to CPU exactly as one on a GPU machine does when CUDA cannot start.
"""

import json
import os

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from trtkit.backends import onnxruntime as ort_backend  # noqa: E402
from trtkit.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeRunner, ProviderUnavailable  # noqa: E402

CUDA_FIRST = ["CUDAExecutionProvider", "CPUExecutionProvider"]

pytestmark = pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(),
                                reason="this onnxruntime has a CUDA provider: the fallback cannot be provoked")


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    """A [N, 4] -> [N, 3] classifier (one MatMul)."""
    from onnx import TensorProto, helper, numpy_helper
    weights = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["input", "w"], ["logits"])], "tiny",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])], [weights])
    path = str(tmp_path_factory.mktemp("tiny") / "tiny.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_cuda_asked_for_is_labelled_by_what_runs(tiny_onnx, capsys):
    with OnnxRuntimeRunner(tiny_onnx, providers=CUDA_FIRST) as runner:
        out = runner.infer(np.ones((2, 4), dtype=np.float32))
        assert runner.providers_in_use == ["CPUExecutionProvider"]
        assert runner.device == "cpu" and not runner.stages_on_device
        record = runner.describe()  # the manifest's ran_on and verify records
    assert record["providers"] == ["CPUExecutionProvider"] and record["device"] == "cpu"
    assert out.shape == (2, 3)
    err = capsys.readouterr().err
    assert "asked for CUDAExecutionProvider but runs tiny.onnx on CPUExecutionProvider" in err


def test_strict_refuses_when_the_gpu_provider_is_not_in_use(tiny_onnx):
    runner = OnnxRuntimeBackend().runner(tiny_onnx, {"providers": CUDA_FIRST, "strict": True})
    with pytest.raises(ProviderUnavailable) as info:
        runner.activate()
    message = str(info.value)
    assert "CUDAExecutionProvider" in message and "CPUExecutionProvider" in message and "\n" not in message
    assert info.value.exit_code != 0 and info.value.hint
    assert not runner.active
    # asked for CPU only, strict has nothing to refuse
    with OnnxRuntimeRunner(tiny_onnx, providers=["CPUExecutionProvider"], strict=True) as cpu:
        assert cpu.device == "cpu"


def test_bench_rows_are_labelled_by_the_provider_in_use(tiny_onnx):
    from trtkit.bench.measure import benchmark_variant
    from trtkit.bench.plan import BenchOptions, Variant
    options = BenchOptions(batch_sizes=(1,), seconds=0.02, warmup=0.0, min_iterations=2, agree_images=4,
                           min_rounds=2, round_seconds=0.02, modes=("latency",))
    variant = Variant("tiny", "onnxruntime", "fp32", lambda: OnnxRuntimeRunner(tiny_onnx, providers=CUDA_FIRST),
                      "onnxruntime-fp32")
    rows = benchmark_variant(variant, np.ones((4, 4), dtype=np.float32), options)
    assert [row["device"] for row in rows] == ["cpu"] and rows[0]["status"] == "ok", rows


def test_build_strict_refuses_and_records_cpu_without_it(sample, tmp_path, monkeypatch, capsys):
    """A build whose ONNX Runtime asks for CUDA first (what ``default_providers`` returns where onnxruntime-gpu
    is installed): without --strict the manifest's ran_on says CPU; with --strict one line and a non-zero exit."""
    from trtkit.cli import main
    monkeypatch.setattr(ort_backend, "default_providers", lambda: list(CUDA_FIRST))
    common = ["build", "--backend", "onnxruntime", "--precision", "fp32", "--verify-images", "32",
              "--bench-seconds", "0"]
    out = str(tmp_path / "lenient")
    assert main(common + ["--out", out]) == 0
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    ran_on = manifest["artifacts"][0]["ran_on"]
    assert ran_on["providers"] == ["CPUExecutionProvider"] and ran_on["device"] == "cpu"
    assert "on CUDA" not in manifest["backend"]["reason"]
    capsys.readouterr()
    strict_out = str(tmp_path / "strict")
    code = main(common + ["--strict", "--out", strict_out])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == ProviderUnavailable.exit_code and len(errors) == 1, err
    assert "asked for CUDAExecutionProvider" in errors[0] and "Traceback" not in err
    assert not os.path.exists(os.path.join(strict_out, "manifest.json"))
