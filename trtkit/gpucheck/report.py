"""The Markdown report of a ``gpu_check`` run: steps, inference speed, agreement, TensorRT-RTX, training.

Built from the run's JSON record alone (``gpu_check.json``), so it can be made
again from a committed result. The speed table is ``trtkit.bench.report``'s,
fed with the rows of every step that timed something, the speed-up recomputed
over all of them against PyTorch FP32 eager at the same batch.
"""

from trtkit.bench.device import describe
from trtkit.bench.matrix import add_speedups
from trtkit.bench.report import markdown_table
from trtkit.intervals import format_low, format_range

# the steps whose results hold bench rows, in the order their rows are shown (first of a duplicate wins)
TIMED_STEPS = ("torch-baselines", "resnet18-224", "torch-compile", "onnxruntime-cuda", "tensorrt-rtx", "tensorrt", "torch2trt")
ENGINE_STEPS = ("tensorrt-rtx", "tensorrt", "torch2trt", "onnxruntime-cuda")


def _first_line(text, limit=240):
    text = str(text or "").strip().splitlines()
    text = text[0] if text else ""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def step_detail(result):
    """One line on how a step ended: its error, its reason to skip, or its figures' count."""
    status = result.get("status")
    if status in ("failed", "timeout"):
        rows = ((result.get("bench") or {}).get("results")) or []
        kept = " (kept what it measured first: {} timed rows)".format(len(rows)) if rows else ""
        return _first_line(result.get("error")) + kept
    if status == "skipped":
        return _first_line(result.get("reason"), 400)
    if status == "refused":
        return _first_line((result.get("refusal") or {}).get("trtkit") or "refused")
    bench = result.get("bench") or {}
    summary = bench.get("summary")
    if summary:
        return "{} of {} timed cells ok".format(summary["ok"], summary["rows"])
    if result.get("modes"):
        return ", ".join("{} {}".format(r["mode"], r["status"]) for r in result["modes"])
    if result.get("line"):
        return _first_line(result["line"])
    if result.get("checkpoint"):
        return "{} the sample model".format("trained" if result.get("trained_now") else "loaded")
    return ""


def speed_rows(steps):
    """Every bench row of the timed steps, one per (model, variant, batch), speed-ups over FP32 eager added."""
    rows, seen = [], set()
    for name in TIMED_STEPS:
        for row in ((steps.get(name) or {}).get("bench") or {}).get("results", []):
            key = (row.get("model"), row.get("variant"), row.get("batch"))
            if key in seen:
                continue
            seen.add(key)
            rows.append(dict(row, step=name))
    return add_speedups(rows)


def agreement_rows(steps):
    """(backend label, precision, status, verify record) of every built variant, then of the PyTorch modes."""
    found = []
    for name in ENGINE_STEPS:
        for artifact in ((steps.get(name) or {}).get("build") or {}).get("artifacts", []):
            label = artifact.get("backend") + (" via torch2trt" if name == "torch2trt" else "")
            found.append((label, artifact.get("precision"), artifact.get("status"), artifact.get("verify") or {},
                          artifact.get("status_detail")))
    for row in speed_rows(steps):
        if row.get("backend") == "torch" and row.get("agreement") is not None and row.get("batch") == 64:
            check = row.get("check") or {}
            found.append(("torch ({})".format(row.get("torch_mode")), row.get("precision"), row.get("status"),
                          {"top1_agreement": row["agreement"], "images": check.get("images", 64),
                           "max_abs_diff": check.get("max_abs_diff")}, row.get("reason")))
    return found


