"""Verify and time a build's artifacts against the FP32 reference: together when they are small, one runtime
session at a time when they are big.

Why one at a time for big ones: every session holds its model's weights (and a
runtime's working copies of them), so sessions alive together cost the sum of
the variants; a VGG19 build (548 MB of weights, FP32 + FP16 + INT8) peaked at
5 GB with the reference and every variant open at once. Then the reference
runs over the held-out images first and its outputs go to a scratch folder
on disk, batch by batch (bounded memory whatever the number of images or the
size of a map); its session is then closed, and each artifact is opened,
streamed over the same images against the stored outputs, and closed before
the next. Why together for small ones (``TOGETHER_BYTES`` in all, most
models): the scratch folder grows with the held-out split (1000 segmentation
maps of 19 classes at 512x512 are 20 GB), while small sessions cost little;
one pass feeds each batch to the reference and every artifact. Both give the
same figures: the same images, batches, outputs and streamed ``Comparison``.

Timing: artifacts that together weigh at most ``TOGETHER_BYTES`` are timed
side by side, still open from their verification pass, in interleaved rounds
(``bench.timing.interleaved_throughput``: a shared machine's busy spell falls
on all alike);
bigger ones are timed alone while their own session is open. Either way the
number of timed calls follows ``--bench-seconds`` (``timing_plan``): a model
whose one call outlasts the budget gets one warm-up call and as many rounds of
one call as fit (one at least), and the log says so. Measured on VGG19 (batch
8 takes about 30 s on one loaded core): 16 calls per variant before, 2 now.
"""

import contextlib
import os
import shutil
import tempfile
import time

import numpy as np

from trtkit import log, tasks
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.pipeline.gate import judge, miou_threshold, threshold

TOGETHER_BYTES = 256 * 2 ** 20  # artifacts up to this size in all are timed side by side, interleaved
FEW_IMAGES = 20  # a held-out split smaller than this gets a warning: its figures move in steps of 5% or more


def comparison_for(info, selection=None):
    """The streamed comparison for the model's task (``Task.comparison_for``: per image, ``verify.Comparison``;
    per pixel, ``dense.DenseComparison``; per object, ``detections.DetectionComparison``), by the output kind's
    decision rule."""
    return tasks.of(info.get("task")).comparison_for(info.get("output_kind"), info, selection)


def _reference_runner(state, stack):
    """What every variant is compared with: PyTorch FP32 when there is a model, else the FP32 ONNX (its
    ONNX Runtime session closes with ``stack``)."""
    model = state.source.torch_model
    if model is not None:
        from trtkit.onnx.export import torch_logits
        batch_size = state.options.batch_size
        return lambda images: torch_logits(model, images, batch_size)
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    from trtkit.backends.base import run_batches
    runner = stack.enter_context(OnnxRuntimeRunner(state.fp32_onnx, providers=["CPUExecutionProvider"]))
    return lambda images: run_batches(runner, images, state.options.batch_size)


def _reference_pass(state, scratch):
    """Run the reference over the held-out images; each batch's outputs to ``scratch``; returns (batches,
    images, seconds). Its session is closed when this returns."""
    count = images_seen = 0
    start = time.time()
    with contextlib.ExitStack() as stack:
        reference = _reference_runner(state, stack)
        for images, _ in state.selection.batches(state.options.batch_size, progress="verifying: reference"):
            np.save(os.path.join(scratch, "{}.npy".format(count)), np.asarray(reference(images)))
            count += 1
            images_seen += len(images)
    return count, images_seen, time.time() - start


def _open(state, record):
    """The record's runner, activated; None (the record says why) when the runtime cannot run it."""
    options = state.options
    runner = state.backends[record["backend"]].runner(state.folder.stage_path(record["path"]),
                                                      {"strict": True} if options.strict else None)
    try:
        runner.activate()
    except DeviceUnavailable as exc:
        _not_run(record, "built", "not run: {}".format(exc), "built but not run")
        return None
    except InputError as exc:  # a variant the runtime refuses fails alone; the others are verified
        if record["precision"] == "fp32":  # the user's own graph: nothing to compare with
            raise
        _not_run(record, "failing", "the runtime refused this variant: {}".format(exc.args[0]),
                 "trtkit wrote this graph: please report it; the other variants go on")
        return None
    return runner


