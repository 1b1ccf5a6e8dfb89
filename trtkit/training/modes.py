"""Precision modes: what runs in 16 bits, what stays in FP32, and where each mode makes sense.

* ``fp32``: the baseline, strict: on a GPU, convolutions and matrix products in IEEE FP32 (TF32 off).
* ``tf32``: FP32 weights and activations, convolutions and matrix products on TF32 tensor cores (GPUs of
  compute capability 8.0+; PyTorch's own default for convolutions there), so FP16's speed-up can be read
  against both (``training.fp32math``).
* ``amp``: autocast. On CUDA, FP16 with dynamic loss scaling (torch's
  GradScaler). On a CPU, BF16 autocast where the CPU has native BF16
  (AVX512-BF16 / AMX); elsewhere BF16 would be emulated and slower than FP32,
  so trtkit refuses and says why.
* ``bf16``: BF16 autocast on GPUs with native BF16 (compute capability 8.0+:
  Ampere and newer) or on a CPU with native BF16 (``trtkit.bf16``). No loss scaling: BF16 keeps FP32's exponent range.
* ``half``: the manual recipe that predates autocast (apex O2 style): the
  model in FP16 except BatchNorm (its statistics overflow/underflow in FP16),
  FP32 master copies of every FP16 weight for the optimizer, dynamic loss
  scaling (torch's GradScaler on the masters). On CPU it runs (torch >= 2.3)
  but PyTorch has no fast FP16 convolution kernels there: it is for checking
  the recipe, not for speed.

``channels_last`` (NHWC) is an option on top of any mode: Tensor Cores prefer it.
"""

import contextlib

from trtkit import log
from trtkit.bf16 import cpu_bf16_native, cuda_bf16_native
from trtkit.deps import require
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.training.scaler import NoScaler, TorchGradScaler, grad_scaler_available

MODES = ("fp32", "tf32", "amp", "bf16", "half")

NO_CPU_BF16 = ("this CPU has no native BF16 instructions (AVX512-BF16 or AMX): BF16 autocast would emulate "
               "every BF16 operation in FP32 arithmetic plus conversions, so training would be slower than fp32")


def parse_modes(text):
    """'fp32,amp' -> ['fp32', 'amp'] with validation."""
    names = [m.strip().lower() for m in str(text).split(",") if m.strip()]
    if not names:
        raise InputError("no precision mode given", hint="use one or more of " + ",".join(MODES))
    for name in names:
        if name not in MODES:
            raise InputError("unknown precision mode '{}'".format(name), hint="use one of " + ", ".join(MODES))
    if len(set(names)) != len(names):
        raise InputError("a precision mode is listed twice in '{}'".format(text))
    return names


def pick_device(device="auto"):
    torch = require("torch", "training")
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceUnavailable("--device {} asked for, but torch sees no CUDA GPU".format(device),
                                hint="use --device cpu, or install a CUDA build of torch")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise InputError("unknown device '{}'".format(device), hint="use auto, cpu or cuda")
    return device


def mode_unavailable_reason(mode, device):
    """None when ``mode`` can train on ``device``, else the sentence saying why not."""
    cuda = device.startswith("cuda")
    if mode == "tf32" and not (cuda and cuda_bf16_native(device)):  # the same GPUs: compute capability 8.0+
        return "TF32 is a math mode of NVIDIA GPUs of compute capability 8.0+ (Ampere and newer){}".format(
            "" if cuda else "; on a CPU fp32 is the only FP32 math")
    if mode in ("amp", "bf16") and not cuda and not cpu_bf16_native():
        return "{} on CPU means BF16 autocast, and {}".format(mode, NO_CPU_BF16)
    if mode == "bf16" and cuda and not cuda_bf16_native(device):
        return "this GPU has no native BF16 math (it needs compute capability 8.0+, Ampere or newer); use amp (FP16)"
    if mode == "half" and not cuda and not grad_scaler_available("cpu"):
        return "the half recipe on CPU needs torch's CPU GradScaler (torch >= 2.3); this is torch {}".format(
            require("torch", "training").__version__)
    return None


