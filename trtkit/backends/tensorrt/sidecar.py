"""The metadata file written beside every engine, and the check made before loading one.

A serialized engine only runs on the TensorRT version (and GPU architecture)
that built it; TensorRT's own refusal is a cryptic "version tag" error, or a
crash on a truncated file. ``<engine>.json`` records what built it, so loading
can say plainly what differs and that the engine must be rebuilt on this device.
"""

import os
import time

from trtkit._version import __version__
from trtkit.errors import EngineMismatch, InputError
from trtkit.fileio import read_json, sha256_file, write_json
from trtkit.versions import parse_version

SIDECAR_VERSION = 1
REQUIRED = ("sidecar_version", "trtkit_version", "flavour", "tensorrt_version", "precision", "inputs", "outputs",
            "engine_bytes", "engine_sha256", "source_onnx_sha256", "built")


def sidecar_path(engine_path):
    return engine_path + ".json"


def make_sidecar(engine_path, flavour, version, gpu, precision, io, profile, source_sha256, build_seconds,
                 extra=None):
    """The sidecar dict for a finished engine file (``io`` from ``api.engine_io`` or the network)."""
    record = {
        "sidecar_version": SIDECAR_VERSION,
        "trtkit_version": __version__,
        "flavour": flavour,
        "tensorrt_version": ".".join(str(p) for p in version),
        "gpu": gpu,  # None when built without a GPU (TensorRT-RTX ahead-of-time)
        "precision": precision,
        "inputs": [_io(t) for t in io if t[1]],
        "outputs": [_io(t) for t in io if not t[1]],
        "profile": profile,
        "engine_bytes": os.path.getsize(engine_path),
        "engine_sha256": sha256_file(engine_path),
        "source_onnx_sha256": source_sha256,
        "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build_seconds": round(build_seconds, 3),
    }
    record.update(extra or {})
    return record


def _io(entry):
    name, _, shape, dtype = entry
    return {"name": name, "shape": [int(d) for d in shape], "dtype": dtype}


def write_sidecar(engine_path, record):
    path = sidecar_path(engine_path)
    write_json(path, record)
    return path


def read_sidecar(engine_path):
    """The sidecar dict, or None when there is none (an engine made elsewhere)."""
    path = sidecar_path(engine_path)
    if not os.path.isfile(path):
        return None
    try:
        record = read_json(path)
    except ValueError as exc:
        raise InputError(str(exc), hint="rebuild the engine, or delete the .json to load it unchecked")
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        raise InputError("{} is incomplete (missing {})".format(path, ", ".join(missing)),
                         hint="rebuild the engine with trtkit")
    return record


def tensor_specs(record):
    """(inputs, outputs) of a sidecar record as ``TensorSpec`` lists; dynamic axes (-1 in the file) are None."""
    from trtkit.backends.base import TensorSpec

    def specs(key):
        return [TensorSpec(t["name"], [d if d >= 0 else None for d in t["shape"]], t["dtype"]) for t in record[key]]

    return specs("inputs"), specs("outputs")


def batch_range(record, input_name=None):
    """(min, opt, max) batch of the engine's optimization profile for ``input_name`` (default: the first input).

    The profile is ``{input: [min shape, opt shape, max shape]}`` (``builder._add_profile``);
    None when the engine has no profile (every input shape fixed) or none for that input.
    """
    if input_name is None:
        input_name = record["inputs"][0]["name"] if record["inputs"] else None
    shapes = (record.get("profile") or {}).get(input_name)
    if not shapes:
        return None
    low, opt, high = (int(shape[0]) for shape in shapes)
    return low, opt, high


def check_file(engine_path, record):
    """A truncated or altered engine file is an InputError naming the sizes."""
    if not os.path.isfile(engine_path):
        raise InputError("engine not found: {}".format(engine_path))
    size = os.path.getsize(engine_path)
    if record is None:
        if size == 0:
            raise InputError("{} is empty".format(engine_path), hint="rebuild the engine")
        return
    if size != record["engine_bytes"]:
        raise InputError("{} is truncated or damaged: {} bytes, its sidecar says {}".format(
            engine_path, size, record["engine_bytes"]), hint="copy it again or rebuild the engine")
    if sha256_file(engine_path) != record["engine_sha256"]:
        raise InputError("{} does not match its sidecar's sha256 (changed after the build)".format(engine_path),
                         hint="copy it again or rebuild the engine")


def check_compatible(record, flavour, version, gpu):
    """Raise EngineMismatch when the engine was built by another TensorRT or for another GPU.

    ``version`` is this TensorRT's integer tuple, ``gpu`` this machine's ``gpu.probe()``
    (None: no GPU, the architecture is not checked).
    """
    if record is None:
        return
    here = ".".join(str(p) for p in version)
    if record["flavour"] != flavour:
        raise EngineMismatch("the engine was built with {} {}, this runner uses {} {}".format(
            record["flavour"], record["tensorrt_version"], flavour, here), hint=_REBUILD)
    if parse_version(record["tensorrt_version"], what="sidecar's TensorRT version") != parse_version(here):
        raise EngineMismatch("the engine was built with {} {}, this machine has {}".format(
            flavour, record["tensorrt_version"], here), hint=_REBUILD)
    if gpu is None:
        return
    targets = record.get("compute_capabilities")
    if targets and "current" not in targets:
        if gpu["compute_capability"] not in targets:
            raise EngineMismatch("the engine targets compute capability {}, this GPU ({}) is {}".format(
                ", ".join(targets), gpu["name"], gpu["compute_capability"]), hint=_REBUILD)
        return
    built_gpu = record.get("gpu")
    if built_gpu and built_gpu["compute_capability"] != gpu["compute_capability"]:
        raise EngineMismatch("the engine was built on {} (compute capability {}), this GPU is {} ({})".format(
            built_gpu["name"], built_gpu["compute_capability"], gpu["name"], gpu["compute_capability"]),
            hint=_REBUILD)


_REBUILD = "engines are tied to the TensorRT version and GPU that built them: rebuild it on this device " \
           "(trtkit build --backend ...)"
