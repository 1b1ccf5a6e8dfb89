"""The benchmark matrix: model x precision x backend x batch size, measured honestly.

``plan_from_manifest`` turns a build manifest into Variants (every artifact,
run through ``get_backend(artifact["backend"]).runner(path)``, plus the
PyTorch baselines from the manifest's checkpoint); ``plan_from_flags`` does the
same from a checkpoint and/or artifact paths. ``run_matrix`` measures each
variant at each batch size in latency mode (sync every call) and throughput
mode (many calls, one sync per round), with and without host<->device copies
where the runner can keep inputs on the device, and returns one JSON-ready
dict with the device record.

A runner that cannot run here (``DeviceUnavailable``, a missing backend or
dependency) is a *skipped* row with its reason, never a crash. A batch that
runs out of memory ends that variant's sweep; the largest batch that fit is
recorded.

Runners may offer optional hooks, used when present (TorchRunner has them all):
``device`` ("cpu"/"cuda"), ``synchronize()`` (wait for queued device work),
``stage(batch)`` + ``run_staged(staged)`` (inputs already on the device: timed
without copies), ``reset_peak_memory()`` + ``peak_memory_bytes()``.
"""

import os
import time

import numpy as np

from trtkit import log
from trtkit.bench import affinity
from trtkit.bench.timing import (DEFAULT_MAX_CV, CudaEventTimer, HostTimer, Stats, make_batch, measure_latency,
                                 measure_throughput)
from trtkit.errors import DeviceUnavailable, InputError, TrtkitError

TORCH_BASELINE = ("torch", "fp32")  # (backend, mode) every speed-up is divided by
BACKEND_LABELS = {"onnxruntime": "ONNX Runtime", "tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX",
                  "torch2trt": "torch2trt", "torch": "PyTorch"}
TORCH_MODE_LABELS = {"fp32": "eager", "half": ".half()", "autocast": "autocast", "channels_last": "channels_last"}


