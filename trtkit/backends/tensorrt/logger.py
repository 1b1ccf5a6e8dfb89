"""TensorRT's log, kept: the builder, the parser and the runtime say why they refuse only through it.

``capturing_logger`` is an ``ILogger`` subclass (the documented way: derive from
``trt.ILogger``, call ``trt.ILogger.__init__(self)``, implement
``log(self, severity, msg)``) that keeps warnings and errors as
"SEVERITY: text" lines, so an exception can quote TensorRT's own reason in one
line (``reason``) instead of pointing at messages printed somewhere else.
Where a TensorRT's Python bindings cannot subclass ``ILogger``, it falls back
to the plain ``trt.Logger`` (messages then go to TensorRT's own stderr and are
not kept). The class is made inside a function: this package imports without
TensorRT.
"""

from trtkit import log
from trtkit.backends.tensorrt import api

KEPT_SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING")
_ERRORS = ("INTERNAL_ERROR", "ERROR")


def capturing_logger(trt, messages, forward=False):
    """A TensorRT logger that appends "SEVERITY: text" of warnings and errors to ``messages``; with
    ``forward`` warnings are also printed as trtkit warnings (errors are for the exception to quote)."""
    if not api.has(trt, "ILogger"):
        return trt.Logger(trt.Logger.WARNING)
    flavour_name = "TensorRT" if not api.has(trt, "ComputeCapability") else "TensorRT-RTX"

    class CapturingLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, text):
            name = severity_name(severity)
            if name in KEPT_SEVERITIES:
                messages.append("{}: {}".format(name, text))
                if forward and name not in _ERRORS:
                    log.warn("{}: {}".format(flavour_name, text))
                elif name in _ERRORS:
                    log.debug("{}: {}".format(flavour_name, text))

    return CapturingLogger()


def severity_name(severity):
    """``ERROR`` for ``trt.ILogger.Severity.ERROR`` (pybind enums print as ``Severity.ERROR``)."""
    return getattr(severity, "name", None) or str(severity).rsplit(".", 1)[-1]


def reason(messages, count=2):
    """TensorRT's last ``count`` errors (else warnings) from ``messages``, as one line; "" when it said none."""
    errors = [m for m in messages if m.split(":", 1)[0] in _ERRORS]
    chosen = (errors or list(messages))[-count:]
    return " | ".join(" ".join(m.split()) for m in chosen)[:700]
