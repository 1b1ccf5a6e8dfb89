"""The one exception type for failures a user can fix.

Every message names what is wrong and what to do about it. The command line
prints ``error: <message>`` on one line and exits non-zero; the traceback is
shown only with ``--verbose``. Anything that is *not* a TrtkitError is a bug in
trtkit (or a library under it): the command line names it as an internal error
in one line too, with the traceback under ``--verbose``.
"""


def first_line(exc, limit=300):
    """The first line of ``exc``'s message, cut at ``limit`` characters (its class name when it has none): what
    a one-line error quotes of a library's multi-line exception."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else exc.__class__.__name__


class TrtkitError(Exception):
    """A problem the user can fix: bad input, a missing dependency, a wrong device."""

    exit_code = 2

    def __init__(self, message, hint=None):
        super(TrtkitError, self).__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self):
        if self.hint:
            return "{} ({})".format(self.message, self.hint)
        return self.message


class MissingDependency(TrtkitError):
    """An optional dependency is not installed; the message names the pip extra."""

    exit_code = 3


class InputError(TrtkitError):
    """A file, folder, model name or option given by the user is unusable."""


class ModelMismatch(InputError):
    """A checkpoint or ONNX file does not fit the model asked for."""


class EngineMismatch(TrtkitError):
    """A serialized engine was built for another TensorRT version or GPU."""


class VerificationFailed(TrtkitError):
    """A built variant disagrees with the FP32 reference beyond tolerance."""

    exit_code = 4


class DeviceUnavailable(TrtkitError):
    """The artifact was built but cannot run here (e.g. a TensorRT engine on a machine with no GPU)."""

    exit_code = 5
