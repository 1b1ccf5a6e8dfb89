"""The steps of ``gpu_check``, each run in a child process: ``python -m trtkit.gpucheck.steps REQUEST.json``.

Why a child per step: a step can crash the interpreter (a TensorRT engine on a
GPU it was not built for, a CUDA error) or hang in a compiler, and the next
step must still run; the parent (``gpu_check.run``) kills a child that outlives
its share of the time budget. The child reads its request (step, seconds,
work folder, options), writes its result JSON (also part-way, so a killed step
keeps what it had), and never raises: a failure is ``{"status": "failed",
"error": the exact text}``.

Every step reuses trtkit: timing through ``trtkit.bench`` (plan, measure,
matrix), engines through ``trtkit.pipeline.build`` (which verifies each variant
against PyTorch FP32 on held-out sample images), training through
``trtkit.training``.
"""

import os
import sys
import time
import traceback

from trtkit.errors import TrtkitError
from trtkit.fileio import read_json, write_json

TORCH_SIZES = (1, 64, 256)
ENGINE_SIZES = (1, 64)
ENGINE_PROFILE = (1, 64, 64)
BENCH_IMAGES = 256
FIGURE_COST = 6.0  # a cell's time in units of per-figure seconds: 4 figures on a GPU plus their warm-ups


def bench_options(seconds, cells, sizes, fixed=0.0):
    """BenchOptions whose cells fit in ``seconds`` (minus ``fixed`` one-off costs): short figures, one pass."""
    from trtkit.bench.plan import BenchOptions
    per_figure = max(0.05, min(1.0, (seconds - fixed) / float(max(1, cells) * FIGURE_COST)))
    return BenchOptions(batch_sizes=sizes, seconds=per_figure, warmup=min(0.3, per_figure),
                        max_seconds=2.0 * per_figure, min_iterations=5, min_rounds=3, repeats=1,
                        agree_images=64, pin=False)


def _bench(variants, images, options, on_rows=None):
    """``run_matrix`` of the variants; ``on_rows(rows)`` gets the rows measured so far as each one completes."""
    from trtkit.bench.matrix import run_matrix
    result = run_matrix(variants, images, options, progress_label="timing", on_rows=on_rows)
    return summarize_bench(result)


def summarize_bench(result):
    rows = result["results"]
    result["summary"] = {"rows": len(rows), "ok": sum(1 for r in rows if r.get("status") == "ok")}
    return result


def saving_rows(result, save, before=()):
    """An ``on_rows`` that puts the rows measured so far (after ``before``) in ``result["bench"]`` and saves it:
    a step stopped at its time limit keeps every row it finished."""
    def on_rows(rows):
        result["bench"] = dict(result.get("bench") or {}, results=list(before) + list(rows))
        save(result)
    return on_rows


def judge_against_eager(rows, modes):
    """Rows of the torch ``modes`` (e.g. compile) whose outputs disagree with eager FP32 (their ``check``, from
    ``bench.agreement.compare_outputs``: max |diff| and top-1 within the precision's tolerance), or that were
    never compared, become ``failing`` with the reason; returns ``rows``."""
    for row in rows:
        if row.get("torch_mode") not in modes or row.get("status") != "ok":
            continue
        check = row.get("check")
        if not check:
            row.update(status="failing", reason="not compared with eager FP32 (no agreement pass ran)")
        elif not check.get("ok"):
            row.update(status="failing", reason="disagrees with eager FP32: {}".format(check.get("why")))
    return rows


def _sample_contract():
    from trtkit.models.sample import sample_model
    model, path, _ = sample_model()
    return model.input_contract, path


def _sample_images(contract):
    from trtkit.bench.plan import load_bench_images
    images, _ = load_bench_images({"model": {"input": contract.to_dict()}, "data": {"source": "sample"}},
                                  count=BENCH_IMAGES)
    return images


# ---------------------------------------------------------------- steps

def step_device(request, save):
    from trtkit.bench.device import describe, device_record
    record = device_record()
    return {"status": "ok", "device": record, "line": describe(record)}


def step_sample_model(request, save):
    from trtkit.models.sample import sample_model
    model, path, trained = sample_model()
    return {"status": "ok", "checkpoint": path, "trained_now": trained,
            "accuracy": (getattr(model, "trtkit_meta", None) or {}).get("accuracy")}


