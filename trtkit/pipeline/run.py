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
from trtkit.pipeline.options import BuildOptions  # noqa: F401  (callers import it from here with build())
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.pipeline.gate import advice, agreement_name, judge, miou_threshold, threshold
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
    if variant.tune:
        record["tune"] = variant.tune
    if nms is not None:
        record["nms"] = nms
    return record


def _reference_runner(state, stack):
    """What every variant is compared with: PyTorch FP32 when there is a model, else the FP32 ONNX (its
    ONNX Runtime session closes with ``stack``)."""
    model = state.source.torch_model
    if model is not None:
        from trtkit.onnx.export import torch_logits
        batch_size = state.options.batch_size
        return lambda images: torch_logits(model, images, batch_size)
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    from trtkit.pipeline.verify import run_batches
    runner = stack.enter_context(OnnxRuntimeRunner(state.fp32_onnx, providers=["CPUExecutionProvider"]))
    return lambda images: run_batches(runner, images, state.options.batch_size)


def _verify_all(state, records):
    """One streamed pass over the held-out images: the reference and every artifact's runner per batch.

    Each image is decoded once whatever the number of variants, and only running
    counts are kept (``verify.Comparison``), so memory does not grow with the data.
    """
    import contextlib
    from trtkit.pipeline.verify import run_batches
    options = state.options
    summary = {"images": 0, "seconds": 0.0, "images_per_second": None, "unreadable_images": 0}
    with contextlib.ExitStack() as stack:
        runners = {}
        for record in records:
            runner = state.backends[record["backend"]].runner(state.folder.stage_path(record["path"]),
                                                              {"strict": True} if options.strict else None)
            try:
                stack.enter_context(runner)
            except DeviceUnavailable as exc:
                _not_run(record, "built", "not run: {}".format(exc), "built but not run")
                continue
            except InputError as exc:  # a variant the runtime refuses fails alone; the others are verified
                if record["precision"] == "fp32":  # the user's own graph: nothing to compare with
                    raise
                _not_run(record, "failing", "the runtime refused this variant: {}".format(exc.args[0]),
                         "trtkit wrote this graph: please report it; the other variants go on")
                continue
            runners[record["name"]] = (runner, _comparison(state.source.info, state.selection))
        if not runners:
            return summary
        reference = _reference_runner(state, stack)
        labels_usable = state.labels_usable
        start = time.time()
        for images, labels in state.selection.batches(options.batch_size, progress="verifying"):
            summary["images"] += len(images)
            expected = reference(images)
            for runner, comparison in runners.values():
                comparison.update(run_batches(runner, images, options.batch_size), expected,
                                  labels if labels_usable else None)
        if 0 < summary["images"] < FEW_IMAGES:
            log.warn("verified on {} held-out image(s) only: one flip moves agreement by {:.0%}, so the gates say "
                     "little; give more images (--data, --verify-images)".format(summary["images"],
                                                                              1.0 / summary["images"]))
        summary["seconds"] = round(time.time() - start, 2)
        if summary["seconds"] > 0:
            summary["images_per_second"] = round(summary["images"] / summary["seconds"], 1)
        skipped = summary["unreadable_images"] = len(state.selection.skipped)
        for record in records:
            if record["name"] not in runners:
                continue
            runner, comparison = runners[record["name"]]
            record["verify"] = comparison.result()
            if skipped:
                record["verify"]["unreadable_images"] = skipped
            record["ran_on"] = runner.describe()
            if record.get("nms", {}).get("placement") == "graph":
                _check_graph_nms(state, record, runner)
            record["throughput_batch"] = runner.accepted_batch(options.throughput_batch)
            task = state.source.info.get("task")
            judge(record, threshold(state.options, task, record["precision"]),
                  miou_threshold(state.options, task, record["precision"]))
        _time_all(state, records, dict((name, pair[0]) for name, pair in runners.items()))
    return summary


FEW_IMAGES = 20  # a held-out split smaller than this gets a warning: its figures move in steps of 5% or more


def _check_graph_nms(state, record, runner):
    """Record how the artifact's own NMS compares with the host's selection on the first held-out batch."""
    from trtkit.contract import InputContract
    from trtkit.detect.params import DetectionHead
    from trtkit.pipeline.detection_nms import check_graph_nms
    record["nms"]["versus_host"] = check_graph_nms(runner, state.first_images,
                                                   DetectionHead.from_dict(state.source.info["detection"]),
                                                   InputContract.from_dict(state.source.info["input"]))


