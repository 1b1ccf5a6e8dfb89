"""The Runner contract's optional queries: their defaults, and what the ONNX Runtime and PyTorch runners answer.

The benchmarker asks runners these questions instead of guessing from backend
names, so each answer must be true of the runner, not of what was asked for.
"""

import numpy as np
import pytest

from bench_fakes import FakeClock, FakeRunner
from trtkit.backends.base import Runner, TensorSpec


def test_defaults_describe_a_host_runner():
    runner = FakeRunner(FakeClock())
    batch = np.ones((3, 3, 8, 8), np.float32)
    assert runner.device == "cpu" and runner.stages_on_device is False
    assert runner.synchronize() is None and runner.device_timer() is None
    assert runner.batch_range() is None  # symbolic batch: any size
    assert FakeRunner(FakeClock(), batch_dim=2).batch_range() == (2, 2, 2)  # a fixed-batch model
    staged = runner.stage(batch)
    assert staged is batch and np.array_equal(runner.run_staged(staged), runner.infer(batch))
    runner.reset_peak_memory()
    assert runner.peak_memory_bytes() is None


@pytest.fixture(scope="module")
def onnx_path(sample_build):
    from trtkit.pipeline.manifest import open_build
    build = open_build(sample_build[0])
    return [build.path(a) for a in build.manifest.artifacts if a.precision == "fp32"][0]


def test_onnxruntime_device_is_what_the_session_uses(onnx_path):
    import onnxruntime
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    with OnnxRuntimeRunner(onnx_path, threads=1) as runner:
        assert runner.providers_in_use == runner.session.get_providers()
        assert runner.device == ("cuda" if "CUDAExecutionProvider" in runner.providers_in_use else "cpu")
        assert runner.batch_range() is None  # the sample is exported with a dynamic batch
        batch = np.random.RandomState(0).standard_normal((2, 3, 64, 64)).astype(np.float32)
        binding = runner.run_staged(runner.stage(batch))
        assert np.allclose(binding.copy_outputs_to_cpu()[0], runner.infer(batch), atol=1e-5)
        assert runner.stages_on_device == (runner.device == "cuda")
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        # asked for CUDA on a CPU-only ONNX Runtime: the session falls back, and the runner says so
        with pytest.warns(UserWarning):
            asked = OnnxRuntimeRunner(onnx_path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
            asked.activate()
        assert asked.providers_in_use == ["CPUExecutionProvider"] and asked.device == "cpu"
        asked.deactivate()


def test_torch_runner_answers_for_its_device(sample):
    import torch
    from trtkit.backends.torch import TorchRunner
    runner = TorchRunner(sample[1], mode="fp32", threads=1)
    assert runner.device == ("cuda" if torch.cuda.is_available() else "cpu")  # known before activation
    with runner:
        batch = np.random.RandomState(0).standard_normal((2, 3, 64, 64)).astype(np.float32)
        staged = runner.run_staged(runner.stage(batch))
        runner.synchronize()
        assert np.allclose(staged.float().cpu().numpy(), runner.infer(batch), atol=1e-5)
        on_gpu = runner.device == "cuda"
        assert runner.stages_on_device is on_gpu and (runner.device_timer() is not None) is on_gpu
        runner.reset_peak_memory()
        runner.infer(batch)
        assert (runner.peak_memory_bytes() is not None) is on_gpu
        assert runner.batch_range() is None


def test_the_manifest_records_what_the_runner_really_used(sample_build):
    _, manifest = sample_build
    for artifact in manifest["artifacts"]:
        ran_on = artifact["ran_on"]
        assert ran_on["backend"] == "onnxruntime" and ran_on["device"] == "cpu"
        assert ran_on["providers"] == ["CPUExecutionProvider"] and ran_on["path"] == artifact["path"]
        assert "providers" not in artifact["backend_info"]  # what was asked for is not a record of what ran


class _RangeRunner(Runner):
    """A host runner that accepts only batches inside ``batch_range`` (like an engine's profile) and echoes."""

    backend = "range-test"

    def __init__(self, batch_range):
        super(_RangeRunner, self).__init__("range.bin")
        self.range = batch_range
        self.seen = []

    def batch_range(self):
        return self.range

    def _activate(self):
        pass

    def inputs(self):
        return [TensorSpec("x", (None, 1), "float32")]

    def outputs(self):
        return [TensorSpec("y", (None, 1), "float32")]

    def _infer(self, batch):
        low, _, high = self.range
        assert low <= len(batch) <= high, "batch {} outside {}".format(len(batch), self.range)
        self.seen.append(len(batch))
        return {"y": batch * 2}


@pytest.mark.parametrize("batch_range, sizes", [((1, 4, 16), [16, 16, 8]), ((4, 4, 4), [4] * 10),
                                                ((8, 8, 64), [32, 8])])
def test_batches_stay_inside_the_runners_range(batch_range, sizes):
    from trtkit.backends.base import run_batches
    images = np.arange(40, dtype=np.float32).reshape(40, 1)
    runner = _RangeRunner(batch_range)
    out = run_batches(runner, images, batch_size=32)
    assert np.array_equal(out, images * 2) and runner.seen == sizes
    assert runner.accepted_batch(2) == max(2, batch_range[0]) and runner.accepted_batch(100) == batch_range[2]
