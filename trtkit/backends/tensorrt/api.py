"""The API bridge: one place that knows how TensorRT 8.2 ... 11.x and TensorRT-RTX differ.

Every version-dependent choice is made by testing for an attribute with
``has(obj, name)``, never by reading a version string. ``API_TABLE`` records,
as data, which API style has which attribute (from NVIDIA's docs, summarized
in the project's TRT_NOTES); ``tests/test_tensorrt_api.py`` scans this package
with ``ast`` and checks that each attribute it touches exists in every API style
that can reach that line, and checks the "rtx" column against the real
``tensorrt_rtx`` module.

``docs/tensorrt-api.md`` is the same knowledge for people: one row per
version-dependent operation, what 8.2, 8.6, 10.x, 11.x and TensorRT-RTX call,
the function here that bridges it, and the NVIDIA page or binding source of each
cell. ``tests/test_tensorrt_api_table.py`` keeps the two in step: every function
here that tests an attribute is in the table, every function the table names
exists, the table agrees with ``API_TABLE`` and (its RTX column) with the
installed ``tensorrt_rtx``, and no module outside this one touches an attribute
the table lists.
"""

import importlib

from trtkit.deps import require
from trtkit.errors import InputError
from trtkit.versions import parse_version
from trtkit.precision.types import is_quantized

STYLES = ("8.2", "8.5", "10", "11", "rtx")
ALL = STYLES
_V8 = ("8.2", "8.5")
_TO_10 = ("8.2", "8.5", "10")
_FROM_85 = ("8.5", "10", "11", "rtx")
_STRONG = ("10", "11", "rtx")

