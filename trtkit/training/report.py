"""Training reports: OUT/metrics.json per run, and the mode comparison (table, CSV, JSON, PNG).

Speed-up is measured on epoch time without the first epoch when there is more
than one (it carries one-off costs: cuDNN autotuning, allocator warm-up), on
the same seed, data and batch size, so the modes differ only in precision. It
is against strict FP32 (``fp32``: TF32 off on a GPU), with the speed-up against
TF32 beside it when a ``tf32`` row ran (measured on an H200: AMP was 4.6x strict
FP32 and 1.5x TF32; a table against PyTorch's default math showed only the 1.5x).
Peak memory is read the same way in every mode: the largest per-epoch peak of
the epochs after the first (the first holds cuDNN's algorithm search, whose
workspaces made FP32's peak 16.2 GB against 10.9 GB after warm-up on the H200);
with one epoch there is no other, and the table says so.
"""

import os

from trtkit.fileio import atomic_path, write_json, write_text

COLUMNS = ("mode", "precision", "status", "epoch_seconds", "images_per_second", "speedup_pct", "speedup_vs_tf32_pct",
           "final_accuracy", "peak_memory_mb", "peak_memory_after_warmup", "skipped_steps", "final_loss_scale")


def write_metrics(out_dir, config, history, detail, device, checkpoint, finished):
    data = {"mode": config.mode, "precision": detail, "device": device, "config": config.to_dict(),
            "epochs": history, "final_accuracy": history[-1].get("accuracy") if history else None,
            "finished": bool(finished), "checkpoint": os.path.abspath(checkpoint) if checkpoint else None}
    write_json(os.path.join(out_dir, "metrics.json"), data)
    return data


def steady_epoch_seconds(history):
    times = [r["seconds"] for r in history]
    if len(times) > 1:
        times = times[1:]
    return sum(times) / float(len(times)) if times else None


def summarize(mode, result=None, reason=None):
    """One comparison row from a TrainResult (or the reason the mode could not run)."""
    if result is None:
        return {"mode": mode, "precision": None, "status": "skipped: " + reason, "history": []}
    history = result.history
    seconds = steady_epoch_seconds(history)
    ips = [r["images_per_second"] for r in history[1:] or history if r.get("images_per_second")]
    peaks = [r["peak_memory_mb"] for r in history[1:] or history if r.get("peak_memory_mb") is not None]
    return {"mode": mode, "precision": result.mode_detail, "status": "ok", "epoch_seconds": seconds,
            "images_per_second": sum(ips) / len(ips) if ips else None, "final_accuracy": result.final_accuracy,
            "peak_memory_mb": max(peaks) if peaks else None,
            "peak_memory_after_warmup": len(history) > 1 if peaks else None,
            "skipped_steps": sum(r.get("skipped_steps", 0) for r in history),
            "final_loss_scale": history[-1].get("loss_scale") if history else None,
            "history": history, "checkpoint": result.checkpoint}


def add_speedups(rows):
    """``speedup_pct`` of each row against strict FP32 (the ``fp32`` row, else the first row that ran) and
    ``speedup_vs_tf32_pct`` against the ``tf32`` row when one ran."""
    ran = [r for r in rows if r["status"] == "ok" and r.get("epoch_seconds")]
    base = next((r for r in ran if r["mode"] == "fp32"), ran[0] if ran else None)
    tf32 = next((r for r in ran if r["mode"] == "tf32"), None)
    for row in rows:
        for key, against in (("speedup_pct", base), ("speedup_vs_tf32_pct", tf32)):
            if against is None or row not in ran:
                row[key] = None
            else:
                row[key] = (against["epoch_seconds"] / row["epoch_seconds"] - 1.0) * 100.0
    return rows


def baseline_mode(rows):
    """The mode speed-ups are against (``add_speedups``)."""
    ran = [r for r in rows if r["status"] == "ok" and r.get("epoch_seconds")]
    return next((r["mode"] for r in ran if r["mode"] == "fp32"), ran[0]["mode"] if ran else rows[0]["mode"])


