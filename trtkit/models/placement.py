"""A caller's model lent to a step on another device, and given back as it was.

``nn.Module.to``/``.cuda()``/``.eval()`` change the module in place (PyTorch's
``torch.nn.Module.to`` documentation: "This method modifies the module
in-place"; ``torch.__future__`` documents the three ways a conversion may do it:
``param.data`` replaced (the default), new Parameters assigned
(``set_overwrite_module_params_on_conversion``) or tensors swapped
(``set_swap_module_params_on_conversion``)). A converter such as torch2trt needs
the model on CUDA, while the build keeps using the same object as its PyTorch
reference afterwards (verification on the CPU). ``on_device`` keeps every
parameter's and buffer's original tensor and object, and each submodule's
training flag, and puts them back when the block ends, however it ends: the
model is back on its device(s), dtype and mode, holding the very same storage
(so "meta", where nothing can be copied back, works too). torch is never
imported here: the model brings it.
"""

import contextlib

from trtkit.deps import require


def _tensors(model):
    """(module, attribute name, tensor object, its ``.data`` alias, its grad and the grad's alias) for every
    parameter and buffer, per owning module (a shared parameter is listed under each owner)."""
    saved = []
    for module in model.modules():
        owned = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
        for name, tensor in owned:
            grad = getattr(tensor, "grad", None)
            saved.append((module, name, tensor, tensor.data, grad, grad.data if grad is not None else None))
    return saved


def _put_back(tensor, data):
    """``tensor`` holds ``data`` again: by ``.data`` (the default conversion), else by swapping back (a swapping
    conversion leaves a tensor type ``.data`` refuses, e.g. a meta tensor in a CPU Parameter)."""
    try:
        tensor.data = data
    except RuntimeError:
        torch = require("torch")
        twin = torch.nn.Parameter(data, requires_grad=tensor.requires_grad) \
            if isinstance(tensor, torch.nn.Parameter) else data.detach()
        torch.utils.swap_tensors(tensor, twin)  # torch >= 2.3, where swapping conversions exist


def _restore(saved, modes):
    for module, name, tensor, data, grad, grad_data in saved:
        _put_back(tensor, data)
        if grad is not None:
            _put_back(grad, grad_data)
            tensor.grad = grad
        if getattr(module, name) is not tensor:  # the conversion assigned a new object
            setattr(module, name, tensor)
    for module, training in modes:
        module.training = training


@contextlib.contextmanager
def on_device(model, device):
    """``model`` in eval mode on ``device`` for the ``with`` block; afterwards exactly as before.

    Yields the model itself (no copy: the memory of a second model is never
    needed). On the way out every parameter and buffer gets its original
    tensor back and every submodule its ``training`` flag, also when the block
    raised.
    """
    saved = _tensors(model)
    modes = [(module, module.training) for module in model.modules()]
    try:
        model.to(device)
        model.eval()
        yield model
    finally:
        _restore(saved, modes)
