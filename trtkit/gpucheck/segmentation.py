"""The GPU check's segmentation step: the reference benchmark's table on this GPU.

The reference (kentaroy47/benchmark-FP32-FP16-INT8-with-TensorRT) times ``fcn_resnet50``, ``fcn_resnet101``,
``deeplabv3_resnet50`` and ``deeplabv3_resnet101`` at 1x3x512x512: PyTorch, TensorRT FP32, FP16 and INT8
latency, one column per model, and an image-size sweep. This step builds each model through
``trtkit.build`` (task segmentation, dynamic H and W from 128 to 1024, the installed TensorRT, else
TensorRT-RTX) and times it at batch 1 beside PyTorch FP32, AMP and ``.half()`` (``torch_baseline``); the
first model is also swept over 128, 256, 512 and 1024. No weights can be downloaded, so these models are
seeded random weights (speed does not depend on them; their agreement figures say only that every
precision runs); the trained segmentation sample (LRASPP, shapes) comes first and carries the real pixel
agreement and mIoU. Each timed row is saved as soon as it is measured, so a crash or a timeout keeps what was measured.
Without TensorRT or TensorRT-RTX the PyTorch rows (the reference's PyTorch column) are timed all the same
(``pytorch_rows``): on an H200 without TensorRT the whole step had been skipped.
"""

import os
import time

from trtkit.tasks.segmentation import SEGMENTATION

REFERENCE_MODELS = ("fcn_resnet50", "fcn_resnet101", "deeplabv3_resnet50", "deeplabv3_resnet101")
REFERENCE_SIZE = 512
SWEEP_SIZES = (128, 256, 512, 1024)
IMAGE_SIZES = (128, 1024)
CLASSES = 21


def engine_backend(modules):
    """The backend the reference's TensorRT columns come from: classic TensorRT, else TensorRT-RTX, else None."""
    if modules.get("tensorrt"):
        return "tensorrt"
    if modules.get("tensorrt_rtx"):
        return "tensorrt-rtx"
    return None


def random_checkpoint(name, folder, size=REFERENCE_SIZE, seed=0):
    """A seeded, randomly initialised ``name`` (torchvision layout, 21 classes) saved as a trtkit checkpoint."""
    import torch

    from trtkit.contract import InputContract
    from trtkit.models.classifiers import save_checkpoint
    from trtkit.models.segmentation import create_segmentation_model
    torch.manual_seed(seed)
    model = create_segmentation_model(name, num_classes=CLASSES, contract=InputContract(size=size, resize="stretch"))
    return save_checkpoint(model, os.path.join(folder, "{}-random.pt".format(name)))


def reference_table(results, models):
    """The reference's layout as markdown: rows PyTorch / FP32 / FP16 / INT8, columns models, latency in ms
    (median, batch 1); '-' where a cell did not run."""
    rows = {}
    for row in results:
        if row.get("status") == "ok" and row.get("batch") == 1:
            rows.setdefault(row["variant"], {})[row["model"]] = (row.get("latency_ms") or {}).get("median")
    lines = ["| latency ms, batch 1, {0}x{0} | {1} |".format(REFERENCE_SIZE, " | ".join(models)),
             "|---|{}|".format("|".join("---:" for _ in models))]
    for label, figures in rows.items():
        lines.append("| {} | {} |".format(label, " | ".join(
            "{:.1f}".format(figures[m]) if figures.get(m) is not None else "-" for m in models)))
    return "\n".join(lines)


