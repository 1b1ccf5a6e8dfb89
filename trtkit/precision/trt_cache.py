"""TensorRT calibration cache files, for the legacy implicit-INT8 path (TensorRT <= 10).

Format (ASCII): a header ``TRT-<packed version>-<calibrator>`` and one line per
tensor ``name: xxxxxxxx``, the scale (amax / 127) as the big-endian IEEE-754
float32 bits in hex. The names are ONNX tensor names, which is how TensorRT's
ONNX parser names the network's tensors. The packed version is
major*1000+minor*100+patch up to TensorRT 9 and major*10000+minor*100+patch from
10 (``TRT-8502``, ``TRT-100300``); TensorRT ignores a cache of another version.
TensorRT 11 and TensorRT-RTX have no calibrators: they use the Q/DQ ONNX.
"""

import struct

from trtkit.errors import InputError
from trtkit.fileio import write_text
from trtkit.versions import parse_version

CALIBRATORS = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration",
               # TensorRT has no percentile calibrator; the scales are what matters to the reader
               "percentile": "EntropyCalibration2"}
DEFAULT_TRT_VERSION = (8, 5, 2)  # JetPack 5 (Xavier), the main user of implicit INT8


def pack_version(version):
    """(major, minor, patch) -> TensorRT's packed integer (8502, 100300)."""
    major, minor, patch = (list(version) + [0, 0, 0])[:3]
    return major * (10000 if major >= 10 else 1000) + minor * 100 + patch


def installed_trt_version():
    """The version tuple of the installed ``tensorrt`` module (not TensorRT-RTX), or None."""
    try:
        import tensorrt  # noqa: F401  (optional; the classic TensorRT reads caches, RTX does not)
    except Exception:
        return None
    try:
        return parse_version(tensorrt.__version__, what="TensorRT version")
    except (AttributeError, InputError):  # a module without a usable __version__
        return None


def scale_to_hex(scale):
    return struct.pack(">f", float(scale)).hex()


def hex_to_scale(text):
    return struct.unpack(">f", bytes.fromhex(text))[0]


def format_cache(scales, method="entropy", version=DEFAULT_TRT_VERSION):
    """The cache text for {tensor name: scale}."""
    header = "TRT-{}-{}".format(pack_version(version), CALIBRATORS.get(method, "EntropyCalibration2"))
    lines = [header] + ["{}: {}".format(name, scale_to_hex(scale)) for name, scale in scales.items()]
    return "\n".join(lines) + "\n"


def write_cache(path, amax, method="entropy", version=None):
    """Write the cache for {tensor name: amax} (scale = amax / 127) atomically; returns {name: scale}."""
    scales = dict((name, max(float(a), 0.0) / 127.0) for name, a in amax.items())
    write_text(path, format_cache(scales, method, version or installed_trt_version() or DEFAULT_TRT_VERSION))
    return scales


def cache_algorithm(path):
    """The calibrator a cache file was written by (``EntropyCalibration2``, ``MinMaxCalibration``, ...).

    TensorRT reads a cache only through the calibrator class of that algorithm;
    another class rejects it and asks for images instead.
    """
    with open(path, "r") as handle:
        header = handle.readline().strip()
    if not header.startswith("TRT-") or header.count("-") < 2:
        raise InputError("{} is not a TensorRT calibration cache (no TRT-<version>-<algorithm> header)".format(path),
                         hint="pass a cache written by TensorRT or 'trtkit calibrate'")
    return header.split("-", 2)[2]


def read_cache(path):
    """(header, {tensor name: scale}) of a cache file; InputError on malformed content."""
    with open(path, "r") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    if not lines or not lines[0].startswith("TRT-"):
        raise InputError("{} is not a TensorRT calibration cache (no TRT- header)".format(path))
    scales = {}
    for number, line in enumerate(lines[1:], 2):
        name, sep, value = line.rpartition(": ")
        if not sep or len(value) != 8:
            raise InputError("{} line {}: expected 'name: xxxxxxxx'".format(path, number))
        try:
            scales[name] = hex_to_scale(value)
        except ValueError:
            raise InputError("{} line {}: '{}' is not 8 hex digits".format(path, number, value))
    return lines[0], scales
