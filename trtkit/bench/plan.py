"""What to measure: the variants of a benchmark (model x backend x precision or torch mode) and how.

Why a module of its own: deciding *which* cells exist (from a build manifest
or from flags, PyTorch baselines included, filtered, labelled) is separate
from timing one of them (``measure``) and from repeating and merging passes
(``passes``). ``BenchOptions`` says how to measure: batch sizes or a sweep,
time per figure, modes, threads, the stability limit, interleaved passes and
the clock the timing loops read (tests inject a fake one).

Every artifact runs through ``get_backend(artifact["backend"]).runner(path)``,
so a new backend is benchmarked without a change here.
"""

import copy
import os
import time

import numpy as np

from trtkit import log
from trtkit.bench import affinity
from trtkit.bench.timing import DEFAULT_MAX_CV
from trtkit.errors import InputError, TrtkitError

TORCH_BASELINE = ("torch", "fp32")  # (backend, mode) every speed-up is divided by
BACKEND_LABELS = {"onnxruntime": "ONNX Runtime", "tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX",
                  "torch2trt": "torch2trt", "torch": "PyTorch", "openvino": "OpenVINO"}
TORCH_MODE_LABELS = {"fp32": "eager", "half": ".half()", "autocast": "autocast", "channels_last": "channels_last",
                     "compile": "torch.compile"}


class BenchOptions(object):
    """How to measure: batch sizes or a sweep, time per measurement, modes, threads, stability limit.

    ``clock`` is the time source of every timing loop (``time.perf_counter``
    unless a test passes a fake one); it is not part of ``to_dict``.
    """

    def __init__(self, batch_sizes=(1, 8), sweep=False, max_batch=64, seconds=1.0, warmup=0.3, max_seconds=None,
                 modes=("latency", "throughput"), threads=None, max_cv=DEFAULT_MAX_CV, agree_images=64,
                 min_iterations=10, min_rounds=5, round_seconds=0.1, repeats=1, pin=True, extra_passes=None,
                 clock=None):
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
        # passes added when the first ``repeats`` disagree (see passes.run_passes); default: as many again
        self.extra_passes = self.repeats if extra_passes is None else int(extra_passes)
        self.clock = clock or time.perf_counter

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
        self.agreement_interval = None  # its 95% interval ([low, high]), where known
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
    """The PyTorch baselines worth timing on ``device``: on CUDA ``torch_baseline.BASELINE_MODES`` (FP32
    channels_last with cudnn benchmark, AMP, .half()); on CPU FP32 contiguous, channels_last and autocast."""
    if device == "cuda":
        from trtkit.backends.torch_baseline import BASELINE_MODES
        return list(BASELINE_MODES)
    return ["fp32", "channels_last", "autocast"]


def torch_variants(model_name, checkpoint, modes, threads, input_size=None, display_name=None, device=None):
    """PyTorch baselines for a checkpoint on ``device`` (default: cuda when torch sees it); modes that cannot
    run here become skipped variants."""
    from trtkit.backends.torch import MODES, default_device, mode_precision, mode_support, torch_runner
    device = device or default_device()
    modes = default_torch_modes(device) if modes in (None, "auto") else list(modes)
    variants = []
    for mode in modes:
        precision = mode_precision(mode, device) if mode in MODES else mode
        options = {"model": model_name, "mode": mode, "device": device, "threads": threads,
                   "input_size": input_size}
        variant = Variant(display_name or model_name, "torch", precision,
                          (lambda o=options: torch_runner(checkpoint, o)),
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


def plan_from_manifest(build, options, backends=None, precisions=None, torch_modes="auto"):
    """Variants for every artifact of a build (filtered) plus PyTorch baselines from its checkpoint."""
    manifest = build.manifest
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
    selected = (manifest.get("selection") or {}).get("chosen") if backends is None and precisions is None else None
    if selected:
        log.info("benchmarking the chosen artifact {} (--precisions/--backends time the others)".format(selected))
    for artifact in manifest.get("artifacts", []):
        if not want(artifact["backend"], backends) or not want(artifact["precision"], precisions):
            continue
        if selected and artifact["name"] != selected:
            continue
        verify = artifact.get("verify") or {}
        variant = artifact_variant(name, artifact["backend"], artifact["precision"], build.path(artifact),
                                   options.threads, verify.get("top1_agreement"))
        variant.agreement_interval = (verify.get("intervals") or {}).get("top1_agreement")
        variants.append(variant)
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
            from trtkit.models.classifiers import read_checkpoint
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


def load_bench_images(manifest, contract_size=None, count=64):
    """Images to time with: the build's held-out data when it loads, else deterministic noise."""
    from trtkit.models.classifiers import InputContract
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
