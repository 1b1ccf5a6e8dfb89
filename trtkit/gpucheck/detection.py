"""The GPU check's detection step: trtkit's torchvision-layout detectors timed in PyTorch, and the source
documents' RetinaNet-ResNet18 training table (FP32 against FP16: it/s and memory) on this GPU.

Inference (``inference_rows``): SSD300-VGG16 at 300x300, SSDlite320-MobileNetV3-Large at 320x320 and
RetinaNet-ResNet18-FPN at 512x512, seeded random weights in torchvision's COCO layout (91 classes; speed does
not depend on the weights, and none can be downloaded), saved as trtkit checkpoints and timed through
``trtkit.bench`` in ``torch_baseline.BASELINE_MODES`` (FP32 with channels_last and cudnn.benchmark, AMP,
``.half()``) at batch 1 and 8. What is timed is what trtkit exports and builds of a detector
(``models.deployable.load_deployable`` -> ``models.detection.export.DecodedDetector``): the network up to
every anchor's decoded box and class probabilities, ``[N, A, 4 + C]``; the selection after it (score
threshold, top-k, NMS) is not in the figures (``TIMED``, in every row). No agreement pass: a top-1 of decoded
boxes and random scores would mean nothing.

Training (``training_rows``): ``training.detection.fit_detection`` (the recipe ``trtkit train --task
detection`` runs) on RetinaNet-ResNet18-FPN at 512x512, strict FP32, TF32 (where the GPU has it), AMP (FP16)
and BF16, each from the same seeded weights over the same batches of drawn shape-boxes images
(``data.shape_boxes`` at 512 px, a bounded count, uint8 on the device; trainable BatchNorm, torchvision's
choice without ImageNet weights). A probe of a few strict-FP32 steps
sizes the steps per mode from the step's time share; each mode's first ``WARMUP_STEPS`` are left out of its
time and its peak memory (the peak is reset after them). Every row is saved as soon as it is measured.

Options (``request["options"]["detection"]``, for tests and small machines): ``device``, ``models``,
``sizes`` ({model: input size}), ``batches``, ``train_size``, ``train_steps``, ``train_images``,
``train_batch``, ``warmup_steps``, ``skip_training``.
"""

import os
import time

# (name, input size): torchvision's own sizes for the SSDs, 512 for RetinaNet-R18 (the source documents')
MODELS = (("ssd300_vgg16", 300), ("ssdlite320_mobilenet_v3_large", 320), ("retinanet_resnet18_fpn", 512))
BATCHES = (1, 8)
CLASSES = 91  # torchvision's COCO layout
TIMED = ("network to decoded boxes and class scores [N, A, 4+C] (anchors decoded and clipped, sigmoid/softmax); "
         "no score threshold, top-k or NMS; input already normalized")
TRAIN_MODEL = "retinanet_resnet18_fpn"
TRAIN_SIZE = 512
TRAIN_BATCH = 8
TRAIN_IMAGES = 64  # drawn once (PIL: 20 s for 96 on a busy 2-core host), uint8: 64 x 512 x 512 x 3 = 48 MiB
TRAIN_MODES = ("fp32", "tf32", "amp", "bf16")
# AdamW from scratch: 3e-4 and above raised the loss within 12 steps (64 px, batch 8, CPU); 1e-4 lowered it
TRAIN_LR = 1e-4
WARMUP_STEPS = 3
PROBE_STEPS = 3
MAX_TRAIN_STEPS = 200
INFERENCE_SHARE = 0.45  # of the step's time; training gets what is left


def settings(request):
    """The step's sizes: the module's defaults, overridden by ``request["options"]["detection"]``."""
    given = dict(((request.get("options") or {}).get("detection") or {}))
    sizes = dict(MODELS)
    sizes.update(given.get("sizes") or {})
    models = list(given.get("models") or [name for name, _ in MODELS])
    return {"device": given.get("device") or "cuda", "models": [(name, int(sizes[name])) for name in models],
            "batches": tuple(given.get("batches") or BATCHES), "train_size": int(given.get("train_size", TRAIN_SIZE)),
            "train_steps": given.get("train_steps"), "train_images": int(given.get("train_images", TRAIN_IMAGES)),
            "train_batch": int(given.get("train_batch", TRAIN_BATCH)),
            "warmup_steps": int(given.get("warmup_steps", WARMUP_STEPS)),
            "skip_training": bool(given.get("skip_training"))}


