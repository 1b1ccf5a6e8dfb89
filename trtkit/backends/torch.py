"""PyTorch baselines: the numbers every TensorRT speed-up is quoted against.

A "torch" runner runs the manifest's checkpoint (via ``trtkit.models.deployable.load_deployable``: a classifier,
a segmentation model or a detector's decoded network)
in one of four modes users compare with:

- ``fp32``: eager FP32, the reference the speed-up column divides by;
- ``half``: ``model.half()`` with BatchNorm layers kept FP32 (the classic GPU recipe);
- ``autocast``: ``torch.autocast`` (AMP), FP16 on CUDA, BF16 on CPU;
- ``channels_last``: FP32 with NHWC memory format (on CUDA every mode is);

Every mode is prepared by ``torch_baseline`` (cudnn.benchmark on, channels_last on CUDA): the best plain
PyTorch a user would write, so the speed-ups quoted against it are not inflated.
- ``compile``: FP32 through ``torch.compile`` (torch 2+; on CUDA it needs
  triton). Each new batch size compiles again, so give it a long warm-up.

There is no artifact to build: the checkpoint *is* the artifact, so PyTorch is
no build backend (not in ``trtkit.backends.REGISTRY``; benchmarks make these
runners with ``torch_runner``). Besides ``infer`` (numpy in, numpy out, copies included) the runner
fills in the optional queries of the Runner contract: ``stage`` puts a batch on
the device once, ``run_staged`` runs it without copies, ``synchronize`` waits,
``device_timer`` times with CUDA events, and peak memory comes from torch's
CUDA allocator.
"""

import os

import numpy as np

from trtkit.backends.base import Runner, TensorSpec
from trtkit.backends.torch_baseline import _keep_batchnorm_fp32  # noqa: F401 (kept importable from here)
from trtkit.backends.torch_baseline import autocast_dtype, prepare_input, prepare_model
from trtkit.bf16 import cpu_bf16_native
from trtkit.deps import available, require
from trtkit.errors import DeviceUnavailable, InputError

MODES = ("fp32", "half", "autocast", "channels_last", "compile")
# precision name used in reports, per mode and device
MODE_PRECISION = {"fp32": "fp32", "half": "fp16", "channels_last": "fp32", "compile": "fp32"}


def default_device():
    torch = require("torch", "the PyTorch baselines")
    return "cuda" if torch.cuda.is_available() else "cpu"


def mode_precision(mode, device):
    """The precision a mode computes in on ``device`` (autocast: fp16 on CUDA, bf16 on CPU)."""
    if mode == "autocast":
        return "fp16" if device == "cuda" else "bf16"
    return MODE_PRECISION[mode]


def mode_support(mode, device):
    """(usable, reason) of a mode on a device, so a benchmark matrix can skip with a reason."""
    if mode not in MODES:
        return False, "unknown torch mode '{}' (use {})".format(mode, ", ".join(MODES))
    torch = require("torch", "the PyTorch baselines")
    if device == "cuda" and not torch.cuda.is_available():
        return False, "no CUDA device visible to torch"
    if mode == "autocast":
        if not hasattr(torch, "autocast") and device != "cuda":
            return False, "this torch has no CPU autocast (needs torch >= 1.10)"
        if device == "cpu" and not cpu_bf16_native():
            return False, "the CPU has no native BF16 instructions"
    if mode == "half" and device == "cpu":
        return False, ".half() is a GPU baseline; on CPU FP16 convolutions are emulated (use autocast for BF16)"
    if mode == "compile":
        if not hasattr(torch, "compile"):
            return False, "torch {} has no torch.compile (it needs torch 2.0+)".format(torch.__version__)
        if device == "cuda" and not available("triton"):
            return False, "torch.compile on CUDA needs triton, which does not import here (pip install triton)"
    return True, "torch {} on {}".format(torch.__version__, device)


