"""The tasks trtkit builds models for, each the one owner of what differs between them.

``parse(name)`` is the one way from a task's name (``--task``, a manifest's
``model.task``, an alias) to its ``Task``; ``of(name)`` reads a recorded name,
where a record older than tasks means classification; ``of_shape(dims)``
recognises a task from an output's dims. Manifests and options keep storing
``task.name``, the same string as ever. Callers ask the Task (``task.dense``,
``task.app_class()``, ``task.comparison_for(kind)``, ``task.metric_label(m)``
...) instead of comparing names.

A new task is one module here (a ``Task`` subclass and its instance) added to
``_ALL`` below.
"""

import difflib

from trtkit.errors import InputError
from trtkit.tasks.base import Task, resolve  # noqa: F401  (the base, for the task modules and callers)
from trtkit.tasks.classification import CLASSIFICATION
from trtkit.tasks.detection import DETECTION
from trtkit.tasks.segmentation import SEGMENTATION

_ALL = (CLASSIFICATION, SEGMENTATION, DETECTION)  # the order of --task's choices
TASKS = dict((task.name, task) for task in _ALL)
DEFAULT = CLASSIFICATION  # what a model is when nothing says otherwise (and manifests before the task)
_ALIASES = dict((alias, task) for task in _ALL for alias in (task.name,) + tuple(task.aliases))


def names():
    """The task names, as ``--task`` offers them."""
    return tuple(task.name for task in _ALL)


def parse(name):
    """The Task called ``name`` or one of its aliases (case and ``_``/``-`` aside; a Task passes through);
    InputError with the nearest names for any other."""
    if isinstance(name, Task):
        return name
    key = str(name).strip().lower().replace("_", "-")
    task = _ALIASES.get(key)
    if task is None:
        close = difflib.get_close_matches(key, sorted(_ALIASES), n=2, cutoff=0.5)
        suggestions = []
        for word in close:  # the canonical name of what is close, once each
            if _ALIASES[word].name not in suggestions:
                suggestions.append(_ALIASES[word].name)
        raise InputError("unknown task '{}'".format(name), hint="did you mean {}?".format(" or ".join(suggestions))
                         if suggestions else "use one of " + ", ".join(names()))
    return task


def of(name):
    """The Task of a recorded ``name`` (a manifest's, a Target's, an option's); None or "" is ``DEFAULT``."""
    return parse(name) if name else DEFAULT


def of_shape(dims):
    """The Task whose output ``dims`` (batch axis included; None or -1 where dynamic) are, or None when the rank
    says none: a [N, C, H, W] map (H and W not both 1) is segmentation, [N, classes] or [N, classes, 1, 1]
    classification."""
    dims = list(dims or [])
    for task in _ALL:
        if task.recognises(dims):
            return task
    return None


def of_model_name(name):
    """The Task whose architecture ``--model NAME`` is, or None (a classifier name, or no name)."""
    for task in _ALL:
        if task.knows_model(name):
            return task
    return None