def random_checkpoint(name, folder, size, seed=0):
    """A seeded, randomly initialised detector ``name`` (torchvision layout, ``CLASSES`` classes, input ``size``)
    saved as a trtkit checkpoint."""
    import torch

    from trtkit.models.classifiers import save_checkpoint
    from trtkit.models.detection import create_detection_model
    torch.manual_seed(seed)
    model = create_detection_model(name, num_classes=CLASSES, input_size=size)
    return save_checkpoint(model, os.path.join(folder, "{}-{}-random.pt".format(name, size)))


def inference_rows(request, save, result, seconds, timing_options, timed, saving_rows, chosen):
    """Time every model of ``chosen["models"]`` in ``BASELINE_MODES`` at ``chosen["batches"]`` within about
    ``seconds``; rows go into ``result["bench"]`` (each saved as it is measured), with ``TIMED`` and the input
    size in each."""
    import numpy as np

    from trtkit.backends.torch_baseline import BASELINE_MODES
    from trtkit.bench.plan import torch_variants
    started = time.time()
    models = chosen["models"]
    result.setdefault("bench", {"results": []})
    for index, (name, size) in enumerate(models):
        left = seconds - (time.time() - started)
        if left < 5:
            result["stopped"] = "time budget spent before timing {}".format(name)
            break
        cells = len(BASELINE_MODES) * len(chosen["batches"])
        timing = timing_options(left / float(len(models) - index), cells, chosen["batches"], fixed=6.0)
        timing.agree_images = 0  # decoded boxes of random weights: no top-1 to agree on
        checkpoint = random_checkpoint(name, request["work"], size)
        display = "{}@{}".format(name, size)
        variants = torch_variants(name, checkpoint, list(BASELINE_MODES), timing.threads, size, display,
                                  device=chosen["device"])
        images = np.random.RandomState(0).rand(max(chosen["batches"]), 3, size, size).astype(np.float32)
        before = list(result["bench"]["results"])
        keep = saving_rows(result, save, before)

        def described(rows, size=size):
            return [dict(row, timed=TIMED, input_size=size) for row in rows]
        try:
            measured = described(timed(variants, images, timing, lambda rows: keep(described(rows)))["results"])
        except Exception as exc:  # this model's error in its row; the next model still runs
            measured = [r for r in result["bench"]["results"][len(before):]] + [
                {"model": display, "backend": "torch", "torch_mode": None, "batch": None, "input_size": size,
                 "status": "failed", "reason": "{}: {}".format(exc.__class__.__name__, str(exc)[:400])}]
        result["bench"]["results"] = before + measured
        save(result)
    rows = result["bench"]["results"]
    result["bench"]["summary"] = {"rows": len(rows), "ok": sum(1 for r in rows if r.get("status") == "ok")}
    return rows


def _modes(device):
    """[(mode, None or why it cannot run here)] of ``TRAIN_MODES``."""
    from trtkit.training.modes import mode_unavailable_reason
    return [(mode, mode_unavailable_reason(mode, device)) for mode in TRAIN_MODES]


def _train_once(mode, images, records, steps, chosen, timed_after, label):
    from trtkit.models.detection import create_detection_model
    from trtkit.training import seed_everything
    from trtkit.training.detection import fit_detection
    seed_everything(0)
    # trainable BatchNorm, as torchvision builds RetinaNet without ImageNet weights: frozen identity norms on
    # random weights let the activations grow layer after layer (a first loss of 1e5 at 64 px, overflow in FP16)
    model = create_detection_model(TRAIN_MODEL, num_classes=3, input_size=chosen["train_size"], frozen_bn=False)
    return fit_detection(model, images, records, steps, batch_size=chosen["train_batch"], lr=TRAIN_LR, mode=mode,
                         device=chosen["device"], seed=0, flips=("horizontal", "vertical"), warmup=0.2, label=label,
                         timed_after=timed_after)


