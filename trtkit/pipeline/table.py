"""The build's table, as ``trtkit build`` prints it: one row per artifact of a manifest."""

from trtkit import tasks
from trtkit.fileio import human_bytes
from trtkit.intervals import format_low, format_range


def format_table(manifest):
    """The build table: variant, backend, size, agreement, accuracy, max |diff|, throughput, status (for a
    segmentation model: pixel agreement, mIoU against FP32's decisions, mIoU against the masks: the task's
    ``agreement_columns`` and ``accuracy_name``). Agreements
    carry their 95% lower bound, accuracies their 95% interval (``trtkit.intervals``); a gate passed on the
    measured figure but not on its bound is ``ok*``, explained under the table."""
    task = tasks.of(manifest.get("model", {}).get("task"))
    metric = task.accuracy_name
    agreements = [column[0] for column in task.agreement_columns]
    figures = [column[1:] for column in task.agreement_columns]  # (field,) or (field, style)
    header = ["variant", "backend", "size"] + agreements + [metric, "max |diff|", "img/s", "status"]
    rows = []
    for a in manifest["artifacts"]:
        v = a.get("verify") or {}
        bounds = v.get("intervals") or {}
        rows.append([a["name"], a["backend"], human_bytes(a["bytes"])] + [
            _figure(v, bounds, f) for f in figures] + [
            format_range(v.get("accuracy"), bounds.get("accuracy")),
            "{:.2e}".format(v["max_abs_diff"]) if v.get("max_abs_diff") is not None else "-",
            "{:.1f}".format(a["throughput_ips"]) if a.get("throughput_ips") else "-",
            a.get("status", "-") + ("*" if a.get("significant") is False else ""),
        ])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    ref = manifest["artifacts"][0].get("verify", {}) if manifest["artifacts"] else {}
    if ref and ref.get("reference_accuracy") is not None:
        lines.append("reference (FP32 {}) {}: {}".format(
            "PyTorch" if manifest.get("export", {}).get("reference") == "pytorch-fp32" else "ONNX", metric,
            format_range(ref["reference_accuracy"], (ref.get("intervals") or {}).get("reference_accuracy"))))
    lines += ["* {}: {}".format(a["name"], a["status_detail"]) for a in manifest["artifacts"]
              if a.get("significant") is False and a.get("status_detail")]
    lines += [_float_share(a) for a in manifest["artifacts"] if (a.get("float_layers") or {}).get("float")]
    if any((a.get("verify") or {}).get("intervals") for a in manifest["artifacts"]):
        lines.append("(>= x): the lower end of the 95% interval; [a, b]: the 95% interval; over {} verified images".format(
            max((a.get("verify") or {}).get("images") or 0 for a in manifest["artifacts"])))
    return "\n".join(lines)


def _float_share(artifact):
    """The line under the table that says how much of a quantized variant runs in float: an ``int8`` variant of
    the measured depthwise rule is not all INT8, and its name alone would not say so."""
    share = artifact["float_layers"]
    why = ""
    depthwise = artifact.get("float_depthwise") or {}
    if artifact.get("precision") == "int8" and (depthwise.get("rule") == "all" or depthwise.get("kept")):
        why = " (depthwise convolutions{}: --int8-float-depthwise {})".format(
            " whose INT8 input loses too much" if depthwise.get("rule") == "measured" else "", depthwise["rule"])
    return "{}: {} of its {} weighted layers run in float{}".format(artifact["name"], share["float"],
                                                                   share["weighted"], why)


def _figure(verify, bounds, column):
    """One agreement cell: a fraction with its 95% lower bound, or (``column[1]``) "signed" (+0.012: a shift
    of a score) or "percent" (a figure without an interval)."""
    field, style = column[0], (column[1] if len(column) > 1 else "low")
    value = verify.get(field)
    if value is None:
        return "-"
    if style == "signed":
        return "{:+.3f}".format(value)
    if style == "percent":
        return "{:.2%}".format(value)
    return format_low(value, bounds.get(field))