# attribute name -> (where it lives, API styles that have it). "module" is the tensorrt module itself.
API_TABLE = {
    "__version__": ("module", ALL), "Logger": ("module", ALL), "Builder": ("module", ALL),
    "Runtime": ("module", ALL), "OnnxParser": ("module", ALL), "BuilderFlag": ("module", ALL),
    "NetworkDefinitionCreationFlag": ("module", ALL), "MemoryPoolType": ("module", _FROM_85),
    "IInt8EntropyCalibrator2": ("module", _TO_10), "IInt8EntropyCalibrator": ("module", _TO_10),
    "IInt8MinMaxCalibrator": ("module", _TO_10), "DeviceType": ("module", ALL),
    "ComputeCapability": ("module", ("rtx",)), "__members__": ("ComputeCapability", ("rtx",)),
    "DataType": ("module", ALL),
    "TensorIOMode": ("module", _FROM_85),
    "WARNING": ("Logger", ALL),
    "FP16": ("BuilderFlag", _TO_10), "INT8": ("BuilderFlag", _TO_10), "GPU_FALLBACK": ("BuilderFlag", ALL),
    "EXPLICIT_BATCH": ("NetworkDefinitionCreationFlag", _TO_10),
    "STRONGLY_TYPED": ("NetworkDefinitionCreationFlag", _STRONG),
    "WORKSPACE": ("MemoryPoolType", _FROM_85), "DLA": ("DeviceType", ALL), "INPUT": ("TensorIOMode", _FROM_85),
    # Builder
    "create_network": ("Builder", ALL), "create_builder_config": ("Builder", ALL),
    "create_optimization_profile": ("Builder", ALL), "build_serialized_network": ("Builder", ALL),
    "num_DLA_cores": ("Builder", ALL),
    "platform_has_fast_fp16": ("Builder", _TO_10), "platform_has_fast_int8": ("Builder", _TO_10),
    # IBuilderConfig
    "max_workspace_size": ("IBuilderConfig", _V8), "set_memory_pool_limit": ("IBuilderConfig", _FROM_85),
    "set_flag": ("IBuilderConfig", ALL), "add_optimization_profile": ("IBuilderConfig", ALL),
    "create_timing_cache": ("IBuilderConfig", ALL), "set_timing_cache": ("IBuilderConfig", ALL),
    "get_timing_cache": ("IBuilderConfig", ALL), "int8_calibrator": ("IBuilderConfig", _TO_10),
    "set_calibration_profile": ("IBuilderConfig", _TO_10),
    "default_device_type": ("IBuilderConfig", ALL), "DLA_core": ("IBuilderConfig", ALL),
    "num_compute_capabilities": ("IBuilderConfig", ("rtx",)), "set_compute_capability": ("IBuilderConfig", ("rtx",)),
    # ITimingCache (also IHostMemory, ICudaEngine)
    "serialize": ("ITimingCache", ALL),
    # INetworkDefinition, ITensor, IOptimizationProfile, OnnxParser
    "num_inputs": ("INetworkDefinition", ALL), "num_outputs": ("INetworkDefinition", ALL),
    "get_input": ("INetworkDefinition", ALL), "get_output": ("INetworkDefinition", ALL),
    "name": ("ITensor", ALL), "shape": ("ITensor", ALL), "dtype": ("ITensor", ALL),
    "set_shape": ("IOptimizationProfile", ALL),
    "parse": ("OnnxParser", ALL), "num_errors": ("OnnxParser", ALL), "get_error": ("OnnxParser", ALL),
    # Runtime, ICudaEngine; IRuntimeConfig (also in late 10.x, which the "10" column does not list)
    "deserialize_cuda_engine": ("Runtime", ALL), "create_execution_context": ("ICudaEngine", ALL),
    "create_runtime_config": ("ICudaEngine", ("11", "rtx")), "ILogger": ("module", ALL),
    "dynamic_shapes_kernel_specialization_strategy": ("IRuntimeConfig", ("rtx",)),
    "DynamicShapesKernelSpecializationStrategy": ("module", ("rtx",)),
    "EAGER": ("DynamicShapesKernelSpecializationStrategy", ("rtx",)),
    "num_io_tensors": ("ICudaEngine", _FROM_85), "get_tensor_name": ("ICudaEngine", _FROM_85),
    "get_tensor_mode": ("ICudaEngine", _FROM_85), "get_tensor_dtype": ("ICudaEngine", _FROM_85),
    "get_tensor_profile_shape": ("ICudaEngine", _FROM_85),
    "num_bindings": ("ICudaEngine", _V8), "get_binding_name": ("ICudaEngine", _V8),
    "binding_is_input": ("ICudaEngine", _V8), "get_binding_dtype": ("ICudaEngine", _V8),
    "get_profile_shape": ("ICudaEngine", _V8),
    # IExecutionContext (get_tensor_shape / get_binding_shape exist on the engine too, same styles)
    "get_tensor_shape": ("IExecutionContext", _FROM_85), "get_binding_shape": ("IExecutionContext", _V8),
    "set_input_shape": ("IExecutionContext", _FROM_85), "set_tensor_address": ("IExecutionContext", _FROM_85),
    "execute_async_v3": ("IExecutionContext", _FROM_85),
    "set_binding_shape": ("IExecutionContext", _V8), "execute_async_v2": ("IExecutionContext", _V8),
}


def styles_having(name):
    """The API styles that have attribute ``name`` (empty when the table does not know it)."""
    entry = API_TABLE.get(name)
    return set(entry[1]) if entry else set()


FLAVOURS = {"tensorrt": "tensorrt", "tensorrt-rtx": "tensorrt_rtx"}
LEGACY_DEFAULT_WORKSPACE_MIB = 256


def has(obj, name):
    """Feature test used for every version-dependent branch (see the module docstring)."""
    return hasattr(obj, name)


# modules that are the same API under another name, tried when the usual one is missing: ``tensorrt_rtx`` is
# only ``from tensorrt_rtx_bindings import *``, and a machine given the wheels by hand may have the bindings alone
FALLBACK_MODULES = {"tensorrt-rtx": ("tensorrt_rtx_bindings",)}


def load(flavour):
    """Import the TensorRT module of ``flavour`` ("tensorrt" or "tensorrt-rtx")."""
    module = try_load(flavour)
    if module is not None:
        return module
    return require(FLAVOURS[flavour], "the {} backend".format(flavour))  # raises, naming the pip extra


def try_load(flavour):
    """The module, or None when it does not import (a broken install raises more than ImportError)."""
    for name in (FLAVOURS[flavour],) + FALLBACK_MODULES.get(flavour, ()):
        try:
            return importlib.import_module(name)
        except Exception:
            continue
    return None


