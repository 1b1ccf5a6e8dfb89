"""Option objects declared once: the Python API is the source, the command line a view of it.

Each option object (``ModelOptions``, ``CalibrationConfig``, ``TensorRTOptions``,
``SearchConfig``, ``BuildOptions``) lists its ``FIELDS``: one ``Field`` per
option, holding the keyword (whose flag is the same name with ``-`` for ``_``:
``calib_method`` is ``--calib-method``), the constructor parameter it sets and
the flag's help. ``add_arguments``, ``from_keywords``, ``from_args`` and
``to_keywords`` are all read from that one list, so a flag cannot lack its
keyword (or the reverse), and the API never goes through argparse:
``from_args`` is ``from_keywords`` on the parsed values. An object made of
others (``BuildOptions``) names them in ``PARTS``; their keywords are its own.
A keyword given as None is left to the constructor's default.
"""

import difflib

from trtkit.errors import InputError


class Field(object):
    """One option. ``keyword``: its name in Python, and its flag (``--`` + the name with ``-`` for ``_``);
    ``param``: the constructor parameter it sets, also the attribute that holds it (default: the keyword);
    ``parse``: the value -> that parameter (e.g. ``parse_size``; None: as given); ``negate``: a flag saying
    no (``--no-calib-cache`` sets ``use_cache=False``); ``into``: the parameter is an entry of this dict
    parameter (``ModelOptions(input={...})``); ``flag``: the rest of ``argparse.add_argument``'s keywords
    (``help``, ``metavar``, ``choices``, ``type``, ``action``), spelling only: defaults belong to the
    constructor, so an unset flag is None and the object's own default applies."""

    def __init__(self, keyword, param=None, parse=None, negate=False, into=None, **flag):
        self.keyword = keyword
        self.param = param or keyword
        self.parse = parse
        self.negate = negate
        self.into = into
        self.flag = flag

    @property
    def option(self):
        """The command-line spelling, ``--calib-method``."""
        return "--" + self.keyword.replace("_", "-")

    def within(self, into):
        """This field setting an entry of the dict parameter ``into`` instead of a parameter of its own."""
        return Field(self.keyword, self.param, self.parse, self.negate, into, **self.flag)

    def add_to(self, group, **spelling):
        """Add the flag to an argparse group; ``spelling`` replaces some of the declared (a command's help)."""
        flag = dict(self.flag, **spelling)
        if flag.get("action") not in ("store_true", "store_false"):
            flag.setdefault("default", None)
        group.add_argument(self.option, dest=self.keyword, **flag)

    def parameter(self, value):
        """The constructor's value for the keyword's ``value`` (not None)."""
        if self.negate:
            return not value
        return self.parse(value) if self.parse is not None else value

    def value_of(self, options):
        """The keyword value that makes ``options`` hold what it holds (the reverse of ``parameter``)."""
        holder = getattr(options, self.into) if self.into else options
        value = holder.get(self.param) if self.into else getattr(holder, self.param)
        return (not value) if self.negate else value


class Options(object):
    """Base of an option object: ``FIELDS`` (its own options), ``PARTS`` (``(attribute, option class)`` it
    is made of), ``GROUP`` (the argparse group title, and description, of its flags)."""

    FIELDS = ()
    PARTS = ()
    GROUP = None
    WHAT = None  # how an unknown-keyword error names the call (default: "CLASS.from_keywords()")

    @classmethod
    def fields(cls):
        """Every Field: its own, then its parts' (what ``from_keywords`` takes and the CLI's flags are)."""
        return list(cls.FIELDS) + [f for _, part in cls.PARTS for f in part.fields()]

    @classmethod
    def keywords(cls):
        return [f.keyword for f in cls.fields()]

    @classmethod
    def add_arguments(cls, parser):
        """Its own flags, in one group (``GROUP``); an object with parts orders its groups itself."""
        add_fields(parser.add_argument_group(*cls.GROUP), cls.FIELDS)

    @classmethod
    def from_keywords(cls, **values):
        """The object from keywords (each validated by the object that declares it); a part may be given
        whole, by its attribute name (``calibration=CalibrationConfig(...)``); an unknown keyword is an
        InputError naming the closest."""
        own = dict((f.keyword, f) for f in cls.FIELDS)
        parts = dict(cls.PARTS)
        given = dict((name, values.pop(name)) for name in list(values) if name in parts)
        split = dict((name, {}) for name in parts)
        params = {}
        for keyword, value in values.items():
            if keyword in own:
                _set(params, own[keyword], value)
                continue
            for name, part in cls.PARTS:
                if keyword in part.keywords():
                    split[name][keyword] = value
                    break
            else:
                raise unknown(keyword, cls.keywords(), cls.WHAT or cls.__name__ + ".from_keywords()")
        for name, part in cls.PARTS:
            if given.get(name) is None:
                params[name] = part.from_keywords(**split[name])
                continue
            if not isinstance(given[name], part):
                raise InputError("{}= takes a {}, got {}".format(name, part.__name__, type(given[name]).__name__))
            extra = sorted(k for k, v in split[name].items() if v is not None)
            if extra:
                raise InputError("{}: option(s) of the {} given as {}=".format(", ".join(extra), part.__name__, name),
                                 hint="set them in that {}, or drop {}=".format(part.__name__, name))
            params[name] = given[name]
        return cls(**params)

    @classmethod
    def from_args(cls, args):
        """The same object from parsed flags: ``from_keywords`` on their values (flags a command lacks are
        left to the defaults)."""
        return cls.from_keywords(**dict((k, getattr(args, k)) for k in cls.keywords() if hasattr(args, k)))

    def to_keywords(self):
        """``{keyword: value}`` that ``from_keywords`` turns into an equal object: every choice it holds."""
        values = dict((f.keyword, f.value_of(self)) for f in self.FIELDS)
        for name, _ in self.PARTS:
            values.update(getattr(self, name).to_keywords())
        return values


def add_fields(group, fields, spelling=None):
    """Add ``fields``' flags to ``group``; ``spelling``: {keyword: {argparse keyword: value}} replacing
    some of a field's declared spelling."""
    for field in fields:
        field.add_to(group, **(spelling or {}).get(field.keyword, {}))


def _set(params, field, value):
    if value is None:
        return
    if field.into:
        params.setdefault(field.into, {})[field.param] = field.parameter(value)
    else:
        params[field.param] = field.parameter(value)


def unknown(keyword, known, what="trtkit.build()"):
    close = difflib.get_close_matches(keyword, sorted(known), n=3, cutoff=0.6)
    return InputError("{} has no option '{}'".format(what, keyword),
                      hint="did you mean {}?".format(" or ".join(close)) if close else
                      "the options are trtkit build's flags with _ for -, e.g. calib_method, batch, verify_images")
