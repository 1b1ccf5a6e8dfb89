"""The main job: model -> validated FP32 ONNX -> precision variants -> backend artifacts -> verified manifest.

``build(BuildOptions(...))`` is what ``scripts/build_engine.py`` and
``trtkit build`` call. Everything is written into a staging folder inside
``--out`` and moved into place only when the whole build succeeded, so a failed
build never leaves a half-written file behind.

Steps add themselves through small hooks rather than editing this flow:
``VARIANT_MAKERS`` (precision -> function making that ONNX variant) and
backends from ``trtkit.backends``.
"""

import os
import shutil
import tempfile
import time

from trtkit import log
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.fileio import human_bytes, output_dir, sha256_file
from trtkit.manifest import new_manifest, save_manifest
from trtkit.precision import PRECISIONS

# Top-1 agreement with the FP32 reference below which a variant is marked failing.
DEFAULT_MIN_AGREEMENT = {"fp32": 0.999, "fp16": 0.99, "int8": 0.98}


class BuildOptions(object):
    """Every knob of a build; the CLI fills it from flags, Python callers directly."""

    def __init__(self, model=None, checkpoint=None, onnx=None, precisions=("fp32", "fp16"), backend="auto",
                 num_classes=None,
                 input_size=None, out="build", data="sample", verify_images=None, batch_size=32,
                 exporter="auto", tolerance=1e-3, strict=False, throughput_seconds=1.0, throughput_batch=8,
                 min_agreement=None, extra=None):
        self.model = model
        self.checkpoint = checkpoint
        self.onnx = onnx
        self.precisions = parse_precisions(precisions)
        self.num_classes = num_classes
        self.backend = backend
        self.input_size = input_size
        self.out = out
        self.data = data
        self.verify_images = verify_images
        self.batch_size = batch_size
        self.exporter = exporter
        self.tolerance = tolerance
        self.strict = strict
        self.throughput_seconds = throughput_seconds
        self.throughput_batch = throughput_batch
        self.min_agreement = dict(DEFAULT_MIN_AGREEMENT, **(min_agreement or {}))
        # options owned by later steps (calibration, TensorRT) travel here by name
        self.extra = dict(extra or {})


def parse_precisions(value):
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [p.strip().lower() for p in items if p.strip()]
    for p in items:
        if p not in PRECISIONS:
            raise InputError("unknown precision '{}'".format(p), hint="use a comma list of " + ",".join(PRECISIONS))
    if not items:
        raise InputError("no precision given", hint="e.g. --precision fp32,fp16")
    return list(dict.fromkeys(items))


class BuildContext(object):
    """What the steps of one build share: the model, data, reference logits and the staging folder."""

    def __init__(self, options, staging):
        self.options = options
        self.staging = staging
        self.torch_model = None
        self.contract = None
        self.name = None
        self.fp32_onnx = None
        self.summary = None
        self.fixed_batch = None
        self.verify_set = None
        self.reference = None
        self.labels = None
        self.backend = None
        self.manifest = None
        self.notes = []

    def stage_path(self, file_name):
        return os.path.join(self.staging, file_name)


# ---------------------------------------------------------------- steps

def _source_model(ctx):
    """Load the PyTorch model (checkpoint, or the sample) or prepare a foreign ONNX."""
    opts = ctx.options
    from trtkit.models import InputContract
    if opts.onnx:
        if opts.checkpoint:
            raise InputError("give --onnx or --checkpoint, not both")
        from trtkit.onnx_tools import prepare_onnx
        ctx.name = opts.model or os.path.splitext(os.path.basename(opts.onnx))[0]
        ctx.fp32_onnx = ctx.stage_path("{}.fp32.onnx".format(ctx.name))
        ctx.summary, notes = prepare_onnx(opts.onnx, ctx.fp32_onnx)
        for note in notes:
            log.info("onnx: " + note)
        ctx.notes.extend(notes)
        ctx.fixed_batch = ctx.summary.batch
        c, h, w = ctx.summary.image_shape
        size = opts.input_size or (h if isinstance(h, int) else None)
        if size is None:
            raise InputError("the ONNX input has no fixed height/width", hint="pass --input-size")
        if isinstance(h, int) and isinstance(w, int) and h != w:
            raise InputError("the ONNX input is {}x{}; trtkit's preprocessing makes square images".format(h, w))
        if opts.input_size and isinstance(h, int) and opts.input_size != h:
            raise InputError("--input-size {} does not match the ONNX input size {}".format(opts.input_size, h))
        ctx.contract = InputContract(size=size, channels=c if isinstance(c, int) else 3)
        if opts.num_classes and ctx.summary.num_classes and opts.num_classes != ctx.summary.num_classes:
            raise InputError("{} outputs {} classes, not {}".format(opts.onnx, ctx.summary.num_classes,
                                                                    opts.num_classes))
        return {"name": ctx.name, "source": "onnx", "onnx": os.path.abspath(opts.onnx),
                "sha256": sha256_file(opts.onnx), "num_classes": ctx.summary.num_classes,
                "input": ctx.contract.to_dict(), "input_name": ctx.summary.input_name,
                "output_names": ctx.summary.output_names, "opset": ctx.summary.opset, "notes": notes}
    from trtkit.models import check_model_name, load_model
    if opts.model:
        check_model_name(opts.model)
    if opts.checkpoint:
        model = load_model(opts.model, opts.checkpoint, num_classes=opts.num_classes, input_size=opts.input_size)
        source, path = "checkpoint", opts.checkpoint
    else:
        if opts.model not in (None, "resnet18"):
            raise InputError("--model {} needs --checkpoint (only the resnet18 sample model is built in)".format(
                opts.model), hint="pass --checkpoint FILE, or drop --model to use the sample model")
        from trtkit.sample import sample_model
        model, path, _ = sample_model()
        source = "sample"
        if opts.input_size and opts.input_size != model.input_contract.size:
            model.input_contract.size = opts.input_size
    ctx.torch_model = model
    ctx.contract = model.input_contract
    ctx.name = model.trtkit_name.replace("torchvision:", "")
    return {"name": model.trtkit_name, "source": source, "checkpoint": os.path.abspath(path),
            "sha256": sha256_file(path), "num_classes": model.num_classes, "stem": model.stem,
            "input": ctx.contract.to_dict()}


