"""Sweeps as the reference benchmark reports them: latency per image size (``imsize``) and FPS per batch
(``batch``), one row per precision (PyTorch, FP32, FP16, INT8...) and one column per size or batch.

Why a module of its own: ``matrix`` times cells at one image size; a sweep decides which sizes each variant
may run at (an artifact only within what its build allows: the input size, or ``--image-sizes``' range, the
range its TensorRT profile covers), times every size through ``matrix``, and pivots the rows into the
reference's ``imsize.csv``/``batch.csv`` layout, with a chart of latency against image size.
"""

import csv
import io
import os

import numpy as np

from trtkit.errors import InputError
from trtkit.fileio import atomic_path, write_json, write_text

IMSIZE_NAMES = {"csv": "imsize.csv", "markdown": "imsize.md", "json": "imsize.json", "png": "imsize.png"}
BATCH_NAME = "batch.csv"


def allowed_sizes(manifest):
    """(smallest, largest) image size a build's artifacts run at: ``--image-sizes`` with the input size
    inside it, else the input size alone (min(H, W)..max(H, W) for a non-square one)."""
    model = (manifest or {}).get("model", {})
    size = (model.get("input") or {}).get("size") or [224, 224]
    height, width = (size, size) if isinstance(size, int) else size
    low, high = min(height, width), max(height, width)
    if model.get("image_sizes"):
        return min(low, model["image_sizes"][0]), max(high, model["image_sizes"][1])
    return low, high


def check_sweep(variants, sizes, manifest):
    """InputError naming the first artifact and size outside what its build allows (PyTorch runs any)."""
    low, high = allowed_sizes(manifest)
    for variant in variants:
        if variant.backend == "torch":
            continue
        for size in sizes:
            if not low <= size <= high:
                raise InputError("image size {} is {} what {} was built for ({})".format(
                    size, "above" if size > high else "below", variant.label,
                    "{}..{}".format(low, high) if low != high else "{0}x{0} only".format(low)),
                    hint="rebuild with --image-sizes {},{} (dynamic H and W; a TensorRT profile spanning them), or "
                         "sweep within {}..{}".format(min(sizes + [low]), max(sizes + [high]), low, high))


def sweep_images(channels, size, count=8, seed=0):
    """``count`` deterministic noise images of ``size`` x ``size``: a timing input (speed does not depend on
    the pixels; reading real images at 1024 would take longer than timing them)."""
    rng = np.random.RandomState(seed)
    return rng.standard_normal((count, channels, size, size)).astype(np.float32)


def image_size_sweep(variants, sizes, options, channels=3, run=None, images=None):
    """Time every variant at batch 1 for each size in ``sizes``; returns the rows of all sizes, each with
    ``image_size``. ``run``: ``matrix.run_matrix`` (a test may pass its own timing). ``images``: the build's
    own, resized to each size (``selection.resized``), for a model whose work depends on the pixels (a
    detector's NMS in the graph: noise leaves it no candidates); None: noise (``sweep_images``)."""
    import copy
    if run is None:
        from trtkit.bench.matrix import run_matrix
        run = run_matrix
    rows, device = [], None
    for size in sizes:
        at_size = copy.copy(options)
        at_size.batch_sizes, at_size.sweep = [1], False
        if images is not None:
            from trtkit.bench.selection import resized
            timed = resized(images[:8], size)
        else:
            timed = sweep_images(channels, size)
        result = run(variants, timed, at_size, progress_label="image size {}".format(size))
        device = result.get("device", device)
        for row in result["results"]:
            row = dict(row)
            row["image_size"] = size
            rows.append(row)
    return {"results": rows, "sizes": list(sizes), "device": device}


def pivot(rows, column, value):
    """[(variant label, {column value: figure})] in first-seen order: the reference's table layout."""
    table = []
    for row in rows:
        if row.get("status") != "ok":
            continue
        label = row["variant"]
        match = [entry for entry in table if entry[0] == label]
        if not match:
            table.append((label, {}))
            match = table[-1:]
        match[0][1][row[column]] = value(row)
    return table


def latency_ms(row):
    return (row.get("latency_ms") or {}).get("median")


def pivot_csv(table, columns, corner):
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([corner] + [str(c) for c in columns])
    for label, figures in table:
        writer.writerow([label] + ["" if figures.get(c) is None else round(figures[c], 3) for c in columns])
    return buffer.getvalue()


def pivot_markdown(table, columns, corner, pattern="{:.2f}"):
    lines = ["| {} | {} |".format(corner, " | ".join(str(c) for c in columns)),
             "|---|{}|".format("|".join("---:" for _ in columns))]
    for label, figures in table:
        lines.append("| {} | {} |".format(label, " | ".join(
            pattern.format(figures[c]) if figures.get(c) is not None else "-" for c in columns)))
    return "\n".join(lines)


def write_imsize(sweep, out_dir, title=None, png=True):
    """imsize.csv/.md/.json (latency p50 in ms at batch 1: rows variants, columns sizes) and imsize.png."""
    if not os.path.isdir(out_dir):
        os.makedirs(out_dir)
    paths = dict((k, os.path.join(out_dir, v)) for k, v in IMSIZE_NAMES.items())
    table = pivot(sweep["results"], "image_size", latency_ms)
    write_json(paths["json"], sweep)
    write_text(paths["csv"], pivot_csv(table, sweep["sizes"], "latency ms (batch 1) / image size"))
    write_text(paths["markdown"], "# {}\n\nLatency (ms, median, batch 1) per image size:\n\n{}\n{}".format(
        title or "image-size sweep", pivot_markdown(table, sweep["sizes"], "precision / backend"),
        "".join("\n" + line + "\n" for line in sweep.get("notes") or [])))
    if not png or not table or plot_imsize(table, sweep["sizes"], paths["png"], title) is None:
        paths.pop("png")
    return paths


def write_batch_table(result, out_dir):
    """batch.csv: FPS per batch size (rows variants, columns batches), from a ``run_matrix`` result."""
    batches = sorted(set(r["batch"] for r in result["results"] if r.get("status") == "ok"))
    table = pivot(result["results"], "batch", lambda row: row.get("fps"))
    path = os.path.join(out_dir, BATCH_NAME)
    write_text(path, pivot_csv(table, batches, "FPS / batch"))
    return path, pivot_markdown(table, batches, "FPS per batch", "{:.0f}")


def plot_imsize(table, sizes, path, title=None):
    """Latency against image size, one line per variant, both axes logarithmic (cost grows with pixels)."""
    from trtkit.deps import require
    matplotlib = require("matplotlib", "the sweep chart")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for label, figures in table:
        xs = [s for s in sizes if figures.get(s) is not None]
        ax.plot(xs, [figures[s] for s in xs], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel("image size (pixels, square)")
    ax.set_ylabel("latency, batch 1 (ms, lower is better)")
    ax.set_title(title or "latency per image size", fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path