def _not_run(record, status, detail, note):
    record.update(verify=None, throughput_ips=None, status=status, status_detail=detail)
    log.warn("{}: {} ({})".format(record["name"], detail, note))


def _comparison(info, selection=None):
    """The streamed comparison for the model's task (``Task.comparison_for``: per image, ``verify.Comparison``;
    per pixel, ``dense.DenseComparison``; per object, ``detections.DetectionComparison``), by the output kind's
    decision rule."""
    return tasks.of(info.get("task")).comparison_for(info.get("output_kind"), info, selection)


def _time_all(state, records, runners):
    """Each verified record's ``throughput_ips``: the median of interleaved rounds (``bench.timing.
    interleaved_throughput``), runners of one batch size timed together so that a busy spell of a shared
    machine falls on every candidate alike; ``throughput_rounds`` keeps the per-round figures."""
    seconds = state.options.throughput_seconds
    if state.options.auto:  # the choice depends on speed: every candidate is timed
        from trtkit.search.config import MIN_TIMING_SECONDS
        seconds = max(seconds, MIN_TIMING_SECONDS)
    by_batch = {}
    for record in records:
        if record["name"] in runners:
            record["throughput_ips"] = None
            by_batch.setdefault(record["throughput_batch"], {})[record["name"]] = runners[record["name"]]
    if seconds <= 0 or not by_batch:
        return
    from trtkit.bench.timing import interleaved_throughput, median_rate
    from trtkit.search.config import TIMING_ROUNDS
    figures = {}
    for batch, group in sorted(by_batch.items()):
        figures.update(interleaved_throughput(group, state.first_images, batch, seconds,
                                              rounds=TIMING_ROUNDS if len(group) > 1 else 1))
    for record in records:
        if record["name"] in figures:
            rates = figures[record["name"]]
            record["throughput_ips"] = median_rate(rates)
            if len(rates) > 1:
                record["throughput_rounds"] = [round(rate, 1) for rate in rates]


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
    tips = [advice(p) for p in sorted(set(a["precision"] for a in failing))]
    return "failing its verification gate: {}{}; or --precision auto to get the fastest variant that passes".format(
        "; ".join(parts), "".join(tips))


def _build_into(options, folder):
    from trtkit.backends import select_backend
    from trtkit.pipeline.source import resolve_model
    total_start = time.time()
    backend, why = select_backend(options.backend)
    log.info("backend: {} ({})".format(backend.name, why))
    source = resolve_model(options.source, folder.staging)
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
    if options.auto:
        from trtkit.search.candidates import make_candidates
        candidates, search = make_candidates(state.maker, options.search, state.source.info.get("output_kind"),
                                             state.source.info.get("task"), state.source.num_classes,
                                             gate=threshold(state.options, state.source.info.get("task"), "mixed"),
                                             miou_gate=miou_threshold(state.options, state.source.info.get("task"),
                                                                      "mixed"),
                                             tune_selection=state.plan.tune.selection,
                                             model_info=state.source.info)
        for backend in _search_backends(state):
            for candidate in candidates:
                label = candidate.label if backend is state.backend else "{}-{}".format(candidate.label, backend.name)
                log.info("building {} {} ...".format(state.name, label))
                manifest["artifacts"].append(_build_from(state, candidate, backend, label))
    else:
        for precision in options.precisions:
            log.info("building {} {} ...".format(state.name, precision))
            manifest["artifacts"].append(_build_artifact(state, precision))
    log.info("verifying {} on {} held-out images ...".format(
        ", ".join(a["name"].split(".", 1)[-1] for a in manifest["artifacts"]), len(state.selection)))
    manifest["verification"] = _verify_all(state, manifest["artifacts"])
    from trtkit.pipeline.diagnosis import diagnose_int8_variants
    diagnose_int8_variants(state, manifest["artifacts"], options.diagnosis)
    if options.auto:
        _select(state, manifest, search)
    manifest["build_seconds"] = round(time.time() - total_start, 2)
    manifest["files"] = folder.staged_files()
    save_manifest(folder.staging, manifest)
    folder.publish()
    return manifest


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