def _load_verify_data(ctx):
    opts = ctx.options
    from trtkit.data import load_images
    ctx.verify_set = load_images(opts.data, ctx.contract, split="heldout", limit=opts.verify_images)
    labels = ctx.verify_set.labels
    num_classes = ctx.torch_model.num_classes if ctx.torch_model is not None else ctx.summary.num_classes
    names = ctx.verify_set.class_names
    if labels is not None and names is not None and num_classes is not None and len(names) != num_classes:
        log.info("data has {} classes, the model {}: accuracy is not reported, agreement is".format(
            len(names), num_classes))
        labels = None
    ctx.labels = labels
    return {"source": opts.data, "identity": ctx.verify_set.identity, "split": "heldout",
            "images": len(ctx.verify_set), "labels": labels is not None}


def _export(ctx):
    """FP32 ONNX + reference logits. PyTorch models are exported and validated against PyTorch."""
    opts = ctx.options
    images = ctx.verify_set.images
    if ctx.torch_model is None:
        from trtkit.backends.onnxruntime import OnnxRuntimeRunner
        from trtkit.verify import run_batches
        with OnnxRuntimeRunner(ctx.fp32_onnx, providers=["CPUExecutionProvider"]) as runner:
            ctx.reference = run_batches(runner, images, opts.batch_size, ctx.fixed_batch)
        log.info("reference: FP32 ONNX Runtime on the given ONNX (no PyTorch model to compare with)")
        return {"reference": "onnxruntime-fp32"}
    from trtkit.export import export_onnx, torch_logits, validate_export
    ctx.fp32_onnx = ctx.stage_path("{}.fp32.onnx".format(ctx.name))
    start = time.time()
    exporter, opset = export_onnx(ctx.torch_model, ctx.fp32_onnx, exporter=opts.exporter)
    ctx.reference = torch_logits(ctx.torch_model, images, opts.batch_size)
    diff, agreement = validate_export(ctx.fp32_onnx, ctx.reference, images, tolerance=opts.tolerance)
    log.info("exported {} with the {} exporter (opset {}): ONNX Runtime vs PyTorch max |diff| {:.2e}, "
             "top-1 agreement {:.2%} on {} images ({:.1f}s)".format(ctx.name, exporter, opset, diff, agreement,
                                                                    len(images), time.time() - start))
    return {"reference": "pytorch-fp32", "exporter": exporter, "opset": opset, "max_abs_diff": diff,
            "top1_agreement": agreement, "tolerance": opts.tolerance}


def _fp32_variant(ctx):
    return ctx.fp32_onnx, {}


def _fp16_variant(ctx):
    from trtkit.precision.fp16 import convert_fp16
    path = ctx.stage_path("{}.fp16.onnx".format(ctx.name))
    kept = convert_fp16(ctx.fp32_onnx, path)
    return path, {"kept_fp32_ops": kept}


def _int8_variant(ctx):
    try:
        from trtkit.precision.calibrate import make_int8_variant
    except ImportError:
        raise InputError("INT8 needs the calibration module, which this trtkit does not have yet",
                         hint="use --precision fp32,fp16")
    return make_int8_variant(ctx)


VARIANT_MAKERS = {"fp32": _fp32_variant, "fp16": _fp16_variant, "int8": _int8_variant}


