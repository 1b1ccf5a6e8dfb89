"""``DIR/manifest.json``: the one module that reads and writes the build's record.

The record itself is typed (``pipeline.records``: ``Manifest`` of
``ArtifactRecord``s with their ``Verification``, ``Selection``); this module
puts it in a file and takes it out. A manifest says which trtkit schema it
follows (``schema_version``); one from a newer trtkit is refused in one line
rather than misread, and manifests from before typed records (no
``schema_version``) load as they are. The build folder is never part of the
record: ``open_build`` returns it beside the manifest (``Build``), so a moved
folder still works.
"""

import os
import time

from trtkit._version import __version__
from trtkit.errors import InputError
from trtkit.fileio import read_json, write_json
from trtkit.pipeline.records import SCHEMA_VERSION, Manifest

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1  # the key older readers check; the schema itself is ``schema_version``


def new_manifest(model_info):
    return Manifest(schema_version=SCHEMA_VERSION, manifest_version=MANIFEST_VERSION, trtkit_version=__version__,
                    created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), model=model_info, artifacts=[])


def save_manifest(out_dir, manifest):
    path = os.path.join(out_dir, MANIFEST_NAME)
    write_json(path, Manifest.from_json(manifest).to_json() if not isinstance(manifest, Manifest)
               else manifest.to_json())
    return path


def manifest_file(path):
    """The manifest file of ``path`` (a build folder or the file itself)."""
    return os.path.join(path, MANIFEST_NAME) if os.path.isdir(path) else path


def load_manifest(path):
    """The Manifest of a build (its folder or its manifest.json); InputError when missing, corrupt, not a
    trtkit manifest, or written by a newer trtkit."""
    path = manifest_file(path)
    if not os.path.isfile(path):
        raise InputError("no build manifest at {}".format(path), hint="run scripts/build_engine.py first")
    try:
        data = read_json(path)
    except ValueError as exc:
        raise InputError(str(exc), hint="run the build again")
    if not isinstance(data, dict) or not isinstance(data.get("artifacts"), list):
        raise InputError("{} is not a trtkit build manifest".format(path))
    schema = data.get("schema_version", 1)
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        raise InputError("{} was written by a newer trtkit ({}, manifest schema {}); this trtkit {} reads schema "
                         "{} and older".format(path, data.get("trtkit_version", "?"), schema, __version__,
                                               SCHEMA_VERSION), hint="pip install --upgrade trtkit")
    data.pop("_dir", None)  # written by nothing, but a hand-edited manifest must not smuggle a folder in
    try:
        return Manifest.from_json(data)
    except (TypeError, ValueError) as exc:
        raise InputError("{} is not a trtkit build manifest ({})".format(path, exc), hint="run the build again")


class Build(object):
    """A build as found on disk: ``folder`` (absolute) and its ``manifest``; ``path(artifact)`` locates a file."""

    def __init__(self, folder, manifest):
        self.folder = folder
        self.manifest = manifest

    def path(self, artifact_or_name):
        """Absolute path of an artifact record (or a file name) of this build."""
        name = artifact_or_name if isinstance(artifact_or_name, str) else artifact_or_name["path"]
        return os.path.join(self.folder, name)


def open_build(path):
    """The Build at ``path`` (a build folder or its manifest.json)."""
    file_path = manifest_file(path)
    manifest = load_manifest(file_path)
    return Build(os.path.dirname(os.path.abspath(file_path)), manifest)


def artifact_path(folder, artifact):
    """Absolute path of ``artifact`` (a record, or a file name) in the build folder ``folder``."""
    return os.path.join(folder, artifact if isinstance(artifact, str) else artifact["path"])


def manifest_files(manifest):
    """Names of every file of the build (relative to its folder; the manifest itself excluded).

    Manifests list them under ``files``; older ones are read from the fields that name files.
    """
    if manifest.get("files") is not None:
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