def version_tuple(trt):
    """Every release number of this TensorRT module as integers, e.g. (10, 3, 0, 26) (never compare strings)."""
    return parse_version(trt.__version__, length=None, what="TensorRT version")


def strongly_typed_only(trt):
    """True where precision can only come from the ONNX graph (no FP16/INT8 builder flags: 11.x, RTX)."""
    return not has(trt.BuilderFlag, "FP16")


def network_flags(trt):
    """Flags for ``create_network``: explicit batch where it exists, strongly typed where flags are gone."""
    flags = 0
    kinds = trt.NetworkDefinitionCreationFlag
    if strongly_typed_only(trt):
        if has(kinds, "STRONGLY_TYPED"):
            flags |= 1 << int(kinds.STRONGLY_TYPED)
    elif has(kinds, "EXPLICIT_BATCH"):
        flags |= 1 << int(kinds.EXPLICIT_BATCH)
    return flags


def set_workspace(trt, config, nbytes):
    if has(config, "set_memory_pool_limit"):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(nbytes))
    elif has(config, "max_workspace_size"):
        config.max_workspace_size = int(nbytes)


def set_precision_flags(trt, config, precision):
    """Weakly typed builds (8.x-10.x): FP16 for fp16; INT8 plus FP16 for the non-quantized layers of int8."""
    flags = trt.BuilderFlag
    names = []
    if precision in ("fp16", "int8", "mixed") and has(flags, "FP16"):
        config.set_flag(flags.FP16)
        names.append("FP16")
    if is_quantized(precision) and has(flags, "INT8"):
        config.set_flag(flags.INT8)
        names.append("INT8")
    return names


def fast_precision(builder):
    """{"fp16": bool|None, "int8": bool|None}: None where the query does not exist (11.x, RTX)."""
    result = {"fp16": None, "int8": None}
    if has(builder, "platform_has_fast_fp16"):
        result["fp16"] = bool(builder.platform_has_fast_fp16)
    if has(builder, "platform_has_fast_int8"):
        result["int8"] = bool(builder.platform_has_fast_int8)
    return result


def supports_calibrator(trt):
    return has(trt, "IInt8EntropyCalibrator2")


# the calibrator base classes trtkit derives from (chosen by a cache's header: calibrator.calibrator_class_name);
# in the bindings of release/8.2 .. release/10.16 (python/src/infer/pyInt8.cpp), gone in 11.x (no pyInt8.cpp) and
# in TensorRT-RTX (docs/tensorrt-api.md, "INT8 calibrator")
CALIBRATOR_BASES = ("IInt8EntropyCalibrator2", "IInt8EntropyCalibrator", "IInt8MinMaxCalibrator")


def calibrator_base(trt, class_name):
    """The TensorRT calibrator class ``class_name`` to derive from; InputError where it was removed (11.x, RTX)."""
    if class_name not in CALIBRATOR_BASES or not has(trt, class_name):
        raise InputError("TensorRT {} has no {} (INT8 calibrators were removed)".format(trt.__version__, class_name),
                         hint="use the Q/DQ INT8 path (the default)")
    return getattr(trt, class_name)


def set_calibrator(config, calibrator, profile=None):
    """Implicit INT8 (TensorRT <= 10); with a dynamic batch the calibration runs at the profile's OPT shape."""
    if not has(config, "int8_calibrator"):
        raise InputError("this TensorRT has no INT8 calibrators", hint="use the Q/DQ INT8 path (the default)")
    config.int8_calibrator = calibrator
    if profile is not None and has(config, "set_calibration_profile"):
        config.set_calibration_profile(profile)


def set_compute_capabilities(trt, config, targets):
    """RTX only: build for the given SM targets (["8.6", "8.9"] or ["current"])."""
    if not has(config, "set_compute_capability"):
        raise InputError("--compute-capability is a TensorRT-RTX option",
                         hint="TensorRT builds for the GPU it runs on; drop the option")
    members = []
    for target in targets:
        key = "CURRENT" if target == "current" else "SM" + target.replace(".", "")
        member = getattr(trt.ComputeCapability, key, None)
        if member is None:
            raise InputError("TensorRT-RTX {} cannot target compute capability {}".format(trt.__version__, target),
                             hint="choose from " + ", ".join(sorted(trt.ComputeCapability.__members__)))
        members.append(member)
    config.num_compute_capabilities = len(members)
    for index, member in enumerate(members):
        config.set_compute_capability(member, index)


