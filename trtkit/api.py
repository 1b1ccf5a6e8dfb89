"""The public Python API: ``trtkit.build(...)`` takes the options ``trtkit build`` takes, by the same names.

The option objects are the source (``trtkit.keywords``): each declares its
fields once, ``BuildOptions.from_keywords`` makes them from Python values
(or takes a step's object whole), and the CLI's ``from_args`` is the same call
on parsed flags, so the two cannot drift apart. An unknown keyword is an error
with the closest names, like a mistyped flag.
"""

import os

from trtkit.errors import InputError


class BuildResult(object):
    """What a build made: ``manifest`` (the ``pipeline.records.Manifest`` written to ``out/manifest.json``),
    ``dir`` (the build folder) and ``artifacts`` (the manifest's artifact records, each with ``"file"``: its
    absolute path)."""

    def __init__(self, manifest, folder):
        self.manifest = manifest
        self.dir = folder
        self.artifacts = [dict(a, file=os.path.join(folder, a["path"])) for a in manifest["artifacts"]]

    def artifact(self, precision):
        """The artifact record of ``precision`` (InputError when the build has none)."""
        for artifact in self.artifacts:
            if artifact["precision"] == precision:
                return artifact
        raise InputError("the build has no {} artifact".format(precision),
                         hint="it has " + ", ".join(a["precision"] for a in self.artifacts))

    def __repr__(self):
        return "BuildResult({}, {})".format(self.dir, ", ".join(
            "{} {}".format(a["name"], a.get("status", "-")) for a in self.artifacts))


def build(model=None, options=None, **keywords):
    """Build, verify and time precision variants of a classifier; returns a BuildResult.

    ``model`` is an architecture name (``resnet18``, ``torchvision:NAME``, ``timm:NAME``), any
    ``torch.nn.Module`` (then ``input_size`` is required and the class count comes from its output) or a
    ``ModelOptions``; ``checkpoint`` holds its weights; ``onnx`` builds from an ONNX classifier instead. Every
    ``trtkit build`` flag is a keyword, its name with ``_`` for ``-``: ``precision="fp32,fp16,int8"``,
    ``input_size=(48, 192)``, ``calib_method="percentile"``, ``verify_images="all"``, ``batch="1:8:32"``,
    ``mean=(0.5,)``, ``resize="pad"``, ``class_names=[...]``, ``min_agreement={"int8": 0.97}``,
    ``throughput_batch=16``, ``strict=True``... They are validated by the option objects they belong to
    (``BuildOptions.from_keywords``), exactly as the CLI's flags are. A step's options may be given as its
    object instead: ``calibration=CalibrationConfig(...)``, ``tensorrt=TensorRTOptions(...)``,
    ``search=SearchConfig(...)``, ``source=ModelOptions(...)``; or everything as ``options``, a
    ``trtkit.pipeline.BuildOptions``.
    """
    from trtkit.pipeline import BuildOptions, build as run_build
    from trtkit.pipeline.source import ModelOptions
    if options is not None:
        if keywords or model is not None:
            raise InputError("give trtkit.build() an options object or keywords, not both",
                             hint="put everything in the BuildOptions, or drop options=")
        if not isinstance(options, BuildOptions):
            raise InputError("options= takes a BuildOptions, got {}".format(type(options).__name__),
                             hint="pass a step's options by its name: source=, calibration=, tensorrt=, search=")
        build_options = options
    else:
        if isinstance(model, ModelOptions):
            keywords["source"] = model
        elif model is not None:
            keywords["model"] = model
        build_options = BuildOptions.from_keywords(**keywords)
    manifest = run_build(build_options)
    folder = os.path.abspath(build_options.out)
    from trtkit.pipeline.run import gate_summary
    summary = gate_summary(manifest)
    if summary:
        from trtkit import log
        log.warn(summary)
    return BuildResult(manifest, folder)
