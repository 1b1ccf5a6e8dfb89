"""Which NVIDIA GPU is here, through the CUDA driver library (ctypes: no torch, no pycuda needed).

The answer decides whether engines can run (no GPU: the runner raises
DeviceUnavailable), what the sidecar records, and whether ``--backend auto``
may pick TensorRT.
"""

import ctypes
import ctypes.util

_ATTR_CC_MAJOR = 75  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
_ATTR_CC_MINOR = 76
_CACHE = {}


def _driver():
    names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda"), "nvcuda.dll"]
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def probe():
    """{"name", "compute_capability": "8.6", "count"} of GPU 0, or None without a usable GPU (cached)."""
    if "gpu" in _CACHE:
        return _CACHE["gpu"]
    _CACHE["gpu"] = found = _probe()
    return found


def _probe():
    lib = _driver()
    if lib is None:
        return None
    try:
        if lib.cuInit(0) != 0:
            return None
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return None
        device = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return None
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, device)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDeviceGetAttribute(ctypes.byref(major), _ATTR_CC_MAJOR, device)
        lib.cuDeviceGetAttribute(ctypes.byref(minor), _ATTR_CC_MINOR, device)
    except (AttributeError, OSError):
        return None
    return {"name": name.value.decode("utf-8", "replace"),
            "compute_capability": "{}.{}".format(major.value, minor.value), "count": count.value}


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
