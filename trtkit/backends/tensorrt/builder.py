"""ONNX -> serialized engine + sidecar, for every TensorRT from 8.2 to 11.x and TensorRT-RTX.

Precision comes from the ONNX graph (FP16 ONNX, ``tensorrt`` Q/DQ INT8 ONNX).
Where the TensorRT still has precision builder flags (8.x-10.x) the network is
weakly typed and the flags the graph needs are set; where they are gone
(11.x, RTX) the network is strongly typed. On TensorRT <= 10 the legacy implicit
INT8 path (FP32 ONNX + calibrator or calibration cache) is kept for users who
have a cache from another tool.
"""

import os
import time

from trtkit import log
from trtkit.backends.base import BuildInputs
from trtkit.backends.tensorrt import api, gpu as gpu_probe
from trtkit.backends.tensorrt.logger import capturing_logger, collector_paused, reason
from trtkit.backends.tensorrt.options import TensorRTOptions
from trtkit.backends.tensorrt.sidecar import make_sidecar, write_sidecar
from trtkit.errors import InputError
from trtkit.fileio import cache_dir, sha256_file, write_bytes
from trtkit.precision.types import is_quantized

def timing_cache_path(options, flavour, version, gpu):
    if options.timing_cache:
        return options.timing_cache
    where = "sm" + gpu["compute_capability"].replace(".", "") if gpu else "nogpu"
    name = "timing-{}-{}-{}.cache".format(flavour, ".".join(str(v) for v in version), where)
    return os.path.join(cache_dir("tensorrt"), name)


def rtx_default_targets(trt, gpu):
    """TensorRT-RTX targets when none are given: this GPU (CURRENT) when TensorRT-RTX supports it.

    Without a GPU, or on one it has no target for (e.g. Hopper), TensorRT-RTX's
    own default set is kept (SM 8.0/8.6/8.9/12.0; 7.5 only when named) and the
    engine is recorded as not runnable here.
    """
    if gpu is None:
        return None
    if api.rtx_supports(trt, gpu["compute_capability"]):
        return ["current"]
    log.warn("TensorRT-RTX {} has no target for {} (SM {}): building for its default GPUs ({}); the engine will "
             "not run here".format(trt.__version__, gpu["name"], gpu["compute_capability"],
                                   ", ".join(api.rtx_targets(trt))))
    return None


def _source_and_mode(trt, flavour, onnx_path, precision, inputs, options, fast):
    """Which ONNX to parse and how: (path, precision actually built, int8 path, note).

    ``mixed`` (INT8 Q/DQ on some layers, float elsewhere: the precision search's variant) builds like
    Q/DQ INT8.
    """
    if is_quantized(precision) and fast.get("int8") is False:
        note = "this GPU has no fast INT8 (e.g. Jetson Nano): building FP16 instead of INT8"
        log.warn(note)
        return _fp16_onnx(inputs), "fp16", None, note
    if precision == "fp16" and fast.get("fp16") is False:
        log.warn("this GPU has no fast FP16: the FP16 engine may be no faster than FP32")
    if precision == "mixed":
        return onnx_path, precision, "qdq", None
    if precision != "int8":
        return onnx_path, precision, None, None
    mode = options.resolved_int8_path()
    if mode == "qdq":
        return onnx_path, precision, "qdq", None
    if not api.supports_calibrator(trt):
        raise InputError("{} {} has no INT8 calibrators (implicit INT8 was removed)".format(
            flavour, trt.__version__), hint="use the Q/DQ INT8 path: drop --calib-cache / --int8-path implicit")
    if not inputs.fp32_onnx:
        raise InputError("implicit INT8 needs the FP32 ONNX of the build")
    return inputs.fp32_onnx, precision, "implicit", None


def _fp16_onnx(inputs):
    """The FP16 ONNX an INT8 request falls back to, written beside the build's other files."""
    if not inputs.fp32_onnx or not inputs.work_dir:
        raise InputError("no fast INT8 on this GPU and no FP32 ONNX to fall back from",
                         hint="build --precision fp16 instead")
    from trtkit.precision.fp16 import convert_fp16
    stem = os.path.basename(inputs.fp32_onnx)
    for suffix in (".onnx", ".fp32"):
        stem = stem[:-len(suffix)] if stem.endswith(suffix) else stem
    path = os.path.join(inputs.work_dir, stem + ".int8-fallback.fp16.onnx")
    if not os.path.isfile(path):
        convert_fp16(inputs.fp32_onnx, path)
    return path


