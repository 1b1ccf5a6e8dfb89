"""Dynamic loss scaling: multiply the loss so FP16 gradients do not underflow.

FP16 has a narrow range: small gradients flush to zero, large ones become inf.
Scaling the loss by S scales every gradient by S; the optimizer sees them
divided by S again (in FP32). When any gradient is inf/NaN the step is skipped
and S is halved; after ``growth_interval`` clean steps S doubles.

torch's GradScaler does exactly this, for ``amp`` and for the manual ``half``
recipe alike: ``half`` hands the FP16 gradients to FP32 master weights before
unscaling, and GradScaler unscales and checks whatever gradients the optimizer
owns (FP32 ones included). ``TorchGradScaler`` puts it behind trtkit's scaler
protocol, ``NoScaler`` serves fp32/bf16, so the training loop has one code path:

    scaler.backward(loss); scaler.unscale(optimizer, params)
    (clip gradients here: they are unscaled)
    scaler.step(optimizer); scaler.update()
    ... scaler.skipped (the steps skipped so far; read once an epoch: reading it waits for the GPU)

No hand-written fallback is kept. Every torch trtkit supports (>= 1.10, the
Jetson Nano's) has the CUDA GradScaler; the CPU one (``torch.amp.GradScaler("cpu")``)
came with torch 2.3, and only the ``half`` recipe on a CPU needs it: with an
older torch that mode is refused with the reason (``modes.mode_unavailable_reason``).
"""

from trtkit.deps import require


class NoScaler(object):
    """FP32 and BF16 need no scaling (BF16 has FP32's exponent range)."""

    name = "none"
    skipped = 0

    @property
    def scale(self):
        return None

    def backward(self, loss):
        loss.backward()

    def unscale(self, optimizer, params):
        return None

    def step(self, optimizer):
        optimizer.step()

    def update(self):
        return None

    def state_dict(self):
        return {"kind": self.name}

    def load_state_dict(self, state):
        pass


def grad_scaler_available(device_type):
    """True when this torch has a GradScaler for ``device_type`` ('cuda' or 'cpu')."""
    torch = require("torch", "loss scaling")
    if hasattr(getattr(torch, "amp", None), "GradScaler"):  # torch >= 2.3: one class for every device
        return True
    return device_type == "cuda"


def _make_grad_scaler(torch, device_type, init_scale, growth_interval):
    if hasattr(getattr(torch, "amp", None), "GradScaler"):
        return torch.amp.GradScaler(device_type, init_scale=init_scale, growth_interval=growth_interval)
    if device_type != "cuda":
        from trtkit.errors import DeviceUnavailable
        raise DeviceUnavailable("torch {} has no GradScaler for {}".format(torch.__version__, device_type),
                                hint="install torch >= 2.3, or train on a CUDA GPU")
    return torch.cuda.amp.GradScaler(init_scale=init_scale, growth_interval=growth_interval)


class TorchGradScaler(object):
    """torch's GradScaler on ``device_type`` behind trtkit's scaler protocol.

    Skipped steps are counted on the device (a step was skipped exactly when GradScaler lowered the scale)
    and read only when ``skipped`` is asked for: reading the scale after every step, as this class did, made
    each AMP step wait for the GPU twice.
    """

    name = "torch"

    def __init__(self, device_type="cuda", init_scale=2.0 ** 16, growth_interval=2000):
        torch = require("torch", "loss scaling")
        self._impl = _make_grad_scaler(torch, device_type, init_scale, growth_interval)
        self._skipped = 0
        self._pending = None  # skipped steps not yet read back from the device (a tensor), or None

    @property
    def scale(self):
        return float(self._impl.get_scale())

    @property
    def skipped(self):
        """Steps skipped so far (waits for the device when steps are pending)."""
        if self._pending is not None:
            self._skipped += int(self._pending.item())
            self._pending = None
        return self._skipped

    def backward(self, loss):
        self._impl.scale(loss.float()).backward()

    def unscale(self, optimizer, params):
        """Divide the gradients the optimizer owns by the scale, in place (clip after this)."""
        self._impl.unscale_(optimizer)
        return None

    def step(self, optimizer):
        self._impl.step(optimizer)  # skipped when unscaling found an inf/NaN gradient

    def update(self):
        """Adjust the scale after a step, counting the step on the device when it was skipped."""
        current = getattr(self._impl, "_scale", None)
        if current is None:  # no scaled step yet (or a torch without the attribute): read it on the host
            before = self.scale
            self._impl.update()
            self._skipped += int(self.scale < before)
            return None
        before = current.clone()
        self._impl.update()
        lowered = (self._impl._scale < before).int()
        self._pending = lowered if self._pending is None else self._pending + lowered
        return None

    def state_dict(self):
        state = dict(self._impl.state_dict())
        state["kind"] = self.name
        state["skipped"] = self.skipped
        return state

    def load_state_dict(self, state):
        state = dict(state)
        kind = state.pop("kind", None)
        self._skipped, self._pending = int(state.pop("skipped", 0)), None
        if kind == "dynamic":  # a checkpoint of trtkit's former own scaler (half recipe): same fields, renamed
            state = {"scale": state["scale"], "growth_factor": state["growth_factor"],
                     "backoff_factor": state["backoff_factor"], "growth_interval": state["growth_interval"],
                     "_growth_tracker": state["good_steps"]}
        self._impl.load_state_dict(state)