class TorchRunner(Runner):
    """One checkpoint in one mode on one device (``cuda`` when available, else ``cpu``)."""

    backend = "torch"

    def __init__(self, checkpoint, model_name=None, mode="fp32", device=None, threads=None, input_size=None):
        super(TorchRunner, self).__init__(checkpoint)
        if mode not in MODES:
            raise InputError("unknown torch mode '{}'".format(mode), hint="use one of " + ", ".join(MODES))
        self.model_name = model_name
        self.mode = mode
        self._device = device
        self.threads = threads
        self.input_size = input_size
        self.model = None

    @property
    def device(self):
        """"cuda" or "cpu": the one asked for, else torch's default (known before activation too)."""
        return self._device or default_device()

    @property
    def stages_on_device(self):
        """On CUDA ``run_staged`` skips the host->device copy and the copy back; on CPU there is none."""
        return self.device == "cuda"

    @property
    def precision(self):
        return mode_precision(self.mode, self.device)

    def _activate(self):
        torch = self.torch = require("torch", "the PyTorch baselines")
        from trtkit.models.deployable import load_deployable
        self._device = self.device
        usable, reason = mode_support(self.mode, self.device)
        if not usable:
            raise DeviceUnavailable("torch {}: {}".format(self.mode, reason))
        if not os.path.isfile(self.path):
            raise InputError("checkpoint not found: {}".format(self.path), hint="check the manifest's model.checkpoint")
        self._threads_before = None
        if self.threads and self.device == "cpu":  # process-wide in torch: given back on deactivate
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(int(self.threads))
        model = load_deployable(self.model_name, self.path, input_size=self.input_size)
        self.contract = model.input_contract
        self.num_classes = model.num_classes
        model = model.to(self.device).eval()
        self.model = prepare_model(torch, model, self.mode, self.device)
        self._autocast_dtype = autocast_dtype(torch, self.mode, self.device)

    def _deactivate(self):
        self.model = None
        if getattr(self, "_threads_before", None):
            self.torch.set_num_threads(self._threads_before)
            self._threads_before = None
        if self.device == "cuda":
            self.torch.cuda.empty_cache()

    def inputs(self):
        c = self.contract.channels if self.model is not None else 3
        h, w = self.contract.size if self.model is not None else (None, None)
        return [TensorSpec("input", ("batch", c, h, w), "float32")]

    def outputs(self):
        return [TensorSpec("logits", ("batch", getattr(self, "num_classes", None)), "float32")]

    # the Runner contract's optional queries ------------------------------------
    def stage(self, batch):
        """Copy a numpy batch to the device in the runner's dtype and memory format."""
        if not self.active:
            self.activate()
        x = self.torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)).to(self.device)
        return prepare_input(self.torch, x, self.mode, self.device)

    def run_staged(self, x):
        """Forward pass on a staged batch; returns the device tensor (no copy, no sync)."""
        torch = self.torch
        grad_off = torch.inference_mode() if hasattr(torch, "inference_mode") else torch.no_grad()
        with grad_off:
            if self._autocast_dtype is not None:
                if hasattr(torch, "autocast"):
                    ctx = torch.autocast(device_type=self.device, dtype=self._autocast_dtype)
                else:  # torch < 1.10: CUDA only
                    ctx = torch.cuda.amp.autocast()
                with ctx:
                    return self.model(x)
            return self.model(x)

    def synchronize(self):
        if self.active and self.device == "cuda":
            self.torch.cuda.synchronize()

    def device_timer(self):
        """CUDA events on torch's current stream (where ``run_staged`` runs); None on CPU."""
        if self.device == "cuda":
            if not self.active:
                self.activate()
            return CudaEventTimer(self.torch)
        return None

    def reset_peak_memory(self):
        if self.active and self.device == "cuda":
            self.torch.cuda.reset_peak_memory_stats()

    def peak_memory_bytes(self):
        """Peak CUDA memory allocated by torch since the last reset; None on CPU."""
        if self.active and self.device == "cuda":
            return int(self.torch.cuda.max_memory_allocated())
        return None

    def _infer(self, batch):
        out = self.run_staged(self.stage(batch))
        return {"logits": out.float().cpu().numpy()}


class CudaEventTimer(object):
    """Times one region on torch's current CUDA stream with events (device time, no host jitter).

    ``stop`` synchronizes on the end event, so it also serves as the sync of
    latency mode; ``sync`` is what warm-up and throughput rounds wait on.
    """

    def __init__(self, torch):
        self.sync = torch.cuda.synchronize
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def start(self):
        self._start.record()

    def stop(self):
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1000.0


def torch_runner(checkpoint, options=None):
    """A TorchRunner of ``checkpoint`` for benchmark baselines; ``options``: model, mode, device, threads,
    input_size. PyTorch runs checkpoints and builds no artifact, so it is no build backend (not in the
    registry of ``trtkit.backends``)."""
    options = options or {}
    return TorchRunner(checkpoint, model_name=options.get("model"), mode=options.get("mode", "fp32"),
                       device=options.get("device"), threads=options.get("threads"),
                       input_size=options.get("input_size"))