def _torch_step(request, save, modes, fixed, checked=(), subject=None):
    """Time ``subject`` (the sample, or ``(checkpoint, input size, images, model name)``) in the torch
    ``modes``, each row saved as soon as it is measured; the ``checked`` modes' rows fail when their outputs
    disagree with eager FP32 (``judge_against_eager``)."""
    from trtkit.bench.plan import plan_from_flags
    if subject is None:
        contract, checkpoint = _sample_contract()
        subject = (checkpoint, contract.size, _sample_images(contract), None)
    checkpoint, size, images, name = subject
    options = bench_options(request["seconds"] * 0.7, len(modes) * len(TORCH_SIZES), TORCH_SIZES, fixed)
    variants = plan_from_flags(options, checkpoint=checkpoint, input_size=size, torch_modes=list(modes))
    for variant in variants:
        variant.model = name or variant.model
    result = {"status": "running", "bench": {"results": []}}
    bench = _bench(variants, images, options, saving_rows(result, save))
    judge_against_eager(bench["results"], checked)
    summarize_bench(bench)
    status = "ok" if bench["summary"]["ok"] == bench["summary"]["rows"] else "partial"
    return {"status": status, "bench": bench}


REFERENCE_MODEL = "resnet18@224"  # the reference benchmark's setting, beside the sample's 64x64


def step_resnet18_224(request, save):
    """ImageNet's ResNet18 at 224x224, as the reference benchmark times it: the sample at 64x64 measures launch
    overhead on a large GPU, not the precision. Seeded random weights (no download; speed does not depend on
    them, agreement then only shows each mode runs); eager FP32, AMP, .half() and torch.compile."""
    import torch
    from trtkit.backends.torch_baseline import BASELINE_MODES
    from trtkit.bench.plan import load_bench_images
    from trtkit.models.classifiers import create_model, save_checkpoint
    checkpoint = os.path.join(request["work"], "resnet18-224.pt")
    torch.manual_seed(0)
    save_checkpoint(create_model("resnet18", num_classes=1000, stem="imagenet", input_size=224), checkpoint)
    images, _ = load_bench_images(None, contract_size=224, count=BENCH_IMAGES)
    import importlib.util
    modes = list(BASELINE_MODES) + (["compile"] if importlib.util.find_spec("triton") else [])  # compile needs triton
    return _torch_step(request, save, modes, fixed=min(60.0, request["seconds"] * 0.4), checked=("compile",),
                       subject=(checkpoint, 224, images, REFERENCE_MODEL))


def step_torch_baselines(request, save):
    from trtkit.backends.torch_baseline import BASELINE_MODES
    return _torch_step(request, save, BASELINE_MODES, fixed=10.0)


def step_torch_compile(request, save):
    # eager FP32 again: the agreement reference of this run (the report keeps the baselines' own row)
    return _torch_step(request, save, ["fp32", "compile"], fixed=min(90.0, request["seconds"] * 0.6),
                       checked=("compile",))


def _build(request, backend, precisions, tensorrt=None):
    """The ``Build`` (folder and manifest) of this step's build."""
    from trtkit.pipeline import BuildOptions, build
    from trtkit.pipeline.manifest import Build
    options = BuildOptions(backend=backend, precisions=precisions, out=os.path.join(request["work"], request["step"]),
                           data="sample", throughput_seconds=0, tensorrt=tensorrt)
    return Build(os.path.abspath(options.out), build(options))


def summarize_build(manifest):
    """What the report needs from a build manifest: per variant its status, verification and what ran it."""
    keep = ("name", "precision", "backend", "status", "status_detail", "verify", "bytes", "build_seconds",
            "ran_on", "min_agreement", "kept_fp32_ops")
    artifacts = []
    for artifact in manifest["artifacts"]:
        item = dict((k, artifact.get(k)) for k in keep if k in artifact)
        info = artifact.get("backend_info") or {}
        item["backend_info"] = dict((k, info.get(k)) for k in ("tensorrt_version", "precision_built",
                                                               "compute_capabilities", "note", "via", "gpu")
                                    if k in info)
        artifacts.append(item)
    return {"backend": manifest.get("backend"), "export": manifest.get("export"), "data": manifest.get("data"),
            "build_seconds": manifest.get("build_seconds"), "artifacts": artifacts}


