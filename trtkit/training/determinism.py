"""``--deterministic`` that works on CUDA: what to switch on, and global average pooling with a deterministic
backward.

``torch.use_deterministic_algorithms(True)`` makes an op with no deterministic CUDA kernel raise a
RuntimeError. ``torch.nn.AdaptiveAvgPool2d`` is one of them "when attempting to differentiate a CUDA tensor"
(listed on the torch.use_deterministic_algorithms page from 1.8.1 to the current one), and every ResNet ends
in one, so ``trtkit train --deterministic`` failed at its first backward on a GPU. Two remedies:

- **deterministic pooling**: ``AdaptiveAvgPool2d`` to 1x1 is a mean over H and W; ``x.mean((2, 3))``'s backward
  spreads the gradient evenly (an expand, no atomic adds), so it is deterministic, and it gives the same
  outputs and gradients. Training replaces those modules on CUDA (``replace_global_pooling``) and puts the
  originals back afterwards (the model exported later is the usual one).
- **warn_only**: for any other such op (e.g. an upsampling backward in a segmentation model),
  ``use_deterministic_algorithms(True, warn_only=True)`` warns instead of raising. The keyword exists from
  torch 1.11 (docs.pytorch.org/docs/1.11/generated/torch.use_deterministic_algorithms.html: ``(mode, *,
  warn_only=False)``); torch 1.8.1 .. 1.10 take ``(mode)`` alone (docs 1.8.1), which is what a Jetson Nano has
  (torch 1.10): there other nondeterministic ops still raise, and the log says so.
"""

from trtkit.versions import parse_version

WARN_ONLY_SINCE = (1, 11, 0)  # torch.use_deterministic_algorithms(mode, *, warn_only=False) since torch 1.11


class DeterminismPlan(object):
    """What ``--deterministic`` switches on for a torch version and device: ``warn_only`` (passed to
    ``use_deterministic_algorithms``), ``replace_pooling`` (global AdaptiveAvgPool2d -> mean) and ``note``
    (the sentence the log prints)."""

    def __init__(self, warn_only, replace_pooling, note):
        self.warn_only = warn_only
        self.replace_pooling = replace_pooling
        self.note = note

    def to_dict(self):
        return {"warn_only": self.warn_only, "replace_pooling": self.replace_pooling}


def determinism_plan(torch_version, cuda):
    """The DeterminismPlan for torch ``torch_version`` (a ``__version__`` string) on CUDA or not."""
    warn_only = parse_version(torch_version, what="torch version") >= WARN_ONLY_SINCE
    if not cuda:
        return DeterminismPlan(warn_only, False, "deterministic algorithms on the CPU")
    note = "deterministic algorithms on CUDA: global average pooling as a mean over H and W (deterministic backward)"
    if warn_only:
        note += "; other ops without a deterministic CUDA kernel warn (warn_only=True)"
    else:
        note += "; torch {} has no warn_only (torch >= 1.11): other ops without a deterministic CUDA kernel " \
                "raise".format(torch_version)
    return DeterminismPlan(warn_only, True, note)


def set_deterministic(torch, warn_only):
    """``torch.use_deterministic_algorithms(True)``, with ``warn_only`` where this torch takes it."""
    if warn_only:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch.use_deterministic_algorithms(True)


_MEAN_POOL = []


def mean_pool_class():
    """``GlobalMeanPool2d``: ``x.mean((2, 3), keepdim=True)``, an ``nn.Module`` (made on first use: torch is
    imported only here)."""
    if not _MEAN_POOL:
        from trtkit.deps import require
        torch = require("torch", "training")

        class GlobalMeanPool2d(torch.nn.Module):
            """AdaptiveAvgPool2d((1, 1)) as a mean over H and W: same values, deterministic backward on CUDA."""

            def forward(self, x):
                return x.mean((2, 3), keepdim=True)

        _MEAN_POOL.append(GlobalMeanPool2d)
    return _MEAN_POOL[0]


def _is_global(module):
    size = module.output_size
    size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
    return size == (1, 1)


def replace_global_pooling(model):
    """Replace every ``AdaptiveAvgPool2d`` to 1x1 in ``model`` by a ``GlobalMeanPool2d``; returns the list of
    (parent, attribute name, original module) that ``restore_pooling`` puts back."""
    from trtkit.deps import require
    torch = require("torch", "training")
    cls = mean_pool_class()
    replaced = []
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.AdaptiveAvgPool2d) and _is_global(child):
                setattr(parent, name, cls())
                replaced.append((parent, name, child))
    return replaced


def restore_pooling(replaced):
    """Put back the modules ``replace_global_pooling`` took out."""
    for parent, name, original in replaced:
        setattr(parent, name, original)
