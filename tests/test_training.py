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
from trtkit.training.scaler import TorchGradScaler, grad_scaler_available  # noqa: E402

from conftest import run_script  # noqa: E402

needs_cpu_scaler = pytest.mark.skipif(not grad_scaler_available("cpu"), reason="torch < 2.3 has no CPU GradScaler")
TINY = dict(data="sample", limit=16, input_size=8, stem="cifar", batch_size=8, epochs=2, lr=0.02,
            device="cpu", deterministic=True)


def _weights(path):
    from trtkit.models.classifiers import read_checkpoint
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


@needs_cpu_scaler
def test_half_recipe_dtype_layout():
    from trtkit.models.classifiers import create_model
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


@needs_cpu_scaler
def test_scaler_skips_overflow_and_lowers_scale():
    scaler = TorchGradScaler("cpu", init_scale=1024.0, growth_interval=2)
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler.backward((w * torch.tensor([1.0, float("inf"), 1.0])).sum())
    scaler.unscale(opt, [w])
    scaler.step(opt)
    scaler.update()
    assert torch.equal(w.detach(), torch.ones(3))  # skipped: weights untouched
    assert scaler.scale == 512.0 and scaler.skipped == 1
    for _ in range(2):  # clean steps: gradients come back unscaled, the scale grows after the interval
        opt.zero_grad()
        scaler.backward(w.sum())
        scaler.unscale(opt, [w])
        assert torch.allclose(w.grad, torch.ones(3))
        scaler.step(opt)
        scaler.update()
        assert scaler.skipped == 1  # counted on the device, read here: the clean steps add none
    assert not torch.equal(w.detach(), torch.ones(3))  # clean steps moved the weights
    assert scaler.scale == 1024.0
    other = TorchGradScaler("cpu")
    other.load_state_dict(scaler.state_dict())
    assert other.scale == 1024.0 and other.skipped == 1


@needs_cpu_scaler
def test_scaler_unscales_fp32_master_gradients_of_an_fp16_model():
    """The half recipe: scaled FP16 gradients handed to FP32 masters, which the optimizer owns."""
    assert torch.tensor(1e-8).half().item() == 0.0  # below FP16's smallest subnormal
    scaler = TorchGradScaler("cpu", init_scale=2.0 ** 16)
    weight16 = torch.nn.Parameter(torch.full((4,), 0.5, dtype=torch.float16))
    master = torch.nn.Parameter(weight16.detach().float())
    opt = torch.optim.SGD([master], lr=1e6)
    scaler.backward((weight16.float() * 1e-8).sum())  # a 1e-8 gradient survives in FP16 only scaled
    master.grad = weight16.grad.float()
    scaler.unscale(opt, [master])
    assert master.grad.dtype == torch.float32 and torch.allclose(master.grad, torch.full((4,), 1e-8), rtol=1e-2)
    scaler.step(opt)
    scaler.update()
    assert scaler.skipped == 0 and torch.all(master.detach() < 0.5)


@needs_cpu_scaler
def test_scaler_resumes_a_checkpoint_of_trtkits_former_own_scaler():
    former = {"kind": "dynamic", "scale": 256.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
              "min_scale": 2.0 ** -14, "good_steps": 2, "skipped": 4}
    scaler = TorchGradScaler("cpu", init_scale=2.0 ** 16, growth_interval=2000)
    scaler.load_state_dict(former)
    assert scaler.scale == 256.0 and scaler.skipped == 4
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler.backward(w.sum())
    scaler.unscale(opt, [w])
    scaler.step(opt)
    scaler.update()
    assert scaler.scale == 512.0  # two good steps were recorded: the third reaches the interval of 3


def test_bf16_on_cuda_needs_compute_capability_8():
    from trtkit.bf16 import capability_has_bf16
    assert not capability_has_bf16((7, 5))  # Turing: torch.cuda.is_bf16_supported() says True (emulated)
    assert not capability_has_bf16((7, 2)) and not capability_has_bf16((6, 1))
    assert capability_has_bf16((8, 0)) and capability_has_bf16((8, 7)) and capability_has_bf16((12, 0))


def test_bf16_on_cpu_needs_native_instructions():
    from trtkit.bf16 import cpuinfo_has_bf16
    skylake = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512vl avx512dq\n"
    sapphire = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n"
    graviton3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"
    assert not cpuinfo_has_bf16(skylake)  # AVX512 without BF16: oneDNN would emulate it
    assert cpuinfo_has_bf16(sapphire) and cpuinfo_has_bf16(graviton3)
    assert not cpuinfo_has_bf16("")


@needs_cpu_scaler
def test_half_training_with_overflowing_scale_skips_steps(tmp_path):
    config = TrainConfig(**dict(TINY, mode="half", epochs=1, limit=8, init_scale=2.0 ** 40, deterministic=False))
    result = run_training(config, str(tmp_path / "half"))
    record = result.history[0]
    assert record["skipped_steps"] >= 1
    assert record["loss_scale"] < 2.0 ** 40
    from trtkit.models.classifiers import load_model
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
    from trtkit.bf16 import cpu_bf16_native
    from trtkit.training.modes import NO_CPU_BF16, Precision
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


def test_evaluation_halves_its_batch_when_out_of_memory(capsys):
    import numpy as np
    import torch
    from trtkit.data import ImageSet
    from trtkit.training.loop import OutOfMemory, evaluate

    class Picky(torch.nn.Module):  # "runs out of memory" above 16 images, answers class 1 otherwise
        def __init__(self, limit):
            super(Picky, self).__init__()
            self.limit = limit

        def forward(self, x):
            if x.shape[0] > self.limit:
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return torch.nn.functional.one_hot(torch.ones(x.shape[0], dtype=torch.long), 3).float()

    labels = np.array([1] * 30 + [0] * 10)
    images = ImageSet(np.zeros((40, 3, 4, 4), np.float32), labels, "test", ["a", "b", "c"], "test")
    model = Picky(16).train()
    assert evaluate(model, images, batch_size=256) == 0.75
    assert model.training  # put back as it was
    assert "retrying at 16" in capsys.readouterr().err
    with pytest.raises(OutOfMemory):
        evaluate(Picky(0), images, batch_size=4)
    with pytest.raises(RuntimeError, match="shapes"):
        evaluate(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(7, 3)), images)  # shape error, not OOM