def build_serialized(builder, network, config):
    """The serialized engine (IHostMemory), or None when TensorRT refuses (its logger says why).

    ``Builder.build_serialized_network`` is in every version trtkit supports;
    ``build_engine`` (deprecated since 8.0) is gone from 10.0, so it is never called.
    """
    return builder.build_serialized_network(network, config)


def timing_cache_works(trt):
    """False on TensorRT-RTX, whose timing cache calls are no-ops (deprecated in 1.2) that force a GPU query
    during ahead-of-time builds, so a CPU-only build would fail. Source:
    https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/timing-cache-migration.html"""
    return not has(trt, "ComputeCapability")


def set_timing_cache(trt, config, data):
    """Give the builder a timing cache read from ``data`` (b"" for a new one); False where none is used (RTX)."""
    if not timing_cache_works(trt):
        return False
    cache = config.create_timing_cache(data)
    config.set_timing_cache(cache, False)
    return True


def timing_cache_bytes(config):
    """The builder's timing cache serialized (an IHostMemory buffer), after a build that used ``set_timing_cache``."""
    return config.get_timing_cache().serialize()


def flavour_name(trt):
    """"TensorRT-RTX" for the tensorrt_rtx module (the only one with ``ComputeCapability``), else "TensorRT"."""
    return "TensorRT-RTX" if has(trt, "ComputeCapability") else "TensorRT"


def set_dla(trt, builder, config, core):
    available = int(builder.num_DLA_cores)
    if core >= available:
        raise InputError("DLA core {} requested, this device has {}".format(core, available),
                         hint="DLA exists on Jetson Xavier and Orin; drop --dla-core elsewhere")
    config.default_device_type = trt.DeviceType.DLA
    config.DLA_core = int(core)
    config.set_flag(trt.BuilderFlag.GPU_FALLBACK)


def network_io(network):
    """(inputs, outputs) as lists of (name, shape tuple, DataType) of a parsed network."""
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    outputs = [network.get_output(i) for i in range(network.num_outputs)]
    return ([(tensor.name, tuple(tensor.shape), tensor.dtype) for tensor in inputs],
            [(tensor.name, tuple(tensor.shape), tensor.dtype) for tensor in outputs])


def engine_io(trt, engine):
    """[(name, is_input, shape tuple, numpy dtype name)] for every I/O tensor of an engine."""
    result = []
    if has(engine, "num_io_tensors"):
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            result.append((name, is_input, tuple(engine.get_tensor_shape(name)),
                           dtype_name(trt, engine.get_tensor_dtype(name))))
    elif has(engine, "num_bindings"):
        for i in range(engine.num_bindings):
            result.append((engine.get_binding_name(i), bool(engine.binding_is_input(i)),
                           tuple(engine.get_binding_shape(i)), dtype_name(trt, engine.get_binding_dtype(i))))
    return result


def profile_shape(engine, name, index):
    """(min, opt, max) shapes of input ``name`` (binding ``index`` on 8.2) in profile 0."""
    if has(engine, "get_tensor_profile_shape"):
        return tuple(tuple(s) for s in engine.get_tensor_profile_shape(name, 0))
    if has(engine, "get_profile_shape"):
        return tuple(tuple(s) for s in engine.get_profile_shape(0, index))
    return None


# TensorRT DataType member -> numpy dtype name. Not ``trt.nptype``: on 8.2/8.4 it builds its table with
# ``np.bool`` (gone since numpy 1.24) and on every version it has no entry for BF16/FP8/INT4/FP4.
# Types numpy lacks keep a descriptive name (records and Triton configs need a name, not a numpy type).
DTYPE_NAMES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "UINT8": "uint8",
               "INT32": "int32", "INT64": "int64", "BOOL": "bool", "FP8": "float8_e4m3fn", "INT4": "int4",
               "FP4": "float4_e2m1fn", "E8M0": "float8_e8m0fnu"}


