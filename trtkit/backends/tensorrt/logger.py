"""TensorRT's log, kept: the builder, the parser and the runtime say why they refuse only through it.

``capturing_logger`` is an ``ILogger`` subclass (the documented way, TensorRT
8.x .. 11 and TensorRT-RTX: derive from ``trt.ILogger``, call
``trt.ILogger.__init__(self)``, implement ``log(self, severity, msg)``). It
keeps warnings and errors as "SEVERITY: text" lines, so an exception can quote
TensorRT's own reason in one line (``reason``), and routes every message
through trtkit's log (``route``): warnings as trtkit warnings, errors and INFO
as debug lines (``--verbose``), VERBOSE nowhere. Nothing goes to TensorRT's
own stdout printer. Where the Python bindings cannot subclass ``ILogger``
(TensorRT 7) it falls back to the plain ``trt.Logger``, whose messages are not
kept. The class is made inside a function: this package imports without
TensorRT.
"""

import contextlib
import gc

from trtkit import log
from trtkit.backends.tensorrt import api

KEPT_SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING")
_ERRORS = ("INTERNAL_ERROR", "ERROR")
KEEP_AT_MOST = 200  # a long INT8 build can warn per layer; the reason is in the last errors


def route(name, forward, verbose):
    """(keep, trtkit log level or None) for a message of severity ``name`` ("ERROR", "INFO", ...).

    Errors are kept for the exception and shown as they come only with ``verbose`` (the
    exception quotes them once); warnings are kept and printed when ``forward``; INFO is
    never kept and shown only with ``verbose``; VERBOSE (thousands of lines per build) is dropped.
    """
    if name in _ERRORS:
        return True, "debug" if verbose else None
    if name == "WARNING":
        return True, "warn" if forward else ("debug" if verbose else None)
    if name == "INFO":
        return False, "debug" if verbose else None
    return False, None


def capturing_logger(trt, messages, forward=False):
    """A TensorRT logger that appends "SEVERITY: text" of warnings and errors to ``messages`` (the last
    ``KEEP_AT_MOST``) and routes each message through trtkit's log (``route``)."""
    if not api.has(trt, "ILogger"):
        return trt.Logger(trt.Logger.WARNING)
    flavour_name = api.flavour_name(trt)

    class CapturingLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, text):
            # TensorRT 8.x calls this from a noexcept C++ function: an exception escaping here aborts the process
            try:
                name = severity_name(severity)
                keep, level = route(name, forward, log.is_verbose())
                if keep:
                    messages.append("{}: {}".format(name, text))
                    del messages[:-KEEP_AT_MOST]
                if level == "warn":
                    log.warn("{}: {}".format(flavour_name, text))
                elif level == "debug":
                    log.debug("{} {}: {}".format(flavour_name, name, text))
            except Exception:
                pass

    return CapturingLogger()


def severity_name(severity):
    """``ERROR`` for ``trt.ILogger.Severity.ERROR`` (pybind enums print as ``Severity.ERROR``)."""
    return getattr(severity, "name", None) or str(severity).rsplit(".", 1)[-1]


def reason(messages, count=2):
    """TensorRT's last ``count`` errors (else warnings) from ``messages``, as one line; "" when it said none."""
    errors = [m for m in messages if m.split(":", 1)[0] in _ERRORS]
    chosen = (errors or list(messages))[-count:]
    return " | ".join(" ".join(m.split()) for m in chosen)[:700]


@contextlib.contextmanager
def collector_paused():
    """Run TensorRT calls with Python's cyclic garbage collector paused, collecting before and after.

    Why: TensorRT calls the Python logger while it holds an internal lock. If the collector runs inside
    that callback (pybind11 allocates there) and frees a TensorRT object left in a reference cycle by an
    earlier build (a builder, a network), the object's destructor waits for the same lock: the process
    hangs for good. Seen with TensorRT-RTX 1.x: ``createInferBuilder`` -> ``PyLogger.log`` -> ``gc`` ->
    ``IBuilder`` dealloc -> ``pthread_mutex_lock``. Collecting outside any TensorRT call, and never
    inside one, cannot deadlock.
    """
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()
