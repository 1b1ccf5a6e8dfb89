"""Benchmark reports: the Markdown table users share, CSV/JSON with every raw figure, a PNG chart.

The table has the shape of the classic Jetson one (model, precision/backend,
FPS, speed-up over PyTorch FP32 eager, latency p50/p99, top-1 agreement),
preceded by the device line and the method, followed by skipped variants and
stability warnings, so a pasted table still says what it measured.
"""

import csv
import io
import os

from trtkit.bench.device import describe
from trtkit.fileio import atomic_path, write_json, write_text

REPORT_NAMES = {"markdown": "bench.md", "csv": "bench.csv", "json": "bench.json", "png": "bench.png"}


def _fmt(value, pattern="{:.1f}", missing="-"):
    return pattern.format(value) if value is not None else missing


def _speedup(value):
    return "{:.1f}x".format(value) if value is not None else "-"


def _agreement(row):
    """The agreement with its 95% lower bound where one is known: ``100.00% (>= 99.6%)``."""
    from trtkit.intervals import format_low
    low = row.get("agreement_low")
    return format_low(row.get("agreement"), None if low is None else (low, 1.0))


def markdown_table(result):
    """The results table (rows in measured order, skipped variants listed below it)."""
    lines = ["| model | precision / backend | batch | FPS | speed-up | latency p50 (ms) | latency p99 (ms) "
             "| agreement | CV |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for row in result["results"]:
        if row.get("status") != "ok":
            if row.get("status") == "failing":
                notes.append("- {} {} batch {}: FAILING, {}".format(row["model"], row["variant"], row["batch"],
                                                                   row.get("reason")))
            elif row.get("status") == "oom":
                notes.append("- {} {}: out of memory at batch {} (largest that fit: {})".format(
                    row["model"], row["variant"], row["batch"], row.get("largest_batch") or "none"))
            else:
                where = " at batch {}".format(row["batch"]) if row.get("batch") else ""
                notes.append("- {} {}{}: skipped, {}".format(row["model"], row["variant"], where, row.get("reason")))
            continue
        lat = row.get("latency_ms") or {}
        cvs = [(row.get(g) or {}).get("cv") for g in ("latency_ms", "throughput_ms_per_batch")]
        cvs = [c for c in cvs if c is not None]
        cv = max(cvs) if cvs else None
        flag = " (!)" if row.get("warnings") else ""
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {}{} |".format(
            row["model"], row["variant"], row["batch"], _fmt(row.get("fps"), "{:.0f}"), _speedup(row.get("speedup")),
            _fmt(lat.get("median"), "{:.2f}"), _fmt(lat.get("p99"), "{:.2f}"), _agreement(row),
            _fmt(cv, "{:.1%}"), flag))
        if row.get("device_fps"):
            notes.append("- {} {} batch {}: {:.0f} FPS without host<->device copies".format(
                row["model"], row["variant"], row["batch"], row["device_fps"]))
    unstable = 0
    for row in result["results"]:
        if row.get("warnings"):  # one line per row, however many of its figures wobbled (was one per figure)
            notes.append("- (!) {} {} batch {}: {}".format(row["model"], row["variant"], row["batch"], _unstable(
                row, (result.get("options") or {}).get("max_cv"))))
            unstable += 1
    if unstable:
        notes.append("- (!) unstable figures come from other load on the machine, thermal throttling or power "
                     "mode changes; close other work and re-run, raise --seconds, or leave the OS a core "
                     "(--threads one below the core count)")
    return "\n".join(lines), notes


def _unstable(row, max_cv=None):
    """A row's stability warnings in one phrase: which figures and their coefficients of variation."""
    groups = [(g.replace("_ms_per_batch", "").replace("_ms", ""), row[g]["cv"]) for g in STAT_GROUPS
              if isinstance(row.get(g), dict) and row[g].get("unstable") and row[g].get("cv") is not None]
    if not groups:
        return "; ".join(row["warnings"])
    return "unstable: coefficient of variation {}{}".format(
        ", ".join("{} {:.0%}".format(name, cv) for name, cv in groups),
        "" if max_cv is None else " (limit {:.0%})".format(max_cv))


