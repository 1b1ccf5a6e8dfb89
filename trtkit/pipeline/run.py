"""The main job: model -> validated FP32 ONNX -> precision variants -> backend artifacts -> verified manifest.

``build(BuildOptions(...))`` is what ``scripts/build_engine.py`` and
``trtkit build`` call (``BuildOptions`` lives in ``trtkit.pipeline.options``). Each step gets what it needs as arguments: the model
from ``source.resolve_model`` (shared with ``trtkit calibrate``), variants
from ``variants.VariantMaker`` (INT8 by a ``CalibrationConfig``), engines from the
backend by ``BuildInputs`` (with its ``TensorRTOptions``) and the
``Int8Calibration``. Files are written into the build folder's staging area
and published only when the whole build succeeded (``buildfolder``), so
``OUT`` always holds exactly one consistent build.

Variants (FP32, FP16, INT8, mixed) come from the one recipe,
``pipeline.variants.VariantMaker``; new runtimes are backends in ``trtkit.backends``.
"""

import os
import time

from trtkit import log, tasks
from trtkit.backends.base import BuildInputs
from trtkit.errors import InputError
from trtkit.pipeline.options import BuildOptions  # noqa: F401  (callers import it from here with build())
from trtkit.pipeline.gate import advice, agreement_name, miou_threshold, threshold
from trtkit.pipeline.manifest import new_manifest, save_manifest
from trtkit.pipeline.records import ArtifactRecord


class _Build(object):
    """The state of one build inside this module: what the steps before produced for the steps after.

    Nothing outside ``pipeline.py`` sees it; other packages get explicit arguments.
    """

    def __init__(self, options, folder, backend, source):
        self.options = options
        self.folder = folder
        self.backend = backend
        self.backends = {backend.name: backend}  # every backend an artifact of the build is for
        self.source = source
        self.name = source.name
        self.plan = None          # data.plan.DataPlan: which images calibration, the tune split and verification get
        self.selection = None     # the held-out images to verify on (listed, decoded as a stream)
        self.first_images = None  # the first batch of them: export check and throughput timing
        self.fp32_onnx = source.onnx_path
        self.inputs = None
        self.maker = None         # the VariantMaker of this build (pipeline.variants)
        self.data = _data_source(options.data, source.info)


def _data_source(data, info):
    """The data to calibrate and verify on: ``data``, but the default ('sample', the digits) means the sample
    model's own (``Task.sample_data``: the shapes sample, with masks, for the segmentation sample model)."""
    if data == "sample" and info.get("source") == "sample":
        return tasks.of(info.get("task")).sample_data
    return data


# ---------------------------------------------------------------- steps

def _select_verify_data(state):
    """Share the images out among the steps (``data.plan``) and choose the held-out ones (a listing: nothing is
    decoded but the first batch)."""
    options = state.options
    from trtkit.data.plan import plan_data
    contract = state.source.contract
    limit = None if options.verify_images == "all" else options.verify_images
    state.plan = plan_data(state.data, options.calibration.data, contract, options.calibration.images,
                           options.calibration.seed, options.search.tune_images if options.auto else None, limit,
                           calibration_needed=options.auto or "int8" in options.precisions,
                           trained_on=state.source.info.get("trained_on"))
    state.plan.log()
    selection = state.selection = state.plan.verify.selection
    state.first_images = next(iter(selection.batches(options.batch_size)))[0]
    names = selection.class_names
    num_classes = state.source.num_classes
    task = tasks.of(state.source.info.get("task"))
    labels = task.usable_labels(selection, num_classes, state.data)  # class labels, or masks
    if contract.class_names is None and names is not None and (num_classes is None or len(names) == num_classes):
        contract.class_names = list(names)
        state.source.info["input"] = contract.to_dict()
    if task.dense and contract.class_names is not None and num_classes is not None and \
            len(contract.class_names) != num_classes:  # a map's class names are its channels'
        contract.class_names = None
        state.source.info["input"] = contract.to_dict()
    state.labels_usable = labels
    return {"source": state.data, "identity": selection.identity, "split": selection.split,
            "images": len(selection), "labels": labels, "plan": state.plan.to_dict()}


