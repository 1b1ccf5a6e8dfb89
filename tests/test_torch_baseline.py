"""Every PyTorch baseline is the best plain PyTorch a user would write (issue 23, item 11), checked on CPU.

One recipe (``trtkit.backends.torch_baseline``) prepares every timed PyTorch model and input:
``torch.backends.cudnn.benchmark = True`` (a real flag, settable without a GPU), channels_last model and input
on CUDA, and AMP (autocast FP16) as a row of its own beside FP32 and ``.half()``.
"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A small ResNet18 (10 classes, 32x32) and its checkpoint."""
    from trtkit.models.classifiers import create_model, save_checkpoint
    torch.manual_seed(0)
    model = create_model("resnet18", num_classes=10, stem="cifar", input_size=32).eval()
    return model, save_checkpoint(model, str(tmp_path_factory.mktemp("tiny") / "tiny.pt"))



@pytest.fixture
def cudnn_benchmark_off():
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    yield
    torch.backends.cudnn.benchmark = before


def _channels_last(tensor):
    return tensor.is_contiguous(memory_format=torch.channels_last)


def test_the_baseline_recipe_sets_cudnn_benchmark_and_channels_last(tiny, cudnn_benchmark_off):
    from trtkit.backends.torch_baseline import baseline_settings, prepare_input, prepare_model
    model, _ = tiny
    assert baseline_settings(torch) == {"cudnn.benchmark": True} and torch.backends.cudnn.benchmark is True
    torch.backends.cudnn.benchmark = False
    for mode in ("fp32", "autocast", "half"):  # on a GPU every baseline mode is NHWC (decided, not moved)
        prepared = prepare_model(torch, copy.deepcopy(model), mode, "cuda")
        assert torch.backends.cudnn.benchmark is True
        assert _channels_last(prepared.conv1.weight) and _channels_last(prepared.layer1[0].conv1.weight)
        x = prepare_input(torch, torch.randn(2, 3, 32, 32), mode, "cuda")
        assert _channels_last(x) and x.dtype == (torch.float16 if mode == "half" else torch.float32)
    half = prepare_model(torch, copy.deepcopy(model), "half", "cuda")
    assert half.conv1.weight.dtype == torch.float16 and half.bn1.weight.dtype == torch.float32


def test_a_torch_runner_times_through_the_recipe(tiny, cudnn_benchmark_off):
    from trtkit.backends.torch import torch_runner
    _, checkpoint = tiny
    threads = torch.get_num_threads()
    runner = torch_runner(checkpoint, {"mode": "channels_last", "device": "cpu", "threads": threads + 1})
    runner.activate()
    try:
        assert torch.backends.cudnn.benchmark is True  # set by activation, not by the test
        assert _channels_last(runner.stage(np.zeros((2, 3, 32, 32), np.float32)))
        assert _channels_last(runner.model.conv1.weight)
        assert torch.get_num_threads() == threads + 1
    finally:
        runner.deactivate()
    # torch's thread count is process-wide: a timed baseline gives it back (it changed later training here)
    assert torch.get_num_threads() == threads


def test_gpu_baselines_include_an_amp_row(tiny):
    from trtkit.backends.torch_baseline import BASELINE_MODES
    from trtkit.bench.plan import default_torch_modes, torch_variants
    _, checkpoint = tiny
    labels = [v.label for v in torch_variants(None, checkpoint, "auto", 1, 32, "tiny", device="cuda")]
    assert labels == ["FP32 PyTorch (eager)", "FP16 PyTorch (autocast)", "FP16 PyTorch (.half())"]
    assert default_torch_modes("cuda") == list(BASELINE_MODES)
