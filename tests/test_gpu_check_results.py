"""gpu_check keeps what it measured and checks torch.compile (issue 23, items 3 and 8), all on CPU.

- A step that saved part of its result and then raises, is killed or hangs keeps those figures, its error
  beside them: real step functions (``gpucheck_step_functions.py``) run in the real child process.
- Rows are saved as they are measured (real PyTorch timing, then a hang past the time limit).
- torch.compile's outputs are checked against eager: ``compare_callables`` on a real model and a wrong one,
  and a measured row whose outputs disagree becomes ``failing``.
(Item 9, the device step's budget: ``test_gpu_check_budget.py``; item 11, the PyTorch baseline recipe:
``test_torch_baseline.py``.)
"""

import copy
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
HELPERS = os.path.join(HERE, "gpucheck_step_functions.py")


def _run(name, tmp_path, seconds=60.0, options=None):
    from trtkit.gpucheck.run import run_step_process
    log = str(tmp_path / "log.txt")
    result = run_step_process(name, seconds, str(tmp_path), options or {}, log,
                              function="{}:{}".format(HELPERS, name.replace("-", "_")))
    return result, open(log).read()


# ---------------------------------------------------------------- item 3: a crash never destroys what was measured

def test_a_step_that_raises_after_saving_keeps_its_figures_and_adds_its_error(tmp_path):
    from gpucheck_step_functions import MEASURED
    result, _ = _run("partial-then-raise", tmp_path)
    assert result["status"] == "failed"
    assert result["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "Traceback" in result["traceback"]
    assert result["bench"]["results"] == [MEASURED]  # kept, not replaced by the error
    assert result["partial_status"] == "running"


def test_a_step_killed_after_saving_keeps_its_figures_and_says_how_it_ended(tmp_path):
    from gpucheck_step_functions import MEASURED
    result, _ = _run("partial-then-killed", tmp_path)
    assert result["status"] == "failed"
    assert result["error"] == "the step's process was killed by signal 9 (SIGKILL) without its final result"
    assert result["bench"]["results"] == [MEASURED]
    assert result["partial_status"] == "running" and "log_tail" in result


def test_the_report_shows_the_error_and_the_rows_kept():
    from trtkit.gpucheck.report import speed_rows, step_detail
    from trtkit.gpucheck.steps import keep_partial
    row = {"model": "resnet18", "variant": "FP32 PyTorch (eager)", "backend": "torch", "torch_mode": "fp32",
           "precision": "fp32", "batch": 64, "status": "ok", "fps": 1000.0}
    result = keep_partial({"status": "running", "bench": {"results": [row]}},
                          {"status": "timeout", "error": "stopped after 80 s, its share of the time budget"})
    assert step_detail(result) == ("stopped after 80 s, its share of the time budget (kept what it measured "
                                   "first: 1 timed rows)")
    assert [r["fps"] for r in speed_rows({"torch-baselines": result})] == [1000.0]


# ---------------------------------------------------------------- item 8: rows saved as measured; compile checked

@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory):
    """A small ResNet18 (10 classes, 32x32) and the same model with its classifier perturbed."""
    from trtkit.models.classifiers import create_model, save_checkpoint
    folder = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    model = create_model("resnet18", num_classes=10, stem="cifar", input_size=32).eval()
    good = save_checkpoint(model, str(folder / "tiny.pt"))
    wrong = copy.deepcopy(model)
    with torch.no_grad():
        wrong.fc.weight.add_(torch.randn_like(wrong.fc.weight) * 5.0)
    return model, good, save_checkpoint(wrong, str(folder / "wrong.pt"))


def test_a_step_past_its_time_keeps_every_row_it_measured(tmp_path, tiny_checkpoints):
    """The step's limit is waited out in full, so it is short: 20 s, about three times what the step takes to
    measure its rows and reach its hang on a loaded two-core machine (8 s, most of it importing torch). A step
    stopped before it got there (a slower machine still: its ``HANGING`` marker missing) runs again with 60 s;
    the rows are judged only from a run that reached its hang, so a slow machine fails nothing and a lost row
    always fails."""
    from gpucheck_step_functions import HANGING
    _, checkpoint, _ = tiny_checkpoints
    marker = str(tmp_path / HANGING)
    for seconds in (20.0, 60.0):
        if os.path.exists(marker):
            os.remove(marker)
        result, log = _run("time-then-hang", tmp_path, seconds=seconds, options={"checkpoint": checkpoint})
        if os.path.exists(marker):
            break
    assert os.path.exists(marker), "the step never reached its hang: {}".format(log[-2000:])
    assert result["status"] == "timeout", (result, log)
    rows = result["bench"]["results"]
    assert [(r["variant"], r["batch"], r["status"]) for r in rows] == [
        ("FP32 PyTorch (eager)", 1, "ok"), ("FP32 PyTorch (eager)", 2, "ok")]
    assert all(r["fps"] > 0 and r["latency_ms"]["median"] > 0 for r in rows)