def _checked_export(state, reference, strict):
    """(max |diff|, agreement, comparison) of ``state.fp32_onnx`` against PyTorch's ``reference`` outputs on the
    first held-out batch; a mismatch raises (``strict``: a fresh export) or gives None (a cached one, which is
    then exported again)."""
    from trtkit.errors import VerificationFailed
    from trtkit.onnx.export import validate_export
    from trtkit.pipeline.source import read_exported_kind
    read_exported_kind(state.source.info, state.options.source, state.fp32_onnx)
    comparison = _comparison(state.source.info, state.selection)
    try:
        diff, agreement = validate_export(state.fp32_onnx, reference, state.first_images,
                                          tolerance=state.options.tolerance, comparison=comparison)
    except VerificationFailed:
        if strict:
            raise
        return None
    return diff, agreement, comparison


def _export(state):
    """The FP32 ONNX; a PyTorch model's export is checked against PyTorch on the first held-out batch."""
    options = state.options
    model = state.source.torch_model
    if model is None:
        log.info("reference: FP32 ONNX Runtime on the given ONNX (no PyTorch model to compare with)")
        return {"reference": "onnxruntime-fp32"}
    from trtkit.onnx import export_cache
    from trtkit.onnx.export import export_onnx, torch_logits
    images = state.first_images
    state.fp32_onnx = state.folder.stage_path("{}.fp32.onnx".format(state.name))
    start = time.time()
    parser_version = state.backend.onnx_parser_version()
    key = export_cache.export_key(state.source.info, options.source, parser_version)
    cached = export_cache.fetch(key, state.fp32_onnx)
    reference = torch_logits(model, images, options.batch_size)
    checked = _checked_export(state, reference, strict=False) if cached is not None else None
    if cached is not None and checked is None:
        log.info("the cached export of {} does not match the model: exporting it again".format(state.name))
        export_cache.drop(key)
        cached = None
    if cached is None:
        exporter, opset = export_onnx(model, state.fp32_onnx, exporter=options.source.exporter,
                                      opset=options.source.opset, contract=state.source.contract,
                                      image_sizes=options.source.image_sizes, tensorrt_version=parser_version)
        checked = _checked_export(state, reference, strict=True)
        export_cache.store(key, state.fp32_onnx, exporter, opset)
    else:
        exporter, opset = cached["exporter"], cached["opset"]
    diff, agreement, comparison = checked
    log.info("{} {} with the {} exporter (opset {}): ONNX Runtime vs PyTorch max |diff| {:.2e}, "
             "{} agreement {} on {} images ({:.1f}s)".format(
                 "reused the export of" if cached else "exported", state.name, exporter, opset, diff,
                 agreement_name(comparison.result()), "n/a" if agreement is None else "{:.2%}".format(agreement),
                 len(images), time.time() - start))
    return {"reference": "pytorch-fp32", "exporter": exporter, "opset": opset, "max_abs_diff": diff,
            "top1_agreement": agreement, "tolerance": options.tolerance, "checked_images": len(images),
            "cached": cached is not None}


def _build_artifact(state, precision):
    return _build_from(state, state.maker.make(precision))


def _build_from(state, variant, backend=None, label=None):
    """Build the ``backend`` artifact ``NAME.<label>`` of one ``Variant``; returns its manifest record."""
    backend = backend or state.backend
    name = "{}.{}".format(state.name, label or variant.label)
    artifact = state.folder.stage_path(name + backend.artifact_suffix)
    start = time.time()
    onnx_path, nms = variant.onnx_path, None
    if state.source.info.get("detection"):  # the selection after the network: in the graph or on the host
        from trtkit.detect.params import DetectionHead
        from trtkit.pipeline.detection_nms import place_nms
        onnx_path, nms = place_nms(backend, onnx_path, DetectionHead.from_dict(state.source.info["detection"]),
                                   state.folder.stage_path(name + ".nms.onnx"))
        if nms["placement"] == "graph":  # NAME.fp16.nms.onnx (the ONNX artifact itself) or NAME.fp16.nms.engine
            artifact = state.folder.stage_path(name + ".nms" + backend.artifact_suffix)
    backend_meta = backend.build(onnx_path, variant.precision, artifact, state.inputs, variant.calibration) or {}
    record = ArtifactRecord(name=name, precision=variant.precision, backend=backend.name,
                            path=os.path.basename(artifact), onnx=os.path.basename(variant.onnx_path),
                            bytes=os.path.getsize(artifact), build_seconds=round(time.time() - start, 3))
    record.update(variant.meta)
    if backend_meta:
        record["backend_info"] = backend_meta
    if backend_meta.get("isa") and record.get("isa"):  # the backend rewrote the weights for itself
        record["isa"] = dict(record["isa"], **backend_meta["isa"])
    if variant.tune:
        record["tune"] = variant.tune
    if nms is not None:
        record["nms"] = nms
    return record


