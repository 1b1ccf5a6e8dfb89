"""One output of a PyTorch module that returns several: what ``output=`` picks (a tuple's index, a dict's key).

Real models return several tensors (MTCNN's nets from facenet-pytorch: box offsets and face probabilities; a
landmark model: points, presence, handedness); trtkit builds, verifies and serves one output, so the module is
wrapped to return the one named, and its export has that output alone.
"""

from trtkit.errors import InputError


def describe(outputs):
    """``0: [1, 4], 1: [1, 2]`` (or ``'out': ...``) for a tuple, list or dict of tensors."""
    items = outputs.items() if isinstance(outputs, dict) else enumerate(outputs)
    return ", ".join("{}: {}".format(repr(k) if isinstance(k, str) else k,
                                     list(v.shape) if hasattr(v, "shape") else type(v).__name__) for k, v in items)


def pick_output(module, outputs, key):
    """(wrapped module, its output) for ``key`` of the ``outputs`` ``module`` returned; InputError naming the
    outputs when ``key`` is None or names none of them."""
    import torch
    what = "a dict" if isinstance(outputs, dict) else "a tuple"
    if key is None:
        raise InputError("the module returns {} of {} outputs ({}): trtkit builds one".format(
            what, len(outputs), describe(outputs)),
            hint="pass output=INDEX or KEY (--output), the one holding the class scores or the map")
    if not isinstance(outputs, dict):
        try:
            key = int(key)
        except (TypeError, ValueError):
            key = None
        if key is None or not -len(outputs) <= key < len(outputs):
            raise InputError("output={!r} names no element of the module's {} outputs ({})".format(
                key, len(outputs), describe(outputs)), hint="pass an index from 0 to {}".format(len(outputs) - 1))
    elif key not in outputs:
        raise InputError("output={!r} is no key of the module's outputs ({})".format(key, describe(outputs)),
                         hint="pass one of the keys listed")

    class PickOutput(torch.nn.Module):
        def __init__(self, model):
            super(PickOutput, self).__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)[key]

    return carry_attributes(module, PickOutput(module).eval()), outputs[key]


def channels_first(module):
    """``module`` wrapped to return its channels-last map ``[N, H, W, C]`` as ``[N, C, H, W]``, the layout every
    step reads (``trtkit.onnx.layout.is_channels_last_of`` tells such a map)."""
    import torch

    class ChannelsFirst(torch.nn.Module):
        def __init__(self, model):
            super(ChannelsFirst, self).__init__()
            self.model = model

        def forward(self, x):
            return self.model(x).permute(0, 3, 1, 2)

    return carry_attributes(module, ChannelsFirst(module).eval())


TRTKIT_ATTRIBUTES = ("trtkit_name", "num_classes", "task", "input_contract", "stem")


def carry_attributes(model, wrapper):
    """``wrapper`` (a module around ``model``) with ``model``'s trtkit attributes, which the build reads."""
    for attribute in TRTKIT_ATTRIBUTES:
        if hasattr(model, attribute):
            setattr(wrapper, attribute, getattr(model, attribute))
    return wrapper
