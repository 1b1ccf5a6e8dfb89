"""The default training recipe: residual blocks that start as the identity, and a run that diverges said so."""

import pytest

torch = pytest.importorskip("torch")


def test_every_residual_branch_starts_at_zero():
    from trtkit.models.classifiers import create_model
    from trtkit.training.runner import zero_init_residuals
    for name, blocks in (("resnet18", 8), ("resnet34", 16), ("resnet50", 16)):
        model = create_model(name, num_classes=10, input_size=64)
        assert zero_init_residuals(model) == blocks
        for module in model.modules():
            last = getattr(module, "bn3", None) if hasattr(module, "conv3") else getattr(module, "bn2", None)
            if last is not None and hasattr(module, "conv1"):
                assert float(last.weight.detach().abs().sum()) == 0.0
        # a block then passes its input through: the whole net's output does not blow up with depth
        model.eval()
        with torch.no_grad():
            out = model(torch.randn(2, 3, 64, 64))
        assert torch.isfinite(out).all() and float(out.abs().max()) < 50.0


class _Tiny(torch.nn.Module):
    def __init__(self, scale):
        super(_Tiny, self).__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)
        with torch.no_grad():
            self.fc.weight.mul_(scale)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def _fit(model, lr, capsys):
    from trtkit.contract import InputContract
    from trtkit.data import load_images
    from trtkit.training.loop import fit
    train = load_images("sample", InputContract(size=16, resize="stretch"), split="train", limit=256)
    torch.manual_seed(0)
    fit(model, train, None, epochs=2, batch_size=64, lr=lr, warmup=0.0, device="cpu")
    return capsys.readouterr().err


def test_a_run_far_above_chance_after_warmup_is_said_once_with_what_to_change(capsys):
    err = _fit(_Tiny(1e4), 1e-7, capsys)  # logits 10,000x too large, a learning rate that cannot fix them
    lines = [l for l in err.splitlines() if "far above chance" in l]
    assert len(lines) == 1 and "(2.30 for 10 classes)" in lines[0] and "--lr 5e-08" in lines[0]
    err = _fit(_Tiny(1.0), 0.05, capsys)  # an ordinary run: nothing said
    assert "far above chance" not in err


def test_speedups_are_against_strict_fp32_with_tf32_beside_and_peaks_leave_the_first_epoch_out():
    """The H200 figures (ResNet50, 224, batch 128; img/s -> seconds per 12,800-image epoch): strict FP32 1006,
    TF32 3023, AMP 4619; the first epoch's peak holds cuDNN's algorithm search."""
    from trtkit.training.loop import TrainResult
    from trtkit.training.report import add_speedups, format_table, summarize
    rows = []
    for mode, ips, peaks in (("fp32", 1006.0, (16177.0, 10853.0)), ("tf32", 3023.0, (16000.0, 10860.0)),
                             ("amp", 4619.0, (7000.0, 5833.0))):
        history = [{"epoch": e + 1, "seconds": 12800.0 / ips, "images_per_second": ips, "loss": 1.0,
                    "peak_memory_mb": peak} for e, peak in enumerate(peaks)]
        rows.append(summarize(mode, TrainResult(history, None, mode)))
    add_speedups(rows)
    amp = rows[2]
    assert amp["speedup_pct"] == pytest.approx((4619.0 / 1006.0 - 1) * 100)  # 4.6x strict FP32
    assert amp["speedup_vs_tf32_pct"] == pytest.approx((4619.0 / 3023.0 - 1) * 100)  # 1.5x TF32
    assert rows[0]["peak_memory_mb"] == 10853.0 and rows[0]["peak_memory_after_warmup"]
    table = format_table(rows, "cuda")
    assert "strict FP32, TF32 off" in table and "vs tf32" in table and "algorithm search excluded" in table


def test_tf32_is_a_gpu_mode_and_says_so_on_a_cpu():
    from trtkit.errors import DeviceUnavailable
    from trtkit.training.modes import Precision, mode_unavailable_reason
    assert "compute capability 8.0+" in mode_unavailable_reason("tf32", "cpu")
    with pytest.raises(DeviceUnavailable):
        Precision("tf32", "cpu")
    assert Precision("fp32", "cpu").fp32_math is None  # a CPU has one FP32 math


def test_fp32_math_is_set_for_the_block_and_restored():
    from trtkit.training.fp32math import STRICT, TF32, current, fp32_math
    before = current(torch)
    with fp32_math(torch, STRICT):
        assert current(torch) == {"convolutions": STRICT, "matmul": STRICT}
    with fp32_math(torch, TF32):
        assert current(torch) == {"convolutions": TF32, "matmul": TF32}
    assert current(torch) == before


def test_sgd_learning_rate_follows_the_linear_scaling_rule_from_batch_128_unless_given():
    """0.1 per 256 images of batch (Goyal et al.) from 128 up; below, 128's rate (the rule's 0.025 at batch 64
    left the digits at 90% after 6 epochs where 0.05 reached 98%)."""
    from trtkit.training.config import TrainConfig
    assert TrainConfig().base_lr == pytest.approx(0.05)  # batch 64
    assert TrainConfig(batch_size=128).base_lr == pytest.approx(0.05)
    assert TrainConfig(batch_size=512).base_lr == pytest.approx(0.2)
    assert TrainConfig(batch_size=128, lr=0.3).base_lr == 0.3
    assert TrainConfig(batch_size=512, optimizer="adamw").base_lr == pytest.approx(1e-3)
