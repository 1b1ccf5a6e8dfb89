"""Real gpu_check steps for tests: plain functions ``(request, save)`` that the step child process runs
(``run_step_process(..., function="this file:name")``). Each saves part of a result, then fails the way a
GPU step does: an exception (a CUDA error), a hard kill (the OOM killer, a segfault in a driver), a hang.
Not collected by pytest (no ``test_`` prefix)."""

import os
import signal
import time

MEASURED = {"model": "resnet18", "variant": "FP16 TensorRT", "batch": 64, "status": "ok", "fps": 4321.0}


def partial_then_raise(request, save):
    save({"status": "running", "bench": {"results": [MEASURED]}})
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def partial_then_killed(request, save):
    save({"status": "running", "bench": {"results": [MEASURED]}})
    os.kill(os.getpid(), signal.SIGKILL)


HANGING = "time-then-hang.hanging"  # written in the step's work folder when it reaches its hang


def _hang():
    time.sleep(3600)


def time_then_hang(request, save):
    """Time a real PyTorch FP32 baseline on CPU through gpu_check's own timing (``steps._bench`` with
    ``steps.saving_rows``), then a variant whose runner never comes back: the parent's time limit kills it.
    Reaching the hang writes ``HANGING`` first, so a test tells a step stopped while still measuring (a slow
    machine) from one stopped in its hang, whose rows must all have been kept."""
    import numpy as np

    from trtkit.bench.plan import BenchOptions, Variant, torch_variants
    from trtkit.gpucheck.steps import _bench, saving_rows
    options = BenchOptions(batch_sizes=(1, 2), seconds=0.05, warmup=0.01, max_seconds=0.1, min_iterations=2,
                           min_rounds=2, agree_images=4, pin=False, threads=1)
    variants = torch_variants(None, request["options"]["checkpoint"], ["fp32"], 1, 32, "tiny", device="cpu")
    marker = os.path.join(request["work"], HANGING)

    def hang():
        open(marker, "w").close()
        _hang()

    variants.append(Variant("tiny", "torch", "fp32", hang, "FP32 a path that hangs", mode="channels_last"))
    images = np.random.RandomState(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    result = {"status": "running", "bench": {"results": []}}
    result["bench"] = _bench(variants, images, options, saving_rows(result, save))
    result["status"] = "ok"
    return result