def dtype_name(trt, dtype):
    """The numpy-style name of a TensorRT ``DataType`` (see ``DTYPE_NAMES``)."""
    key = getattr(dtype, "name", None) or str(dtype).rsplit(".", 1)[-1]
    if key not in DTYPE_NAMES:
        raise InputError("TensorRT data type {} is not known to trtkit".format(key),
                         hint="the engine's inputs/outputs should be FP32, FP16 or INT8")
    return DTYPE_NAMES[key]


def default_workspace(config):
    """Bytes to give the builder when ``--workspace`` is not set, or None to keep TensorRT's default.

    TensorRT 8.2 (Jetson Nano) defaults to a workspace of 0 and then drops many
    tactics; 8.4+ (``set_memory_pool_limit``) defaults to the device's memory.
    """
    return workspace_default_for(has(config, "set_memory_pool_limit"), has(config, "max_workspace_size"))


def workspace_default_for(memory_pool_limit, max_workspace_size):
    """``default_workspace`` from what the builder config has: a few hundred MiB only where the workspace is
    set through ``max_workspace_size`` alone (8.2, whose default is 0), else None (TensorRT's own default)."""
    if max_workspace_size and not memory_pool_limit:
        return LEGACY_DEFAULT_WORKSPACE_MIB << 20
    return None


def rtx_targets(trt):
    """The compute capabilities TensorRT-RTX can build for, e.g. ["7.5", "8.0", "8.6", "8.9", "12.0"]."""
    if not has(trt, "ComputeCapability"):
        return []
    found = []
    for key in trt.ComputeCapability.__members__:
        digits = key[2:] if key.startswith("SM") else ""
        if digits.isdigit() and len(digits) >= 2:
            found.append("{}.{}".format(int(digits[:-1]), int(digits[-1])))
    return sorted(found, key=lambda cc: tuple(int(p) for p in cc.split(".")))


def create_context(trt, engine):
    """(execution context, kernel specialization or None). TensorRT-RTX: dynamic-shape kernels specialized EAGERly.

    TensorRT-RTX compiles the kernels for a new input shape in the background
    (LAZY) and runs generic fallback kernels until they are ready, so the first
    timings of each batch size would measure the fallbacks; EAGER compiles them
    before the first inference of that shape returns.
    """
    if has(engine, "create_runtime_config"):
        config = engine.create_runtime_config()
        strategy = None
        if has(config, "dynamic_shapes_kernel_specialization_strategy") and \
                has(trt, "DynamicShapesKernelSpecializationStrategy"):
            config.dynamic_shapes_kernel_specialization_strategy = trt.DynamicShapesKernelSpecializationStrategy.EAGER
            strategy = "eager"
        return engine.create_execution_context(config), strategy
    return engine.create_execution_context(), None


def uses_tensor_names(context):
    """The tensor-name API (``execute_async_v3``) is there from 8.5; 8.2 has bindings only."""
    return has(context, "execute_async_v3")


def set_input_shape(context, name, index, shape):
    if has(context, "set_input_shape"):
        return context.set_input_shape(name, tuple(shape))
    if has(context, "set_binding_shape"):
        return context.set_binding_shape(index, tuple(shape))
    return False


def output_shape(context, name, index):
    """An output's shape once the input shapes are set."""
    if has(context, "get_tensor_shape"):
        return tuple(context.get_tensor_shape(name))
    if has(context, "get_binding_shape"):
        return tuple(context.get_binding_shape(index))
    return None


def execute(context, addresses, names, stream_handle):
    """Run one batch: tensor addresses by name (8.5+) or the bindings list (8.2)."""
    if has(context, "execute_async_v3"):
        for name, address in zip(names, addresses):
            context.set_tensor_address(name, int(address))
        return context.execute_async_v3(stream_handle)
    if has(context, "execute_async_v2"):
        return context.execute_async_v2([int(a) for a in addresses], stream_handle)
    raise InputError("this TensorRT has neither execute_async_v3 nor execute_async_v2")


def rtx_supports(trt, compute_capability):
    """True when TensorRT-RTX ``trt`` can build engines that run on a GPU of ``compute_capability`` ("8.6")."""
    return compute_capability in rtx_targets(trt)
