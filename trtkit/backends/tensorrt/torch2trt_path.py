"""``--via torch2trt``: convert the PyTorch model directly with torch2trt, then save engine + sidecar.

torch2trt is not on PyPI (Jetson users build it from source), so it is only
imported here; without it the option fails with how to get it. Its engine is
written in the same format as the ONNX path's, so the runner, verification and
benchmarks treat it the same way.

INT8 calibration follows the torch2trt that is installed: 0.4 copies one image
per dataset item into its batch buffer (``int8_calib_batch_size`` images), 0.5+
hands TensorRT each item as one whole batch (``calibration_dataset``).
"""

import inspect
import os
import time

import numpy as np

from trtkit import log
from trtkit.backends.tensorrt import api, gpu as gpu_probe
from trtkit.backends.tensorrt.sidecar import make_sidecar, write_sidecar
from trtkit.deps import require
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.fileio import write_bytes
from trtkit.models.placement import on_device


def build_with_torch2trt(flavour, precision, out_path, inputs, options, calibration=None):
    """Convert ``inputs.torch_model`` with torch2trt; ``options`` is the TensorRTOptions."""
    if flavour != "tensorrt":
        raise InputError("--via torch2trt works with --backend tensorrt", hint="use --backend tensorrt")
    converter = require("torch2trt", "--via torch2trt")
    if inputs.torch_model is None:
        raise InputError("--via torch2trt converts a PyTorch model; this build has none (--onnx given)",
                         hint="pass --checkpoint, or drop --via")
    torch = require("torch")
    trt = api.load(flavour)
    gpu = gpu_probe.probe()
    if gpu is None or not torch.cuda.is_available():
        raise DeviceUnavailable("torch2trt converts on a CUDA GPU and none is usable here")
    low, opt, high = options.profile(inputs.default_batch)
    contract = inputs.contract
    kwargs = {"fp16_mode": precision in ("fp16", "int8"), "max_batch_size": high}
    if options.workspace_mib:
        kwargs["max_workspace_size"] = int(options.workspace_mib * (1 << 20))
    if precision == "int8":
        if calibration is None:
            raise InputError("torch2trt INT8 needs the build's calibration images", hint="build --precision int8")
        items, extra = calibration_dataset(calibration.image_array(), opt, copies_per_image(converter.torch2trt))
        kwargs["int8_mode"] = True
        kwargs["int8_calib_dataset"] = [[torch.from_numpy(array).cuda() for array in item] for item in items]
        kwargs.update(extra)
    start = time.time()
    module = convert(converter.torch2trt, inputs.torch_model, (opt,) + contract.shape, kwargs, "cuda")
    engine = module.engine
    write_bytes(out_path, engine.serialize())
    seconds = time.time() - start
    io = api.engine_io(trt, engine)
    shapes = {name: [list(s) for s in api.profile_shape(engine, name, i) or ()]
               for i, (name, is_input, shape, _) in enumerate(io) if is_input and shape[0] < 0}
    record = make_sidecar(out_path, flavour, api.version_tuple(trt), gpu, precision, io, shapes or None,
                          None, seconds, {"precision_requested": precision, "via": "torch2trt"})
    sidecar = write_sidecar(out_path, record)
    log.info("torch2trt: {} engine in {:.1f}s".format(precision, seconds))
    return {"flavour": flavour, "tensorrt_version": record["tensorrt_version"], "via": "torch2trt",
            "sidecar": os.path.basename(sidecar), "gpu": gpu, "precision_built": precision}


def calibration_batches(images, batch):
    """torch2trt's INT8 dataset items as numpy arrays: whole batches of ``batch`` images each.

    torch2trt hands TensorRT each item's data pointer as one batch of the
    profile's OPT size, so a single-image item would be read past its end.
    """
    from trtkit.backends.tensorrt.calibrator import batch_spans
    spans = batch_spans(len(images), batch)
    if not spans:
        raise InputError("{} calibration images are fewer than one batch of {}".format(len(images), batch),
                         hint="use more --calib-images or a smaller --batch OPT")
    return [np.ascontiguousarray(images[start:stop], dtype=np.float32) for start, stop in spans]


def convert(torch2trt, model, example_shape, kwargs, device="cuda"):
    """``torch2trt(model, [example], **kwargs)`` with the model lent on ``device`` in eval mode.

    The caller's model is the build's PyTorch reference: the verification that
    follows runs it where it was (the CPU). ``on_device`` gives it back on its
    own device and in its own mode, also when the conversion fails.
    """
    torch = require("torch")
    with on_device(model, device) as placed, torch.no_grad():
        return torch2trt(placed, [torch.zeros(tuple(example_shape), device=device)], **kwargs)


def copies_per_image(torch2trt):
    """True for torch2trt <= 0.4 (its ``torch2trt`` has ``int8_calib_batch_size``): its calibrator copies one
    image per dataset item into a batch buffer. False for 0.5+, whose calibrator hands TensorRT each item as
    one whole batch. Read from the function's parameters, never from a version string."""
    return "int8_calib_batch_size" in inspect.signature(torch2trt).parameters


def calibration_dataset(images, batch, per_image):
    """torch2trt's ``int8_calib_dataset`` as numpy (each item a list: one array per network input) and the
    keywords that go with it, for the example batch ``batch`` (the network's input batch).

    torch2trt 0.4.0 (``torch2trt/calibration.py``, ``DatasetCalibrator``):
    its buffers are ``(batch_size,) + input.shape[1:]`` and ``get_batch``
    does ``buffer[i].copy_(tensor)`` for ``batch_size`` items, so an item is
    one image (C, H, W), and ``int8_calib_batch_size`` must be the network's
    batch (TensorRT reads a whole input from the buffer); a whole-batch item
    cannot be copied into ``buffer[i]`` (the crash). Items are a multiple of
    ``batch`` (it wraps around with ``count % len(dataset)`` otherwise).
    torch2trt 0.5+ (``torch2trt/dataset_calibrator.py``): ``get_batch`` returns
    each item's ``data_ptr()`` and ``get_batch_size`` is 1, so an item is a
    whole batch of the calibration profile's OPT shape (``calibration_batches``).
    """
    if not per_image:
        return [[chunk] for chunk in calibration_batches(images, batch)], {}
    whole = calibration_batches(images, batch)
    return [[image] for chunk in whole for image in chunk], {"int8_calib_batch_size": int(batch)}