def planned_steps(seconds, per_step, modes, warmup, overhead=4.0):
    """Steps per mode that fit ``seconds`` for ``modes`` modes when a (strict FP32) step takes ``per_step``
    seconds and each mode pays ``overhead`` (its model, cuDNN's search), a fifth kept back; at least
    ``warmup`` + 2, at most ``MAX_TRAIN_STEPS``."""
    room = (0.8 * seconds - modes * overhead) / float(max(1, modes) * max(per_step, 1e-3))
    return int(max(warmup + 2, min(MAX_TRAIN_STEPS, room)))


def training_rows(save, result, seconds, chosen):
    """The RetinaNet-R18 training table within about ``seconds``: ``result["training"]`` (saved per mode)."""
    from trtkit.data.shape_boxes import BOX_CLASS_NAMES, draw_shape_boxes
    started = time.time()
    size, warmup = chosen["train_size"], chosen["warmup_steps"]
    images, records = draw_shape_boxes(chosen["train_images"], size=size, seed=0)
    training = result["training"] = {
        "model": TRAIN_MODEL, "input_size": size, "batch_size": chosen["train_batch"], "device": chosen["device"],
        "data": "drawn shape-boxes ({}): {} uint8 images at {}x{}, flipped both ways".format(
            "/".join(BOX_CLASS_NAMES), len(images), size, size),
        "warmup_steps": warmup, "rows": []}
    modes = _modes(chosen["device"])
    running = [m for m, why in modes if why is None]
    steps = chosen["train_steps"]
    if steps is None:  # a strict-FP32 probe (also the process's CUDA warm-up) sizes the steps
        try:
            probe = _train_once("fp32", images, records, PROBE_STEPS, chosen, 1, "detection training probe")
        except Exception as exc:  # the inference rows stay; the error says why there is no table
            training["error"] = "the strict-FP32 probe failed: {}: {}".format(exc.__class__.__name__, exc)
            result["stopped"] = training["error"]
            return training
        finally:
            _free_cuda(chosen["device"])
        training["probe"] = {"steps": PROBE_STEPS, "seconds_per_step": probe["seconds"] / probe["timed_steps"]}
        left = seconds - (time.time() - started)
        steps = planned_steps(left, training["probe"]["seconds_per_step"], len(running), warmup)
    steps = int(steps)
    training["steps"] = steps
    save(result)
    for mode, why in modes:
        if why is not None:
            training["rows"].append({"mode": mode, "status": "skipped", "reason": why})
            continue
        spent = time.time() - started
        done = [r for r in training["rows"] if r.get("status") == "ok"]
        expected = max([r["seconds"] * steps / max(r["timed_steps"], 1) for r in done] or [0.0])
        if spent + expected > seconds:
            training["rows"].append({"mode": mode, "status": "not run", "reason": "time budget: {:.0f} s of {:.0f} "
                                     "spent, a mode takes about {:.0f} s".format(spent, seconds, expected)})
            result["stopped"] = "training stopped before {}".format(mode)
            continue
        try:
            record = dict(_train_once(mode, images, records, steps, chosen, min(warmup, steps - 1),
                                      "training {} ({})".format(TRAIN_MODEL, mode)), status="ok")
        except Exception as exc:  # e.g. a loss that is not finite in one mode: the other modes still run
            record = {"mode": mode, "status": "failed", "reason": "{}: {}".format(exc.__class__.__name__, exc)}
        finally:
            _free_cuda(chosen["device"])
        training["rows"].append(record)
        add_training_speedups(training["rows"])
        save(result)
    return training


def _free_cuda(device):
    """Give the last mode's blocks back, so the next mode's peak is its own."""
    if str(device).startswith("cuda"):
        import gc

        import torch
        gc.collect()
        torch.cuda.empty_cache()


def add_training_speedups(rows):
    """Each ok row's ``speedup_vs_fp32`` and ``speedup_vs_tf32`` (steps/s over strict FP32's and TF32's)."""
    rate = dict((r["mode"], r["steps_per_second"]) for r in rows if r.get("status") == "ok")
    for row in rows:
        if row.get("status") == "ok":
            for base in ("fp32", "tf32"):
                row["speedup_vs_" + base] = round(row["steps_per_second"] / rate[base], 3) if rate.get(base) else None
    return rows