def _comparison(info, selection=None):
    from trtkit.pipeline.verification import comparison_for
    return comparison_for(info, selection)


# ---------------------------------------------------------------- orchestration

def build(options):
    """Run a whole build into ``options.out``; returns its Manifest (``pipeline.records``; also written to
    ``OUT/manifest.json``).

    With ``options.strict`` a variant that fails its verification gate raises VerificationFailed (after the
    build folder is published, so its figures can be read)."""
    from trtkit.pipeline.folder import build_folder
    with build_folder(options.out) as folder:
        manifest = _build_into(options, folder)
    if options.strict:
        summary = gate_summary(manifest)
        if summary:
            from trtkit.errors import VerificationFailed
            raise VerificationFailed(summary, hint="see {} for the figures".format(
                os.path.join(folder.path, "manifest.json")))
    return manifest


def gate_summary(manifest):
    """The one line that ends a build whose variants fail their verification gate, saying what to try; None
    when every verified variant passes. Under ``--precision auto`` failing candidates are expected (the
    search tries them) and only the chosen one matters, so the line is about requested variants."""
    if manifest.get("selection"):
        return None
    failing = [a for a in manifest["artifacts"] if a.get("status") == "failing"]
    if not failing:
        return None
    parts = ["{}: {}".format(a["name"], a["status_detail"]) for a in failing]
    tips = []
    for tip in (advice(a["precision"], a.get("calibration"), a.get("int8_method")) for a in failing):
        if tip not in tips:
            tips.append(tip)
    return "failing its verification gate: {}{}; or --precision auto to get the fastest variant that passes".format(
        "; ".join(parts), "".join(tips))


def _build_into(options, folder):
    from trtkit.backends import select_backend
    from trtkit.pipeline.source import resolve_model
    total_start = time.time()
    backend, why = select_backend(options.backend)
    log.info("backend: {} ({})".format(backend.name, why))
    source = resolve_model(options.source, folder.staging)
    if options.qat_steps is not None and source.torch_model is None:
        raise InputError("--qat-steps fine-tunes a PyTorch model, and {} is an ONNX graph: QAT needs the model's "
                         "PyTorch source".format(source.name),
                         hint="build from the PyTorch model (--checkpoint, or trtkit.build(model=...)), or drop "
                              "--qat-steps for post-training INT8")
    options = options.for_task(tasks.of(source.info.get("task")))  # its own INT8 ranges (a detector's minmax)
    state = _Build(options, folder, backend, source)
    data = _select_verify_data(state)
    manifest = new_manifest(state.source.info)
    manifest["data"] = data
    manifest["export"] = _export(state)
    manifest["backend"] = {"name": backend.name, "reason": why}
    manifest["options"] = options.to_dict(backend.name)
    state.inputs = BuildInputs(contract=state.source.contract, fp32_onnx=state.fp32_onnx,
                               default_batch=options.default_batch, work_dir=folder.staging,
                               torch_model=state.source.torch_model, tensorrt=options.tensorrt,
                               image_sizes=options.source.image_sizes)
    from trtkit.pipeline.variants import VariantMaker
    state.maker = VariantMaker(state.fp32_onnx, state.name, state.source.contract, options.calibration,
                               state.data, backend.int8_encoding, folder.staging,
                               images=state.plan.calibration.selection if state.plan.calibration else None)
    if options.qat_steps is not None:
        state.maker.use_qat(state.source.torch_model, options.qat_steps, state.source.info.get("output_kind"))
    if options.auto:
        from trtkit.search.candidates import make_candidates
        from trtkit.search.tune import load_tune_set
        task = state.source.info.get("task")
        tune = load_tune_set(state.maker.data, state.maker.contract, options.search.tune_images,
                             state.maker.fp32_onnx, kind=state.source.info.get("output_kind"), task=task,
                             selection=state.plan.tune.selection, model_info=state.source.info)
        candidates, search = make_candidates(state.maker, options.search, state.source.info.get("output_kind"),
                                             task, state.source.num_classes,
                                             gate=threshold(state.options, task, "mixed"),
                                             miou_gate=miou_threshold(state.options, task, "mixed"), tune=tune)
        for backend in _search_backends(state):
            for candidate in candidates:
                label = candidate.label if backend is state.backend else "{}-{}".format(candidate.label, backend.name)
                log.info("building {} {} ...".format(state.name, label))
                record = _build_from(state, candidate, backend, label)
                if (record.get("backend_info") or {}).get("rewrote_graph") and record.get("tune"):
                    _rescore(state, record, backend, tune, candidates[0].tune)  # candidates[0]: FP32
                manifest["artifacts"].append(record)
        del tune  # the verification streams its own images
    else:
        for precision in options.precisions:
            log.info("building {} {} ...".format(state.name, precision))
            manifest["artifacts"].append(_build_artifact(state, precision))
    log.info("verifying {} on {} held-out images ...".format(
        ", ".join(a["name"].split(".", 1)[-1] for a in manifest["artifacts"]), len(state.selection)))
    from trtkit.pipeline.verification import verify_all
    manifest["verification"] = verify_all(state, manifest["artifacts"])
    from trtkit.pipeline.diagnosis import diagnose_int8_variants
    diagnose_int8_variants(state, manifest["artifacts"], options.diagnosis)
    if options.auto:
        _select(state, manifest, search)
    manifest["build_seconds"] = round(time.time() - total_start, 2)
    manifest["files"] = folder.staged_files()
    save_manifest(folder.staging, manifest)
    folder.publish()
    return manifest


