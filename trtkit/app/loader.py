"""``trtkit.load(path)``: the artifact a path means, loaded as the kind of model it is.

A classification build gives a ``Classifier`` (``predict`` -> top classes), a
segmentation build a ``Segmenter`` (``predict`` -> class-index masks at each
image's own size), a detection build a ``Detector`` (``predict`` -> boxes in each
image's own pixels); all are ``model.LoadedModel``s. Which one is the target's
task's (``Task.app_class``; ``locate``: the manifest's ``model.task``, else the
artifact's output shape).

This module is imported by ``import trtkit``: it needs only numpy at import time.
"""

from trtkit.errors import InputError


def load(path, precision=None, backend=None, batch_size=None, decoder=None):
    """Load a built artifact for inference: ``path`` is a build folder, its manifest.json, or one artifact.

    From a build: ``precision``'s artifact, else the manifest's chosen one, else the fastest that passed
    verification. ``backend`` restricts the choice to that runtime (for a lone artifact: the one to run it with).
    ``batch_size``: the most images per run (kept inside the artifact's batch range; default 32).
    Returns a ``Classifier`` for a classification model, a ``Segmenter`` for a segmentation one, a ``Detector``
    for a detection build (its runner already loaded). InputError for a missing path, a folder without a
    manifest, a precision the build does not have. ``decoder``: for a detector built with the user's own Python
    decoder (``--decoder module:function``), the function, where its name does not import here.
    """
    from trtkit.app.locate import locate
    model = open_target(locate(path, precision, backend), batch_size)
    if decoder is not None:
        try:
            if not hasattr(model, "use_decoder"):
                raise InputError("{} is no detector: decoder= is for a detector built with --decoder "
                                 "module:function".format(path), hint="drop decoder=")
            model.use_decoder(decoder)
        except BaseException:
            model.close()
            raise
    return model


def open_target(target, batch_size=None):
    """The loaded model of a ``locate.Target``: a Classifier or a Segmenter, the app class of the target's task."""
    from trtkit import tasks
    return tasks.of(target.task).app_class().open(target, batch_size)