def _build_artifact(ctx, precision):
    opts = ctx.options
    onnx_path, variant_meta = VARIANT_MAKERS[precision](ctx)
    backend = ctx.backend
    name = "{}.{}".format(ctx.name, precision)
    artifact = ctx.stage_path(name + backend.artifact_suffix)
    start = time.time()
    backend_meta = backend.build(onnx_path, precision, artifact, dict(opts.extra, context=ctx)) or {}
    build_seconds = time.time() - start
    record = {"name": name, "precision": precision, "backend": backend.name,
              "path": os.path.basename(artifact), "onnx": os.path.basename(onnx_path),
              "bytes": os.path.getsize(artifact), "build_seconds": round(build_seconds, 3)}
    record.update(variant_meta)
    if backend_meta:
        record["backend_info"] = backend_meta
    runner = backend.runner(artifact, opts.extra)
    try:
        with runner:
            from trtkit.verify import run_batches, compare
            logits = run_batches(runner, ctx.verify_set.images, opts.batch_size, ctx.fixed_batch)
            record["verify"] = compare(logits, ctx.reference, ctx.labels)
            record["throughput_ips"] = _throughput(ctx, runner)
            record["throughput_batch"] = ctx.fixed_batch or opts.throughput_batch
    except DeviceUnavailable as exc:
        record["verify"] = None
        record["throughput_ips"] = None
        record["status"] = "built"
        record["status_detail"] = "not run: {}".format(exc)
        log.warn("{} built but not run: {}".format(name, exc))
        return record
    threshold = opts.min_agreement.get(precision, 0.98)
    agreement = record["verify"]["top1_agreement"]
    record["min_agreement"] = threshold
    if agreement < threshold:
        record["status"] = "failing"
        record["status_detail"] = "top-1 agreement {:.2%} is below {:.0%}".format(agreement, threshold)
        log.warn("{}: {}".format(name, record["status_detail"]) + _advice(precision))
    else:
        record["status"] = "ok"
    return record


def _advice(precision):
    if precision == "int8":
        return " - try --calib-method percentile or minmax, or more --calib-images"
    if precision == "fp16":
        return " - the model may overflow FP16; keep the FP32 variant for it"
    return ""


def _throughput(ctx, runner):
    opts = ctx.options
    if opts.throughput_seconds <= 0:
        return None
    from trtkit.bench.timing import quick_throughput
    return quick_throughput(runner, ctx.verify_set.images, ctx.fixed_batch or opts.throughput_batch,
                            opts.throughput_seconds)


# ---------------------------------------------------------------- orchestration

def build(options):
    """Run a whole build; returns the manifest dict (also written to ``OUT/manifest.json``)."""
    with output_dir(options.out) as out:
        manifest = _build_into(options, out)
    if options.strict:
        failing = [a["name"] for a in manifest["artifacts"] if a.get("status") == "failing"]
        if failing:
            from trtkit.errors import VerificationFailed
            raise VerificationFailed("{} below the agreement threshold: {}".format(
                "variant" if len(failing) == 1 else "variants", ", ".join(failing)),
                hint="see {} for the figures".format(os.path.join(out, "manifest.json")))
    return manifest


def _build_into(options, out):
    from trtkit.backends import select_backend
    staging = tempfile.mkdtemp(prefix=".trtkit-build-", dir=out)
    ctx = BuildContext(options, staging)
    total_start = time.time()
    try:
        ctx.backend, why = select_backend(options.backend)
        log.info("backend: {} ({})".format(ctx.backend.name, why))
        model_info = _source_model(ctx)
        ctx.manifest = manifest = new_manifest(model_info)
        manifest["data"] = _load_verify_data(ctx)
        manifest["export"] = _export(ctx)
        manifest["backend"] = {"name": ctx.backend.name, "reason": why}
        manifest["options"] = {"precisions": options.precisions, "batch_size": options.batch_size,
                               "throughput_batch": options.throughput_batch}
        for precision in options.precisions:
            log.info("building {} {} ...".format(ctx.name, precision))
            manifest["artifacts"].append(_build_artifact(ctx, precision))
        manifest["build_seconds"] = round(time.time() - total_start, 2)
        save_manifest(staging, manifest)
        _publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest["_dir"] = out
    return manifest


def _publish(staging, out):
    """Move every finished file from the staging folder into ``out`` (manifest last)."""
    names = sorted(os.listdir(staging), key=lambda n: n == "manifest.json")
    for name in names:
        os.replace(os.path.join(staging, name), os.path.join(out, name))


def format_table(manifest):
    """The build table: variant, backend, size, agreement, accuracy, max |diff|, throughput, status."""
    header = ["variant", "backend", "size", "top-1 agree", "accuracy", "max |diff|", "img/s", "status"]
    rows = []
    for a in manifest["artifacts"]:
        v = a.get("verify") or {}
        rows.append([
            a["name"], a["backend"], human_bytes(a["bytes"]),
            _pct(v.get("top1_agreement")), _pct(v.get("accuracy")),
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
        lines.append("reference (FP32 {}) accuracy: {}".format(
            "PyTorch" if manifest.get("export", {}).get("reference") == "pytorch-fp32" else "ONNX",
            _pct(ref["reference_accuracy"])))
    return "\n".join(lines)


def _pct(value):
    return "{:.2%}".format(value) if value is not None else "-"