def _rescore(state, record, backend, tune, reference):
    """The tune-split figures of an artifact its backend rewrote, from that artifact (``search.candidates.rescore``).
    A runtime that cannot open it leaves the figures as they were: the verification opens it next and says why."""
    from trtkit.errors import DeviceUnavailable
    from trtkit.search.candidates import rescore
    runner = backend.runner(state.folder.stage_path(record["path"]), {"strict": True} if state.options.strict else None)
    try:
        runner.activate()
    except (DeviceUnavailable, InputError):
        return
    try:
        record["tune"] = rescore(runner, tune, reference)
    finally:
        runner.deactivate()


def _search_backends(state):
    """The backends ``--precision auto`` times its candidates on: the build's, and with ``--backend auto`` the
    other runtimes of the same device that are installed and read the same Q/DQ encoding (OpenVINO beside ONNX
    Runtime on a CPU): the choice is the fastest engine, whichever runtime runs it."""
    from trtkit.backends import search_alternatives
    backends = [state.backend]
    if state.options.backend == "auto":
        for backend in search_alternatives(state.backend):
            log.info("auto: also timing every candidate on {}".format(backend.name))
            state.backends[backend.name] = backend
            backends.append(backend)
    return backends


def _select(state, manifest, search):
    """Choose among the verified, timed candidates; write the selection and the search's reports."""
    from trtkit.search.report import write_reports
    from trtkit.search.select import choose
    from trtkit.search.select import budget_metric, metric_label
    fp32 = [a for a in manifest["artifacts"] if a["precision"] == "fp32" and a.get("verify")]
    reference_accuracy = fp32[0]["verify"].get("reference_accuracy") if fp32 else None
    metric, warning = budget_metric(state.labels_usable, reference_accuracy, state.source.num_classes,
                                    state.source.info.get("task"))
    if warning:
        log.warn("auto: " + warning)
    task = manifest.get("model", {}).get("task")
    selection = choose(manifest["artifacts"], state.options.search.max_drop, metric, metric_label(metric, task),
                       state.options.search.budget_rule)
    manifest["selection"] = selection
    search = dict(search)
    search["reports"] = write_reports(state.folder.staging, state.name, search, selection)
    search.pop("sensitivity")  # in the report files; the manifest names them
    manifest["search"] = search
