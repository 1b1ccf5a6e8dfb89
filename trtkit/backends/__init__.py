"""Backend registry: names users type -> the module that implements them, imported lazily.

Adding a backend: a module in this package with a Backend subclass, and one
line in ``REGISTRY``. ``select_backend("auto")`` picks the fastest usable one
and says why.
"""

import importlib

from trtkit.errors import InputError, MissingDependency

# name -> "module:Class"; order of preference for --backend auto
REGISTRY = [
    ("tensorrt", "trtkit.backends.tensorrt:TensorRTBackend"),
    ("tensorrt-rtx", "trtkit.backends.tensorrt:TensorRTRTXBackend"),
    ("onnxruntime", "trtkit.backends.onnxruntime:OnnxRuntimeBackend"),
    ("openvino", "trtkit.backends.openvino:OpenVINOBackend"),
]


def backend_names():
    return [name for name, _ in REGISTRY]


def get_backend(name):
    """The Backend instance registered as ``name`` (InputError for unknown names)."""
    for registered, target in REGISTRY:
        if registered == name:
            module_name, class_name = target.split(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                raise InputError("backend '{}' is not part of this trtkit build".format(name))
            return getattr(module, class_name)()
    raise InputError("unknown backend '{}'".format(name), hint="choose auto or one of " + ", ".join(backend_names()))


def select_backend(name="auto"):
    """Return (backend, reason). ``auto`` picks the first usable one in REGISTRY order."""
    if name != "auto":
        backend = get_backend(name)
        usable, reason = backend.availability()
        if not usable:
            raise InputError("backend '{}' cannot be used here: {}".format(name, reason),
                             hint="use --backend auto or onnxruntime")
        return backend, reason
    skipped = []
    for registered, _ in REGISTRY:
        try:
            backend = get_backend(registered)
        except InputError:
            continue
        if not backend.auto_selectable:
            skipped.append("{}: {}".format(registered, backend.auto_skip_reason))
            continue
        usable, reason = backend.availability()
        if usable:
            why = reason if not skipped else "{} ({})".format(reason, "; ".join(skipped))
            return backend, why
        skipped.append("{}: {}".format(registered, reason))
    # ONNX Runtime is the embedded default: when nothing is usable, the missing package is the fix.
    raise MissingDependency("no usable backend: " + "; ".join(skipped))


# runtimes that ``--precision auto`` also times its candidates on, beside the backend auto picked: same device,
# same INT8 encoding, not the embedded default (so not picked by ``--backend auto`` itself)
SEARCH_ALTERNATIVES = {"onnxruntime": ("openvino",)}


def search_alternatives(backend):
    """Usable Backend instances to time next to ``backend`` in a precision search (none when not installed)."""
    found = []
    for name in SEARCH_ALTERNATIVES.get(backend.name, ()):
        try:
            other = get_backend(name)
        except InputError:
            continue
        usable, _ = other.availability()
        if usable and other.int8_encoding == backend.int8_encoding:
            found.append(other)
    return found
