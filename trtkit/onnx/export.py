"""PyTorch -> ONNX with a dynamic batch axis, validated before anyone builds on it.

The export is checked twice: by ``onnx.checker`` and by running ONNX Runtime
against PyTorch on real images (largest logit difference and top-1 agreement).
A difference above tolerance is an error, never a warning: every variant and
engine downstream inherits it.

Exporters: torch's current one (``torch.export``-based, ``dynamo=True``) when
it is there, else the TorchScript-based one (the only one in torch 1.10 on a
Jetson Nano). ``exporter="torchscript"`` forces the old one; a failure of the
new one falls back to it with a warning.

The opset comes from ``trtkit.onnx.opsets.choose_opset``: the highest both the installed torch and the
target TensorRT read (opset 13 for TensorRT 8.2 on a Jetson Nano), or the one asked for (``--opset``) when
both can. Below opset 18 the TorchScript exporter writes it (the torch.export-based one starts at 18).
"""

import inspect
import warnings

import numpy as np

from trtkit import log
from trtkit.deps import available, require
from trtkit.errors import InputError, VerificationFailed, first_line
from trtkit.fileio import atomic_path
from trtkit.onnx.opsets import DEFAULT_OPSET, DYNAMO_MIN_OPSET, choose_opset  # noqa: F401 (DEFAULT_OPSET: kept here)

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
EXPORTERS = ("auto", "dynamo", "torchscript")


class ExportReport(object):
    """What the export did and how well ONNX Runtime matched PyTorch."""

    def __init__(self, exporter, opset, max_abs_diff, top1_agreement, images):
        self.exporter = exporter
        self.opset = opset
        self.max_abs_diff = max_abs_diff
        self.top1_agreement = top1_agreement
        self.images = images

    def to_dict(self):
        return {"exporter": self.exporter, "opset": self.opset, "max_abs_diff": self.max_abs_diff,
                "top1_agreement": self.top1_agreement, "images": self.images}


def _has_dynamo_exporter(torch):
    try:
        params = inspect.signature(torch.onnx.export).parameters
    except (TypeError, ValueError):
        return False
    return "dynamo" in params and available("onnxscript")


def export_onnx(model, path, exporter="auto", opset=None, example=None, contract=None, image_sizes=None,
                tensorrt_version=None):
    """Export ``model`` (eval mode, CPU) to ``path`` atomically; returns (exporter used, opset).

    ``opset``: the opset asked for (None: chosen); ``tensorrt_version``: the TensorRT the ONNX is for (its
    parser's highest opset caps the choice; None: not for TensorRT). See ``trtkit.onnx.opsets``.

    ``contract`` is the model's InputContract (default: ``model.input_contract``, which trtkit's own
    models carry); it sets the example input's shape and is recorded in the ONNX metadata. ``image_sizes``
    (smallest, largest): height and width become dynamic axes too (and a map output's, which follows them);
    the export is checked to run at the smallest size.
    """
    torch = require("torch", "exporting to ONNX")
    require("onnx", "exporting to ONNX")
    if exporter not in EXPORTERS:
        raise InputError("unknown exporter '{}'".format(exporter), hint="use one of " + ", ".join(EXPORTERS))
    model = model.eval().cpu()
    contract = contract or model.input_contract
    if example is None:
        example = torch.zeros((2,) + contract.shape, dtype=torch.float32)
    use_dynamo = exporter == "dynamo" or (exporter == "auto" and _has_dynamo_exporter(torch))
    if use_dynamo and exporter == "auto" and image_sizes and \
            getattr(model, "image_sizes_exporter", None) == "torchscript":  # the model knows torch.export
        use_dynamo = False  # fixes its sizes (a detector's: models.detection.export); trying costs a minute
    requested = opset
    if exporter == "dynamo" and not _has_dynamo_exporter(torch):
        raise InputError("this torch has no dynamo ONNX exporter", hint="use --exporter torchscript")
    if use_dynamo:
        dynamo_opset = choose_opset(torch.__version__, tensorrt_version, opset, dynamo=True)
        if dynamo_opset < DYNAMO_MIN_OPSET:
            if exporter == "dynamo":
                raise InputError("the dynamo exporter writes opset {} or newer, not {}".format(
                    DYNAMO_MIN_OPSET, dynamo_opset), hint="use --exporter torchscript (or auto) for this opset")
            use_dynamo = False
    opset = choose_opset(torch.__version__, tensorrt_version, opset, dynamo=use_dynamo)
    output = output_name(model)
    axes = _dynamic_axes(torch, model, example, image_sizes, output)
    with atomic_path(path) as tmp:
        if use_dynamo:
            try:
                used = _export_dynamo(torch, model, example, tmp, opset, image_sizes, output)
                if image_sizes:  # torch.export may specialize a size it cannot keep symbolic (a detector's
                    # 1x1 top level: a size-1 guard), and the ONNX comes out fixed at the example's size
                    _check_runs_at(tmp, example, image_sizes[0])
            except Exception as exc:
                if exporter == "dynamo":
                    raise
                log.warn("the torch.export-based exporter failed ({}); using the TorchScript one".format(
                    first_line(exc, 160)))
                used = _export_torchscript(torch, model, example, tmp,
                                           choose_opset(torch.__version__, tensorrt_version, requested), axes, output)
        else:
            used = _export_torchscript(torch, model, example, tmp, opset, axes, output)
        _finish(tmp, contract, getattr(model, "detection_head", None))
        if image_sizes and used[0] != "dynamo":  # a dynamo export was checked above
            _check_runs_at(tmp, example, image_sizes[0])
    return used


