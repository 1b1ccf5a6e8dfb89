"""Which artifact a path means, which runtime runs it, and the input contract it was built for.

``trtkit.load``, ``trtkit predict`` and ``trtkit serve`` take a build folder,
its ``manifest.json``, or one artifact (an ONNX file; a TensorRT engine with
its ``.json`` sidecar). An application must feed the model exactly what the
build verified it with, so the contract is never guessed where it was recorded:

- a build folder or manifest: the manifest's ``model.input``; the artifact is
  ``precision``'s, else the manifest's ``selection["chosen"]``, else the fastest
  one that passed verification (status ok, highest ``throughput_ips``);
- a lone ONNX file: the manifest beside it when that lists it, else the contract
  a trtkit export recorded in the ONNX metadata, else the graph's fixed C x H x W
  with default normalization (a warning says so);
- a lone engine: the manifest beside it when that lists it, else its sidecar's
  input dims with default normalization (a warning says so).

``output_kind`` (manifest ``model.output_kind``; a lone ONNX file: read from its
graph): what the output holds, whose decision rule predict follows
(``trtkit.outputs``): whatever ``build`` accepts, ``load`` accepts.
"""

import os
import re

from trtkit import log, tasks
from trtkit.contract import InputContract
from trtkit.errors import InputError
from trtkit.pipeline.manifest import MANIFEST_NAME, manifest_files, open_build

ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
ENGINE_BACKENDS = ("tensorrt", "tensorrt-rtx")
PATH_HINT = "give a build folder (trtkit build --out DIR), its manifest.json, or one .onnx or .engine artifact"


class Target(object):
    """One artifact to run and what it expects.

    ``path`` (absolute), ``backend`` (registry name), ``contract`` (InputContract),
    ``precision`` (None when unknown), ``output_kind``, ``name`` (the artifact's,
    e.g. ``resnet18.fp16``), ``artifact`` (its manifest record; None for a file no
    manifest lists), ``manifest`` (the loaded manifest, or None) and ``task``
    (the name of its ``trtkit.tasks`` Task: ``classification`` or ``segmentation``).
    """

    def __init__(self, path, backend, contract, precision=None, output_kind="logits", name=None, artifact=None,
                 manifest=None, task=None):
        from trtkit.outputs import OutputKind
        output_kind = OutputKind.parse(output_kind).name
        try:
            self.task = tasks.of(task).name
        except InputError:
            raise InputError("{} is for task '{}', which this trtkit does not know".format(path, task),
                             hint="use the trtkit that built it, or rebuild") from None
        self.path = os.path.abspath(path)
        self.backend = backend
        self.contract = contract
        self.precision = precision
        self.output_kind = output_kind
        self.name = name or os.path.basename(path)
        self.artifact = artifact
        self.manifest = manifest

    @property
    def status(self):
        """The artifact's verification status in its build (``ok``, ``failing``, ``built``), None when unknown."""
        return (self.artifact or {}).get("status")

    def __repr__(self):
        return "Target({}, {}, {})".format(self.name, self.backend, self.precision or "-")


def locate(path, precision=None, backend=None):
    """The Target ``path`` means (see the module doc); InputError naming what is wrong otherwise."""
    precision = precision.strip().lower() if precision else None
    if is_build(path):
        build = read_build(path)
        return target_of(build, choose_artifact(build, precision, backend))
    path = str(path)
    lower = path.lower()
    if lower.endswith(".onnx"):
        return _lone_onnx(path, precision, backend)
    if lower.endswith(ENGINE_SUFFIXES):
        return _lone_engine(path, precision, backend)
    raise InputError("{} is neither a build folder, a manifest nor an artifact (.onnx, .engine)".format(path),
                     hint=PATH_HINT)


def is_build(path):
    """True when ``path`` names a build (a folder or a .json file), False for an artifact; InputError when missing."""
    if path is None or not os.path.exists(str(path)):
        raise InputError("no such file or folder: {}".format(path), hint=PATH_HINT)
    return os.path.isdir(str(path)) or str(path).lower().endswith(".json")


def read_build(path):
    """The ``Build`` (folder and manifest) of a build folder or manifest file; InputError for a folder that
    holds none."""
    path = str(path)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        raise InputError("{} holds no {}: it is not a trtkit build folder".format(path, MANIFEST_NAME),
                         hint="build into it first (trtkit build --out {}), or give one .onnx or .engine "
                              "artifact".format(path))
    return open_build(path)