def _engine_step(request, save, backend, precisions, tensorrt=None, label_suffix=None):
    """Build (and verify) every precision, save, then time the variants that ran at ``ENGINE_SIZES``."""
    from trtkit.bench.plan import load_bench_images, plan_from_manifest
    started = time.time()
    built = _build(request, backend, precisions, tensorrt)
    manifest = built.manifest
    result = {"status": "running", "backend": backend, "build": summarize_build(manifest)}
    save(result)
    ran = [a for a in manifest["artifacts"] if a.get("status") in ("ok", "failing")]
    if ran:
        left = request["seconds"] * 0.85 - (time.time() - started)
        options = bench_options(left, len(ran) * len(ENGINE_SIZES), ENGINE_SIZES, fixed=5.0 * len(ran))
        variants = plan_from_manifest(built, options, backends=[backend], torch_modes=None)
        for variant in variants:
            variant.label += label_suffix or ""
        images, _ = load_bench_images(manifest, count=BENCH_IMAGES)
        result["bench"] = _bench(variants, images, options, saving_rows(result, save))
    failing = [a for a in manifest["artifacts"] if a.get("status") != "ok"]
    result["status"] = "ok" if not failing else ("partial" if ran else "not run")
    result["manifest"] = manifest.to_json()
    return result, built


def step_tensorrt_rtx(request, save):
    from trtkit.backends.tensorrt.options import TensorRTOptions
    result, built = _engine_step(request, save, "tensorrt-rtx", "fp32,fp16,int8",
                                 TensorRTOptions(batch=ENGINE_PROFILE))
    if result["status"] == "not run":
        result["status"] = "refused"
        save(result)
        result["refusal"] = rtx_refusal(request, built)
    return result


def rtx_refusal(request, built):
    """TensorRT-RTX on a GPU trtkit will not run it on: trtkit's reason, TensorRT-RTX's own words loading the
    engine anyway, and whether an engine built for this very GPU (target CURRENT) builds and loads."""
    from trtkit.backends import get_backend
    from trtkit.backends.base import BuildInputs
    from trtkit.backends.tensorrt.options import TensorRTOptions
    from trtkit.backends.tensorrt.runner import probe_engine
    from trtkit.contract import InputContract
    manifest = built.manifest
    first = manifest["artifacts"][0]
    record = {"trtkit": first.get("status_detail"), "engine": first["name"],
              "tensorrt_rtx_load": probe_engine(built.path(first), "tensorrt-rtx")}
    current = {"targets": ["current"], "built": False, "error": None, "load": None, "messages": []}
    out = os.path.join(request["work"], "rtx-current", "{}.current.engine".format(first["name"]))
    options = TensorRTOptions(batch=ENGINE_PROFILE, compute_capabilities=["current"])
    inputs = BuildInputs(contract=InputContract.from_dict(manifest["model"]["input"]), default_batch=ENGINE_PROFILE,
                         work_dir=os.path.dirname(out), tensorrt=options)
    try:
        get_backend("tensorrt-rtx").build(built.path(first["onnx"]), "fp32", out, inputs)
        current["built"] = True
    except Exception as exc:  # the builder's refusal quotes TensorRT's reason; its last messages ride along
        current["error"] = "{}: {}".format(exc.__class__.__name__, exc)
        current["messages"] = list(getattr(exc, "tensorrt_log", None) or [])
    if current["built"]:
        current["load"] = probe_engine(out, "tensorrt-rtx")
    record["current_target"] = current
    return record


def step_tensorrt(request, save):
    from trtkit.backends.tensorrt.options import TensorRTOptions
    return _engine_step(request, save, "tensorrt", "fp32,fp16,int8", TensorRTOptions(batch=ENGINE_PROFILE))[0]


def step_torch2trt(request, save):
    from trtkit.backends.tensorrt.options import TensorRTOptions
    return _engine_step(request, save, "tensorrt", "fp32,fp16,int8",
                        TensorRTOptions(batch=ENGINE_PROFILE, via="torch2trt"), " via torch2trt")[0]


def step_onnxruntime_cuda(request, save):
    return _engine_step(request, save, "onnxruntime", "fp32,fp16", label_suffix=" (CUDA)")[0]