def _parse(trt, builder, logger, onnx_path):
    network = builder.create_network(api.network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    with open(onnx_path, "rb") as handle:
        data = handle.read()
    if not parser.parse(data, os.path.abspath(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise InputError("TensorRT cannot parse {}: {}".format(os.path.basename(onnx_path),
                                                               "; ".join(errors[:3])[:600]),
                         hint="check the ONNX with onnx.checker; INT8 needs symmetric Q/DQ without quantized bias")
    return network, parser


def profile_shapes(net_inputs, batch_profile, image_shape, image_sizes=None):
    """{input name: [min, opt, max] shape lists} for the parsed network's inputs, or None when no dim is dynamic.

    ``net_inputs`` is [(name, shape)] with -1 for dynamic dims, ``batch_profile`` the (min, opt, max)
    batch, ``image_shape`` the contract's (C, H, W) or None. A dynamic batch takes the batch profile; a
    dynamic C, H or W of a 4-D input takes the contract's size at min = opt = max (a paddle2onnx
    classifier with dynamic H and W builds at its 48x192 contract: one size, the one it is used at), or,
    with ``image_sizes`` (smallest, largest), a dynamic H or W spans from the smaller of the smallest and the
    contract's to the larger of the largest and the contract's, optimized at the contract's (``--image-sizes``).
    Any other dynamic dim has no size to take: an InputError naming the input.
    """
    if not any(d < 0 for _, shape in net_inputs for d in shape):
        return None
    record = {}
    for name, shape in net_inputs:
        rest = []
        for axis, d in enumerate(shape[1:]):
            if d < 0 and (image_shape is None or len(shape) != 4):
                raise InputError("input {} has dynamic dims {} besides the batch".format(name, list(shape)),
                                 hint="pass --input-size, or export with a fixed image size")
            size = int(image_shape[axis]) if d < 0 else int(d)
            spans = d < 0 and axis >= 1 and image_sizes is not None
            rest.append((min(size, image_sizes[0]), size, max(size, image_sizes[1])) if spans else (size,) * 3)
        batches = batch_profile if shape[0] < 0 else (shape[0],) * 3
        record[name] = [[int(b)] + [dims[k] for dims in rest] for k, b in enumerate(batches)]
    return record


def _add_profile(builder, config, network, inputs, options):
    """The optimization profile of ``profile_shapes`` added to ``config``: (record, profile) or (None, None)."""
    net_inputs, _ = api.network_io(network)
    image = inputs.contract.shape if inputs.contract is not None else None
    record = profile_shapes([(n, s) for n, s, _ in net_inputs], options.profile(inputs.default_batch), image,
                            getattr(inputs, "image_sizes", None))
    if record is None:
        return None, None
    profile = builder.create_optimization_profile()
    for name, shapes in record.items():
        profile.set_shape(name, tuple(shapes[0]), tuple(shapes[1]), tuple(shapes[2]))
    config.add_optimization_profile(profile)
    return record, profile


SHARED_DIM_NAME = "Input dimensions with this name"


def refusal_hint(said):
    """What to do about a refused build, from TensorRT's reason ``said`` (``logger.reason``; "" when none)."""
    if not said:
        return "try --workspace with more MiB, or another precision"
    if SHARED_DIM_NAME in said:
        return ("the ONNX names two dynamic input dims alike, which TensorRT reads as one size: build it with "
                "'trtkit build --onnx' (it names them apart) or rename the dim_params")
    return "the reason is TensorRT's own; --verbose shows its other messages"


def _timing_cache(trt, config, path):
    """Whether the cache file existed (was reused); the cache itself is set by ``api.set_timing_cache``."""
    data = b""
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            data = handle.read()
    api.set_timing_cache(trt, config, data)
    return bool(data)


def build_engine(flavour, onnx_path, precision, out_path, inputs=None, calibration=None):
    """Build ``out_path`` (+ ``out_path.json``) from ``onnx_path``; returns the manifest's backend info.

    ``inputs`` is a ``BuildInputs`` (its ``tensorrt`` holds the TensorRTOptions),
    ``calibration`` the build's ``Int8Calibration`` (images, ranges, TensorRT cache)
    for the implicit INT8 path. Python's garbage collector is paused meanwhile
    (``logger.collector_paused``: a collection inside TensorRT's log callback can deadlock).
    """
    with collector_paused():
        return _build_engine(flavour, onnx_path, precision, out_path, inputs, calibration)


def _build_engine(flavour, onnx_path, precision, out_path, inputs, calibration):
    inputs = inputs or BuildInputs()
    options = inputs.tensorrt or TensorRTOptions()
    trt = api.load(flavour)
    version = api.version_tuple(trt)
    gpu = gpu_probe.probe()
    if flavour == "tensorrt" and gpu is None:
        raise InputError("TensorRT builds engines on the GPU that runs them, and no NVIDIA GPU was found",
                         hint="use --backend tensorrt-rtx to build ahead of time, or onnxruntime")
    start = time.time()
    messages = []  # TensorRT's warnings and errors: a refusal quotes them
    logger = capturing_logger(trt, messages, forward=True)
    builder = trt.Builder(logger)
    fast = api.fast_precision(builder)
    if gpu is not None:
        fast = {"fp16": fast["fp16"] if fast["fp16"] is not None else gpu_probe.fast_fp16(gpu["compute_capability"]),
                "int8": fast["int8"] if fast["int8"] is not None else gpu_probe.fast_int8(gpu["compute_capability"])}
    source, built_precision, int8_path, note = _source_and_mode(trt, flavour, onnx_path, precision, inputs, options,
                                                                fast)
    if options.dla_core is not None and built_precision not in ("fp16", "int8"):
        raise InputError("DLA runs FP16 and INT8 layers only; a {} engine would run on the GPU, not DLA core {}".format(
            built_precision.upper(), options.dla_core), hint="build --precision fp16 or int8 with --dla-core")
    network, parser = _parse(trt, builder, logger, source)
    config = builder.create_builder_config()
    strongly_typed = api.strongly_typed_only(trt)
    flags = [] if strongly_typed else api.set_precision_flags(trt, config, built_precision)
    workspace = int(options.workspace_mib * (1 << 20)) if options.workspace_mib else api.default_workspace(config)
    if workspace:
        api.set_workspace(trt, config, workspace)
    profile_record, trt_profile = _add_profile(builder, config, network, inputs, options)
    targets = options.compute_capabilities or (rtx_default_targets(trt, gpu) if flavour == "tensorrt-rtx" else None)
    if targets:
        api.set_compute_capabilities(trt, config, targets)
    if options.dla_core is not None:
        api.set_dla(trt, builder, config, options.dla_core)
    calibrator = None
    if int8_path == "implicit":
        from trtkit.backends.tensorrt.calibrator import make_calibrator
        first = list(profile_record.values())[0] if profile_record else None
        batch = first[1][0] if first else max(1, network.get_input(0).shape[0])
        calibrator = make_calibrator(trt, network, batch, calibration, options.calib_cache)
        api.set_calibrator(config, calibrator, trt_profile)
    cache_path, cache_reused = None, False
    if api.timing_cache_works(trt):  # not on TensorRT-RTX (no-ops that need a GPU: see the function)
        cache_path = timing_cache_path(options, flavour, version, gpu)
        cache_reused = _timing_cache(trt, config, cache_path)
    try:
        serialized = api.build_serialized(builder, network, config)
    finally:
        if calibrator is not None:
            calibrator.close()  # synchronize, then free its batch buffer
    if calibrator is not None:
        calibrator.raise_if_failed()
    if serialized is None:
        said = reason(messages)
        error = InputError("{} could not build an engine from {}: {}".format(
            flavour, os.path.basename(source), said or "TensorRT gave no reason"), hint=refusal_hint(said))
        error.tensorrt_log = list(messages[-6:])  # for records that keep more than the one line (gpu_check)
        raise error
    write_bytes(out_path, serialized)
    if cache_path:
        write_bytes(cache_path, api.timing_cache_bytes(config))
    seconds = time.time() - start
    net_inputs, net_outputs = api.network_io(network)
    io = [(n, True, s, api.dtype_name(trt, d)) for n, s, d in net_inputs]
    io += [(n, False, s, api.dtype_name(trt, d)) for n, s, d in net_outputs]
    extra = {"precision_requested": precision, "strongly_typed": strongly_typed, "builder_flags": flags,
             "int8_path": int8_path, "compute_capabilities": targets, "dla_core": options.dla_core,
             "workspace_mib": workspace / float(1 << 20) if workspace else None, "via": "onnx"}
    if note:
        extra["note"] = note
    record = make_sidecar(out_path, flavour, version, gpu, built_precision, io, profile_record,
                          sha256_file(source), seconds, extra)
    sidecar = write_sidecar(out_path, record)
    del parser, calibrator, trt_profile
    return {"flavour": flavour, "tensorrt_version": record["tensorrt_version"], "sidecar": os.path.basename(sidecar),
            "gpu": gpu, "precision_built": built_precision, "strongly_typed": strongly_typed, "builder_flags": flags,
            "int8_path": int8_path, "profile": profile_record, "compute_capabilities": targets,
            "timing_cache": {"path": cache_path, "reused": cache_reused} if cache_path else None,
            "note": note}