def output_name(model):
    """The exported output's name: the model's own (``output_name``: a detector's ``decoded``), else
    ``OUTPUT_NAME``."""
    return getattr(model, "output_name", None) or OUTPUT_NAME


def _dynamic_axes(torch, model, example, image_sizes, output=OUTPUT_NAME):
    """TorchScript's ``dynamic_axes``: the batch; with ``image_sizes`` H and W of the input, and of the output
    when it is a map at the input's size (a segmentation model)."""
    axes = {INPUT_NAME: {0: "batch"}, output: {0: "batch"}}
    if image_sizes:
        axes[INPUT_NAME].update({2: "height", 3: "width"})
        with torch.no_grad():
            out = model(example[:1])
        if hasattr(out, "dim") and out.dim() == 4 and tuple(out.shape[2:]) == tuple(example.shape[2:]):
            axes[output].update({2: "height", 3: "width"})
        elif getattr(model, "detection_head", None) is not None:  # decoded [N, A, 4 + C]: A follows H and W
            axes[output][1] = "anchors"
    return axes


def _check_runs_at(path, example, size):
    """InputError unless the ONNX at ``path`` runs at ``size`` x ``size`` (its H and W really are dynamic)."""
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    x = np.zeros((1, example.shape[1], size, size), dtype=np.float32)
    try:
        with OnnxRuntimeRunner(path, providers=["CPUExecutionProvider"]) as runner:
            runner.infer(x)
    except Exception as exc:
        raise InputError("the export does not run at {0}x{0} ({1})".format(
            size, first_line(exc, 200)),
            hint="this model may need a fixed image size: drop --image-sizes, or raise its smallest size")


def _export_torchscript(torch, model, example, path, opset, axes=None, output=OUTPUT_NAME):
    kwargs = dict(input_names=[INPUT_NAME], output_names=[output], opset_version=opset,
                  dynamic_axes=axes or {INPUT_NAME: {0: "batch"}, output: {0: "batch"}}, do_constant_folding=True)
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(model, (example,), path, **kwargs)
    return "torchscript", opset


def _export_dynamo(torch, model, example, path, opset, image_sizes=None, output=OUTPUT_NAME):
    batch = torch.export.Dim("batch", min=1, max=4096)
    shapes = {0: batch}
    if image_sizes:
        for axis, name in ((2, "height"), (3, "width")):
            size = int(example.shape[axis])
            shapes[axis] = torch.export.Dim(name, min=min(image_sizes[0], size), max=max(image_sizes[1], size))
    import logging
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "torch._dynamo", "torch.export", "onnxscript")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.no_grad():
                torch.onnx.export(model, (example,), path, dynamo=True, input_names=[INPUT_NAME],
                                  output_names=[output], opset_version=opset,
                                  dynamic_shapes=(shapes,), external_data=False, verbose=False,
                                  report=False)
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    return "dynamo", opset


def _finish(path, contract, detection_head=None):
    """One self-contained file (TensorRT parsers and copies expect that for small models) that carries the
    model's input contract (and a detector's head), so a later ``--onnx`` build of it preprocesses (and
    selects) the same way."""
    import os
    onnx = require("onnx")
    from trtkit.onnx.load import set_contract_metadata, set_detection_metadata
    model = onnx.load(path)
    set_contract_metadata(model, contract)
    if detection_head is not None:
        set_detection_metadata(model, detection_head)
    onnx.save(model, path, save_as_external_data=False)
    if os.path.exists(path + ".data"):
        os.remove(path + ".data")


def torch_logits(model, images, batch_size=64):
    """FP32 PyTorch logits for a numpy batch (the reference every variant is compared with)."""
    torch = require("torch")
    model = model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, images.shape[0], batch_size):
            chunk = torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size]))
            outputs.append(model(chunk).float().numpy())
    return np.concatenate(outputs)


def validate_export(onnx_path, reference_logits, images, tolerance=1e-3, batch_size=32, comparison=None):
    """Check an exported ONNX against PyTorch logits on the same images; raise above tolerance. The agreement
    is ``comparison``'s (a ``verify.Comparison`` or ``dense.DenseComparison``: the model's decision rule),
    else that of the arg-max over axis 1."""
    from trtkit.onnx.load import load_onnx
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    load_onnx(onnx_path, check=True)
    with OnnxRuntimeRunner(onnx_path, providers=["CPUExecutionProvider"]) as runner:
        got = np.concatenate([runner.infer(images[s:s + batch_size]) for s in range(0, len(images), batch_size)])
        single = runner.infer(images[:1])  # the batch axis really is dynamic
    diff = float(np.max(np.abs(got - reference_logits)))
    diff = max(diff, float(np.max(np.abs(single - reference_logits[:1]))))
    if comparison is not None:
        comparison.update(got, reference_logits)
        agreement = comparison.result()["top1_agreement"]
    else:
        agreement = float(np.mean(got.argmax(1) == reference_logits.argmax(1)))
    if not np.isfinite(diff) or diff > tolerance:
        raise VerificationFailed("the ONNX export differs from PyTorch by {:.3g} (tolerance {:.1g})".format(
            diff, tolerance), hint="re-run with --exporter torchscript, or report the model to trtkit")
    return diff, agreement
