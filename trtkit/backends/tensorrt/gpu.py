"""Which NVIDIA GPUs are here, through the driver libraries (ctypes: no torch, pycuda or nvidia-smi needed).

The one place trtkit asks the machine about its GPUs. ``probe()`` (GPU 0)
decides whether engines can run (no GPU: the runner raises
DeviceUnavailable), what the sidecar records, and whether ``--backend auto``
may pick TensorRT; ``devices()`` and ``driver_versions()`` fill the device
record of every benchmark (``trtkit.bench.device``). The CUDA driver library
(libcuda) is there wherever a GPU is usable, Jetson included, so this works
with or without a CUDA build of torch; NVML (libnvidia-ml) only adds the
driver's release number on desktop drivers.
"""

import ctypes
import ctypes.util

# CUdevice_attribute values (cuda.h)
_ATTR_MULTIPROCESSORS = 16
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76
_CACHE = {}


def _library(names):
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _driver():
    """libcuda with cuInit done, or None."""
    if "driver" not in _CACHE:
        lib = _library(["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda"), "nvcuda.dll"])
        try:
            _CACHE["driver"] = lib if lib is not None and lib.cuInit(0) == 0 else None
        except (AttributeError, OSError):
            _CACHE["driver"] = None
    return _CACHE["driver"]


def probe():
    """{"name", "compute_capability": "8.6", "count"} of GPU 0, or None without a usable GPU (cached)."""
    found = devices()
    if not found:
        return None
    return {"name": found[0]["name"], "compute_capability": found[0]["compute_capability"], "count": len(found)}


def devices():
    """Every GPU the driver shows this process (CUDA_VISIBLE_DEVICES applies), cached.

    Each is {"name", "compute_capability", "memory_bytes", "multiprocessors"}; [] without a usable GPU.
    """
    if "devices" not in _CACHE:
        _CACHE["devices"] = _devices(_driver())
    return list(_CACHE["devices"])


def _devices(lib):
    if lib is None:
        return []
    found = []
    try:
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return []
        for index in range(count.value):
            device = ctypes.c_int(0)
            if lib.cuDeviceGet(ctypes.byref(device), index) != 0:
                break
            name = ctypes.create_string_buffer(256)
            lib.cuDeviceGetName(name, 256, device)
            values = {}
            for key, attr in (("major", _ATTR_CC_MAJOR), ("minor", _ATTR_CC_MINOR), ("sms", _ATTR_MULTIPROCESSORS)):
                value = ctypes.c_int(0)
                lib.cuDeviceGetAttribute(ctypes.byref(value), attr, device)
                values[key] = value.value
            memory = ctypes.c_size_t(0)
            total_mem = getattr(lib, "cuDeviceTotalMem_v2", None) or lib.cuDeviceTotalMem
            total_mem(ctypes.byref(memory), device)
            found.append({"name": name.value.decode("utf-8", "replace"),
                          "compute_capability": "{}.{}".format(values["major"], values["minor"]),
                          "memory_bytes": int(memory.value), "multiprocessors": values["sms"]})
    except (AttributeError, OSError):
        return found
    return found


def driver_versions():
    """{"driver": "550.54.14" or None (NVML), "cuda": "12.4" or None (the CUDA version the driver supports)}."""
    if "versions" not in _CACHE:
        _CACHE["versions"] = {"driver": _nvml_driver_version(), "cuda": _driver_cuda_version(_driver())}
    return dict(_CACHE["versions"])


def _driver_cuda_version(lib):
    if lib is None:
        return None
    version = ctypes.c_int(0)
    try:
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (AttributeError, OSError):
        return None
    return cuda_version_text(version.value)


def cuda_version_text(number):
    """cuDriverGetVersion's integer as users read it: 12040 -> "12.4", 11080 -> "11.8"."""
    number = int(number)
    return "{}.{}".format(number // 1000, (number % 1000) // 10) if number > 0 else None


def _nvml_driver_version():
    lib = _library(["libnvidia-ml.so.1", "libnvidia-ml.so", ctypes.util.find_library("nvidia-ml"), "nvml.dll"])
    if lib is None:
        return None
    try:
        init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
        if init() != 0:
            return None
        try:
            text = ctypes.create_string_buffer(96)
            if lib.nvmlSystemGetDriverVersion(text, ctypes.c_uint(96)) != 0:
                return None
            return text.value.decode("utf-8", "replace") or None
        finally:
            lib.nvmlShutdown()
    except (AttributeError, OSError):
        return None


def cc_tuple(text):
    """"8.6" -> (8, 6)."""
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def fast_int8(cc):
    """INT8 tensor math (DP4A or tensor cores): SM 6.1 and 7.0+; not Maxwell (Jetson Nano, 5.3) or 6.0/6.2."""
    major, minor = cc_tuple(cc)
    return (major, minor) == (6, 1) or major >= 7


def fast_fp16(cc):
    """Full-rate FP16: SM 5.3 (Jetson Nano), 6.0, 6.2 and 7.0+; not 5.0-5.2 or 6.1 (GeForce Pascal)."""
    major, minor = cc_tuple(cc)
    return (major, minor) in ((5, 3), (6, 0), (6, 2)) or major >= 7