def _numpy_model(model):
    def run(images):
        with torch.no_grad():
            return model(torch.from_numpy(np.ascontiguousarray(images))).numpy()
    return run


def test_compare_callables_passes_a_faithful_rewrite_and_fails_a_wrong_one(tiny_checkpoints):
    from trtkit.backends.torch_baseline import prepare_model
    from trtkit.bench.agreement import compare_callables
    model, _, _ = tiny_checkpoints
    images = np.random.RandomState(1).standard_normal((12, 3, 32, 32)).astype(np.float32)
    eager = _numpy_model(model)
    rewritten = _numpy_model(prepare_model(torch, copy.deepcopy(model), "channels_last", "cpu"))
    same = compare_callables(eager, rewritten, images, "fp32", batch=6)
    assert same["ok"] and same["images"] == 12 and same["top1_agreement"] == 1.0
    assert same["max_abs_diff"] <= same["limit"]

    def wrong(batch):  # the right model on the wrong images: plausible logits, wrong answers
        return eager(batch[::-1].copy())
    bad = compare_callables(eager, wrong, images, "fp32", batch=6)
    assert not bad["ok"] and bad["max_abs_diff"] > bad["limit"] and "max |diff|" in bad["why"]
    nan = compare_callables(eager, lambda b: eager(b) * np.nan, images[:4], "fp32")
    assert not nan["ok"] and nan["why"].startswith("non-finite outputs")
    # the tolerance is the precision's: what FP32 refuses, BF16's looser limit may take
    reference = eager(images)
    scaled = compare_callables(lambda b: reference, lambda b: reference * 1.03, [0], "fp32")
    assert not scaled["ok"] and compare_callables(lambda b: reference, lambda b: reference * 1.03, [0], "bf16")["ok"]


def test_a_compiled_row_that_disagrees_with_eager_is_failing(tiny_checkpoints):
    """Measured for real: eager FP32, then a 'compile' row whose runner computes something else (the
    perturbed model); the agreement pass records max |diff| and top-1, and the torch-compile step's judge
    marks the row failing with the figures. A faithful channels_last row stays ok."""
    from trtkit.backends.torch import torch_runner
    from trtkit.bench.matrix import run_matrix
    from trtkit.bench.plan import BenchOptions, Variant, torch_variants
    from trtkit.gpucheck.steps import judge_against_eager
    _, good, wrong = tiny_checkpoints
    options = BenchOptions(batch_sizes=(2,), seconds=0.05, warmup=0.01, max_seconds=0.1, min_iterations=2,
                           min_rounds=2, agree_images=16, pin=False, threads=1)
    variants = torch_variants(None, good, ["fp32", "channels_last"], 1, 32, "tiny", device="cpu")
    variants.append(Variant("tiny", "torch", "fp32", lambda: torch_runner(wrong, {"device": "cpu", "threads": 1}),
                            "FP32 PyTorch (torch.compile)", mode="compile", path=wrong))
    images = np.random.RandomState(2).standard_normal((16, 3, 32, 32)).astype(np.float32)
    rows = run_matrix(variants, images, options, device={"test": "cpu"})["results"]
    judged = dict((r["torch_mode"], r) for r in judge_against_eager(rows, ("compile", "channels_last")))
    assert judged["channels_last"]["status"] == "ok" and judged["channels_last"]["check"]["ok"]
    bad = judged["compile"]
    assert bad["status"] == "failing" and bad["reason"].startswith("disagrees with eager FP32: max |diff|")
    assert bad["check"]["max_abs_diff"] > bad["check"]["limit"]
    assert judged["fp32"]["status"] == "ok"  # the reference itself is never judged