def inference_table(rows):
    """Markdown: model, input, mode, batch, latency (median, p99) and FPS, on the device (no copies) and with
    the host<->device copies; skipped rows with their reason."""
    lines = ["| model | input | PyTorch mode | batch | latency ms (median / p99) | FPS | with copies: ms / FPS | "
             "speed-up |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        name = str(row.get("model", "")).split("@")[0]
        if row.get("status") != "ok":
            lines.append("| {} | {} | {} | {} | {}: {} | | | |".format(
                name, row.get("input_size", "-"), row.get("torch_mode"), row.get("batch") or "-", row.get("status"),
                str(row.get("reason") or "")[:100].replace("|", "/")))
            continue
        device = row.get("device_latency_ms") or row.get("latency_ms") or {}
        plain = row.get("latency_ms") or {}
        lines.append("| {} | {} | {} | {} | {:.2f} / {:.2f} | {:.0f} | {:.2f} / {:.0f} | {} |".format(
            name, row.get("input_size", "-"), row.get("torch_mode"), row.get("batch"), device.get("median", 0.0),
            device.get("p99", 0.0), row.get("device_fps") or row.get("fps") or 0.0, plain.get("median", 0.0),
            row.get("fps") or 0.0, "{:.2f}x".format(row["speedup"]) if row.get("speedup") else "-"))
    return "\n".join(lines)


def training_table(training):
    """Markdown: mode, steps/s, images/s, speed-up vs strict FP32 and vs TF32, peak memory after the warm-up,
    loss (mean of the last 10 steps)."""
    lines = ["| mode | steps/s | images/s | vs strict FP32 | vs TF32 | peak MiB after warm-up | loss |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in training.get("rows", []):
        if row.get("status") != "ok":
            lines.append("| {} | {}: {} | | | | | |".format(row["mode"], row.get("status"),
                                                            str(row.get("reason") or "")[:120].replace("|", "/")))
            continue
        lines.append("| {} | {:.2f} | {:.1f} | {} | {} | {} | {:.3f} |".format(
            row["mode"], row["steps_per_second"], row["images_per_second"], _times(row.get("speedup_vs_fp32")),
            _times(row.get("speedup_vs_tf32")),
            "{:.0f}".format(row["peak_memory_mb"]) if row.get("peak_memory_mb") is not None else "- (CPU)",
            row["loss"]))
    return "\n".join(lines)


def _times(value):
    return "{:.2f}x".format(value) if value else "-"


def step_detection(request, save, timing_options, timed, saving_rows):
    """Inference rows, then the training table, in ``request["seconds"]``; ``timing_options``, ``timed`` and
    ``saving_rows``: ``gpucheck.steps``' ``bench_options``, ``_bench`` and ``saving_rows`` (passed in:
    ``gpucheck.steps`` imports this module)."""
    import torch
    chosen = settings(request)
    if chosen["device"].startswith("cuda"):
        torch.backends.cudnn.benchmark = True  # the baselines set it too (torch_baseline.baseline_settings)
    started = time.time()
    budget = request["seconds"] * 0.9
    result = {"status": "running", "timed": TIMED, "device": chosen["device"], "bench": {"results": []}}
    rows = inference_rows(request, save, result, budget * (INFERENCE_SHARE if not chosen["skip_training"] else 1.0),
                          timing_options, timed, saving_rows, chosen)
    result["inference_table"] = inference_table(rows)
    save(result)
    if not chosen["skip_training"]:
        training = training_rows(save, result, budget - (time.time() - started), chosen)
        result["training_table"] = training_table(training)
    broken = [r for r in rows if r.get("status") not in ("ok", "skipped")] + [
        r for r in (result.get("training") or {}).get("rows", []) if r.get("status") not in ("ok", "skipped")]
    ran = [r for r in rows if r.get("status") == "ok"]
    result["status"] = "ok" if ran and not broken and not result.get("stopped") else "partial"
    return result
