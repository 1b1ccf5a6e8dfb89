"""Class names beside a box data set: ``classes.txt`` (one per line) or a YOLO ``data.yaml``'s ``names``.

A ``data.yaml`` is read without PyYAML in the forms ultralytics and its exporters
write: ``names: [a, b]`` (a flow list, quotes optional, over one or several
lines), ``names: {0: a, 1: b}``, or a block of ``- a`` items or ``0: a`` keys
indented under ``names:``. Anything else (anchors, multi-line strings) is read
with PyYAML when it is installed, else refused with the package to install:
names read wrongly would shift every class silently.
"""

import os
import re

from trtkit.errors import InputError

_KEYED = re.compile(r"^(\d+)\s*:\s*(.*)$")


def read_classes_txt(path):
    """The non-empty lines of a ``classes.txt`` (or ``obj.names``), stripped."""
    try:
        with open(path, encoding="utf-8") as handle:
            return [line.strip() for line in handle if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("cannot read class names from {} ({})".format(path, exc.__class__.__name__),
                         hint="one class name per line, UTF-8")


def read_yaml_names(path):
    """The ``names`` of a YOLO ``data.yaml`` as a list (a dict's keys 0..K-1 in order); None when it has none."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("cannot read {} ({})".format(path, exc.__class__.__name__))
    try:
        names = _plain_names(text)
    except ValueError:
        names = _pyyaml_names(path, text)
    if names is None:
        return None
    if isinstance(names, dict):
        keys = sorted(names)
        if keys != list(range(len(keys))):
            raise InputError("{}: names are keyed {} but must be 0..{}".format(path, keys, len(keys) - 1),
                             hint="number the classes from 0 without gaps")
        names = [names[k] for k in keys]
    if not isinstance(names, list) or not all(isinstance(n, (str, int, float)) for n in names):
        raise InputError("{}: 'names' is not a list of class names".format(path),
                         hint="write names: [cat, dog] or one '0: cat' line per class")
    return [str(n) for n in names]


def _pyyaml_names(path, text):
    from trtkit.deps import require
    yaml = require("yaml", "reading {} (a form trtkit's own reader does not parse)".format(os.path.basename(path)))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError("{} is not valid YAML ({})".format(path, str(exc).splitlines()[0]))
    return data.get("names") if isinstance(data, dict) else None


def _unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    if value[:1] in "'\"[]{}&*!|>" or value == "":
        raise ValueError(value)  # a form left to PyYAML
    return value


def _strip_comment(line):
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
    return line.rstrip()


def _split_flow(body):
    """Items of a flow list/dict body, split at commas outside quotes."""
    items, current, quote = [], "", None
    for char in body:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == ",":
            items.append(current)
            current = ""
            continue
        current += char
    items.append(current)
    return [item for item in items if item.strip()]


def _plain_names(text):
    """``names`` in the common forms (module doc); None when absent; ValueError for any other form."""
    lines = [_strip_comment(line) for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if re.match(r"^names\s*:", line)), None)
    if start is None:
        return None
    rest = lines[start].split(":", 1)[1].strip()
    if rest.startswith(("[", "{")):
        close = "]" if rest[0] == "[" else "}"
        body, index = rest, start
        while not body.endswith(close):
            index += 1
            if index >= len(lines):
                raise ValueError("unclosed")
            body += " " + lines[index].strip()
        items = _split_flow(body[1:-1])
        if close == "]":
            return [_unquote(item) for item in items]
        return dict(_keyed(item) for item in items)
    if rest:
        raise ValueError(rest)
    block = []
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        if not line[:1].isspace() and not line.startswith("-"):
            break
        block.append(line.strip())
    if block and all(item.startswith("- ") for item in block):
        return [_unquote(item[2:]) for item in block]
    if block and all(_KEYED.match(item) for item in block):
        return dict(_keyed(item) for item in block)
    raise ValueError("block")


def _keyed(item):
    match = _KEYED.match(item.strip())
    if not match:
        raise ValueError(item)
    return int(match.group(1)), _unquote(match.group(2))


def class_names_beside(folder, *more):
    """Names from ``classes.txt``/``obj.names``/``data.yaml`` in ``folder`` (then the ``more`` folders), with the
    file they came from: (names, path), or (None, None)."""
    for where in (folder,) + more:
        for name in ("classes.txt", "obj.names", "data.yaml", "dataset.yaml"):
            path = os.path.join(where, name)
            if os.path.isfile(path):
                names = read_yaml_names(path) if name.endswith(".yaml") else read_classes_txt(path)
                if names:
                    return names, path
    return None, None
