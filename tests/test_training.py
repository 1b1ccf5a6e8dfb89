"""Training: exact resume, the half recipe's dtype layout, loss scaling, NaN stop, bad data, CLI compare.

Tiny runs only (ResNet18 with the CIFAR stem at 16x16 on a few dozen digits):
the >=97% accuracy acceptance is measured by the command in docs/training.md.
"""

import json
import os

import pytest

torch = pytest.importorskip("torch")

from trtkit.errors import DeviceUnavailable, InputError  # noqa: E402
from trtkit.training import TrainConfig  # noqa: E402
from trtkit.training.loop import TrainingDiverged  # noqa: E402
from trtkit.training.runner import run_training  # noqa: E402
from trtkit.training.scaler import DynamicLossScaler  # noqa: E402

from conftest import run_script  # noqa: E402

TINY = dict(data="sample", limit=16, input_size=8, stem="cifar", batch_size=8, epochs=2, lr=0.02,
            device="cpu", deterministic=True)


def _weights(path):
    from trtkit.models import read_checkpoint
    return read_checkpoint(path)[0]


def test_resume_matches_uninterrupted_run(tmp_path):
    config = TrainConfig(**TINY)
    full = run_training(config, str(tmp_path / "full"))
    part = run_training(config, str(tmp_path / "part"), stop_after=1)
    assert part.stopped_early and len(part.history) == 1
    resumed = run_training(None, str(tmp_path / "part"), resume_path=part.checkpoint)
    assert len(resumed.history) == 2
    a, b = _weights(full.checkpoint), _weights(resumed.checkpoint)
    assert sorted(a) == sorted(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    metrics = json.load(open(str(tmp_path / "part" / "metrics.json")))
    assert metrics["finished"] and len(metrics["epochs"]) == 2
    assert metrics["final_accuracy"] == resumed.final_accuracy


def test_half_recipe_dtype_layout():
    from trtkit.models import create_model
    from trtkit.training.modes import Precision
    model = create_model("resnet18", num_classes=10, stem="cifar", input_size=16)
    precision = Precision("half", "cpu")
    params = precision.prepare(model)
    for module in model.modules():
        is_bn = isinstance(module, torch.nn.BatchNorm2d)
        for name, p in module.named_parameters(recurse=False):
            assert p.dtype == (torch.float32 if is_bn else torch.float16), (module, name)
        if is_bn:
            assert module.running_mean.dtype == torch.float32 and module.running_var.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in params)  # the optimizer owns FP32 masters only
    fp16_params = [p for p in model.parameters() if p.dtype == torch.float16]
    assert fp16_params and not any(p is q for p in fp16_params for q in params)
    state = precision.fp32_state_dict(model)
    assert all(v.dtype == torch.float32 for v in state.values() if v.is_floating_point())


def test_scaler_skips_overflow_and_lowers_scale():
    scaler = DynamicLossScaler(init_scale=1024.0, growth_interval=2)
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler.backward((w * torch.tensor([1.0, float("inf"), 1.0])).sum())
    assert scaler.unscale(opt, [w]) is True
    scaler.step(opt)
    assert scaler.update() is True
    assert torch.equal(w.detach(), torch.ones(3))  # skipped: weights untouched
    assert scaler.scale == 512.0 and scaler.skipped == 1
    for _ in range(2):  # clean steps: gradients come back unscaled, the scale grows after the interval
        opt.zero_grad()
        scaler.backward(w.sum())
        assert scaler.unscale(opt, [w]) is False
        assert torch.allclose(w.grad, torch.ones(3))
        scaler.step(opt)
        assert scaler.update() is False
    assert scaler.scale == 1024.0
    state = scaler.state_dict()
    other = DynamicLossScaler()
    other.load_state_dict(state)
    assert other.scale == 1024.0 and other.skipped == 1


def test_half_training_with_overflowing_scale_skips_steps(tmp_path):
    config = TrainConfig(**dict(TINY, mode="half", epochs=1, limit=8, init_scale=2.0 ** 40, deterministic=False))
    result = run_training(config, str(tmp_path / "half"))
    record = result.history[0]
    assert record["skipped_steps"] >= 1
    assert record["loss_scale"] < 2.0 ** 40
    from trtkit.models import load_model
    model = load_model(None, result.checkpoint)  # FP32 masters, loadable for deployment
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.trtkit_meta["mode"] == "half"


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    out = str(tmp_path / "nan")

    def poison(epoch, step, model):
        if epoch == 1 and step == 1:
            with torch.no_grad():
                model.fc.weight.fill_(float("nan"))

    config = TrainConfig(**dict(TINY, deterministic=False))
    with pytest.raises(TrainingDiverged) as info:
        run_training(config, out, callback=poison)
    text = str(info.value)
    assert "epoch 2 step 2" in text and "fp32" in text and "epoch 1" in text
    state = _weights(os.path.join(out, "checkpoint.pt"))
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert json.load(open(os.path.join(out, "metrics.json")))["finished"] is False


def test_cifar_wrong_layouts(tmp_path):
    from trtkit.training.sources import check_source
    parent = tmp_path / "parent"
    (parent / "cifar-10-batches-py").mkdir(parents=True)
    (parent / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"x")
    (parent / "cifar-10-batches-py" / "test_batch").write_bytes(b"x")
    with pytest.raises(InputError) as info:
        check_source(str(parent))
    assert "cifar-10-batches-py" in str(info.value)
    archive = tmp_path / "dl"
    archive.mkdir()
    (archive / "cifar-10-python.tar.gz").write_bytes(b"x")
    with pytest.raises(InputError, match="extract"):
        check_source(str(archive))
    only_test = tmp_path / "only"
    only_test.mkdir()
    (only_test / "test_batch").write_bytes(b"x")
    with pytest.raises(InputError, match="data_batch"):
        check_source(str(only_test))


def test_amp_on_cpu_is_bf16_or_explained():
    from trtkit.training.modes import NO_CPU_BF16, Precision, cpu_bf16_native
    if cpu_bf16_native():
        assert Precision("amp", "cpu").autocast_dtype == torch.bfloat16
    else:
        with pytest.raises(DeviceUnavailable) as info:
            Precision("amp", "cpu")
        assert NO_CPU_BF16 in str(info.value)


def test_cli_compare_writes_table_and_files(tmp_path):
    out = str(tmp_path / "cmp")
    result = run_script("train.py", ["--data", "sample", "--limit", "8", "--input-size", "8", "--stem", "cifar",
                                     "--batch-size", "8", "--epochs", "1", "--device", "cpu",
                                     "--compare", "fp32,amp", "--out", out])
    assert result.returncode == 0, result.stderr
    assert "speed-up" in result.stdout and "fp32" in result.stdout and "amp" in result.stdout
    for name in ("compare.csv", "compare.json", "compare_loss.png", "fp32/checkpoint.pt", "fp32/metrics.json"):
        assert os.path.isfile(os.path.join(out, name)), name
    rows = json.load(open(os.path.join(out, "compare.json")))["modes"]
    assert [r["mode"] for r in rows] == ["fp32", "amp"]
    assert rows[0]["status"] == "ok" and rows[0]["speedup_pct"] == 0.0


def test_cli_bad_mode_and_batch_size_one_line(tmp_path):
    result = run_script("train.py", ["--data", "sample", "--batch-size", "1", "--out", str(tmp_path)])
    assert result.returncode != 0
    assert "error:" in result.stderr and "Traceback" not in result.stderr
