"""gpu_check: the dry-run plan on this machine, the plan and budget logic on described machines, the step
processes (time limit, failures), the report, and the CIFAR-shaped data.

The plan is a function of an environment dict, so an H100 with TensorRT-RTX, an
RTX 4090 NGC container or a CPU-only torch are described, not needed.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from trtkit.backends.tensorrt import gpu as gpu_probe
from trtkit.errors import InputError
from trtkit.gpucheck.plan import MARGIN_SECONDS, STEP_NAMES, STEPS, allot, get_step, make_plan, parse_skip
from trtkit.gpucheck.report import markdown_report, speed_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.py")
GPU_STEPS = [name for name in STEP_NAMES if name not in ("device", "sample-model")]
RTX_TARGETS = ["7.5", "8.0", "8.6", "8.9", "12.0", "12.1"]


def env(gpu=None, missing=(), **values):
    """An environment as ``probe_environment`` returns it: every module present unless ``missing``."""
    modules = dict((name, name not in missing) for name in ("torch", "onnx", "onnxruntime", "sklearn", "tensorrt",
                                                            "tensorrt_rtx", "tensorrt_rtx_bindings", "torch2trt",
                                                            "triton"))
    found = {"gpu": gpu, "modules": modules, "import_errors": {}, "versions": {"tensorrt_rtx": "1.7.1.116",
             "torch": "2.11.0", "onnxruntime": "1.24.1"}, "torch_cuda": True if gpu else None,
             "torch_compile": True if gpu else None, "ort_providers": None, "rtx_targets": None}
    found.update(values)
    return found


H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "count": 1}
RTX_4090 = {"name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9", "count": 1}


def verdicts(plan):
    return dict((p.name, (p.run, p.why())) for p in plan)


def run_script(args, cwd):
    environ = dict(os.environ, TRTKIT_CACHE=os.environ.get("TRTKIT_CACHE", ""))
    return subprocess.run([sys.executable, SCRIPT] + list(args), cwd=cwd, env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)


def test_dry_run_lists_every_step_with_its_reason_and_writes_nothing(tmp_path):
    result = run_script(["--dry-run"], str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = dict((line.split()[0], line) for line in result.stdout.splitlines()
                 if line.startswith("  ") and line.split() and line.split()[0] in STEP_NAMES)
    assert sorted(lines) == sorted(STEP_NAMES)
    assert " RUN " in lines["device"]
    if gpu_probe.probe() is None:
        for name in GPU_STEPS:
            assert " SKIP " in lines[name] and "no NVIDIA GPU here" in lines[name], lines[name]
        assert "no step that uses it will run" in lines["sample-model"]
    for line in lines.values():  # every SKIP says why
        assert " RUN " in line or len(line.split("SKIP", 1)[1].strip()) > 10
    assert "results would go to: benchmarks/results/" in result.stdout
    assert os.listdir(str(tmp_path)) == []  # nothing written, not even the results folder


def test_help_teaches_the_steps_and_the_files():
    result = run_script(["--help"], ROOT)
    assert result.returncode == 0
    for text in STEP_NAMES + ("--dry-run", "--budget-seconds", "--skip", "gpu_check.md", "device.json"):
        assert text in result.stdout


def test_a_cpu_machine_runs_only_the_device_record():
    verdict = verdicts(make_plan(env()))
    assert verdict["device"][0] is True
    for name in GPU_STEPS:
        assert verdict[name][0] is False and "no NVIDIA GPU here" in verdict[name][1]
    assert verdict["sample-model"] == (False, "no step that uses it will run")
    assert "builds engines without a GPU" in verdict["tensorrt-rtx"][1]


def test_hopper_runs_tensorrt_rtx_to_record_its_refusal_and_skips_what_is_missing():
    machine = env(H100, missing=("tensorrt", "torch2trt"), ort_providers=["CPUExecutionProvider"],
                  rtx_targets=RTX_TARGETS)
    verdict = verdicts(make_plan(machine))
    runs = sorted(name for name, (run, _) in verdict.items() if run)
    assert runs == sorted(["device", "sample-model", "torch-baselines", "resnet18-224", "tensorrt-rtx", "training", "torch-compile",
                           "segmentation", "detection"])
    assert "has no target for NVIDIA H100 80GB HBM3 (SM 9.0" in verdict["tensorrt-rtx"][1]
    assert "refusal" in verdict["tensorrt-rtx"][1]
    assert "tensorrt is not installed" in verdict["tensorrt"][1]
    assert "torch2trt is not installed" in verdict["torch2trt"][1] and "tensorrt is not" in verdict["torch2trt"][1]
    assert "no CUDAExecutionProvider" in verdict["onnxruntime-cuda"][1]


def test_an_rtx_gpu_with_every_runtime_runs_every_step():
    machine = env(RTX_4090, ort_providers=["CUDAExecutionProvider", "CPUExecutionProvider"], rtx_targets=RTX_TARGETS)
    plan = make_plan(machine)
    assert all(p.run for p in plan)
    assert "builds for this GPU (SM 8.9)" in verdicts(plan)["tensorrt-rtx"][1]


def test_torch_without_cuda_or_compile_is_named():
    machine = env(H100, torch_cuda=False, torch_compile=None, rtx_targets=RTX_TARGETS)
    verdict = verdicts(make_plan(machine))
    for name in ("torch-baselines", "training", "torch2trt", "torch-compile"):
        assert "torch 2.11.0 has no CUDA" in verdict[name][1]
    machine = env(H100, torch_compile=False, torch_compile_reason="torch.compile on CUDA needs triton")
    assert verdicts(make_plan(machine))["torch-compile"] == (False, "torch.compile on CUDA needs triton")


def test_a_helper_that_cannot_run_skips_its_users_and_says_why():
    machine = env(RTX_4090, missing=("sklearn",), rtx_targets=RTX_TARGETS)
    verdict = verdicts(make_plan(machine))
    assert verdict["sample-model"][0] is False and "sklearn is not installed" in verdict["sample-model"][1]
    assert "needs the sample-model step, which cannot run: sklearn" in verdict["torch-baselines"][1]
    assert verdict["training"][0] is True  # its own synthetic data, no sample model
    # without TensorRT the segmentation step times PyTorch rows only: it needs no sample model then
    machine = env(H100, missing=("sklearn", "tensorrt", "tensorrt_rtx", "torch2trt"))
    plan = make_plan(machine)
    verdict = verdicts(plan)
    assert verdict["segmentation"][0] is True and verdict["sample-model"][0] is False
    assert [p.after for p in plan if p.name == "segmentation"] == [()]


def test_broken_install_is_reported_with_its_import_error():
    machine = env(RTX_4090, missing=("tensorrt",), import_errors={"tensorrt": "OSError: libnvinfer.so.10: cannot open"})
    assert "tensorrt is installed but does not import (OSError: libnvinfer.so.10" in \
        verdicts(make_plan(machine))["tensorrt"][1]


def test_tensorrt_rtx_bindings_without_their_front_package_are_enough():
    machine = env(RTX_4090, missing=("tensorrt_rtx",), rtx_targets=RTX_TARGETS)
    assert verdicts(make_plan(machine))["tensorrt-rtx"][0] is True  # trtkit loads tensorrt_rtx_bindings itself
    machine["modules"]["tensorrt_rtx_bindings"] = False
    assert "tensorrt_rtx is not installed" in verdicts(make_plan(machine))["tensorrt-rtx"][1]


def test_skip_takes_lists_and_suggests_on_a_typo():
    assert parse_skip(["torch-compile,training", "tensorrt"]) == {"torch-compile", "training", "tensorrt"}
    verdict = verdicts(make_plan(env(RTX_4090, rtx_targets=RTX_TARGETS), skip={"training"}))
    assert verdict["training"] == (False, "left out with --skip")
    with pytest.raises(InputError) as info:
        parse_skip(["torch-compil"])
    assert "did you mean torch-compile" in info.value.hint


def test_budget_shares_follow_the_steps_and_keep_their_floors():
    steps = [get_step(n) for n in ("torch-baselines", "tensorrt-rtx", "training")]
    first, why = allot(steps[0], 480.0, steps[1:])
    assert why is None
    expected = (480.0 - MARGIN_SECONDS) * steps[0].seconds / sum(s.seconds for s in steps)
    assert first == pytest.approx(expected)
    # time a step did not use goes to the later ones
    assert allot(steps[1], 480.0 - 20.0, steps[2:])[0] > allot(steps[1], 480.0 - first, steps[2:])[0]
    # too little for every later floor: the earlier step runs at its floor rather than keep time for steps that
    # would not all fit either; too little for its own floor: skipped with the figures
    seconds, why = allot(steps[0], 100.0, steps[1:])
    assert why is None and seconds == pytest.approx(steps[0].floor)
    seconds, why = allot(steps[0], 40.0, steps[1:])
    assert seconds is None and "time budget: 40 s left; this one needs at least 30 s" in why
    # a later prerequisite's floor is always kept
    seconds, why = allot(steps[0], 60.0, [get_step("sample-model")] + steps[1:])
    assert seconds is None and "30 s of it kept for the later prerequisite(s)" in why
    # never below the floor, and into the later floors only when they cannot all fit
    seconds, _ = allot(steps[0], 125.0, steps[1:])
    assert seconds == pytest.approx(125.0 - MARGIN_SECONDS - 80.0)
    assert all(s.floor <= s.seconds for s in STEPS)


def _simulate(plan, budget, durations):
    """Run ``plan`` as run_check does, with a clock that each step advances by its (fake) duration, capped at
    the time it was given; returns {step: result} and the seconds each step was given."""
    from trtkit.gpucheck.run import run_planned
    clock, given, done = [0.0], {}, {}

    def run(name, seconds):
        given[name] = seconds
        clock[0] += min(durations.get(name, 10.0), seconds)
        return {"status": "ok" if durations.get(name, 10.0) <= seconds else "timeout"}
    for index, planned in enumerate(plan):
        done[planned.name] = run_planned(plan, index, done, budget - clock[0], run)
    return done, given, clock[0]


def test_the_planner_runs_prerequisites_first_for_every_budget_from_60_to_900_s():
    """Measured before: with --budget-seconds 300 the device record and the sample model were skipped to keep
    280 s for five later steps, which then could not run without the sample model."""
    from trtkit.gpucheck.plan import is_prerequisite, minimum_budget
    plan = make_plan(env(H100, missing=("tensorrt", "torch2trt"), ort_providers=["CPUExecutionProvider"],
                         rtx_targets=RTX_TARGETS))
    needed = minimum_budget(plan)
    prerequisites = [p.step for p in plan if p.run and is_prerequisite(p.step)]
    assert [s.name for s in prerequisites] == ["device", "sample-model"]
    assert needed == pytest.approx(MARGIN_SECONDS + sum(s.floor for s in prerequisites) + min(
        p.step.floor for p in plan if p.run and not is_prerequisite(p.step)))
    for durations in ({"device": 6.0, "sample-model": 30.0}, {"device": 40.0, "sample-model": 95.0}, {}):
        for budget in range(60, 901, 30):
            done, given, spent = _simulate(plan, float(budget), durations)
            if budget < needed:
                continue  # refused up front by run_check (below)
            assert done["device"]["status"] != "skipped" and done["sample-model"]["status"] != "skipped", budget
            ran = [name for name, result in done.items() if result["status"] != "skipped"]
            left = budget - MARGIN_SECONDS - sum(min(durations.get(n, 10.0), given[n]) for n in ("device", "sample-model"))
            cheapest = min(p.step.floor for p in plan if p.run and not is_prerequisite(p.step))
            if done["sample-model"]["status"] == "ok" and left >= cheapest:  # a step that uses it runs too
                assert len(ran) >= 3, (budget, done)
            else:  # it needed more than the budget had: it got all but the cheapest user's floor
                cheapest = min(p.step.floor for p in plan if p.run and not is_prerequisite(p.step))
                assert given["sample-model"] >= min(2 * get_step("sample-model").seconds, budget - MARGIN_SECONDS - min(
                    durations.get("device", 10.0), given["device"]) - cheapest) - 1e-6, (budget, given)
            if all(durations.get(s.name, 10.0) <= s.floor for s in prerequisites):  # prerequisites within their
                assert len(ran) >= 3, (budget, done)  # floors leave the cheapest step that uses them its floor
            for name in ran:  # every step that ran got at least its floor, and the run kept within the budget
                assert given[name] >= get_step(name).floor - 1e-6
            assert spent <= budget - MARGIN_SECONDS + 1e-6
            for name, result in done.items():  # nothing waits for a prerequisite that did not finish
                if result["status"] != "skipped" and "sample-model" in get_step(name).after:
                    assert done["sample-model"]["status"] == "ok"
    # 300 s, as on the H200: the device record and the sample model run, then steps in order (the expected
    # times, not the floors, go to the prerequisites first)
    done, _, _ = _simulate(plan, 300.0, {"device": 5.4, "sample-model": 31.2})
    assert done["device"]["status"] == "ok" and done["sample-model"]["status"] == "ok"
    assert done["torch-baselines"]["status"] == "ok"


def test_the_detection_step_gets_its_floor_without_taking_the_others_for_every_budget_from_60_to_900_s():
    """The detection step comes last: on a GPU without TensorRT it gets at least its floor from the default budget
    even when every step before it uses all its share, and at no budget does a step before it get less than its
    floor because of it (a budget too small for every floor skips detection, not an earlier step)."""
    from trtkit.gpucheck.plan import minimum_budget
    from trtkit.gpucheck.run import DEFAULT_BUDGET_SECONDS
    plan = make_plan(env(H100, missing=("tensorrt", "torch2trt", "tensorrt_rtx", "tensorrt_rtx_bindings"),
                         ort_providers=["CUDAExecutionProvider"]))
    running = [p.name for p in plan if p.run]
    assert running[-1] == "detection" and get_step("detection").after == ()
    others = [p for p in plan if p.run and p.name != "detection"]
    without = make_plan(env(H100, missing=("tensorrt", "torch2trt", "tensorrt_rtx", "tensorrt_rtx_bindings"),
                            ort_providers=["CUDAExecutionProvider"]), skip={"detection"})
    for budget in range(60, 901, 30):
        if budget < minimum_budget(plan):
            continue
        # steps that take 10 s, their expected time (``seconds``; the prerequisites as measured on the H200), or
        # every second they are given
        for case, durations in (("fast", dict((p.name, 10.0) for p in plan)),
                                ("expected", dict([(p.name, p.step.seconds) for p in plan] +
                                                  [("device", 5.4), ("sample-model", 31.2)])),
                                ("slow", dict((p.name, 1e9) for p in plan))):
            done, given, spent = _simulate(plan, float(budget), durations)
            alone, given_alone, _ = _simulate(without, float(budget), durations)
            assert spent <= budget - MARGIN_SECONDS + 1e-6
            for p in others:  # each earlier step runs exactly when it did without detection, never below its floor
                assert (done[p.name]["status"] == "skipped") == (alone[p.name]["status"] == "skipped"), (budget, p.name)
                if p.name in given:
                    assert given[p.name] >= get_step(p.name).floor - 1e-6
            if done["detection"]["status"] != "skipped":
                assert given["detection"] >= get_step("detection").floor - 1e-6
            if budget >= DEFAULT_BUDGET_SECONDS and case != "slow":  # (slow: the prerequisites take up to twice
                assert done["detection"]["status"] != "skipped", (budget, case, given)  # their time, by design)
            if case == "fast" and budget >= 300:
                assert given["detection"] >= get_step("detection").seconds, (budget, given)


def test_a_budget_too_small_for_the_prerequisites_is_refused_up_front_with_the_budget_that_works(tmp_path):
    from trtkit.gpucheck.plan import minimum_budget
    skip = ("tensorrt,torch2trt,onnxruntime-cuda,tensorrt-rtx,segmentation,torch-compile,training,torch-baselines,"
            "resnet18-224,detection")
    result = run_script(["--out", str(tmp_path / "r"), "--budget-seconds", "20", "--skip", skip], str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    plan = make_plan(env(H100), skip=set(skip.split(",")))
    assert "--budget-seconds 20 is too small" in result.stderr
    needed = minimum_budget([p for p in plan if p.name == "device"])
    assert "give --budget-seconds {:.0f} or more".format(needed) in result.stderr
    assert not os.path.exists(str(tmp_path / "r"))


def test_a_step_past_its_time_is_stopped_and_recorded(tmp_path, monkeypatch):
    from trtkit.gpucheck.run import run_step_process
    monkeypatch.setenv("TRTKIT_CACHE", str(tmp_path / "empty-cache"))  # the sample model must train: minutes
    log = str(tmp_path / "log.txt")
    result = run_step_process("sample-model", 4.0, str(tmp_path), {}, log)
    assert result["status"] == "timeout" and result["error"] == "stopped after 4 s, its share of the time budget"
    assert result["wall_seconds"] < 20 and "===== sample-model" in open(log).read()
    assert not os.path.exists(str(tmp_path / "empty-cache" / "sample")) or not [
        n for n in os.listdir(str(tmp_path / "empty-cache" / "sample")) if n.endswith(".pt")]


def test_a_failing_step_is_recorded_with_its_exact_error(tmp_path):
    from trtkit.gpucheck.run import run_step_process
    result = run_step_process("no-such-step", 60.0, str(tmp_path), {}, str(tmp_path / "log.txt"))
    assert result["status"] == "failed" and result["error"] == "TrtkitError: unknown step 'no-such-step'"


def test_a_run_writes_the_four_result_files(tmp_path):
    out = tmp_path / "results"
    skip = ",".join(n for n in STEP_NAMES if n != "device")
    result = run_script(["--out", str(out), "--budget-seconds", "90", "--skip", skip], str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(str(out))) == ["device.json", "gpu_check.json", "gpu_check.log", "gpu_check.md"]
    with open(str(out / "gpu_check.json")) as handle:
        record = json.load(handle)
    assert record["steps"]["device"]["status"] == "ok" and record["device"]["software"]["trtkit"]
    assert [record["steps"][n]["reason"] for n in STEP_NAMES if n != "device"] == ["left out with --skip"] * (len(STEP_NAMES) - 1)
    text = (out / "gpu_check.md").read_text()
    assert "| device | ok |" in text and "Nothing was timed." in text


def _row(step_variant, backend, precision, batch, fps, mode=None, agreement=None):
    return {"model": "resnet18", "variant": step_variant, "backend": backend, "precision": precision,
            "torch_mode": mode, "batch": batch, "status": "ok", "fps": fps, "agreement": agreement,
            "latency_ms": {"median": 1.0, "p99": 1.5}}


def test_report_combines_steps_quotes_the_rtx_refusal_and_the_training_table():
    refusal = "not run: TensorRT-RTX 1.7 has no target for NVIDIA H100 80GB HBM3 (SM 9.0): the engine cannot run"
    steps = {
        "torch-baselines": {"status": "ok", "bench": {"results": [
            _row("FP32 PyTorch (eager)", "torch", "fp32", 64, 1000.0, "fp32", 1.0),
            _row("FP16 PyTorch (.half())", "torch", "fp16", 64, 2500.0, "half", 0.997)]}},
        "torch-compile": {"status": "ok", "bench": {"results": [
            _row("FP32 PyTorch (eager)", "torch", "fp32", 64, 800.0, "fp32", 1.0),
            _row("FP32 PyTorch (torch.compile)", "torch", "fp32", 64, 1600.0, "compile", 1.0)]}},
        "tensorrt-rtx": {"status": "refused", "build": {"artifacts": [
            {"name": "resnet18.fp32", "precision": "fp32", "backend": "tensorrt-rtx", "status": "built",
             "status_detail": refusal, "verify": None}]},
            "refusal": {"trtkit": refusal, "tensorrt_rtx_load": {
                "path": "resnet18.fp32.engine", "tensorrt_version": "1.7.1.116", "deserialized": False,
                "context": False, "messages": ["ERROR: IRuntime::deserializeCudaEngine: no kernel image for SM 9.0"]},
                "current_target": {"built": False, "error": "InputError: could not build",
                                   "messages": ["[TRT] [E] unsupported SM 90"]}}},
        "onnxruntime-cuda": {"status": "ok", "build": {"artifacts": [
            {"name": "resnet18.fp16", "precision": "fp16", "backend": "onnxruntime", "status": "ok",
             "verify": {"top1_agreement": 0.9972, "max_abs_diff": 0.0123, "accuracy": 0.99, "images": 359}}]},
            "bench": {"results": [_row("FP16 ONNX Runtime (CUDA)", "onnxruntime", "fp16", 64, 4000.0,
                                       agreement=0.9972)]}},
        "training": {"status": "ok", "data": "synthetic", "config": {"epochs": 3, "batch_size": 256},
                     "table": "mode  s/epoch\\nfp32  2.00\\namp   1.00"},
    }
    rows = speed_rows(steps)
    eager = [r for r in rows if r["variant"] == "FP32 PyTorch (eager)"]
    assert len(eager) == 1 and eager[0]["fps"] == 1000.0  # the baselines' row, not torch-compile's rerun
    speedups = dict((r["variant"], r["speedup"]) for r in rows)
    assert speedups["FP16 PyTorch (.half())"] == pytest.approx(2.5)
    assert speedups["FP32 PyTorch (torch.compile)"] == pytest.approx(1.6)
    assert speedups["FP16 ONNX Runtime (CUDA)"] == pytest.approx(4.0)
    plan = [{"step": name} for name in STEP_NAMES]
    text = markdown_report({"plan": plan, "steps": steps, "device": {"gpus": [H100], "cpu": {}, "software": {}},
                            "started": "now", "seconds": 100, "budget_seconds": 480, "command": "gpu_check.py"})
    assert text.startswith("# trtkit GPU check: NVIDIA H100 80GB HBM3")
    assert "| tensorrt-rtx | refused |" in text and refusal in text
    assert "no kernel image for SM 9.0" in text and "unsupported SM 90" in text
    assert "| onnxruntime | FP16 | ok | 99.72% | 1.23e-02 | 99.00% | 359 |" in text
    assert "| torch (half) | FP16 | ok | 99.70% |" in text
    assert "4.0x" in text and "amp   1.00" in text
    assert "| torch2trt | not reached |" in text


def test_cifar_shaped_data_loads_like_cifar10_and_repeats_by_seed(tmp_path):
    from trtkit.contract import InputContract
    from trtkit.data import load_images
    from trtkit.gpucheck.cifar_like import write_cifar_like
    folder = write_cifar_like(str(tmp_path / "c"), train=500, test=100, seed=3)
    train = load_images(folder, InputContract(size=32), split="train")
    heldout = load_images(folder, InputContract(size=32), split="heldout")
    assert train.images.shape == (500, 3, 32, 32) and heldout.images.shape == (100, 3, 32, 32)
    assert set(train.labels.tolist()) == set(range(10)) and len(train.class_names) == 10
    again = write_cifar_like(str(tmp_path / "d"), train=500, test=100, seed=3)
    assert np.array_equal(load_images(again, InputContract(size=32), split="train").images, train.images)


def test_the_segmentation_step_fills_the_reference_table_from_real_rows(tmp_path):
    """The reference's layout (rows precisions, columns models, latency at batch 1) from bench rows, the engine
    backend by what imports, and a random-weight reference model that trtkit reads back as that model."""
    from trtkit.gpucheck.segmentation import engine_backend, random_checkpoint, reference_table
    from trtkit.models.classifiers import read_checkpoint
    from trtkit.models.segmentation import infer_segmentation_layout
    rows = [{"status": "ok", "batch": 1, "variant": "FP32 PyTorch (eager)", "model": "fcn_resnet50",
             "latency_ms": {"median": 200.0}},
            {"status": "ok", "batch": 1, "variant": "FP16 TensorRT", "model": "fcn_resnet50",
             "latency_ms": {"median": 36.0}},
            {"status": "ok", "batch": 1, "variant": "FP16 TensorRT", "model": "deeplabv3_resnet50",
             "latency_ms": {"median": 130.0}},
            {"status": "failed", "batch": 1, "variant": "INT8 TensorRT", "model": "fcn_resnet50"}]
    table = reference_table(rows, ["fcn_resnet50", "deeplabv3_resnet50"]).splitlines()
    assert table[0] == "| latency ms, batch 1, 512x512 | fcn_resnet50 | deeplabv3_resnet50 |"
    assert table[2:] == ["| FP32 PyTorch (eager) | 200.0 | - |", "| FP16 TensorRT | 36.0 | 130.0 |"]
    assert engine_backend({"tensorrt": True, "tensorrt_rtx": True}) == "tensorrt"
    assert engine_backend({"tensorrt": False, "tensorrt_rtx": True}) == "tensorrt-rtx"
    assert engine_backend({}) is None
    state, meta = read_checkpoint(random_checkpoint("fcn_resnet50", str(tmp_path)))
    assert infer_segmentation_layout(state) == ("fcn_resnet50", 21, False)
    assert meta["input"]["size"] in (512, [512, 512])


def test_the_segmentation_step_times_its_pytorch_rows_without_tensorrt(tmp_path):
    """On the H200 without TensorRT the whole segmentation step was skipped, PyTorch column included. Here the
    same code times FCN-ResNet50 (seeded weights) on the CPU at a small size, each row saved as it comes."""
    pytest.importorskip("torch")
    from trtkit.gpucheck.segmentation import pytorch_rows
    from trtkit.gpucheck.steps import _bench, bench_options, saving_rows
    saved = []
    result = pytorch_rows({"seconds": 60.0, "work": str(tmp_path)}, lambda r: saved.append(dict(r)),
                          bench_options, _bench, saving_rows, size=64, models=("fcn_resnet50",))
    rows = result["bench"]["results"]
    ran = [r for r in rows if r.get("status") == "ok"]
    assert result["status"] == "ok" and ran and all(r["backend"] == "torch" and r["fps"] > 0 for r in ran)
    assert "PyTorch rows only" in result["reason"] and "fcn_resnet50" in result["table"]
    assert saved and saved[-1]["bench"]["results"]