def choose_artifact(build, precision=None, backend=None):
    """The build's artifact record for ``precision`` / ``backend``, else the chosen one, else the fastest passing."""
    manifest, where = build.manifest, build.folder
    candidates = list(manifest["artifacts"])
    if backend:
        candidates = [a for a in candidates if a.get("backend") == backend]
        if not candidates:
            raise InputError("the build at {} has no {} artifact".format(where, backend),
                             hint="it was built for " + _listing(manifest["artifacts"], "backend"))
    if precision:
        found = [a for a in candidates if a.get("precision") == precision]
        if not found:
            raise InputError("the build at {} has no {} artifact".format(where, precision),
                             hint="it has " + _listing(candidates, "precision"))
        return _said_unless_ok(found[0])
    chosen = _chosen(manifest, candidates)
    if chosen is not None:
        return chosen
    passing = [a for a in candidates if a.get("status") == "ok"]
    if passing:
        return max(passing, key=lambda a: a.get("throughput_ips") or 0.0)  # the first of equals: build order
    unverified = [a for a in candidates if a.get("status") in (None, "built")]
    if unverified:
        log.warn("no artifact of the build at {} was verified; loading {} ({})".format(
            where, unverified[0]["name"], unverified[0].get("status_detail") or "not run at build time"))
        return unverified[0]
    raise InputError("no artifact of the build at {} passed verification ({})".format(
        where, ", ".join("{} {}".format(a["name"], a.get("status")) for a in candidates)),
        hint="pick one anyway with precision= (--precision), or rebuild")


def _said_unless_ok(artifact):
    """``artifact``, with a warning when its build's verification did not pass it (asked for by precision, or
    loaded by its file: a failing INT8 loaded as a file ran silently)."""
    if artifact.get("status") != "ok":
        log.warn("{}: {}".format(artifact["name"], artifact.get("status_detail") or "status {}".format(
            artifact.get("status", "unknown"))))
    return artifact


def _chosen(manifest, candidates):
    """The artifact the manifest's ``selection["chosen"]`` names (a name, precision or record), else None."""
    chosen = (manifest.get("selection") or {}).get("chosen")
    if not chosen:
        return None
    if isinstance(chosen, dict):
        keys = [chosen.get("name"), chosen.get("path"), chosen.get("precision")]
    else:
        keys = [str(chosen)]
    for key in keys:
        for artifact in candidates:
            if key and key in (artifact.get("name"), artifact.get("path"), artifact.get("precision")):
                return artifact
    log.warn("the manifest's chosen artifact {!r} is not among its artifacts; taking the fastest passing one".format(
        chosen))
    return None


def target_of(build, artifact):
    """The Target of one artifact record of a ``Build``."""
    path = build.path(artifact)
    if not os.path.isfile(path):
        raise InputError("artifact file missing: {}".format(path), hint="run the build again")
    return Target(path, artifact["backend"], manifest_contract(build), precision=artifact.get("precision"),
                  output_kind=build.manifest.output_kind, name=artifact.get("name"), artifact=artifact,
                  manifest=build.manifest, task=build.manifest.task)


def serving_targets(build, precisions=None):
    """Targets of every artifact that passed verification, or of ``precisions`` (a warning for any not passing)."""
    manifest = build.manifest
    missing = [p for p in precisions or () if p not in set(a.get("precision") for a in manifest["artifacts"])]
    if missing:
        raise InputError("the build at {} has no {} artifact".format(build.folder, ", ".join(missing)),
                         hint="it has " + _listing(manifest["artifacts"], "precision"))
    chosen = []
    for artifact in manifest["artifacts"]:
        if precisions:
            if artifact.get("precision") not in precisions:
                continue
            if artifact.get("status") != "ok":
                log.warn("serving {} although it did not pass verification ({})".format(
                    artifact["name"], artifact.get("status_detail") or artifact.get("status")))
        elif artifact.get("status") != "ok":
            log.warn("not serving {}: {} (name its precision to serve it anyway)".format(
                artifact["name"], artifact.get("status_detail") or "status {}".format(artifact.get("status"))))
            continue
        chosen.append(target_of(build, artifact))
    if not chosen:
        raise InputError("no artifact of the build at {} to serve (artifacts: {})".format(
            build.folder, ", ".join("{} {}".format(a["name"], a.get("status")) for a in manifest["artifacts"])
            or "none"), hint="check --precision: the build has " + _listing(manifest["artifacts"], "precision"))
    return chosen


def manifest_contract(build):
    """The InputContract a ``Build``'s manifest records."""
    record = (build.manifest.get("model") or {}).get("input")
    if not record:
        raise InputError("the manifest at {} records no input contract (model.input)".format(build.folder),
                         hint="rebuild with this trtkit")
    return InputContract.from_dict(record)


def _listing(artifacts, key):
    return ", ".join(sorted(set(str(a.get(key)) for a in artifacts))) or "no artifacts"