def pytorch_rows(request, save, timing_options, timed, saving_rows, size=REFERENCE_SIZE, models=REFERENCE_MODELS):
    """The reference's PyTorch rows alone (no engine runtime here): each model of ``models`` timed at batch 1 and
    ``size`` in ``torch_baseline.BASELINE_MODES`` on seeded input (speed does not depend on the pixels), each
    row saved as soon as it is measured; the result says the TensorRT columns are missing and why."""
    import numpy as np

    from trtkit.backends.torch_baseline import BASELINE_MODES
    from trtkit.bench.plan import torch_variants
    started = time.time()
    result = {"status": "running", "backend": None, "models": {}, "bench": {"results": []},
              "note": "neither TensorRT nor TensorRT-RTX imports: PyTorch rows only"}
    images = np.random.RandomState(0).rand(4, 3, size, size).astype(np.float32)
    for index, name in enumerate(models):
        left = request["seconds"] * 0.9 - (time.time() - started)
        if left < 10:
            result["stopped"] = "time budget spent before {}".format(name)
            break
        timing = timing_options(left / float(len(models) - index), len(BASELINE_MODES), (1,), fixed=5.0)
        checkpoint = random_checkpoint(name, request["work"], size=size)
        variants = torch_variants(name, checkpoint, list(BASELINE_MODES), timing.threads, size, name)
        before = list(result["bench"]["results"])
        bench = timed(variants, images, timing, saving_rows(result, save, before))
        result["bench"]["results"] = before + bench["results"]
        result["models"][name] = {"rows": len(bench["results"])}
        save(result)
    result["table"] = reference_table(result["bench"]["results"], [m for m in models if m in result["models"]])
    ran = [r for r in result["bench"]["results"] if r.get("status") == "ok"]
    result["status"] = "partial" if result.get("stopped") or not ran else "ok"
    result["reason"] = result["note"]
    return result


def step_segmentation(request, save, timing_options, timed, summarize_build, saving_rows):
    """Build, verify and time the segmentation sample and the reference's four models; ``save`` after each
    timed row. ``timing_options``, ``timed``, ``summarize_build`` and ``saving_rows``: the other steps'
    ``bench_options``, ``_bench``, ``summarize_build`` and ``saving_rows`` (passed in: ``gpucheck.steps``
    imports this module). PyTorch is timed as ``torch_baseline.BASELINE_MODES``: FP32 (channels_last, cudnn
    benchmark), AMP and ``.half()``."""
    from trtkit.backends.torch_baseline import BASELINE_MODES
    from trtkit.deps import available
    modules = {"tensorrt": available("tensorrt"), "tensorrt_rtx": available("tensorrt_rtx")}
    from trtkit.bench.plan import load_bench_images, plan_from_manifest
    from trtkit.bench.sweeps import image_size_sweep
    from trtkit.pipeline import BuildOptions, build
    from trtkit.pipeline.manifest import Build
    from trtkit.pipeline.source import ModelOptions
    backend = engine_backend(modules)
    if backend is None:
        return pytorch_rows(request, save, timing_options, timed, saving_rows)
    started = time.time()
    result = {"status": "running", "backend": backend, "models": {}, "bench": {"results": []}}
    names = ["sample"] + list(REFERENCE_MODELS)
    for index, name in enumerate(names):
        left = request["seconds"] * 0.9 - (time.time() - started)
        if left < 20:
            result["stopped"] = "time budget spent before {}".format(name)
            break
        if name == "sample":
            source = ModelOptions(task=SEGMENTATION.name, image_sizes=(64, 256))
            data = "shapes"
        else:
            source = ModelOptions(checkpoint=random_checkpoint(name, request["work"]), task=SEGMENTATION.name,
                                  image_sizes=IMAGE_SIZES)
            data = "shapes"
        options = BuildOptions(source=source, backend=backend, precisions=["fp32", "fp16", "int8"], data=data,
                               out=os.path.join(request["work"], "seg-" + name), throughput_seconds=0,
                               verify_images=64, batch_size=8)
        built = Build(os.path.abspath(options.out), build(options))
        entry = result["models"][name] = {"build": summarize_build(built.manifest)}
        share = left / float(len(names) - index)
        timing = timing_options(share * 0.5, 5, (1,), fixed=10.0)
        variants = plan_from_manifest(built, timing, torch_modes=list(BASELINE_MODES))
        images, _ = load_bench_images(built.manifest, count=16)
        before = list(result["bench"]["results"])
        bench = timed(variants, images, timing, saving_rows(result, save, before))
        result["bench"]["results"] = before + bench["results"]
        if name == REFERENCE_MODELS[0]:
            sweep = image_size_sweep(variants, list(SWEEP_SIZES), timing)
            entry["imsize"] = sweep["results"]
        save(result)
    result["table"] = reference_table(result["bench"]["results"], [m for m in REFERENCE_MODELS
                                                                   if m in result["models"]])
    failing = [a["name"] for m in result["models"].values() for a in m["build"]["artifacts"]
               if a.get("status") not in ("ok",)]
    result["status"] = "ok" if not failing and not result.get("stopped") else "partial"
    if failing:
        result["reason"] = "not ok: " + ", ".join(failing)
    return result
