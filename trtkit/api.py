"""The public Python API: ``trtkit.build(...)`` takes the options ``trtkit build`` takes, by the same names.

The CLI and the API must never drift apart, so the API builds its options the
way the CLI does: it starts from the command's own argument defaults, applies
the keyword arguments (flag names with ``_`` for ``-``: ``calib_method``,
``batch``, ``verify_images``, ``mean``...) and calls ``BuildOptions.from_args``.
An unknown keyword is an error with the closest names, like a mistyped flag.
"""

import argparse
import difflib
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


def build(model=None, checkpoint=None, onnx=None, precision="fp32,fp16", backend="auto", data="sample",
          calib_data=None, input_size=None, out=os.path.join("build", "engines"), **options):
    """Build, verify and time ``precision`` variants of a classifier; returns a BuildResult.

    ``model`` is an architecture name (``resnet18``, ``torchvision:NAME``, ``timm:NAME``) or any
    ``torch.nn.Module`` (then ``input_size`` is required and the class count comes from its output);
    ``checkpoint`` holds its weights; ``onnx`` builds from an ONNX classifier instead. ``input_size``
    is N or (H, W). Every other ``trtkit build`` flag is a keyword: ``calib_method="percentile"``,
    ``calib_images=256``, ``verify_images="all"``, ``batch="1:8:32"``, ``mean=(0.5,)``,
    ``resize="pad"``, ``strict=True``...
    """
    from trtkit.pipeline import BuildOptions, build as run_build
    from trtkit.pipeline.source import ModelOptions
    parser = argparse.ArgumentParser(add_help=False)
    BuildOptions.add_arguments(parser)
    args = parser.parse_args([])
    given = dict(options, checkpoint=checkpoint, onnx=onnx, precision=_comma(precision), backend=backend,
                 data=data, calib_data=calib_data, input_size=input_size, out=out)
    module = None
    if model is not None and not isinstance(model, str):
        module = model
    else:
        given["model"] = model
    known = vars(args)
    for key, value in given.items():
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
            raise InputError("trtkit.build() has no option '{}'".format(key),
                             hint="did you mean {}?".format(" or ".join(close)) if close else
                             "the options are trtkit build's flags, e.g. calib_method, batch, verify_images")
        setattr(args, key, value)
    if isinstance(args.class_names, (list, tuple)):  # names given directly rather than a file
        names, args.class_names = list(args.class_names), None
    else:
        names = None
    build_options = BuildOptions.from_args(args)
    if module is not None or names is not None:
        source = build_options.source
        overrides = source.input_overrides()
        if names is not None:
            overrides["class_names"] = names
        build_options.source = ModelOptions(model=module if module is not None else source.model,
                                            checkpoint=source.checkpoint, onnx=source.onnx,
                                            num_classes=source.num_classes, exporter=source.exporter,
                                            input=overrides)
    manifest = run_build(build_options)
    folder = os.path.abspath(build_options.out)
    from trtkit.pipeline.run import gate_summary
    summary = gate_summary(manifest)
    if summary:
        from trtkit import log
        log.warn(summary)
    return BuildResult(manifest, folder)


def _comma(value):
    return value if isinstance(value, str) else ",".join(value)