def _beside(path):
    """(Build, artifact record or None) of a build manifest beside ``path`` that lists it, else None."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isfile(os.path.join(folder, MANIFEST_NAME)):
        return None
    try:
        build = open_build(folder)
    except InputError as exc:
        log.warn("ignoring the manifest beside {}: {}".format(path, exc))
        return None
    manifest = build.manifest
    name = os.path.basename(path)
    listed = [a for a in manifest["artifacts"] if a.get("path") == name]
    if listed:  # one file verified on two runtimes: a lone file runs on ONNX Runtime, so its record first
        return build, ([a for a in listed if a.get("backend") == "onnxruntime"] + listed)[0]
    if name in manifest_files(manifest) or any(a.get("onnx") == name for a in manifest["artifacts"]):
        return build, None
    return None


def _check_precision(path, asked, known):
    if asked and known and asked != known:
        raise InputError("{} is a {} artifact, not {}".format(path, known, asked),
                         hint="drop the precision, or give the build folder to choose among its artifacts")
    return known or asked


def _lone_onnx(path, precision, backend):
    if backend not in (None, "onnxruntime"):
        raise InputError("an ONNX file runs on ONNX Runtime here, not {}".format(backend),
                         hint="build an engine first: trtkit build --onnx {} --backend {}".format(path, backend))
    beside = _beside(path)
    if beside is not None and beside[1] is not None and beside[1].get("backend") == "onnxruntime":
        build, artifact = beside
        _check_precision(path, precision, artifact.get("precision"))
        return target_of(build, _said_unless_ok(artifact))
    guessed = re.search(r"\.(fp32|fp16|int8|bf16)\.onnx$", path.lower())
    known = (beside[1] or {}).get("precision") if beside else None
    precision = _check_precision(path, precision, known or (guessed.group(1) if guessed else None))
    if beside is not None:  # e.g. the FP32 ONNX an engine of the build was made from
        build = beside[0]
        return Target(path, "onnxruntime", manifest_contract(build), precision, build.manifest.output_kind,
                      manifest=build.manifest, task=build.manifest.task)
    contract, kind, task = _onnx_interface(path)
    return Target(path, "onnxruntime", contract, precision, kind, task=task)


def _onnx_interface(path):
    """(InputContract, output kind name, task) of a lone ONNX file: the contract a trtkit export recorded, else
    its fixed dims; the output kind and task its graph shows (logits, classification when they cannot be told)."""
    from trtkit.onnx.layout import check_task
    from trtkit.onnx.load import OnnxSummary, contract_metadata, load_onnx
    model = load_onnx(path, check=False)
    task = check_task(model)
    summary = OnnxSummary(model, task)
    contract = contract_metadata(model) or _from_dims(path, summary.image_shape, "its graph")
    return contract, summary.output_kind or "logits", task.name


def _from_dims(path, dims, what):
    dims = list(dims)
    if len(dims) != 3 or not all(isinstance(d, int) and d > 0 for d in dims):
        raise InputError("cannot tell what {} expects: it records no input contract and {} has image dims {}".format(
            path, what, dims), hint="build it with trtkit (trtkit build --onnx FILE --input-size N) and load the "
                                    "build folder")
    channels, height, width = dims
    contract = InputContract(size=(height, width), channels=channels, resize="crop")
    log.warn("{} records no input contract: taking {}'s {}x{}x{} with default preprocessing ({}, mean {}, std {}, "
             "no class names); load its build folder to use the build's".format(
                 path, what, channels, height, width, contract.resize, list(contract.mean), list(contract.std)))
    return contract


def _lone_engine(path, precision, backend):
    from trtkit.backends.tensorrt.sidecar import read_sidecar, sidecar_path
    if backend not in (None,) + ENGINE_BACKENDS:
        raise InputError("an engine runs on TensorRT, not {}".format(backend), hint="use tensorrt or tensorrt-rtx")
    beside = _beside(path)
    if beside is not None and beside[1] is not None:
        build, artifact = beside
        _check_precision(path, precision, artifact.get("precision"))
        if backend and backend != artifact["backend"]:
            raise InputError("{} was built for {}, not {}".format(path, artifact["backend"], backend))
        return target_of(build, _said_unless_ok(artifact))
    record = read_sidecar(path)
    if record is None:
        raise InputError("{} has no sidecar ({}) and no build manifest beside it lists it: what it expects is "
                         "unknown".format(path, os.path.basename(sidecar_path(path))),
                         hint="copy the engine with its .json sidecar, or load its build folder")
    precision = _check_precision(path, precision, record.get("precision"))
    flavour = record.get("flavour", "tensorrt")
    if backend and backend != flavour:
        raise InputError("{} was built with {}, not {}".format(path, flavour, backend))
    inputs = record.get("inputs") or []
    dims = inputs[0]["shape"][1:] if inputs else []
    outputs = record.get("outputs") or []
    task = tasks.of_shape(outputs[0].get("shape") if outputs else None) or tasks.DEFAULT
    return Target(path, flavour, _from_dims(path, dims, "its sidecar"), precision, task=task.name)