def _variant_pass(state, record, runner, scratch, batches):
    """Stream the held-out images through ``runner`` against the stored reference outputs; fills the
    record's verification figures."""
    from trtkit.backends.base import run_batches
    options = state.options
    comparison = comparison_for(state.source.info, state.selection)
    index = 0
    for images, labels in state.selection.batches(options.batch_size, progress="verifying: " + record["name"]):
        if index >= batches:
            break
        expected = np.load(os.path.join(scratch, "{}.npy".format(index)))
        comparison.update(run_batches(runner, images, options.batch_size), expected,
                          labels if state.labels_usable else None)
        index += 1
    _finish(state, record, runner, comparison)


def _finish(state, record, runner, comparison):
    """The record's verification figures from its streamed ``comparison``, and its gate."""
    options = state.options
    record["verify"] = comparison.result()
    skipped = len(state.selection.skipped)
    if skipped:
        record["verify"]["unreadable_images"] = skipped
    record["ran_on"] = runner.describe()
    if record.get("nms", {}).get("placement") == "graph":
        _check_graph_nms(state, record, runner)
    record["throughput_batch"] = runner.accepted_batch(options.throughput_batch)
    task = state.source.info.get("task")
    judge(record, threshold(options, task, record["precision"]), miou_threshold(options, task, record["precision"]))


def verify_all(state, records):
    """Verify every record against the reference (together or one session at a time: the module doc says
    when), then time them."""
    summary = {"images": 0, "seconds": 0.0, "images_per_second": None, "unreadable_images": 0}
    if not records:
        return summary
    together = sum(os.path.getsize(state.folder.stage_path(r["path"])) for r in records) <= TOGETHER_BYTES
    verified, figures = [], {}
    if together:
        images, seconds = _one_pass(state, records, verified, figures)
    else:
        images, seconds = _one_at_a_time(state, records, verified, figures)
    if not verified:
        return summary
    summary["images"] = images
    if 0 < images < FEW_IMAGES:
        log.warn("verified on {} held-out image(s) only: one flip moves agreement by {:.0%}, so the gates say "
                 "little; give more images (--data, --verify-images)".format(images, 1.0 / images))
    summary["seconds"] = round(seconds, 2)
    if summary["seconds"] > 0:
        summary["images_per_second"] = round(images / summary["seconds"], 1)
    summary["unreadable_images"] = len(state.selection.skipped)
    _record_rates(verified, figures)
    return summary


def _one_pass(state, records, verified, figures):
    """Small artifacts: the reference and every variant open together, one pass over the held-out images
    (memory: the sessions and one batch; nothing on disk, whatever the number of images), then the variants
    timed in interleaved rounds, per batch size, while still open (``figures``). Returns (images, seconds)."""
    from trtkit.backends.base import run_batches
    options = state.options
    images_seen, start = 0, time.time()
    with contextlib.ExitStack() as stack:
        opened = []
        for record in records:
            runner = _open(state, record)
            if runner is not None:
                stack.callback(runner.deactivate)
                opened.append((record, runner, comparison_for(state.source.info, state.selection)))
        if not opened:
            return 0, 0.0
        twin = _reference_twin(state, opened)
        if twin is None:
            reference = _reference_runner(state, stack)
        else:  # no second session of the same file: the twin's outputs are the reference
            def reference(images):
                return run_batches(twin, images, options.batch_size)
        for images, labels in state.selection.batches(options.batch_size, progress="verifying"):
            expected = np.asarray(reference(images))
            for _, runner, comparison in opened:
                got = expected if runner is twin else run_batches(runner, images, options.batch_size)
                comparison.update(got, expected, labels if state.labels_usable else None)
            images_seen += len(images)
        seconds = time.time() - start
        by_batch = {}
        for record, runner, comparison in opened:
            _finish(state, record, runner, comparison)
            if runner is twin:
                record["verify"]["is_reference"] = True
            verified.append(record)
            by_batch.setdefault(record["throughput_batch"], {})[record["name"]] = runner
        for batch, runners in sorted(by_batch.items()):  # timed while open: interleaved, per batch size
            figures.update(_time(runners, state, batch))
    return images_seen, seconds


def _reference_twin(state, opened):
    """The opened runner that *is* the reference, or None: the FP32 artifact of an ONNX source (its file is the
    FP32 ONNX) on ONNX Runtime's CPU provider, which is what ``_reference_runner`` would open a second session
    of. Running both computed every batch twice for a comparison that is exact by construction (max |diff| 0;
    a quarter of a three-variant build's verification); its verification record says ``is_reference``."""
    if state.source.torch_model is not None:
        return None
    for record, runner, _ in opened:
        if record["precision"] == "fp32" and record["backend"] == "onnxruntime" and \
                os.path.abspath(state.folder.stage_path(record["path"])) == os.path.abspath(state.fp32_onnx) and \
                list(runner.describe().get("providers") or []) == ["CPUExecutionProvider"]:
            return runner
    return None


