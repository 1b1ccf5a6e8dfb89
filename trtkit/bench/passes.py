"""Interleaved passes: repeat the whole matrix, add passes when they disagree, merge them into one row each.

Why: on a shared machine speed changes while a benchmark runs. With
``--repeats N`` each variant is measured in N short windows spread over the
whole run, so a slow spell falls on every variant alike instead of on one.
Passes whose medians disagree by more than ``max_cv`` straddled such a change:
``run_passes`` adds up to ``extra_passes`` more, and ``merge_passes`` pools the
samples of every pass into one figure and says how far the passes drifted.

Everything here works on rows as ``measure.benchmark_variant`` returns them
(figures plus their ``Stats`` under ``_stats``), never on a runner or a clock,
so tests give it constructed per-pass figures.
"""

import numpy as np

from trtkit.bench.measure import set_figures
from trtkit.bench.timing import Stats


def run_passes(measure_pass, repeats, extra_passes, max_cv, before_extra=None):
    """``repeats`` passes, then up to ``extra_passes`` more while ``drifting``; returns the list of passes.

    ``measure_pass()`` returns one pass's rows; ``before_extra()`` (optional)
    runs before each added pass (the progress bar grows). A single pass cannot
    drift, so it never gets extra passes.
    """
    passes = [measure_pass() for _ in range(repeats)]
    extra = 0
    while repeats > 1 and extra < extra_passes and drifting(passes, max_cv):
        extra += 1
        if before_extra is not None:
            before_extra()
        passes.append(measure_pass())
    return passes


def merge_passes(passes, max_cv):
    """One row per variant and batch: the samples of every pass pooled, figures and warnings from the pool."""
    merged = []
    for row in passes[0]:
        row = dict(row)
        same = _same_cell(passes[1:], row)
        figures = _pass_figures(row, same)
        drift = []
        if figures is not None:
            for what, per_pass in figures.items():
                set_figures(row, what, Stats(np.concatenate([p.samples for p in per_pass]), max_cv), row["batch"])
                if same:
                    spread = pass_spread(per_pass)
                    row.setdefault("pass_spread", {})[what] = spread
                    if spread > max_cv:
                        drift.append("{} median moved {:.0%} between passes ({} ms): the machine's speed changed "
                                     "while measuring".format(what, spread, "/".join(
                                         "{:.3g}".format(p.median * 1000.0) for p in per_pass)))
            row["passes"] = 1 + len(same)
        elif row.get("status") == "ok":
            row.update(status="skipped", reason="failed in a later pass: " + next(
                r.get("reason", "") for r in same if r.get("status") != "ok"))
        stats = row.pop("_stats", {})
        row["warnings"] = ["{} {}".format(what, s.warning()) for what, s in sorted(stats.items()) if s.warning()]
        row["warnings"] += drift  # shown once, under the results table (bench.report), not also as they come
        merged.append(row)
    return merged


def _same_cell(passes, row):
    return [r for rows in passes for r in rows if r["variant"] == row["variant"] and r.get("batch") == row.get("batch")]


def _pass_figures(row, same):
    """{figure: [Stats of each pass]} for a cell that ran in every pass; None when one of them failed it."""
    if row.get("status") != "ok" or any(r.get("status") != "ok" for r in same):
        return None
    return dict((what, [stats] + [r["_stats"][what] for r in same]) for what, stats in row["_stats"].items())


def drifting(passes, max_cv):
    """True when some figure's per-pass medians differ by more than ``max_cv`` (see ``pass_spread``)."""
    for row in passes[0]:
        figures = _pass_figures(row, _same_cell(passes[1:], row)) or {}
        if any(len(per_pass) > 1 and pass_spread(per_pass) > max_cv for per_pass in figures.values()):
            return True
    return False


def pass_spread(per_pass):
    """(max - min) / mean of the per-pass medians: how far the machine drifted between passes."""
    medians = [p.median for p in per_pass]
    mean = sum(medians) / float(len(medians))
    return (max(medians) - min(medians)) / mean if mean > 0 else 0.0