def step_training(request, save):
    from trtkit.training.config import TrainConfig
    from trtkit.training.report import format_table
    from trtkit.training.runner import compare_modes
    work = request["work"]
    data = (request.get("options") or {}).get("train_data")
    described = data
    if not data:
        from trtkit.gpucheck.cifar_like import write_cifar_like
        train = int(max(5000, min(50000, request["seconds"] * 150)))
        data = write_cifar_like(os.path.join(work, "cifar-like"), train=train, test=max(1000, train // 5))
        described = "synthetic CIFAR-shaped (32x32 RGB, 10 classes): {} training, {} held-out images".format(
            train, max(1000, train // 5))
    config = TrainConfig(model="resnet18", data=data, input_size=32, stem="cifar", epochs=3, batch_size=256,
                         device="cuda", seed=0)
    # strict FP32 is the baseline; TF32, where the GPU has it (Ampere and newer), shows what PyTorch's default gives
    from trtkit.training.modes import mode_unavailable_reason, pick_device
    modes = ["fp32"] + (["tf32"] if mode_unavailable_reason("tf32", pick_device(config.device)) is None else []) + [
        "amp", "half"]
    rows, device = compare_modes(modes, config, os.path.join(work, "training"))
    for row in rows:
        row.pop("checkpoint", None)
    ran = [r for r in rows if r["status"] == "ok"]
    return {"status": "ok" if len(ran) == len(rows) else ("partial" if ran else "not run"), "data": described,
            "config": config.to_dict(), "device": device, "modes": rows, "table": format_table(rows, device)}


def step_segmentation(request, save):
    from trtkit.gpucheck.segmentation import step_segmentation as run
    return run(request, save, bench_options, _bench, summarize_build, saving_rows)


def step_detection(request, save):
    from trtkit.gpucheck.detection import step_detection as run
    return run(request, save, bench_options, _bench, saving_rows)


STEP_FUNCTIONS = {"device": step_device, "sample-model": step_sample_model, "torch-baselines": step_torch_baselines,
                  "resnet18-224": step_resnet18_224,
                  "tensorrt-rtx": step_tensorrt_rtx, "tensorrt": step_tensorrt, "torch2trt": step_torch2trt,
                  "onnxruntime-cuda": step_onnxruntime_cuda, "training": step_training,
                  "torch-compile": step_torch_compile, "segmentation": step_segmentation,
                  "detection": step_detection}


def keep_partial(partial, failure):
    """``failure`` (status, error...) added beside what the step had saved in ``partial``, never instead of it:
    the measured figures stay, ``partial_status`` says how far the step had got."""
    if not partial:
        return dict(failure)
    merged = dict(partial)
    merged["partial_status"] = partial.get("status")
    merged.update(failure)
    return merged


def step_function(request):
    """The function a request runs: its ``function`` ("path/to/file.py:name", a step from outside trtkit,
    e.g. a test's), else the step of that name."""
    spec = request.get("function")
    if spec:
        import importlib.util
        path, _, name = spec.rpartition(":")
        module_spec = importlib.util.spec_from_file_location("trtkit_gpucheck_external_step", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return getattr(module, name)
    function = STEP_FUNCTIONS.get(request["step"])
    if function is None:
        raise TrtkitError("unknown step '{}'".format(request["step"]))
    return function


def error_record(exc):
    """The exact error: type and message (with a TrtkitError's hint), and the traceback for anything else."""
    record = {"status": "failed", "error": "{}: {}".format(exc.__class__.__name__, exc)}
    if not isinstance(exc, TrtkitError):
        record["traceback"] = traceback.format_exc()[-4000:]
    return record


def main(argv=None):
    """Run the step a request file names; the result file is written whatever happens, and a step that
    raises after saving part of its result keeps that part, its error beside it (``keep_partial``)."""
    argv = sys.argv[1:] if argv is None else argv
    request = read_json(argv[0])
    started = time.time()
    saved = {}

    def save(result):
        result = dict(result, step=request["step"], seconds=round(time.time() - started, 1))
        write_json(request["result"], result)
        saved.clear()
        saved.update(result)

    try:
        result = step_function(request)(request, save)
    except Exception as exc:
        result = keep_partial(saved, error_record(exc))
    save(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
