"""Dynamic loss scaling: multiply the loss so FP16 gradients do not underflow.

FP16 has a narrow range: small gradients flush to zero, large ones become inf.
Scaling the loss by S scales every gradient by S; the optimizer sees them
divided by S again (in FP32). When any gradient is inf/NaN the step is skipped
and S is halved; after ``growth_interval`` clean steps S doubles. This is the
recipe of PyTorch's GradScaler, apex and Keras' LossScaleOptimizer.

``DynamicLossScaler`` is trtkit's own (pure torch, any device): the manual
``half`` recipe needs it because its gradients live on FP16 parameters but are
unscaled into FP32 master copies. ``TorchGradScaler`` wraps torch's fused
CUDA GradScaler for ``amp``. ``NoScaler`` serves fp32/bf16. All three share
one protocol so the training loop has a single code path:

    scaler.backward(loss); scaler.unscale(optimizer, params)
    (clip gradients here: they are unscaled)
    scaler.step(optimizer); skipped = scaler.update()
"""

import math

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
        return False

    def state_dict(self):
        return {"kind": self.name}

    def load_state_dict(self, state):
        pass


class DynamicLossScaler(object):
    """Scale the loss, unscale gradients in FP32, skip steps whose gradients overflowed."""

    name = "dynamic"

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 min_scale=2.0 ** -14):
        if init_scale <= 0 or growth_factor <= 1 or not 0 < backoff_factor < 1 or growth_interval < 1:
            raise ValueError("invalid loss-scaler settings")
        self._scale = float(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.min_scale = float(min_scale)
        self.good_steps = 0
        self.skipped = 0
        self.found_inf = False

    @property
    def scale(self):
        return self._scale

    def backward(self, loss):
        (loss.float() * self._scale).backward()

    def unscale(self, optimizer, params):
        """Divide every gradient by the scale (in place, FP32) and record whether any is inf/NaN."""
        torch = require("torch", "loss scaling")
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            self.found_inf = False
            return False
        inv = 1.0 / self._scale
        flags = []
        with torch.no_grad():
            for g in grads:
                g.mul_(inv)
                flags.append(torch.isfinite(g).all())
            self.found_inf = not bool(torch.stack(flags).all())  # one host sync per step
        return self.found_inf

    def step(self, optimizer):
        if not self.found_inf:
            optimizer.step()

    def update(self):
        """Adjust the scale after a step; returns True when the step was skipped."""
        skipped = self.found_inf
        if skipped:
            self._scale = max(self._scale * self.backoff_factor, self.min_scale)
            self.good_steps = 0
            self.skipped += 1
        else:
            self.good_steps += 1
            if self.good_steps >= self.growth_interval:
                grown = self._scale * self.growth_factor
                if math.isfinite(grown):
                    self._scale = grown
                self.good_steps = 0
        self.found_inf = False
        return skipped

    def state_dict(self):
        return {"kind": self.name, "scale": self._scale, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "min_scale": self.min_scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state):
        self._scale = float(state["scale"])
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self.min_scale = float(state.get("min_scale", self.min_scale))
        self.good_steps = int(state["good_steps"])
        self.skipped = int(state["skipped"])


class TorchGradScaler(object):
    """torch's GradScaler (fused CUDA unscale/inf check) behind trtkit's scaler protocol."""

    name = "torch"

    def __init__(self, init_scale=2.0 ** 16, growth_interval=2000):
        torch = require("torch", "AMP training")
        amp = getattr(torch, "amp", None)
        if amp is not None and hasattr(amp, "GradScaler"):
            try:
                self._impl = amp.GradScaler("cuda", init_scale=init_scale, growth_interval=growth_interval)
            except TypeError:
                self._impl = torch.cuda.amp.GradScaler(init_scale=init_scale, growth_interval=growth_interval)
        else:
            self._impl = torch.cuda.amp.GradScaler(init_scale=init_scale, growth_interval=growth_interval)
        self.skipped = 0

    @property
    def scale(self):
        return float(self._impl.get_scale())

    def backward(self, loss):
        self._impl.scale(loss).backward()

    def unscale(self, optimizer, params):
        self._impl.unscale_(optimizer)
        return None

    def step(self, optimizer):
        self._impl.step(optimizer)

    def update(self):
        before = self.scale
        self._impl.update()
        skipped = self.scale < before  # GradScaler lowers the scale exactly when it skipped the step
        if skipped:
            self.skipped += 1
        return skipped

    def state_dict(self):
        state = dict(self._impl.state_dict())
        state["kind"] = self.name
        state["skipped"] = self.skipped
        return state

    def load_state_dict(self, state):
        state = dict(state)
        state.pop("kind", None)
        self.skipped = int(state.pop("skipped", 0))
        self._impl.load_state_dict(state)
