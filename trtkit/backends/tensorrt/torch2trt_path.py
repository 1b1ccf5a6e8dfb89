"""``--via torch2trt``: convert the PyTorch model directly with torch2trt, then save engine + sidecar.

torch2trt is not on PyPI (Jetson users build it from source), so it is only
imported here; without it the option fails with how to get it. Its engine is
written in the same format as the ONNX path's, so the runner, verification and
benchmarks treat it the same way.
"""

import os
import time

from trtkit import log
from trtkit.backends.tensorrt import api, gpu as gpu_probe
from trtkit.backends.tensorrt.sidecar import make_sidecar, write_sidecar
from trtkit.deps import require
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.fileio import write_bytes


def build_with_torch2trt(flavour, precision, out_path, options):
    if flavour != "tensorrt":
        raise InputError("--via torch2trt works with --backend tensorrt", hint="use --backend tensorrt")
    converter = require("torch2trt", "--via torch2trt")
    torch = require("torch")
    trt = api.load(flavour)
    ctx = options.get("context")
    if ctx is None or ctx.torch_model is None:
        raise InputError("--via torch2trt converts a PyTorch model; this build has none (--onnx given)",
                         hint="pass --checkpoint, or drop --via")
    gpu = gpu_probe.probe()
    if gpu is None or not torch.cuda.is_available():
        raise DeviceUnavailable("torch2trt converts on a CUDA GPU and none is usable here")
    from trtkit.backends.tensorrt.builder import default_batch, parse_batch
    low, opt, high = parse_batch(options.get("batch") or default_batch(options))
    size = ctx.contract.size
    model = ctx.torch_model.eval().cuda()
    example = torch.zeros((opt, ctx.contract.channels, size, size), device="cuda")
    kwargs = {"fp16_mode": precision in ("fp16", "int8"), "max_batch_size": high}
    if options.get("workspace"):
        kwargs["max_workspace_size"] = int(float(options["workspace"]) * (1 << 20))
    if precision == "int8":
        from trtkit.backends.tensorrt.calibrator import calibration_images
        images = calibration_images(options)
        kwargs["int8_mode"] = True
        kwargs["int8_calib_dataset"] = [[torch.from_numpy(images[i:i + 1]).cuda()] for i in range(len(images))]
    start = time.time()
    with torch.no_grad():
        module = converter.torch2trt(model, [example], **kwargs)
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
