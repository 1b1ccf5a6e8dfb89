"""A Triton Inference Server model repository from a trtkit build.

``export_repository(manifest, out)`` writes, for each artifact of a build,
``OUT/<model>/config.pbtxt`` and ``OUT/<model>/1/model.plan`` (TensorRT
engines) or ``OUT/<model>/1/model.onnx`` (ONNX files, served by Triton's ONNX
Runtime backend). This module only picks artifacts, names models and writes
files; what an artifact takes and returns comes from ``triton_io`` (the
artifact itself, an engine's sidecar) and the config text and its schema
check from ``triton_config``. Nothing is left half-written: models are
assembled in a staging folder inside OUT and renamed into place.
"""

import os
import re
import shutil
import tempfile

from trtkit import log, tasks
from trtkit._version import __version__
from trtkit.deploy.triton_config import TritonOptions, model_config_pb2, model_config_text, parse_model_config, \
    plan_batching
from trtkit.deploy.triton_io import artifact_io, artifact_kind
from trtkit.errors import InputError, MissingDependency
from trtkit.fileio import output_dir
from trtkit.pipeline.manifest import open_build


def model_name(artifact, base=None, multiple=True):
    """Triton model name for an artifact: ``resnet18_fp16`` (letters, digits, ``_`` and ``-`` only)."""
    if base:
        raw = "{}_{}".format(base, artifact.get("precision", "model")) if multiple else base
    else:
        raw = artifact.get("name") or os.path.splitext(os.path.basename(artifact["path"]))[0]
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", raw).strip("_")
    if not name:
        raise InputError("cannot make a Triton model name from '{}'".format(raw), hint="pass --name")
    return name


def select_artifacts(manifest, names=None, precisions=None, include_failing=False):
    """The artifacts to export: by name and/or precision; failing ones only when asked. With neither, a
    build made by ``--precision auto`` exports its chosen artifact, other builds every passing one."""
    selected = (manifest.get("selection") or {}).get("chosen")
    if not names and not precisions and selected:
        log.info("exporting the chosen artifact {} (--artifact/--precision export others)".format(selected))
        names = [selected]
    chosen = []
    for artifact in manifest["artifacts"]:
        if names and artifact.get("name") not in names:
            continue
        if precisions and artifact.get("precision") not in precisions:
            continue
        if artifact.get("status") == "failing" and not include_failing:
            log.warn("skipping {}: {} (pass --include-failing to export it anyway)".format(
                artifact.get("name"), artifact.get("status_detail", "failing verification")))
            continue
        chosen.append(artifact)
    if not chosen:
        have = ", ".join(a.get("name", "?") for a in manifest["artifacts"]) or "none"
        raise InputError("no artifact of the build matches (artifacts: {})".format(have),
                         hint="check --artifact/--precision, or build first")
    return chosen


def export_repository(manifest_path, out_dir, artifacts=None, precisions=None, options=None, base_name=None,
                      include_failing=False, force=False, validate=True):
    """Write a Triton model repository for a build; returns one dict per model written.

    ``validate`` parses every config with Triton's ModelConfig schema when
    tritonclient is installed (it is skipped, with a debug note, when not).
    """
    options = options or TritonOptions()
    build = open_build(manifest_path)
    manifest = build.manifest
    chosen = select_artifacts(manifest, artifacts, precisions, include_failing)
    out = os.path.abspath(out_dir)
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError("{} exists and is not a folder".format(out))
    names = [model_name(a, base_name, multiple=len(chosen) > 1) for a in chosen]
    if len(set(names)) != len(names):
        raise InputError("two artifacts map to the same model name ({})".format(", ".join(names)),
                         hint="select artifacts with --artifact or --precision")
    for name in names:
        if os.path.exists(os.path.join(out, name)) and not force:
            raise InputError("{} already exists".format(os.path.join(out, name)),
                             hint="pass --force to replace it, or use another --out")
    check = validate
    if check:
        try:
            model_config_pb2()
        except MissingDependency as exc:
            log.debug("config not checked against Triton's schema: {}".format(exc))
            check = False
    with output_dir(out) as out:
        staging = tempfile.mkdtemp(prefix=".trtkit-triton-", dir=out)
        written = []
        try:
            for artifact, name in zip(chosen, names):
                written.append(_stage_model(build, artifact, name, staging, options, check))
            for record in written:
                target = os.path.join(out, record["model"])
                old = None
                if os.path.exists(target):
                    old = os.path.join(staging, ".old-" + record["model"])
                    os.rename(target, old)
                os.rename(os.path.join(staging, record["model"]), target)
                if old:
                    shutil.rmtree(old)
                record["dir"] = target
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return written


def _stage_model(build, artifact, name, staging, options, check):
    manifest = build.manifest
    kind = artifact_kind(artifact)
    source = build.path(artifact)
    if not os.path.isfile(source):
        raise InputError("artifact file missing: {}".format(source), hint="run the build again")
    io = artifact_io(build, artifact)
    output_kind = manifest.output_kind
    note = tasks.of(manifest.task).triton_note(io, name, manifest.get("model"))
    comment = "generated by trtkit {} from {} ({}, {} backend; I/O from {})\noutput: {} ({}){}".format(
        __version__, artifact.get("name"), artifact.get("precision"), artifact.get("backend"), io.source,
        output_kind, _decision_rule(output_kind), note)
    if artifact.get("backend") == "tensorrt-rtx":
        comment += ("\nTensorRT-RTX engine: needs a Triton whose TensorRT backend runs TensorRT-RTX plans"
                    "\n(the stock 'tensorrt' backend loads engines of its own TensorRT version only)")
    max_batch, preferred = plan_batching(io, kind, options, label=name)
    text = model_config_text(name, io, kind, options, comment=comment, batching=(max_batch, preferred),
                             ran_on=artifact.get("ran_on"), runtime=artifact.get("backend"))
    if check:
        parse_model_config(text)
    folder = os.path.join(staging, name)
    os.makedirs(os.path.join(folder, "1"))
    file_name = "model.plan" if kind == "plan" else "model.onnx"
    shutil.copyfile(source, os.path.join(folder, "1", file_name))
    with open(os.path.join(folder, "config.pbtxt"), "w") as handle:
        handle.write(text)
    return {"model": name, "artifact": artifact.get("name"), "precision": artifact.get("precision"),
            "kind": kind, "file": os.path.join(name, "1", file_name), "max_batch_size": max_batch,
            "preferred_batch_sizes": preferred, "inputs": [_tensor_record(t) for t in io.inputs],
            "outputs": [_tensor_record(t) for t in io.outputs], "io_source": io.source, "output_kind": output_kind,
            "task": manifest.task}


def _decision_rule(name):
    """The client's decision rule for an output kind, in words (``trtkit.outputs``)."""
    from trtkit.outputs import OutputKind
    return OutputKind.parse(name).summary


def _tensor_record(spec):
    """A tensor as ``--json`` prints it: numpy dtype name and the full shape, -1 for dynamic axes."""
    return {"name": spec.name, "dtype": spec.dtype, "shape": spec.dims}
