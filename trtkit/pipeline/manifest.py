"""The build manifest: the single record of a build (``DIR/manifest.json``).

Schema (version 1), extended by later steps but never broken:

    {"manifest_version": 1, "trtkit_version": ..., "created": ...,
     "model": {"name", "source", "checkpoint", "onnx", "num_classes", "input": {size, mean, std, channels},
               "sha256"},
     "export": {...}, "data": {...}, "options": {...}, "files": [every file of the build],
     "artifacts": [{"name", "precision", "backend", "path" (relative to DIR), "bytes", "onnx",
                    "verify": {"top1_agreement", "accuracy", "reference_accuracy", "max_abs_diff", ...},
                    "throughput_ips", "status", ...}]}
"""

import os
import time

from trtkit._version import __version__
from trtkit.errors import InputError
from trtkit.fileio import read_json, write_json

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


def new_manifest(model_info):
    return {"manifest_version": MANIFEST_VERSION, "trtkit_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": model_info, "artifacts": []}


def save_manifest(out_dir, manifest):
    path = os.path.join(out_dir, MANIFEST_NAME)
    write_json(path, manifest)
    return path


def load_manifest(path):
    """Read a manifest (file or build folder); InputError when missing or corrupt."""
    if os.path.isdir(path):
        path = os.path.join(path, MANIFEST_NAME)
    if not os.path.isfile(path):
        raise InputError("no build manifest at {}".format(path), hint="run scripts/build_engine.py first")
    try:
        manifest = read_json(path)
    except ValueError as exc:
        raise InputError(str(exc), hint="run the build again")
    if not isinstance(manifest, dict) or "artifacts" not in manifest:
        raise InputError("{} is not a trtkit build manifest".format(path))
    manifest["_dir"] = os.path.dirname(os.path.abspath(path))
    return manifest


def artifact_path(manifest, artifact):
    """Absolute path of an artifact listed in a loaded manifest."""
    return os.path.join(manifest["_dir"], artifact["path"])


def manifest_files(manifest):
    """Names of every file of the build (relative to its folder; the manifest itself excluded).

    Manifests list them under ``files``; older ones are read from the fields that name files.
    """
    if "files" in manifest:
        return list(manifest["files"])
    names = set()
    for artifact in manifest.get("artifacts", []):
        calibration = artifact.get("calibration") or {}
        backend_info = artifact.get("backend_info") or {}
        for value in (artifact.get("path"), artifact.get("onnx"), backend_info.get("sidecar"),
                      calibration.get("report"), calibration.get("trt_calibration_cache")):
            if value:
                names.add(value)
    return sorted(names)
