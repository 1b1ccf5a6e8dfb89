"""The layout of a detector's exported output, ``decoded`` ``[N, A, 4 + C]``, in one place.

Why one tensor rather than two (boxes and scores): every runner, the export check, the verification stream and
the benchmark handle a model's first output, and one tensor keeps a detector a model like any other there;
splitting is a view. Columns 0-3 are the box (x1, y1, x2, y2 in the model input's pixels, clipped to the
unpadded input), columns 4.. the C class probabilities, and, for a face detector whose head says so
(``DetectionHead.landmarks``: K points), 2K more: each point's x and y in the same pixels.
"""

import numpy as np

from trtkit.errors import InputError

OUTPUT_NAME = "decoded"
BOX_COLUMNS = 4


def split(decoded, num_classes=None, points=0):
    """``(boxes [N, A, 4], scores [N, A, C])`` views of a ``decoded`` array (numpy); ``num_classes`` checks C,
    ``points`` (K landmarks) the 2K columns after the scores, which ``landmarks`` gives."""
    decoded = np.asarray(decoded)
    if decoded.ndim != 3 or decoded.shape[-1] <= BOX_COLUMNS:
        raise InputError("a detector's output is [N, anchors, 4 + classes]; got shape {}".format(
            list(decoded.shape)), hint="export it with trtkit (models.detection.export), or see docs/detection.md")
    if num_classes is not None and decoded.shape[-1] != BOX_COLUMNS + int(num_classes) + 2 * int(points):
        raise InputError("the detector's output has {} {}columns after the box, its head says {} classes{}".format(
            decoded.shape[-1] - BOX_COLUMNS, "" if points else "score ", num_classes,
            " and {} landmarks".format(points) if points else ""),
            hint="the build's manifest is not this model's: rebuild it")
    stop = decoded.shape[-1] - 2 * int(points)
    return decoded[..., :BOX_COLUMNS], decoded[..., BOX_COLUMNS:stop]


def landmarks(decoded, points):
    """``[N, A, 2K]``: the landmark columns of ``decoded`` (x y per point) of a head with ``points`` (K)."""
    decoded = np.asarray(decoded)
    return decoded[..., decoded.shape[-1] - 2 * int(points):]


def classes_of(dims):
    """C of an output of ``dims`` ([N, A, 4 + C]; None or -1 where dynamic), or None when unknown."""
    last = list(dims or [None])[-1]
    return int(last) - BOX_COLUMNS if isinstance(last, int) and last > BOX_COLUMNS else None
