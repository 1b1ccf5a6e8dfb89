"""Measuring one variant: its runner at each batch size, in every timing mode, with and without copies.

Why a module of its own: this is the only place that talks to a runner while
timing, and it does so only through the Runner contract
(``trtkit/backends/base.Runner``): ``device`` picks host or device timing,
``synchronize`` ends each timed region, ``batch_range`` skips sizes the
artifact cannot take, ``stages_on_device`` + ``stage``/``run_staged`` add the
figures without host<->device copies, ``device_timer`` supplies device time
(CUDA events for PyTorch), and ``peak_memory_bytes`` the memory column. No
backend names, no probing for attributes.

A runner that cannot run here (``DeviceUnavailable``, a missing backend or
dependency) is a *skipped* row with its reason, never a crash. A batch that
runs out of memory ends that variant's sweep; the largest batch that fit is
recorded.
"""

import sys


from trtkit import log
from trtkit.bench.agreement import agreement_of, compare_outputs
from trtkit.bench.timing import HostTimer, make_batch, measure_latency, measure_throughput
from trtkit.errors import DeviceUnavailable, TrtkitError

AGREEMENT_BATCH = 32


def is_out_of_memory(exc):
    """True for the allocation failures of torch, ONNX Runtime, TensorRT and the host."""
    if isinstance(exc, MemoryError):
        return True
    text = "{} {}".format(exc.__class__.__name__, exc).lower()
    return any(s in text for s in ("out of memory", "outofmemory", "out_of_memory", "failed to allocate",
                                   "cudaerrormemoryallocation", "bad_alloc"))


def _free_device_memory():
    """Give cached CUDA blocks back after an out-of-memory batch (only if torch is already loaded)."""
    try:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def batch_unsupported(batch_range, size):
    """Why a runner with ``batch_range`` (Runner.batch_range()) cannot take a batch of ``size``, else None."""
    if batch_range is None:
        return None
    low, _, high = batch_range
    if low == high and size != low:
        return "the artifact has a fixed batch of {}".format(low)
    if not low <= size <= high:
        return "batch {} is outside the engine's profile ({}..{})".format(size, low, high)
    return None


def device_of(runner):
    """"cpu" or "cuda" from the runner's ``device`` ("cuda:1" counts as "cuda")."""
    return str(runner.device).split(":")[0]


def timers(runner, device, clock=None):
    """(timer with copies, timer without copies or None).

    On a device the host clock stops after ``synchronize()``; the copy-free
    path exists where the runner stages on the device, timed by its own device
    timer when it has one.
    """
    sync = runner.synchronize if device != "cpu" else None
    with_copies = HostTimer(sync=sync, clock=clock)
    if device == "cpu" or not runner.stages_on_device:
        return with_copies, None
    return with_copies, runner.device_timer() or HostTimer(sync=sync, clock=clock)


def measure_cell(runner, batch, options, device):
    """All figures of one runner at one batch: latency/throughput, with/without copies, peak memory."""
    cell = {}
    with_copies, device_timer = timers(runner, device, options.clock)
    runner.reset_peak_memory()
    paths = [("", lambda: runner.infer(batch), with_copies)]
    if device_timer is not None:
        staged = runner.stage(batch)
        paths.append(("device_", lambda: runner.run_staged(staged), device_timer))
    n = batch.shape[0]
    for prefix, fn, timer in paths:
        if "latency" in options.modes:
            stats = measure_latency(fn, timer, warmup_seconds=options.warmup, min_seconds=options.seconds,
                                    min_iterations=options.min_iterations, max_seconds=options.max_seconds,
                                    max_cv=options.max_cv, clock=options.clock)
            set_figures(cell, prefix + "latency", stats, n)
        if "throughput" in options.modes:
            stats, per_round = measure_throughput(
                fn, timer, warmup_seconds=0.0 if "latency" in options.modes else options.warmup,
                min_seconds=options.seconds, max_seconds=options.max_seconds, max_cv=options.max_cv,
                min_rounds=options.min_rounds, round_seconds=options.round_seconds, clock=options.clock)
            cell[prefix + "throughput_calls_per_round"] = per_round
            set_figures(cell, prefix + "throughput", stats, n)
    cell["peak_memory_bytes"] = runner.peak_memory_bytes()
    cell["copies"] = "included" if device != "cpu" else "none (host memory)"
    return cell


