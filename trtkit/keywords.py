"""Option objects made from keywords: the Python API is the source, the command line a view of it.

Each option object (``ModelOptions``, ``CalibrationConfig``, ``TensorRTOptions``,
``SearchConfig``, ``BuildOptions``) declares ``KEYWORDS``: its keyword names,
which are its command-line flags' names with ``_`` for ``-`` (``calib_method``
is ``--calib-method``), each mapped to the constructor parameter it sets, or to
``(parameter, converter)``. ``from_keywords`` builds the object from Python
values with that one mapping; ``from_args`` is the same call on the parsed
flags, so the API never goes through argparse and a flag without a keyword
(or the reverse) is a visible gap (``tests/test_python_api.py`` checks both
ways). A keyword given as None is left to the constructor's default.
"""

import difflib

from trtkit.errors import InputError


def parameters(cls, values):
    """Constructor keyword arguments of ``cls`` from ``{keyword: value}`` (keywords of ``cls.KEYWORDS``
    only; None values left out)."""
    params = {}
    for keyword, value in values.items():
        if value is None:
            continue
        target = cls.KEYWORDS[keyword]
        if isinstance(target, tuple):
            name, convert = target
            params[name] = convert(value)
        else:
            params[target] = value
    return params


def split(values, *classes):
    """``[{keyword: value} for each class]`` of ``values``: each keyword goes to the class that declares it;
    an unknown one is an InputError naming the closest keywords."""
    parts = [{} for _ in classes]
    for keyword, value in values.items():
        for part, cls in zip(parts, classes):
            if keyword in cls.KEYWORDS:
                part[keyword] = value
                break
        else:
            raise unknown(keyword, [k for cls in classes for k in cls.KEYWORDS])
    return parts


def unknown(keyword, known, what="trtkit.build()"):
    close = difflib.get_close_matches(keyword, sorted(known), n=3, cutoff=0.6)
    return InputError("{} has no option '{}'".format(what, keyword),
                      hint="did you mean {}?".format(" or ".join(close)) if close else
                      "the options are trtkit build's flags with _ for -, e.g. calib_method, batch, verify_images")


def args_values(cls, args):
    """``{keyword: value}`` of ``cls.KEYWORDS`` read from parsed flags (flags a command lacks are left out)."""
    return dict((k, getattr(args, k)) for k in cls.KEYWORDS if hasattr(args, k))


class KeywordOptions(object):
    """Base of an option object made from its declared ``KEYWORDS``: ``from_keywords(**values)`` (the API)
    and ``from_args(args)`` (the same call on parsed flags)."""

    KEYWORDS = {}

    @classmethod
    def from_keywords(cls, **values):
        return cls(**parameters(cls, values))

    @classmethod
    def from_args(cls, args):
        return cls.from_keywords(**args_values(cls, args))
