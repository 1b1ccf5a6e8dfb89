"""Which ONNX opset an export writes: the highest that both the installed torch and the target TensorRT read.

Opset 17 everywhere broke two real targets: torch 1.10 (JetPack 4.6 on a Jetson Nano) cannot write it, and
TensorRT 8.2's ONNX parser reads operators up to opset 13 only. ``choose_opset`` is a pure function of the
two versions (parsed with ``trtkit.versions``, never compared as strings) and of the opset asked for.

Torch's TorchScript exporter: the highest opset it writes, per release (a version between two rows takes the
lower row: the documented value, never a guess above it):

| torch | max opset | source |
|---|---|---|
| 1.8 .. 1.11 | 13 | ``torch/onnx/symbolic_helper.py`` of that era: ``_onnx_main_opset = 13``; torch 1.12's "update default opset_version to 13" (pytorch #73898) made 13 the default. torch 1.10 may also write 14, its experimental "main" opset: not read here, so 13 is the documented maximum |
| 1.12 | 16 | ``torch/onnx/_constants.py``: ``onnx_main_opset = 16`` (the first release with that module) |
| 1.13 .. 2.12 | 17 | ``torch/onnx/_constants.py``: ``ONNX_MAX_OPSET = 17`` |
| 2.13 | 20 | ``torch.onnx._constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET = 20`` (read in the installed torch 2.13.0) |

The ``torch.export``-based exporter (``dynamo=True``, torch 2.x) writes opset 18 and newer
(``DYNAMO_MIN_OPSET``); a lower opset uses the TorchScript exporter. Its maximum: 18 in torch 2.0 .. 2.12
(``torch.onnx.ExportOptions.opset_version``: "Defaults to the latest supported ONNX opset version: 18"), 23 in
torch 2.13 (``torch.onnx._constants.ONNX_MAX_OPSET``, read in the installed 2.13.0).

TensorRT's ONNX parser: the highest opset it reads, from onnx-tensorrt's ``docs/operators.md`` on each
release branch ("TensorRT X supports operators up to Opset N" / "in the inclusive range of opset 9 to opset
N"), and NVIDIA's "ONNX Opset Guide" (docs.nvidia.com/deeplearning/tensorrt/latest/reference/onnx-opset-guide.html):

| TensorRT | max opset | source |
|---|---|---|
| 8.2 (and older; 8.3, 8.4 taken as 8.2) | 13 | onnx-tensorrt release/8.2-GA docs/operators.md: "up to Opset 13" (7.2's says the same) |
| 8.5, 8.6 | 17 | release/8.5-GA and release/8.6-GA docs/operators.md: "up to Opset 17" |
| 9.2 .. 10.14 | 19 | release/9.2 docs/operators.md: "up to Opset 19" |
| 10.15 .. 11.x | 24 | TensorRT 10.15 and 11.2 operators.md: "inclusive range of opset 9 to opset 24" |

TensorRT-RTX has no row: pass None (its parser reads what the ONNX Runtime CPU tests here write).
The lowest opset accepted is 9: torch's base opset (``torch/onnx/README.md``) and the lowest the TensorRT
parser is documented to read (ONNX Opset Guide: "backward compatible to opset 9").
"""

from trtkit.errors import InputError
from trtkit.versions import parse_version

DEFAULT_OPSET = 17  # what an export writes when nothing lower is needed (TorchScript exporter)
DYNAMO_MIN_OPSET = 18  # the torch.export-based exporter writes opset 18 and newer
MIN_OPSET = 9

# (torch release, highest opset its TorchScript exporter writes), ascending: see the module docstring
TORCH_MAX_OPSET = (((1, 8, 0), 13), ((1, 12, 0), 16), ((1, 13, 0), 17), ((2, 13, 0), 20))
# (torch release, highest opset its torch.export-based (dynamo) exporter writes): see the module docstring
TORCH_DYNAMO_MAX_OPSET = (((2, 0, 0), 18), ((2, 13, 0), 23))
# (TensorRT release, highest opset its ONNX parser reads), ascending: see the module docstring
TENSORRT_MAX_OPSET = (((8, 2, 0), 13), ((8, 5, 0), 17), ((9, 2, 0), 19), ((10, 15, 0), 24))


def _row(table, version):
    """The value of the last row at or below ``version`` (the first row's below it)."""
    value = table[0][1]
    for release, limit in table:
        if version >= release:
            value = limit
    return value


def torch_max_opset(torch_version, dynamo=False):
    """The highest opset torch ``torch_version``'s TorchScript exporter (``dynamo``: its torch.export-based one)
    writes."""
    return _row(TORCH_DYNAMO_MAX_OPSET if dynamo else TORCH_MAX_OPSET,
                parse_version(torch_version, what="torch version"))


def tensorrt_max_opset(tensorrt_version):
    """The highest opset TensorRT ``tensorrt_version``'s ONNX parser reads (None for None: no TensorRT)."""
    if tensorrt_version is None:
        return None
    return _row(TENSORRT_MAX_OPSET, parse_version(tensorrt_version, what="TensorRT version"))


def parse_opset(value):
    """``--opset``'s value -> int (None stays None); InputError for a non-number or one below MIN_OPSET."""
    if value is None:
        return None
    try:
        opset = int(value)
    except (TypeError, ValueError):
        raise InputError("--opset takes a number, got {!r}".format(value), hint="e.g. --opset 13")
    if opset < MIN_OPSET:
        raise InputError("--opset {} is below opset {}, the oldest torch and TensorRT read".format(opset, MIN_OPSET),
                         hint="use --opset {} or higher (13 for a Jetson Nano with TensorRT 8.2)".format(MIN_OPSET))
    return opset


def choose_opset(torch_version, tensorrt_version=None, requested=None, dynamo=False):
    """The opset to export at: ``requested`` when both torch and TensorRT can (InputError when not), else the
    default (DEFAULT_OPSET, or DYNAMO_MIN_OPSET with ``dynamo``) lowered to what both support.

    ``torch_version``: torch's ``__version__``; ``tensorrt_version``: the target TensorRT's, or None when the
    export is not for TensorRT (ONNX Runtime, OpenVINO, TensorRT-RTX). ``dynamo``: the ``torch.export``-based
    exporter, which has its own (higher) range.
    """
    requested = parse_opset(requested)
    torch_limit = torch_max_opset(torch_version, dynamo)
    trt_limit = tensorrt_max_opset(tensorrt_version)
    if requested is not None:
        if torch_limit is not None and requested > torch_limit:
            raise InputError("--opset {} is above what torch {}'s exporter writes (opset {})".format(
                requested, torch_version, torch_limit), hint="use --opset {} or lower".format(torch_limit))
        if trt_limit is not None and requested > trt_limit:
            raise InputError("--opset {} is above what TensorRT {}'s ONNX parser reads (opset {})".format(
                requested, tensorrt_version, trt_limit), hint="use --opset {} or lower".format(trt_limit))
        return requested
    chosen = DYNAMO_MIN_OPSET if dynamo else DEFAULT_OPSET
    for limit in (torch_limit, trt_limit):
        if limit is not None:
            chosen = min(chosen, limit)
    return chosen