def format_table(rows, device):
    tf32 = any(r.get("speedup_vs_tf32_pct") is not None for r in rows)
    header = ["mode", "s/epoch", "img/s", "speed-up"] + (["vs tf32"] if tf32 else []) + [
        "final acc", "peak mem", "skipped", "precision / status"]
    lines = []
    for r in rows:
        ok = r["status"] == "ok"
        lines.append([
            r["mode"],
            "{:.2f}".format(r["epoch_seconds"]) if ok and r.get("epoch_seconds") else "-",
            "{:.0f}".format(r["images_per_second"]) if ok and r.get("images_per_second") else "-",
            "{:+.1f}%".format(r["speedup_pct"]) if r.get("speedup_pct") is not None else "-"] + (
            ["{:+.1f}%".format(r["speedup_vs_tf32_pct"]) if r.get("speedup_vs_tf32_pct") is not None else "-"]
            if tf32 else []) + [
            "{:.2%}".format(r["final_accuracy"]) if ok and r.get("final_accuracy") is not None else "-",
            "{:.0f} MB".format(r["peak_memory_mb"]) if r.get("peak_memory_mb") is not None else "n/a (CPU)"
            if ok else "-",
            str(r.get("skipped_steps", "-")) if ok else "-",
            r["precision"] if ok else r["status"],
        ])
    widths = [max(len(header[i]), max(len(l[i]) for l in lines)) for i in range(len(header))]
    base = baseline_mode(rows)
    out = ["training speed by precision mode on {} (speed-up vs {})".format(
        device, "strict FP32, TF32 off" if base == "fp32" and device.startswith("cuda") else base),
        "  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out.append("  ".join("-" * w for w in widths))
    for l in lines:
        out.append("  ".join(c.ljust(w) for c, w in zip(l, widths)))
    peaks = [r.get("peak_memory_after_warmup") for r in rows if r.get("peak_memory_mb") is not None]
    if peaks:
        out.append("peak memory: the largest per-epoch peak {}".format(
            "after the first epoch (cuDNN's algorithm search excluded)" if all(peaks) else
            "of the only epoch, cuDNN's algorithm search included (train 2+ epochs to leave it out)"))
    return "\n".join(out)


def write_comparison(out_dir, rows, device, config):
    """compare.json, compare.csv and compare_loss.png (loss and accuracy per epoch) in ``out_dir``."""
    import csv
    import io
    paths = {}
    paths["json"] = os.path.join(out_dir, "compare.json")
    write_json(paths["json"], {"device": device, "config": config.to_dict(), "modes": rows})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([_csv(r.get(c)) for c in COLUMNS])
    paths["csv"] = os.path.join(out_dir, "compare.csv")
    write_text(paths["csv"], buffer.getvalue())
    png = plot_curves(os.path.join(out_dir, "compare_loss.png"), rows, device)
    if png:
        paths["png"] = png
    return paths


def _csv(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return "{:.6g}".format(value)
    return value


def plot_curves(path, rows, device):
    """Loss and held-out accuracy per epoch for each mode; None when matplotlib is missing."""
    from trtkit import log
    from trtkit.deps import available
    if not available("matplotlib"):
        log.warn("matplotlib is not installed: no loss-curve PNG (pip install 'trtkit[bench]')")
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for r in rows:
        hist = r.get("history") or []
        if not hist:
            continue
        epochs = [h["epoch"] for h in hist]
        ax_loss.plot(epochs, [h["loss"] for h in hist], marker="o", label=r["mode"])
        if all(h.get("accuracy") is not None for h in hist):
            ax_acc.plot(epochs, [100 * h["accuracy"] for h in hist], marker="o", label=r["mode"])
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training loss")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("held-out accuracy (%)")
    for ax in (ax_loss, ax_acc):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("trtkit train --compare on {}".format(device))
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return path