def set_figures(cell, what, stats, batch):
    """Store one Stats (``what`` = [device_]latency or [device_]throughput) as the row's figures.

    ``fps`` is the throughput-mode figure when there is one, else the latency-mode one.
    The Stats stay under ``_stats`` until passes are merged (``passes.merge_passes``).
    """
    kind = "latency" if what.endswith("latency") else "throughput"
    prefix = what[:-len(kind)]
    if kind == "latency":
        cell[prefix + "latency_ms"] = stats.to_dict(1000.0)
        cell[prefix + "latency_fps"] = batch / stats.median
    else:
        cell[prefix + "throughput_ms_per_batch"] = stats.to_dict(1000.0)
        cell[prefix + "fps"] = batch / stats.median
    figures = cell.setdefault("_stats", {})
    figures[what] = stats
    if not prefix and kind == "latency" and "throughput" not in figures:
        cell["fps"] = cell["latency_fps"]


def agreement_logits(runner, images):
    """Logits of ``images`` in batches of up to 32 that the runner accepts (``backends.base.run_batches``)."""
    from trtkit.backends.base import run_batches
    return run_batches(runner, images, AGREEMENT_BATCH)


def _set_agreement(variant, runner, images, options, reference, base):
    """Agreement with the FP32 eager baseline (measured first, its outputs kept in ``reference``), by the
    output kind in ``reference["kind"]`` (``agreement.decisions``)."""
    if variant.agreement is not None or reference is None or options.agree_images <= 0:
        return
    if variant.is_baseline:
        reference["logits"] = agreement_logits(runner, images[:options.agree_images])
        variant.agreement = 1.0
    elif reference.get("logits") is not None:
        logits = agreement_logits(runner, images[:options.agree_images])
        variant.agreement = agreement_of(reference["logits"], logits, reference.get("kind"))
        if logits.ndim == 2 and len(logits):  # one decision per image: a proportion of independent images
            from trtkit.intervals import rounded, wilson
            variant.agreement_interval = rounded(wilson(round(variant.agreement * len(logits)), len(logits)))
        # max |diff| and agreement against the eager outputs, judged by the variant's precision's tolerance
        base["check"] = compare_outputs(reference["logits"], logits, variant.precision, reference.get("kind"))
    base["agreement"] = variant.agreement
    base["agreement_low"] = variant.agreement_interval[0] if variant.agreement_interval else None


def benchmark_variant(variant, images, options, reference=None, progress=None, on_row=None):
    """Rows (one per batch size) for one variant; a variant that cannot run gives one skipped row.
    ``on_row(row)`` (optional) is called with each row as soon as it is complete, so a caller that is
    stopped part-way (gpu_check's time limit) keeps what was measured."""
    base = {"model": variant.model, "variant": variant.label, "backend": variant.backend,
            "precision": variant.precision, "torch_mode": variant.mode, "path": variant.path,
            "agreement": variant.agreement, "threads": options.threads,
            "agreement_low": variant.agreement_interval[0] if variant.agreement_interval else None}
    sizes = options.sizes()

    def tick(count, postfix=None):
        if progress:
            progress.update(count, postfix=postfix)

    def finished(row):
        if on_row is not None:
            on_row(row)
        return row

    if variant.skip_reason:
        tick(len(sizes), "{}: skipped".format(variant.label))
        return [finished(dict(base, status="skipped", reason=variant.skip_reason, batch=None))]
    try:
        runner = variant.make_runner()
        runner.activate()
    except TrtkitError as exc:  # no GPU, a missing dependency or backend, an engine for another GPU
        tick(len(sizes), "{}: skipped".format(variant.label))
        return [finished(dict(base, status="skipped", reason=str(exc), batch=None))]
    rows = []
    try:
        device = device_of(runner)
        batch_range = runner.batch_range()
        _set_agreement(variant, runner, images, options, reference, base)
        largest = None
        for index, size in enumerate(sizes):
            row = dict(base, batch=size, device=device)
            rows.append(row)
            reason = batch_unsupported(batch_range, size)
            if reason:
                row.update(status="skipped", reason=reason)
                finished(row)
                tick(1)
                continue
            try:
                cell = measure_cell(runner, make_batch(images, size), options, device)
            except DeviceUnavailable as exc:
                row.update(status="skipped", reason=str(exc))
                finished(row)
                tick(len(sizes) - index)
                break
            except TrtkitError as exc:  # e.g. a batch outside an engine's profile: that size only
                row.update(status="skipped", reason=str(exc))
                finished(row)
                tick(1)
                continue
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                _free_device_memory()
                row.update(status="oom", reason="out of memory at batch {}".format(size))
                finished(row)
                log.warn("{}: out of memory at batch {}; largest batch that fit: {}".format(
                    variant.label, size, largest))
                tick(len(sizes) - index)
                break
            row.update(cell, status="ok")
            finished(row)
            largest = size
            tick(1, "{} b={}: {:.0f} img/s".format(variant.label, size, row["fps"]))
        for row in rows:
            row["largest_batch"] = largest
    finally:
        runner.deactivate()
    return rows