def _one_at_a_time(state, records, verified, figures):
    """Big artifacts (over ``TOGETHER_BYTES`` in all): the reference's outputs to a scratch folder first, then
    each variant alone against them, timed while open (see the module doc). Returns (images, seconds)."""
    scratch = tempfile.mkdtemp(prefix="trtkit-verify-")
    try:
        batches, images, seconds = _reference_pass(state, scratch)
        for record in records:
            runner = _open(state, record)
            if runner is None:
                continue
            try:
                start = time.time()
                _variant_pass(state, record, runner, scratch, batches)
                seconds += time.time() - start
                verified.append(record)
                figures.update(_time({record["name"]: runner}, state, record["throughput_batch"]))
            finally:
                runner.deactivate()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return images, seconds


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


def _seconds(state):
    seconds = state.options.throughput_seconds
    if state.options.auto:  # the choice depends on speed: every candidate is timed
        from trtkit.search.config import MIN_TIMING_SECONDS
        seconds = max(seconds, MIN_TIMING_SECONDS)
    return seconds


def _time(runners, state, batch):
    """{name: [images per second per round]} of ``runners`` (open) at ``batch``, within ``timing_plan``."""
    seconds = _seconds(state)
    if seconds <= 0:
        return {}
    from trtkit.bench.timing import interleaved_throughput, make_batch
    from trtkit.search.config import TIMING_ROUNDS
    rounds = TIMING_ROUNDS if len(runners) > 1 else 1
    images = make_batch(state.first_images, batch)
    call = max(warm_call_seconds(runner, images) for runner in runners.values())
    rounds, calls = timing_plan(call, seconds, rounds, len(runners))
    what = "timing {} at batch {}: ".format(", ".join(name.split(".", 1)[-1] for name in runners), batch)
    if calls >= 3:
        log.info(what + "{} round(s) of {:.2g}s each".format(rounds, seconds / rounds))
        return interleaved_throughput(runners, state.first_images, batch, seconds, rounds=rounds)
    log.info(what + "one call takes {:.1f}s, so --bench-seconds {:g} allows {} round(s) of one call, after one "
             "warm-up call".format(call, seconds, rounds))
    keys = sorted(runners)
    figures = dict((key, []) for key in keys)
    for index in range(rounds):  # the order rotates, as interleaved_throughput's
        for key in keys[index % len(keys):] + keys[:index % len(keys)]:
            figures[key].append(batch / _one_call(runners[key], images))
    return figures


def warm_call_seconds(runner, images):
    """Seconds of one call of ``runner`` on ``images`` after a first, untimed one. Why not the first: OpenVINO
    allocates and picks kernels on it (measured quiet, the sample detector's OpenVINO artifacts at batch 8: 39-50
    ms, then 11-19 ms), and on a busy machine the first call of the slowest of ten candidates took 0.4 s: planned
    from it, a whole auto build went to the one-call-per-round plan (two calls per candidate) and chose by noise."""
    _one_call(runner, images)
    return _one_call(runner, images)


def _one_call(runner, images):
    start = time.perf_counter()
    runner.infer(images)
    runner.synchronize()
    return time.perf_counter() - start


def timing_plan(call_seconds, seconds, rounds, runners=1):
    """(rounds, calls per round) for timing ``runners`` runners whose one call takes ``call_seconds`` within
    about ``seconds`` each: the usual ``rounds`` of at least 3 calls when they overrun it at most twice; else
    one call per round (after one warm-up call) in as many rounds as the budget holds, at least one (a figure
    needs one call, whatever the budget)."""
    if call_seconds * 3 * rounds <= max(seconds, 0.0) * 2:
        return rounds, 3
    fitting = int(max(1, min(rounds, seconds / max(call_seconds, 1e-9))))
    return (fitting if runners > 1 else 1), 1


def _record_rates(records, figures):
    from trtkit.bench.timing import median_rate
    for record in records:
        record["throughput_ips"] = None
        if record["name"] in figures:
            rates = figures[record["name"]]
            record["throughput_ips"] = median_rate(rates)
            if len(rates) > 1:
                record["throughput_rounds"] = [round(rate, 1) for rate in rates]