def markdown_report(result, title=None):
    opts = result.get("options", {})
    table, notes = markdown_table(result)
    figures = {"warmup": 0, "seconds": 0, "min_iterations": 0, "max_seconds": 0, "max_cv": 0.1}
    figures.update(opts)
    figures["threads"] = opts.get("threads_text") or opts.get("threads", "?")
    method = ("FPS from throughput mode (batches back to back, one sync per round); latency from latency mode "
              "(sync after every call); median of each. Warm-up {warmup:g} s, at least {seconds:g} s and "
              "{min_iterations} calls per figure (at most {max_seconds:g} s); CPU threads: {threads}; "
              "speed-up over PyTorch FP32 eager at the same batch; CV = the larger coefficient of variation of "
              "the two modes, (!) above {max_cv:.0%}.").format(**figures)
    lines = ["# {}".format(title or "trtkit benchmark"), "",
             "Device: {}".format(describe(result["device"])), "",
             method, "", table]
    if notes:
        lines += ["", "Notes:"] + notes
    lines += ["", "Measured in {} s by trtkit {}.".format(result.get("seconds"),
                                                         result["device"].get("software", {}).get("trtkit"))]
    return "\n".join(lines) + "\n"


CSV_FIELDS = ["model", "variant", "backend", "precision", "torch_mode", "batch", "status", "reason", "fps",
              "speedup", "agreement", "agreement_low", "threads", "device", "copies", "peak_memory_bytes",
              "largest_batch",
              "latency_fps", "device_fps", "device_latency_fps", "throughput_calls_per_round"]
STAT_GROUPS = ["latency_ms", "throughput_ms_per_batch", "device_latency_ms", "device_throughput_ms_per_batch"]
STAT_FIELDS = ["median", "mean", "p90", "p99", "min", "max", "std", "cv", "count"]


def csv_text(result):
    """Every raw figure, one row per (variant, batch), flat columns like ``latency_ms.p99``."""
    header = CSV_FIELDS + ["{}.{}".format(g, f) for g in STAT_GROUPS for f in STAT_FIELDS] + ["warnings", "path"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in result["results"]:
        values = [row.get(k) for k in CSV_FIELDS]
        for group in STAT_GROUPS:
            stats = row.get(group) or {}
            values += [stats.get(f) for f in STAT_FIELDS]
        values += ["; ".join(row.get("warnings") or []), row.get("path")]
        writer.writerow(["" if v is None else v for v in values])
    return buffer.getvalue()


def plot_png(result, path, title=None):
    """Horizontal bars of FPS per variant, one colour per batch size, speed-ups written on the bars."""
    from trtkit.deps import require
    matplotlib = require("matplotlib", "the benchmark chart")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in result["results"] if r.get("status") == "ok"]
    if not rows:
        return None
    variants = []
    for r in rows:
        key = (r["model"], r["variant"])
        if key not in variants:
            variants.append(key)
    batches = sorted(set(r["batch"] for r in rows))
    height = 0.8 / len(batches)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(variants) * max(1, len(batches)) ** 0.7 + 0.6))
    colors = plt.get_cmap("tab10")
    top = max(r["fps"] for r in rows)
    for bi, batch in enumerate(batches):
        ys, xs, labels = [], [], []
        for vi, key in enumerate(variants):
            match = [r for r in rows if (r["model"], r["variant"]) == key and r["batch"] == batch]
            if not match:
                continue
            r = match[0]
            ys.append(vi + (bi - (len(batches) - 1) / 2.0) * height)
            xs.append(r["fps"])
            labels.append("{:.0f}{}".format(r["fps"], "  ({})".format(_speedup(r["speedup"])) if r.get("speedup")
                                            else ""))
        ax.barh(ys, xs, height=height * 0.92, color=colors(bi % 10), label="batch {}".format(batch))
        for y, x, text in zip(ys, xs, labels):
            ax.text(x + top * 0.01, y, text, va="center", fontsize=8)
    models = set(m for m, _ in variants)
    ax.set_yticks(range(len(variants)))
    ax.set_yticklabels([v if len(models) == 1 else "{} {}".format(m, v) for m, v in variants], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel("images per second (higher is better); speed-up over PyTorch FP32 eager in brackets")
    device = result["device"]
    subtitle = device.get("slug", "")
    ax.set_title("{}\n{}".format(title or "trtkit benchmark", subtitle), fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=min(len(batches), 8), fontsize=8,
              frameon=False)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)
    return path


def write_reports(result, out_dir, title=None, png=True):
    """Write bench.md, bench.csv, bench.json (and bench.png); returns {kind: path}."""
    if not os.path.isdir(out_dir):
        os.makedirs(out_dir)
    paths = dict((k, os.path.join(out_dir, v)) for k, v in REPORT_NAMES.items())
    write_json(paths["json"], result)
    write_text(paths["csv"], csv_text(result))
    write_text(paths["markdown"], markdown_report(result, title))
    if not png or plot_png(result, paths["png"], title) is None:
        paths.pop("png")
    return paths
