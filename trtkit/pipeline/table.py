"""The build's table, as ``trtkit build`` prints it: one row per artifact of a manifest."""

from trtkit.fileio import human_bytes


def format_table(manifest):
    """The build table: variant, backend, size, agreement, accuracy, max |diff|, throughput, status (for a
    segmentation model: pixel agreement, mIoU against FP32's decisions, mIoU against the masks)."""
    dense = manifest.get("model", {}).get("task") == "segmentation"
    metric = "mIoU" if dense else "accuracy"
    agreements = ["pixel agree", "mIoU vs FP32"] if dense else ["top-1 agree"]
    header = ["variant", "backend", "size"] + agreements + [metric, "max |diff|", "img/s", "status"]
    rows = []
    for a in manifest["artifacts"]:
        v = a.get("verify") or {}
        figures = [v.get("pixel_agreement"), v.get("miou_vs_reference")] if dense else [v.get("top1_agreement")]
        rows.append([a["name"], a["backend"], human_bytes(a["bytes"])] + [_pct(f) for f in figures] + [
            _pct(v.get("accuracy")),
            "{:.2e}".format(v["max_abs_diff"]) if v.get("max_abs_diff") is not None else "-",
            "{:.1f}".format(a["throughput_ips"]) if a.get("throughput_ips") else "-",
            a.get("status", "-"),
        ])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    ref = manifest["artifacts"][0].get("verify", {}) if manifest["artifacts"] else {}
    if ref and ref.get("reference_accuracy") is not None:
        lines.append("reference (FP32 {}) {}: {}".format(
            "PyTorch" if manifest.get("export", {}).get("reference") == "pytorch-fp32" else "ONNX", metric,
            _pct(ref["reference_accuracy"])))
    return "\n".join(lines)


def _pct(value):
    return "{:.2%}".format(value) if value is not None else "-"
