"""Version strings -> integer tuples, the one parser every version comparison uses.

Never compare versions as strings (``"10.0" < "8.6"``). Only the release
numbers matter to trtkit (which TensorRT built an engine, which header a
calibration cache needs), so suffixes are dropped: ``8.6.1.post1``,
``2.13.0+cpu`` and ``1.10.0a0+git36449ea`` all parse. ``packaging.version``
would do the same, but it is not a dependency of trtkit (a Jetson image need
not have it) and its strict PEP 440 rules refuse strings tools do print.
"""

import re

from trtkit.errors import InputError

_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)*)")


def parse_version(text, length=3, what="version"):
    """'8.6.1.post1' -> (8, 6, 1); '10.3.0.26' -> (10, 3, 0).

    ``length``: pad with zeros or cut to this many numbers; None keeps every
    release number ('10.3.0.26' -> (10, 3, 0, 26)). InputError when ``text``
    does not start with a number; ``what`` names the version in that message.
    """
    match = _RELEASE.match(str(text))
    if match is None:
        raise InputError("not a {}: '{}'".format(what, text), hint="give a version like 8.6.1 or 10.3.0")
    parts = [int(p) for p in match.group(1).split(".")]
    if length is None:
        return tuple(parts)
    return tuple((parts + [0] * length)[:length])
