"""The FP32 ONNX of a PyTorch checkpoint, kept once exported: a rebuild of the same checkpoint with the same
export options reuses it (``cache_dir("export")``).

Why: the export is the slowest step of a small model's build (measured: the ResNet18 sample at 64x64 with the
dynamo exporter took 73 s of a 126 s FP32 build on a loaded two-core machine), and users rebuild the same
checkpoint again and again, for other precisions, backends, data and budgets. Nothing is trusted blindly: the
reused graph is validated against the PyTorch model in every build (``onnx.export.validate_export``, as a fresh
export is), and an entry that fails is dropped and the model exported again.

The key holds everything the graph depends on: the checkpoint's sha256 (a file, never a module object, whose
code the key cannot see), the architecture and class count, the exporter and opset asked for, the TensorRT
parser's opset limit, the input contract, the image sizes, the output picked, the torch and onnx versions, and
a digest of trtkit's own source (a changed export or model definition is a new key, with or without a version
bump). At most ``KEEP`` entries are kept (least recently used dropped), so the folder stays a few models' size.
``TRTKIT_EXPORT_CACHE=0`` turns it off.
"""

import hashlib
import json
import os
import shutil

from trtkit import log
from trtkit.fileio import atomic_path, cache_dir

KEEP = 8
_SOURCE_DIGEST = []  # trtkit's source digest, computed once per process


def enabled():
    return os.environ.get("TRTKIT_EXPORT_CACHE", "1") != "0"


def export_key(info, options, parser_version):
    """The cache key of a PyTorch source's export (``info``: the manifest's model record; ``options``: its
    ``ModelOptions``), or None when the source is no file (a module object) or the cache is off."""
    if not enabled() or info.get("source") not in ("checkpoint", "sample") or not info.get("sha256"):
        return None
    import onnx
    import torch
    record = {"sha256": info["sha256"], "name": info.get("name"), "num_classes": info.get("num_classes"),
              "input": info.get("input"), "exporter": options.exporter, "opset": options.opset,
              "image_sizes": list(options.image_sizes) if options.image_sizes else None, "output": options.output,
              "tensorrt_parser": None if parser_version is None else list(parser_version),
              "torch": torch.__version__, "onnx": onnx.__version__, "trtkit_source": _source_digest()}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:32]


def fetch(key, path):
    """Copy the cached graph of ``key`` to ``path``; its record ({"exporter", "opset"}) or None on a miss."""
    if key is None:
        return None
    graph, record = _paths(key)
    try:
        with open(record) as handle:
            found = json.load(handle)
        shutil.copyfile(graph, path)
        os.utime(record, None)  # recently used: kept longest
    except (OSError, ValueError):
        return None
    return found


def store(key, path, exporter, opset):
    """Keep a validated export of ``key`` (written atomically: a killed process leaves no half entry)."""
    if key is None:
        return
    graph, record = _paths(key)
    try:
        with atomic_path(graph) as tmp:
            shutil.copyfile(path, tmp)
        with atomic_path(record) as tmp:
            with open(tmp, "w") as handle:
                json.dump({"exporter": exporter, "opset": opset}, handle)
        _trim()
    except OSError as exc:  # a full or read-only cache costs the next build an export, nothing else
        log.debug("export cache: not kept ({})".format(exc))


def drop(key):
    """Forget ``key``'s entry (its graph did not validate against the model)."""
    for path in _paths(key) if key else ():
        if os.path.exists(path):
            os.remove(path)


def _paths(key):
    folder = cache_dir("export")
    return os.path.join(folder, key + ".onnx"), os.path.join(folder, key + ".json")


def _trim():
    folder = cache_dir("export")
    records = [os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".json")]
    records.sort(key=os.path.getmtime, reverse=True)
    for record in records[KEEP:]:
        drop(os.path.basename(record)[:-len(".json")])


def _source_digest():
    if not _SOURCE_DIGEST:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        digest = hashlib.sha256()
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    digest.update(os.path.relpath(path, root).encode("utf-8"))
                    with open(path, "rb") as handle:
                        digest.update(handle.read())
        _SOURCE_DIGEST.append(digest.hexdigest())
    return _SOURCE_DIGEST[0]
