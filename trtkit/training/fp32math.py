"""Which math FP32 convolutions and matrix products use on a GPU: strict IEEE FP32, or TF32 tensor cores.

On Ampere and newer GPUs PyTorch runs FP32 convolutions as TF32 by default (10-bit mantissa inputs, FP32
accumulation): measured on an H200 (ResNet50, 224, batch 128), strict FP32 trained at 1006 img/s and TF32 at
3023, so a table that calls TF32 "FP32" shows FP16's speed-up against TF32, not against FP32 as the papers it
is compared with do. trtkit's ``fp32`` mode is therefore strict and ``tf32`` is a mode of its own.

Two APIs: torch >= 2.9 has ``torch.backends.cudnn.conv.fp32_precision`` and
``torch.backends.cuda.matmul.fp32_precision`` ("ieee" / "tf32"; its notes ask not to mix them with the older
flags), older torch ``torch.backends.cudnn.allow_tf32`` and ``torch.backends.cuda.matmul.allow_tf32``
(torch >= 1.7). Attributes are tested, versions never compared.
"""

import contextlib

STRICT = "ieee"
TF32 = "tf32"


def _new_api(torch):
    conv = getattr(torch.backends.cudnn, "conv", None)
    return conv is not None and hasattr(conv, "fp32_precision") and \
        hasattr(torch.backends.cuda.matmul, "fp32_precision")


def current(torch):
    """{"convolutions": "ieee"|"tf32"|..., "matmul": ...}: the FP32 math in force now."""
    if _new_api(torch):
        return {"convolutions": str(torch.backends.cudnn.conv.fp32_precision),
                "matmul": str(torch.backends.cuda.matmul.fp32_precision)}
    return {"convolutions": TF32 if torch.backends.cudnn.allow_tf32 else STRICT,
            "matmul": TF32 if torch.backends.cuda.matmul.allow_tf32 else STRICT}


def _set(torch, convolutions, matmul):
    if _new_api(torch):
        torch.backends.cudnn.conv.fp32_precision = convolutions
        torch.backends.cuda.matmul.fp32_precision = matmul
    else:
        torch.backends.cudnn.allow_tf32 = convolutions == TF32
        torch.backends.cuda.matmul.allow_tf32 = matmul == TF32


@contextlib.contextmanager
def fp32_math(torch, math):
    """Run the block with FP32 convolutions and matrix products in ``math`` (``STRICT`` or ``TF32``; None:
    as they are), restoring the previous setting after."""
    if math is None:
        yield
        return
    previous = current(torch)
    _set(torch, math, math)
    try:
        yield
    finally:
        _set(torch, previous["convolutions"], previous["matmul"])
