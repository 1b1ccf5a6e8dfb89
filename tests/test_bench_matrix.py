"""The benchmark matrix on the sample build, skipped/OOM/fixed-batch/noisy runners, passes, reports and the CLI.

Fake runners advance a fake clock instead of sleeping (tests/bench_fakes.py), so
no assertion depends on how busy the machine is; only the sample build's rows
use real timings, and they are checked for shape, never for speed.
"""

import copy
import csv
import json
import os

import numpy as np
import pytest

from bench_fakes import (FakeClock, FakeRunner, NoGpuRunner, NoisyRunner, SlowingRunner, SmallMemoryRunner,
                         StagingGpuRunner)
from conftest import run_script
from trtkit.bench.matrix import run_matrix
from trtkit.bench.measure import measure_cell, set_figures
from trtkit.bench.passes import merge_passes, run_passes
from trtkit.bench.plan import BenchOptions, Variant, load_bench_images, plan_from_manifest
from trtkit.bench.report import write_reports
from trtkit.bench.timing import Stats

FAST = dict(seconds=0.02, warmup=0.0, min_iterations=2, agree_images=8, min_rounds=2, round_seconds=0.02)
DEVICE = {"cpu": {}, "software": {}, "slug": "test"}


def fake_variant(label, runner_factory):
    return Variant("fake", "fake", "fp32", runner_factory, label)


@pytest.fixture(scope="module")
def sample_result(sample_build, tmp_path_factory):
    from trtkit.pipeline.manifest import open_build
    out, _ = sample_build
    build = open_build(out)
    options = BenchOptions(batch_sizes=(1, 2), **FAST)
    variants = plan_from_manifest(build, options, torch_modes=["fp32", "channels_last", "half"])
    images, source = load_bench_images(build.manifest, count=8)
    assert source == "sample" and images.shape == (8, 3, 64, 64)
    result = run_matrix(variants, images, options)
    paths = write_reports(result, str(tmp_path_factory.mktemp("bench")), title="sample")
    return result, paths


def rows_of(result, variant):
    return [r for r in result["results"] if r["variant"] == variant]


def test_matrix_rows_and_speedups(sample_result):
    result, _ = sample_result
    eager = rows_of(result, "FP32 PyTorch (eager)")
    assert [r["batch"] for r in eager] == [1, 2]
    assert all(r["status"] == "ok" and r["speedup"] == pytest.approx(1.0) and r["agreement"] == 1.0 for r in eager)
    for label in ("FP32 ONNX Runtime", "FP16 ONNX Runtime", "FP32 PyTorch (channels_last)"):
        rows = rows_of(result, label)
        assert [r["status"] for r in rows] == ["ok", "ok"], rows
        for r in rows:
            assert r["fps"] > 0 and r["speedup"] > 0 and r["agreement"] >= 0.9
            assert r["latency_ms"]["p99"] >= r["latency_ms"]["median"] >= r["latency_ms"]["min"] > 0
            assert r["threads"] == result["options"]["threads"]
    half = rows_of(result, "FP16 PyTorch (.half())")
    assert half[0]["status"] == "skipped" and "GPU" in half[0]["reason"]
    assert result["device"]["cpu"]["usable_cores"] >= 1