class Precision(object):
    """One precision mode on one device: autocast, model preparation, master weights, scaler."""

    def __init__(self, mode, device="cpu", channels_last=False, init_scale=2.0 ** 16, growth_interval=2000):
        torch = require("torch", "training")
        if mode not in MODES:
            raise InputError("unknown precision mode '{}'".format(mode), hint="use one of " + ", ".join(MODES))
        reason = mode_unavailable_reason(mode, device)
        if reason:
            raise DeviceUnavailable(reason, hint="use --mode fp32 here, or train on a machine that has it")
        self.mode = mode
        self.device = device
        self.cuda = device.startswith("cuda")
        self.channels_last = bool(channels_last)
        self.init_scale = init_scale
        self.growth_interval = growth_interval
        self.autocast_dtype = None
        if mode == "amp":
            self.autocast_dtype = torch.float16 if self.cuda else torch.bfloat16
        elif mode == "bf16":
            self.autocast_dtype = torch.bfloat16
        self.model_dtype = torch.float16 if mode == "half" else torch.float32
        self._pairs = []  # (fp16 model parameter, fp32 master copy) for the half recipe
        self._master_grads = None  # the masters' FP32 gradient buffers, reused every step
        self._names = {}

    # ------------------------------------------------------------------ description
    @property
    def fp32_math(self):
        """What FP32 convolutions and matrix products run as (``training.fp32math``): strict for fp32, TF32
        for tf32, PyTorch's default (None: left as it is) for the 16-bit modes; None on a CPU."""
        if not self.cuda:
            return None
        from trtkit.training.fp32math import STRICT, TF32
        return {"fp32": STRICT, "tf32": TF32}.get(self.mode)

    def describe(self):
        if self.mode == "fp32":
            return "FP32 (strict: TF32 off)" if self.cuda else "FP32"
        if self.mode == "tf32":
            return "FP32 storage, TF32 tensor-core convolutions and matrix products"
        if self.mode == "half":
            return "FP16 model, BatchNorm FP32, FP32 master weights, dynamic loss scaling"
        dtype = "FP16" if self.autocast_dtype is not None and "16" in str(self.autocast_dtype) and \
            "bfloat" not in str(self.autocast_dtype) else "BF16"
        return "{} autocast{}".format(dtype, ", dynamic loss scaling" if self.needs_scaling else "")

    @property
    def needs_scaling(self):
        return self.mode == "half" or (self.mode == "amp" and self.cuda)

    def warnings(self):
        """Sentences worth telling the user before training starts."""
        notes = []
        if self.mode == "half" and not self.cuda:
            notes.append("the half recipe on CPU: PyTorch has no fast FP16 convolution kernels for CPUs, so it runs "
                         "far slower than fp32 (use it here to check the recipe; it pays off on CUDA GPUs)")
        if self.mode in ("amp", "bf16") and not self.cuda:
            notes.append("{} on CPU = BF16 autocast (no loss scaling: BF16 has FP32's range); whether it beats fp32 "
                         "depends on the CPU's BF16 kernels: compare with --compare fp32,{}".format(self.mode, self.mode))
        return notes

    # ------------------------------------------------------------------ model
    def prepare(self, model):
        """Move/cast ``model`` for this mode; returns the parameters the optimizer must own.

        For ``half``: every weight goes to FP16 except BatchNorm's (parameters
        and running statistics stay FP32), and the optimizer gets FP32 master
        copies of the FP16 weights. Call it after loading weights in FP32.
        """
        torch = require("torch", "training")
        model.to(self.device)
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
        params = []
        if self.mode == "half":
            batchnorm = torch.nn.modules.batchnorm._BatchNorm
            masters = {}
            for name, p in model.named_parameters():
                masters[name] = p.detach().clone().float()
            for module in model.modules():
                if not isinstance(module, batchnorm):
                    for p in module.parameters(recurse=False):
                        p.data = p.data.half()
                    for key, buf in module._buffers.items():
                        if buf is not None and buf.is_floating_point():
                            module._buffers[key] = buf.half()
            self._pairs = []
            self._names = {}
            self._master_grads = None  # buffers of another model's masters must not be reused
            for name, p in model.named_parameters():
                if p.dtype == torch.float16:
                    master = torch.nn.Parameter(masters[name], requires_grad=True)
                    self._pairs.append((p, master))
                    self._names[name] = master
                    params.append(master)
                else:
                    params.append(p)  # BatchNorm: already FP32, optimized in place
        else:
            params = list(model.parameters())
        return params

    def autocast(self):
        if self.autocast_dtype is None:
            return _null()
        torch = require("torch", "training")
        return torch.autocast(device_type="cuda" if self.cuda else "cpu", dtype=self.autocast_dtype)

    def inputs(self, images):
        """Put a float32 batch into the layout and dtype the prepared model expects."""
        torch = require("torch", "training")
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if self.mode == "half":
            images = images.half()
        return images

    def make_scaler(self):
        if self.needs_scaling:
            return TorchGradScaler("cuda" if self.cuda else "cpu", init_scale=self.init_scale,
                                   growth_interval=self.growth_interval)
        return NoScaler()

    def after_backward(self):
        """half: hand the FP16 gradients to the FP32 master weights (unscaling happens there, in FP32), into
        gradient buffers kept from step to step, with one multi-tensor copy where torch has it."""
        if not self._pairs:
            return
        torch = require("torch", "training")
        grads = [p.grad for p, _ in self._pairs]
        if any(g is None for g in grads):
            for p, master in self._pairs:
                master.grad = None if p.grad is None else p.grad.detach().float()
                p.grad = None
            return
        if self._master_grads is None:
            self._master_grads = [torch.empty_like(master) for _, master in self._pairs]
        copy_all(torch, self._master_grads, grads)
        for (p, master), grad in zip(self._pairs, self._master_grads):
            master.grad = grad
            p.grad = None

    def after_step(self):
        """half: copy the updated FP32 masters back into the FP16 model."""
        if not self._pairs:
            return
        torch = require("torch", "training")
        with torch.no_grad():
            copy_all(torch, [p for p, _ in self._pairs], [master for _, master in self._pairs])

    def fp32_state_dict(self, model):
        """The model's weights in FP32 (masters for ``half``), contiguous: what a checkpoint stores."""
        state = {}
        for name, value in model.state_dict().items():
            if name in self._names:
                value = self._names[name]
            value = value.detach()
            if value.is_floating_point():
                value = value.float()
            state[name] = value.cpu().contiguous().clone()
        return state


def copy_all(torch, targets, sources):
    """``target.copy_(source)`` for each pair (casting), as one multi-tensor kernel where this torch has
    ``_foreach_copy_`` (2.1 and later; a per-tensor loop otherwise): the half recipe copies every parameter
    twice a step, and a launch per parameter kept the GPU waiting on the host."""
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None:
        try:
            foreach(targets, sources)
            return
        except (RuntimeError, TypeError):
            pass
    for target, source in zip(targets, sources):
        target.copy_(source)


@contextlib.contextmanager
def _null():
    yield


def check_mode(mode, device):
    """Raise DeviceUnavailable with the reason when ``mode`` cannot train on ``device``."""
    reason = mode_unavailable_reason(mode, device)
    if reason:
        raise DeviceUnavailable(reason, hint="use --mode fp32 here")
    log.debug("mode {} is available on {}".format(mode, device))