def _agreement_table(steps):
    rows = agreement_rows(steps)
    if not rows:
        return ["No variant was verified."]
    lines = ["| backend | precision | status | top-1 agreement | max abs diff | accuracy | images |",
             "|---|---|---|---:|---:|---:|---:|"]
    for label, precision, status, verify, detail in rows:
        diff = verify.get("max_abs_diff")
        outcome = status if not detail else "{}: {}".format(status, _first_line(detail, 120))
        lines.append("| {} | {} | {} | {} | {} | {} | {} |".format(
            label, (precision or "").upper(), outcome,
            format_low(verify.get("top1_agreement"), (verify.get("intervals") or {}).get("top1_agreement")),
            "{:.2e}".format(diff) if diff is not None else "-",
            format_range(verify.get("accuracy"), (verify.get("intervals") or {}).get("accuracy")),
            verify.get("images", "-")))
    return lines


def _rtx_section(result):
    if not result:
        return ["Not attempted."]
    status = result.get("status")
    if status == "skipped":
        return ["Skipped: {}".format(result.get("reason"))]
    if status in ("failed", "timeout"):
        return ["{}: `{}`".format(status.capitalize(), _first_line(result.get("error"), 600))]
    built = ((result.get("build") or {}).get("artifacts") or [])
    lines = []
    if status != "refused":
        ran = [a for a in built if a.get("status") in ("ok", "failing")]
        lines.append("Ran {} of {} engines on this GPU (targets: {}; kernels specialized {}).".format(
            len(ran), len(built), ", ".join((built[0].get("backend_info") or {}).get("compute_capabilities") or
                                            ["TensorRT-RTX's default"]) if built else "-",
            ((ran[0].get("ran_on") or {}).get("kernel_specialization") or "lazily") if ran else "-"))
        return lines
    refusal = result.get("refusal") or {}
    lines.append("trtkit refused to run the engines here: `{}`".format(refusal.get("trtkit")))
    load = refusal.get("tensorrt_rtx_load") or {}
    lines += ["", "TensorRT-RTX {} asked to load `{}` anyway: deserialized {}, execution context {}{}.".format(
        load.get("tensorrt_version", ""), load.get("path"), _yes(load.get("deserialized")), _yes(load.get("context")),
        ", error `{}`".format(load["error"]) if load.get("error") else "")]
    lines += _messages(load.get("messages"))
    current = refusal.get("current_target") or {}
    if current:
        if current.get("built"):
            again = current.get("load") or {}
            lines += ["", "An FP32 engine built for this GPU (target CURRENT) built; loading it: deserialized {}, "
                      "execution context {}.".format(_yes(again.get("deserialized")), _yes(again.get("context")))]
            lines += _messages(again.get("messages"))
        else:
            lines += ["", "Building an FP32 engine for this GPU (target CURRENT) failed: `{}`".format(
                _first_line(current.get("error"), 600))]
            lines += _messages(current.get("messages"))
    return lines


def _yes(value):
    return "yes" if value else "no"


def _messages(messages):
    if not messages:
        return []
    return ["", "```"] + [_first_line(m, 400) for m in messages[-6:]] + ["```"]


def _training_section(result):
    if not result:
        return ["Not attempted."]
    if result.get("status") in ("skipped", "failed", "timeout"):
        return ["{}: {}".format(result["status"].capitalize(), _first_line(result.get("reason") or result.get("error"),
                                                                            600))]
    lines = ["Data: {}; {} epochs of batch {} per mode, the first left out of the time.".format(
        result.get("data"), (result.get("config") or {}).get("epochs"), (result.get("config") or {}).get("batch_size")),
        "", "```", result.get("table", ""), "```"]
    return lines