def test_reports_written(sample_result):
    result, paths = sample_result
    assert sorted(paths) == ["csv", "json", "markdown", "png"]
    with open(paths["markdown"]) as handle:
        text = handle.read()
    assert "| resnet18 | FP32 PyTorch (eager) | 1 |" in text and "1.0x" in text
    assert "Device: CPU" in text and "skipped" in text
    with open(paths["csv"]) as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == len(result["results"])
    ok = [r for r in table if r["status"] == "ok"]
    assert ok and all(float(r["latency_ms.p99"]) > 0 and float(r["fps"]) > 0 for r in ok)
    with open(paths["json"]) as handle:
        saved = json.load(handle)
    assert saved["device"]["slug"] and len(saved["results"]) == len(result["results"])
    with open(paths["png"], "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_skip_oom_fixed_batch_and_noise(tmp_path):
    clock = FakeClock()
    options = BenchOptions(sweep=True, max_batch=16, clock=clock, **FAST)
    variants = [fake_variant("no gpu", lambda: NoGpuRunner(clock)),
                fake_variant("small memory", lambda: SmallMemoryRunner(clock)),
                fake_variant("fixed batch", lambda: FakeRunner(clock, batch_dim=2)),
                fake_variant("noisy", lambda: NoisyRunner(clock)),
                fake_variant("steady", lambda: FakeRunner(clock))]
    images = np.zeros((4, 3, 8, 8), dtype=np.float32)
    result = run_matrix(variants, images, options, device=DEVICE)
    skipped = rows_of(result, "no gpu")
    assert len(skipped) == 1 and skipped[0]["status"] == "skipped" and "GPU" in skipped[0]["reason"]
    small = rows_of(result, "small memory")
    assert [(r["batch"], r["status"]) for r in small] == [(1, "ok"), (2, "ok"), (4, "ok"), (8, "oom")]
    assert all(r["largest_batch"] == 4 for r in small)
    fixed = rows_of(result, "fixed batch")
    assert [r["status"] for r in fixed] == ["skipped", "ok", "skipped", "skipped", "skipped"]
    assert "fixed batch of 2" in fixed[0]["reason"]
    noisy = [r for r in rows_of(result, "noisy") if r["status"] == "ok"]
    assert noisy and all(any("unstable" in w for w in r["warnings"]) for r in noisy)
    assert all(r["warnings"] == [] and r["latency_ms"]["cv"] == 0 for r in rows_of(result, "steady"))
    assert all(r["device"] == "cpu" and r["copies"] == "none (host memory)" and r["peak_memory_bytes"] is None
               and "device_fps" not in r for r in rows_of(result, "steady"))
    paths = write_reports(result, str(tmp_path), png=False)
    with open(paths["markdown"]) as handle:
        text = handle.read()
    assert "(!)" in text and "out of memory at batch 8 (largest that fit: 4)" in text
    assert "no gpu: skipped, TensorRT engines need an NVIDIA GPU" in text


def test_half_keeps_batchnorm_fp32(sample):
    import torch
    from trtkit.backends.torch import _keep_batchnorm_fp32
    model = _keep_batchnorm_fp32(torch, copy.deepcopy(sample[0]).half())
    assert model.conv1.weight.dtype == torch.float16
    assert model.bn1.weight.dtype == torch.float32 and model.bn1.running_mean.dtype == torch.float32


def test_cli_writes_reports_and_says_where(sample_build, tmp_path):
    out, _ = sample_build
    reports = str(tmp_path / "r")
    proc = run_script("benchmark.py", ["--manifest", out, "--backends", "onnxruntime", "--precisions", "fp32",
                                       "--batch-sizes", "1", "--seconds", "0.05", "--warmup", "0",
                                       "--min-iterations", "2", "--out", reports])
    assert proc.returncode == 0, proc.stderr
    assert "| resnet18 | FP32 ONNX Runtime | 1 |" in proc.stdout
    assert "reports: " + os.path.join(reports, "bench.md") in proc.stderr
    assert sorted(os.listdir(reports)) == ["batch.csv", "bench.csv", "bench.json", "bench.md", "bench.png"]
    with open(os.path.join(reports, "batch.csv")) as handle:  # the reference's layout: variants x batches
        lines = handle.read().splitlines()
    assert lines[0] == "FPS / batch,1" and lines[1].startswith("FP32 ONNX Runtime,") and len(lines) == 2
    assert float(lines[1].split(",")[1]) > 0
    missing = run_script("benchmark.py", ["--manifest", str(tmp_path / "nothing")])
    assert missing.returncode == 2 and missing.stderr.startswith("error: no build manifest")
    assert "Traceback" not in missing.stderr


def test_registry_artifacts_that_cannot_run_are_skipped(sample_build, tmp_path):
    """Artifacts go through get_backend(...).runner(path): no GPU / unknown backend -> skipped with a reason."""
    from trtkit.pipeline.manifest import open_build
    out, _ = sample_build
    build = open_build(out)
    manifest = build.manifest
    engine = tmp_path / "resnet18.fp16.engine"
    engine.write_bytes(b"not an engine")
    manifest["artifacts"] = [
        {"name": "resnet18.fp16", "precision": "fp16", "backend": "tensorrt-rtx", "path": str(engine)},
        {"name": "resnet18.fp16", "precision": "fp16", "backend": "torch2trt", "path": str(engine)},
    ]
    options = BenchOptions(batch_sizes=(1,), **FAST)
    variants = plan_from_manifest(build, options, torch_modes=None)
    images = np.zeros((2, 3, 64, 64), dtype=np.float32)
    result = run_matrix(variants, images, options, device=DEVICE)
    rows = result["results"]
    assert [r["backend"] for r in rows] == ["tensorrt-rtx", "torch2trt"]
    assert all(r["status"] == "skipped" and r["reason"] for r in rows)
    assert "torch2trt" in rows[1]["reason"]


def test_interleaved_passes_pool_their_samples():
    """--repeats: the figures of a variant come from the samples of every pass together."""
    def row(samples, status="ok"):
        cell = {"variant": "v", "batch": 4, "status": status}
        if status == "ok":
            set_figures(cell, "latency", Stats(samples), 4)
            set_figures(cell, "throughput", Stats(samples), 4)
        return cell

    merged = merge_passes([[row([0.010] * 5)], [row([0.010] * 5)], [row([0.030] * 5)]], max_cv=0.10)
    assert len(merged) == 1
    figure = merged[0]
    assert figure["passes"] == 3 and figure["latency_ms"]["count"] == 15
    assert abs(figure["latency_ms"]["median"] - 10.0) < 1e-9  # the slow pass does not move the median
    assert abs(figure["fps"] - 400.0) < 1e-6
    assert any("unstable" in w for w in figure["warnings"])  # but its spread is reported
    assert "_stats" not in figure
    failed = merge_passes([[row([0.01] * 3)], [row(None, status="oom")]], max_cv=0.10)
    assert failed[0]["status"] == "skipped"


def test_drift_between_passes_is_reported():
    """A figure whose per-pass medians disagree (the machine slowed down mid-run) gets a drift warning."""
    def row(seconds):
        cell = {"variant": "v", "batch": 1, "status": "ok"}
        set_figures(cell, "latency", Stats([seconds] * 9 + [seconds * 1.01]), 1)
        return cell

    steady = merge_passes([[row(0.010)], [row(0.0101)], [row(0.0099)]], max_cv=0.10)[0]
    assert steady["warnings"] == [] and steady["pass_spread"]["latency"] < 0.05
    drifted = merge_passes([[row(0.010)], [row(0.010)], [row(0.014)]], max_cv=0.10)[0]
    assert abs(drifted["pass_spread"]["latency"] - 0.004 / (0.034 / 3)) < 1e-6
    assert any("between passes" in w and "10/10/14 ms" in w for w in drifted["warnings"])


def test_run_passes_adds_passes_only_while_passes_drift():
    """Constructed per-pass figures: drifting passes get up to ``extra_passes`` more, steady ones none."""
    def passes_of(medians, extra_passes, repeats=3):
        made = []

        def measure_pass():
            seconds = medians[len(made)]
            cell = {"variant": "v", "batch": 1, "status": "ok"}
            set_figures(cell, "latency", Stats([seconds] * 5), 1)
            made.append(cell)
            return [cell]
        grown = []
        passes = run_passes(measure_pass, repeats, extra_passes, 0.10, lambda: grown.append(1))
        assert len(grown) == len(passes) - repeats
        return len(passes)

    slowing = [0.002 * (i + 1) for i in range(10)]
    assert [passes_of(slowing, extra) for extra in (3, 1, 0)] == [6, 4, 3]
    assert passes_of([0.010, 0.0101, 0.0099] + slowing, 3) == 3
    assert passes_of([0.005] * 3, 3, repeats=1) == 1  # a single pass cannot drift


def test_run_matrix_adds_passes_and_warns_when_passes_drift():
    """Passes that disagree get more passes (up to --extra-passes) and a warning; steady ones get neither."""
    images = np.zeros((2, 3, 8, 8), np.float32)
    clock = FakeClock()
    for extra, expected in ((None, 6), (1, 4), (0, 3)):
        SlowingRunner.activations = 0
        options = BenchOptions(batch_sizes=[1], repeats=3, extra_passes=extra, clock=clock,
                               **dict(FAST, seconds=0.06, agree_images=0))
        variants = [fake_variant("slowing", lambda: SlowingRunner(clock)),
                    fake_variant("steady", lambda: FakeRunner(clock, seconds=0.005))]
        result = run_matrix(variants, images, options, device=DEVICE)
        row = rows_of(result, "slowing")[0]
        assert row["passes"] == expected == result["options"]["passes"] == SlowingRunner.activations
        assert row["pass_spread"]["latency"] > 0.5
        assert any("machine's speed changed" in w for w in row["warnings"])
        steady = rows_of(result, "steady")[0]
        assert steady["pass_spread"]["latency"] < 1e-9 and steady["warnings"] == []
    options = BenchOptions(batch_sizes=[1], repeats=3, clock=clock, **dict(FAST, seconds=0.03, agree_images=0))
    steady = run_matrix([fake_variant("steady", lambda: FakeRunner(clock, seconds=0.005))], images, options,
                        device=DEVICE)
    assert steady["options"]["passes"] == 3 and rows_of(steady, "steady")[0]["passes"] == 3


def test_gpu_runner_is_timed_through_the_contract():
    """device "cuda" + stages_on_device: synchronized host timing, a copy-free figure and the runner's peak memory."""
    clock = FakeClock()
    runner = StagingGpuRunner(clock)
    options = BenchOptions(batch_sizes=[4], clock=clock, **FAST)
    cell = measure_cell(runner, np.zeros((4, 3, 8, 8), np.float32), options, "cuda")
    assert runner.log["stage"] == 1 and runner.log["run_staged"] > 0 and runner.log["reset"] == 1
    assert runner.log["synchronize"] >= 2 * cell["latency_ms"]["count"]  # the clock stops after the device
    assert cell["copies"] == "included" and cell["peak_memory_bytes"] == 12345
    assert cell["latency_ms"]["median"] == pytest.approx(2.0)  # infer: 2 ms a call
    assert cell["device_latency_ms"]["median"] == pytest.approx(1.0)  # run_staged: 1 ms, no copies
    assert cell["fps"] == pytest.approx(2000.0) and cell["device_fps"] == pytest.approx(4000.0)
    result = run_matrix([fake_variant("gpu", lambda: StagingGpuRunner(clock))], np.zeros((4, 3, 8, 8), np.float32),
                        options, device=DEVICE)
    row = result["results"][0]
    assert row["device"] == "cuda" and row["device_fps"] == pytest.approx(4000.0)
