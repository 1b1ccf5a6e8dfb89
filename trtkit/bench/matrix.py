"""The benchmark matrix: model x precision x backend x batch size, measured honestly.

The orchestrator of ``trtkit bench``, ``scripts/benchmark.py`` and
``benchmarks/run_matrix.py``: variants come from ``plan`` (a build manifest or
flags), each is measured by ``measure`` (latency and throughput modes, with
and without host<->device copies where the runner can keep inputs on the
device), the whole matrix is repeated and merged by ``passes``, and
``run_matrix`` returns one JSON-ready dict with the device record. This module
only puts those steps in order: the baseline first (its logits are the
agreement reference), threads pinned, a progress bar, speed-ups at the end.
"""

import time

from trtkit.bench import affinity
from trtkit.bench.measure import benchmark_variant
from trtkit.bench.passes import merge_passes, run_passes
from trtkit.bench.plan import TORCH_BASELINE


def add_speedups(rows):
    """speed-up = FPS / FPS of PyTorch FP32 eager on the same model and batch size."""
    base = dict(((r["model"], r["batch"]), r["fps"]) for r in rows
                if r.get("status") == "ok" and (r["backend"], r.get("torch_mode")) == TORCH_BASELINE)
    for row in rows:
        ref = base.get((row["model"], row.get("batch")))
        row["speedup"] = row["fps"] / ref if row.get("status") == "ok" and ref else None
    return rows


def plain_row(row):
    """A measured row as JSON can hold it: the raw samples (``_stats``) left out, figures kept."""
    return dict((k, v) for k, v in row.items() if k != "_stats")


def run_matrix(variants, images, options, device=None, progress_label="benchmarking", on_rows=None, output_kind=None):
    """Measure every variant; returns {"device", "options", "results", "seconds"} (JSON-ready).

    ``output_kind``: what the model's output holds (``trtkit.outputs``; None: logits, binary-logit for one
    column), whose rule the agreement with the baseline uses. ``on_rows(rows)`` (optional) gets the rows measured so far in the current pass (JSON-ready, without
    their raw samples) each time one more is complete: gpu_check saves them, so a step stopped at its
    time limit keeps every row done."""
    from trtkit.bench.device import device_record
    from trtkit.log import Progress
    start = time.time()
    device = device or device_record()
    ordered = sorted(variants, key=lambda v: not v.is_baseline)  # baseline first: reference logits
    reference = {"kind": output_kind}  # the baseline's outputs join it; agreement by the model's decision rule
    part = options.one_pass() if options.repeats > 1 else options
    cells = len(ordered) * len(options.sizes())
    with affinity.pinned(options.threads, options.pin) as cores:
        with Progress(progress_label, total=cells * options.repeats, unit="cells") as bar:
            def measure_pass():
                done = []

                def on_row(row):
                    done.append(row)
                    on_rows([plain_row(r) for r in done])

                keep = on_row if on_rows is not None else None
                return [row for variant in ordered
                        for row in benchmark_variant(variant, images, part, reference, bar, on_row=keep)]

            def grow_bar():
                bar.total += cells

            passes = run_passes(measure_pass, options.repeats, options.extra_passes, options.max_cv, grow_bar)
    rows = merge_passes(passes, options.max_cv)
    add_speedups(rows)
    stated = options.to_dict()
    stated["cpu_cores"] = cores
    stated["passes"] = len(passes)
    stated["threads_text"] = affinity.describe_pinning(options.threads, cores)
    return {"device": device, "options": stated, "results": rows,
            "seconds": round(time.time() - start, 1)}