def _detection_section(result):
    """The detection step's inference table and RetinaNet-R18 training table (``gpucheck.detection``)."""
    from trtkit.gpucheck.detection import inference_table, training_table
    if not result:
        return ["Not attempted."]
    if result.get("status") == "skipped":
        return ["Skipped: {}".format(_first_line(result.get("reason"), 600))]
    lines = []
    if result.get("status") in ("failed", "timeout"):
        lines += ["{}: `{}`".format(result["status"].capitalize(), _first_line(result.get("error"), 600)), ""]
    rows = (result.get("bench") or {}).get("results") or []
    if rows:
        lines += ["PyTorch, seeded random weights (torchvision's COCO layout, 91 classes), on {}. Timed: {}. Latency "
                  "and FPS on the device (batch already there), then with the host<->device copies (input and the "
                  "[N, A, 4+C] output); speed-up over FP32 at the same model and batch.".format(
                      result.get("device"), result.get("timed")), "", inference_table(add_speedups(
                          [dict(r) for r in rows]))]
    training = result.get("training")
    if training:
        lines += ["", "Training {} at {}x{}, batch {} ({}); {} steps per mode from the same seeded weights over the "
                  "same batches; the first {} left out of the time and of the peak memory (reset after them); loss: "
                  "mean of the last 10 steps.".format(training.get("model"), training.get("input_size"),
                                                      training.get("input_size"), training.get("batch_size"),
                                                      training.get("data"), training.get("steps"),
                                                      training.get("warmup_steps")),
                  "", training_table(training)]
    if training and training.get("error"):
        lines += ["", "Training: `{}`".format(_first_line(training["error"], 600))]
    if result.get("stopped"):
        lines += ["", "Stopped early: {}.".format(result["stopped"])]
    return lines or ["Nothing was measured."]


def markdown_report(record):
    """The whole gpu_check.md text from the run's record (see ``gpu_check.run``)."""
    steps = record.get("steps", {})
    device = record.get("device") or {}
    gpus = device.get("gpus") or []
    lines = ["# trtkit GPU check: {}".format(gpus[0]["name"] if gpus else "no NVIDIA GPU"), "",
             "Device: {}".format(describe(device) if device else "unknown"), "",
             "Run {} for {} s of a {:.0f} s budget: `{}`.".format(
                 record.get("started"), record.get("seconds"), record.get("budget_seconds", 0), record.get("command")),
             "", "## Steps", "", "| step | outcome | seconds | detail |", "|---|---|---:|---|"]
    for planned in record.get("plan", []):
        result = steps.get(planned["step"]) or {"status": "not reached"}
        lines.append("| {} | {} | {} | {} |".format(planned["step"], result.get("status"),
                                                  result.get("wall_seconds", "-"),
                                                  step_detail(result).replace("|", "/")))
    rows = speed_rows(steps)
    lines += ["", "## Inference speed", ""]
    if rows:
        table, notes = markdown_table({"results": rows})
        lines += ["Sample ResNet18 (64x64 digits), and resnet18@224: ImageNet's ResNet18 at 224x224 with random "
                  "weights (the reference benchmark's setting). FPS from throughput mode, host<->device copies included; "
                  "speed-up over PyTorch FP32 eager at the same batch; agreement = top-1 agreement with PyTorch "
                  "FP32. Figures are short (a check that every path runs, not a benchmark): for publishable "
                  "numbers use `trtkit bench`.", "", table]
        if notes:
            lines += ["", "Notes:"] + notes
    else:
        lines.append("Nothing was timed.")
    lines += ["", "## Agreement with PyTorch FP32 (held-out sample images)", ""] + _agreement_table(steps)
    lines += ["", "## TensorRT-RTX on this GPU", ""] + _rtx_section(steps.get("tensorrt-rtx"))
    lines += ["", "## Training speed by precision mode", ""] + _training_section(steps.get("training"))
    segmentation = steps.get("segmentation") or {}
    lines += ["", "## Segmentation, as the reference benchmark measures it", ""] + (
        ["{}; FCN/DeepLabV3 have seeded random weights (no download): their agreement only shows every "
         "precision runs.".format("{} engines".format(segmentation["backend"]) if segmentation.get("backend")
                                  else segmentation.get("reason") or "PyTorch rows only"),
         "", segmentation["table"]]
        if segmentation.get("table") else ["Not run."])
    lines += ["", "## Object detection (PyTorch)", ""] + _detection_section(steps.get("detection"))
    return "\n".join(lines) + "\n"