class BenchOptions(object):
    """How to measure: batch sizes or a sweep, time per measurement, modes, threads, stability limit."""

    def __init__(self, batch_sizes=(1, 8), sweep=False, max_batch=64, seconds=1.0, warmup=0.3, max_seconds=None,
                 modes=("latency", "throughput"), threads=None, max_cv=DEFAULT_MAX_CV, agree_images=64,
                 min_iterations=10, min_rounds=5, round_seconds=0.1, repeats=1, pin=True, extra_passes=None):
        self.batch_sizes = sorted(set(int(b) for b in batch_sizes))
        if not self.batch_sizes or self.batch_sizes[0] < 1:
            raise InputError("batch sizes must be positive integers", hint="e.g. --batch-sizes 1,8")
        self.sweep = bool(sweep)
        self.max_batch = int(max_batch)
        self.seconds = float(seconds)
        self.warmup = float(warmup)
        self.max_seconds = float(max_seconds) if max_seconds else 3.0 * self.seconds
        self.modes = tuple(modes)
        for mode in self.modes:
            if mode not in ("latency", "throughput"):
                raise InputError("unknown timing mode '{}'".format(mode), hint="use latency and/or throughput")
        self.threads = int(threads) if threads else usable_cores()
        self.max_cv = float(max_cv)
        self.agree_images = int(agree_images)
        self.min_iterations = int(min_iterations)
        self.min_rounds = int(min_rounds)
        self.round_seconds = float(round_seconds)
        self.repeats = int(repeats)
        if self.repeats < 1:
            raise InputError("--repeats must be at least 1")
        self.pin = bool(pin)
        # passes added when the first ``repeats`` disagree (see run_matrix); default: as many again
        self.extra_passes = self.repeats if extra_passes is None else int(extra_passes)

    def sizes(self):
        """Batch sizes to try, in increasing order (a sweep doubles from 1 up to ``max_batch``)."""
        if not self.sweep:
            return list(self.batch_sizes)
        sizes, b = [], 1
        while b <= self.max_batch:
            sizes.append(b)
            b *= 2
        return sizes

    def to_dict(self):
        return {"batch_sizes": self.sizes(), "sweep": self.sweep, "seconds": self.seconds, "warmup": self.warmup,
                "max_seconds": self.max_seconds, "modes": list(self.modes), "threads": self.threads,
                "max_cv": self.max_cv, "min_iterations": self.min_iterations, "min_rounds": self.min_rounds,
                "round_seconds": self.round_seconds, "repeats": self.repeats, "pin": self.pin,
                "extra_passes": self.extra_passes}

    def one_pass(self):
        """The options of one of ``repeats`` interleaved passes: the time split between them."""
        import copy
        part = copy.copy(self)
        part.seconds = self.seconds / self.repeats
        part.max_seconds = self.max_seconds / self.repeats
        part.min_iterations = max(3, self.min_iterations // self.repeats)
        part.min_rounds = max(2, self.min_rounds // self.repeats)
        return part


def usable_cores():
    """How many cores this process may use: the default thread count."""
    return len(affinity.usable_cores())


class Variant(object):
    """One row group of the table: a model run by one backend at one precision (or torch mode)."""

    def __init__(self, model, backend, precision, make_runner, label, mode=None, agreement=None, path=None):
        self.model = model
        self.backend = backend
        self.precision = precision
        self.make_runner = make_runner
        self.label = label
        self.mode = mode
        self.agreement = agreement
        self.path = path
        self.skip_reason = None

    @property
    def is_baseline(self):
        return (self.backend, self.mode) == TORCH_BASELINE

    def key(self):
        return "{}/{}{}".format(self.backend, self.precision, "/" + self.mode if self.mode else "")


def variant_label(backend, precision, mode=None):
    """'FP16 TensorRT', 'FP32 PyTorch (eager)', 'BF16 PyTorch (autocast)'."""
    name = BACKEND_LABELS.get(backend, backend)
    text = "{} {}".format(precision.upper(), name)
    if backend == "torch":
        text += " ({})".format(TORCH_MODE_LABELS.get(mode, mode))
    return text


def default_torch_modes(device):
    """The PyTorch baselines worth timing on ``device`` (half only where FP16 is native: CUDA)."""
    if device == "cuda":
        return ["fp32", "half", "autocast", "channels_last"]
    return ["fp32", "channels_last", "autocast"]


def torch_variants(model_name, checkpoint, modes, threads, input_size=None, display_name=None):
    """PyTorch baselines for a checkpoint; modes that cannot run here become skipped variants."""
    from trtkit.backends.torch import TorchBackend, default_device, mode_precision, mode_support
    device = default_device()
    modes = default_torch_modes(device) if modes in (None, "auto") else list(modes)
    variants = []
    for mode in modes:
        precision = mode_precision(mode, device) if mode in ("fp32", "half", "autocast", "channels_last") else mode
        options = {"model": model_name, "mode": mode, "device": device, "threads": threads,
                   "input_size": input_size}
        variant = Variant(display_name or model_name, "torch", precision,
                          (lambda o=options: TorchBackend().runner(checkpoint, o)),
                          variant_label("torch", precision, mode), mode=mode, path=checkpoint)
        usable, reason = mode_support(mode, device)
        if not usable:
            variant.skip_reason = reason
        variants.append(variant)
    return variants


def artifact_variant(model, backend_name, precision, path, threads, agreement=None):
    """A Variant for one built artifact, run through the backend registry (TensorRT included once it lands)."""
    def make():
        from trtkit.backends import get_backend
        return get_backend(backend_name).runner(path, {"threads": threads})
    return Variant(model, backend_name, precision, make, variant_label(backend_name, precision),
                   agreement=agreement, path=path)


def plan_from_manifest(manifest, options, backends=None, precisions=None, torch_modes="auto"):
    """Variants for every artifact of a build (filtered) plus PyTorch baselines from its checkpoint."""
    from trtkit.manifest import artifact_path
    model = manifest.get("model", {})
    name = (model.get("name") or "model").replace("torchvision:", "")
    variants = []
    want = lambda value, allowed: allowed is None or value in allowed  # noqa: E731
    checkpoint = model.get("checkpoint")
    if torch_modes and checkpoint and want("torch", backends):
        if os.path.isfile(checkpoint):
            size = (model.get("input") or {}).get("size")
            for v in torch_variants(model.get("name"), checkpoint, torch_modes, options.threads, size, name):
                if want(v.precision, precisions) or v.is_baseline:
                    variants.append(v)
        else:
            log.warn("the build's checkpoint {} is gone: no PyTorch baselines".format(checkpoint))
    for artifact in manifest.get("artifacts", []):
        if not want(artifact["backend"], backends) or not want(artifact["precision"], precisions):
            continue
        agreement = (artifact.get("verify") or {}).get("top1_agreement")
        variants.append(artifact_variant(name, artifact["backend"], artifact["precision"],
                                         artifact_path(manifest, artifact), options.threads, agreement))
    if not variants:
        raise InputError("nothing to benchmark in this manifest with the filters given",
                         hint="drop --backends/--precisions, or build first")
    return variants


def plan_from_flags(options, checkpoint=None, model=None, input_size=None, artifacts=(), torch_modes="auto"):
    """Variants from a checkpoint (PyTorch baselines) and ``BACKEND:PRECISION:PATH`` artifact specs."""
    variants = []
    name = model or "model"
    if checkpoint:
        if not os.path.isfile(checkpoint):
            raise InputError("checkpoint not found: {}".format(checkpoint))
        if not model:
            from trtkit.models import read_checkpoint
            name = (read_checkpoint(checkpoint)[1].get("arch") or "resnet18").replace("torchvision:", "")
        # artifacts share the checkpoint's name so their speed-up is computed against its FP32 eager
        variants += torch_variants(model, checkpoint, torch_modes, options.threads, input_size, name)
    for spec in artifacts:
        parts = spec.split(":", 2)
        if len(parts) != 3:
            raise InputError("artifact '{}' is not BACKEND:PRECISION:PATH".format(spec),
                             hint="e.g. --artifact onnxruntime:fp16:build/engines/resnet18.fp16.onnx")
        backend, precision, path = parts
        if not os.path.isfile(path):
            raise InputError("artifact not found: {}".format(path))
        variants.append(artifact_variant(name, backend, precision, path, options.threads))
    if not variants:
        raise InputError("nothing to benchmark", hint="pass --manifest, --checkpoint or --artifact")
    return variants


# ---------------------------------------------------------------- measuring

def is_out_of_memory(exc):
    """True for the allocation failures of torch, ONNX Runtime, TensorRT and the host."""
    if isinstance(exc, MemoryError):
        return True
    text = "{} {}".format(exc.__class__.__name__, exc).lower()
    return any(s in text for s in ("out of memory", "outofmemory", "out_of_memory", "failed to allocate",
                                   "cudaerrormemoryallocation", "bad_alloc"))


def _free_device_memory():
    try:
        import sys
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def _fixed_batch(runner):
    try:
        dim = runner.inputs()[0].shape[0]
    except Exception:
        return None
    return dim if isinstance(dim, int) and dim > 0 else None


def _batch_unsupported(runner, size, fixed):
    """Why ``runner`` cannot take a batch of ``size`` (fixed batch, engine profile), else None."""
    if fixed and size != fixed:
        return "the artifact has a fixed batch of {}".format(fixed)
    batch_range = getattr(runner, "batch_range", None)
    if batch_range is not None:
        try:
            low, high = batch_range(runner.inputs()[0].name)
        except Exception:
            return None
        if not low <= size <= high:
            return "batch {} is outside the engine's profile ({}..{})".format(size, low, high)
    return None


def _device_of(runner):
    """"cpu" or "cuda": the runner's own ``device`` string, else inferred from its backend/providers."""
    device = getattr(runner, "device", None)
    if isinstance(device, str) and device:
        return device.split(":")[0]
    if any("CUDA" in p for p in (getattr(runner, "providers", None) or [])):
        return "cuda"
    backend = str(getattr(runner, "backend", ""))
    return "cuda" if backend.startswith("tensorrt") or backend == "torch2trt" else "cpu"


def _timers(runner, device):
    """(timer with copies, timer without copies or None). CUDA: host clock + sync, and CUDA events."""
    sync = getattr(runner, "synchronize", None)
    with_copies = HostTimer(sync=sync if device != "cpu" else None)
    if device == "cpu" or not (hasattr(runner, "stage") and hasattr(runner, "run_staged")):
        return with_copies, None
    if device == "cuda" and getattr(runner, "backend", None) == "torch":
        return with_copies, CudaEventTimer(runner.torch)
    return with_copies, HostTimer(sync=sync)


def measure_cell(runner, batch, options, device):
    """All figures of one runner at one batch: latency/throughput, with/without copies, peak memory."""
    cell = {}
    with_copies, device_timer = _timers(runner, device)
    if hasattr(runner, "reset_peak_memory"):
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
                                    max_cv=options.max_cv)
            set_figures(cell, prefix + "latency", stats, n)
        if "throughput" in options.modes:
            stats, per_round = measure_throughput(
                fn, timer, warmup_seconds=0.0 if "latency" in options.modes else options.warmup,
                min_seconds=options.seconds, max_seconds=options.max_seconds, max_cv=options.max_cv,
                min_rounds=options.min_rounds, round_seconds=options.round_seconds)
            cell[prefix + "throughput_calls_per_round"] = per_round
            set_figures(cell, prefix + "throughput", stats, n)
    if hasattr(runner, "peak_memory_bytes"):
        cell["peak_memory_bytes"] = runner.peak_memory_bytes()
    cell["copies"] = "included" if device != "cpu" else "none (host memory)"
    return cell


def set_figures(cell, what, stats, batch):
    """Store one Stats (``what`` = [device_]latency or [device_]throughput) as the row's figures.

    ``fps`` is the throughput-mode figure when there is one, else the latency-mode one.
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


def _agreement_logits(runner, images, batch_size):
    from trtkit.verify import run_batches
    return run_batches(runner, images, batch_size, _fixed_batch(runner))


def benchmark_variant(variant, images, options, reference=None, progress=None):
    """Rows (one per batch size) for one variant; a variant that cannot run gives one skipped row."""
    base = {"model": variant.model, "variant": variant.label, "backend": variant.backend,
            "precision": variant.precision, "torch_mode": variant.mode, "path": variant.path,
            "agreement": variant.agreement, "threads": options.threads}
    sizes = options.sizes()

    def skipped(reason, status="skipped"):
        if progress:
            progress.update(len(sizes), postfix="{}: {}".format(variant.label, status))
        return [dict(base, status=status, reason=reason, batch=None)]

    if variant.skip_reason:
        return skipped(variant.skip_reason)
    try:
        runner = variant.make_runner()
        runner.activate()
    except TrtkitError as exc:  # no GPU, a missing dependency or backend, an engine for another GPU
        return skipped(str(exc))
    rows = []
    try:
        device = _device_of(runner)
        fixed = _fixed_batch(runner)
        if variant.agreement is None and reference is not None and options.agree_images > 0:
            if variant.is_baseline:
                reference["logits"] = _agreement_logits(runner, images[:options.agree_images], 32)
                variant.agreement = 1.0
            elif reference.get("logits") is not None:
                logits = _agreement_logits(runner, images[:options.agree_images], 32)
                variant.agreement = float(np.mean(logits.argmax(1) == reference["logits"].argmax(1)))
            base["agreement"] = variant.agreement
        largest = None
        for index, size in enumerate(sizes):
            row = dict(base, batch=size, device=device)
            reason = _batch_unsupported(runner, size, fixed)
            if reason:
                row.update(status="skipped", reason=reason)
                rows.append(row)
                if progress:
                    progress.update(1)
                continue
            try:
                cell = measure_cell(runner, make_batch(images, size), options, device)
            except DeviceUnavailable as exc:
                row.update(status="skipped", reason=str(exc))
                rows.append(row)
                if progress:
                    progress.update(len(sizes) - index)
                break
            except TrtkitError as exc:  # e.g. a batch outside an engine's profile: that size only
                row.update(status="skipped", reason=str(exc))
                rows.append(row)
                if progress:
                    progress.update(1)
                continue
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                _free_device_memory()
                row.update(status="oom", reason="out of memory at batch {}".format(size))
                rows.append(row)
                log.warn("{}: out of memory at batch {}; largest batch that fit: {}".format(
                    variant.label, size, largest))
                if progress:
                    progress.update(len(sizes) - index)
                break
            row.update(cell, status="ok")
            largest = size
            rows.append(row)
            if progress:
                progress.update(1, postfix="{} b={}: {:.0f} img/s".format(variant.label, size, row["fps"]))
        for row in rows:
            row["largest_batch"] = largest
    finally:
        runner.deactivate()
    return rows


def merge_passes(passes, max_cv):
    """One row per variant and batch: the samples of every pass pooled, figures and warnings from the pool."""
    merged = []
    for row in passes[0]:
        row = dict(row)
        same = _same_cell(passes[1:], row)
        figures = _pass_figures(row, same)
        drift = []
        if figures is not None:
            for what, per_pass in figures.items():
                set_figures(row, what, Stats(np.concatenate([p.samples for p in per_pass]), max_cv), row["batch"])
                if same:
                    spread = pass_spread(per_pass)
                    row.setdefault("pass_spread", {})[what] = spread
                    if spread > max_cv:
                        drift.append("{} median moved {:.0%} between passes ({} ms): the machine's speed changed "
                                     "while measuring".format(what, spread, "/".join(
                                         "{:.3g}".format(p.median * 1000.0) for p in per_pass)))
            row["passes"] = 1 + len(same)
        elif row.get("status") == "ok":
            row.update(status="skipped", reason="failed in a later pass: " + next(
                r.get("reason", "") for r in same if r.get("status") != "ok"))
        stats = row.pop("_stats", {})
        row["warnings"] = ["{} {}".format(what, s.warning()) for what, s in sorted(stats.items()) if s.warning()]
        row["warnings"] += drift
        for text in row["warnings"]:
            log.warn("{} batch {}: {}".format(row["variant"], row["batch"], text))
        merged.append(row)
    return merged


def _same_cell(passes, row):
    return [r for rows in passes for r in rows if r["variant"] == row["variant"] and r.get("batch") == row.get("batch")]


def _pass_figures(row, same):
    """{figure: [Stats of each pass]} for a cell that ran in every pass; None when one of them failed it."""
    if row.get("status") != "ok" or any(r.get("status") != "ok" for r in same):
        return None
    return dict((what, [stats] + [r["_stats"][what] for r in same]) for what, stats in row["_stats"].items())


def drifting(passes, max_cv):
    """True when some figure's per-pass medians differ by more than ``max_cv`` (see ``pass_spread``)."""
    for row in passes[0]:
        figures = _pass_figures(row, _same_cell(passes[1:], row)) or {}
        if any(len(per_pass) > 1 and pass_spread(per_pass) > max_cv for per_pass in figures.values()):
            return True
    return False


def pass_spread(per_pass):
    """(max - min) / mean of the per-pass medians: how far the machine drifted between passes."""
    medians = [p.median for p in per_pass]
    mean = sum(medians) / float(len(medians))
    return (max(medians) - min(medians)) / mean if mean > 0 else 0.0


def add_speedups(rows):
    """speed-up = FPS / FPS of PyTorch FP32 eager on the same model and batch size."""
    base = dict(((r["model"], r["batch"]), r["fps"]) for r in rows
                if r.get("status") == "ok" and (r["backend"], r.get("torch_mode")) == TORCH_BASELINE)
    for row in rows:
        ref = base.get((row["model"], row.get("batch")))
        row["speedup"] = row["fps"] / ref if row.get("status") == "ok" and ref else None
    return rows


def load_bench_images(manifest, contract_size=None, count=64):
    """Images to time with: the build's held-out data when it loads, else deterministic noise."""
    from trtkit.models import InputContract
    model = (manifest or {}).get("model", {})
    contract = InputContract.from_dict(model.get("input") or {"size": contract_size or 224})
    source = ((manifest or {}).get("data") or {}).get("source")
    if source:
        try:
            from trtkit.data import load_images
            return load_images(source, contract, split="heldout", limit=count).images, source
        except TrtkitError as exc:
            log.warn("cannot load the build's data ({}); timing on random images".format(exc))
    rng = np.random.RandomState(0)
    return rng.standard_normal((count,) + contract.shape).astype(np.float32), "random"


def run_matrix(variants, images, options, device=None, progress_label="benchmarking"):
    """Measure every variant; returns {"device", "options", "results", "seconds"} (JSON-ready)."""
    from trtkit.bench.device import device_record
    from trtkit.log import Progress
    start = time.time()
    device = device or device_record()
    ordered = sorted(variants, key=lambda v: not v.is_baseline)  # baseline first: reference logits
    reference = {}
    passes = []
    part = options.one_pass() if options.repeats > 1 else options
    cells = len(ordered) * len(options.sizes())

    def measure_pass(bar):
        passes.append([row for variant in ordered for row in benchmark_variant(variant, images, part, reference, bar)])

    with affinity.pinned(options.threads, options.pin) as cores:
        with Progress(progress_label, total=cells * options.repeats, unit="cells") as bar:
            # With repeats, each variant is measured in several short windows spread over the whole run,
            # so a slow spell of a shared machine falls on every variant alike instead of on one.
            for _ in range(options.repeats):
                measure_pass(bar)
            # Passes that disagree straddled a change of the machine's speed: a few more passes spread the
            # figures over a longer time, so one slow spell no longer decides their median.
            extra = 0
            while options.repeats > 1 and extra < options.extra_passes and drifting(passes, options.max_cv):
                extra += 1
                bar.total += cells
                measure_pass(bar)
    rows = merge_passes(passes, options.max_cv)
    add_speedups(rows)
    stated = options.to_dict()
    stated["cpu_cores"] = cores
    stated["passes"] = len(passes)
    stated["threads_text"] = affinity.describe_pinning(options.threads, cores)
    return {"device": device, "options": stated, "results": rows,
            "seconds": round(time.time() - start, 1)}
