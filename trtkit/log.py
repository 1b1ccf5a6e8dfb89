"""User-facing messages and progress bars, with no dependency beyond the stdlib.

Messages go to stderr so that tables and JSON printed on stdout stay clean for
pipes. Progress bars draw only on a terminal (or when TRTKIT_PROGRESS=1) and
fall back to a start/finish line otherwise, so CI logs stay readable.
"""

import os
import sys
import time

_state = {"quiet": False, "verbose": False}


def configure(quiet=False, verbose=False):
    _state["quiet"] = bool(quiet)
    _state["verbose"] = bool(verbose)


def is_verbose():
    return _state["verbose"]


def info(message):
    if not _state["quiet"]:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def debug(message):
    if _state["verbose"]:
        sys.stderr.write("[debug] " + message + "\n")
        sys.stderr.flush()


def warn(message):
    sys.stderr.write("warning: " + message + "\n")
    sys.stderr.flush()


def _interactive():
    if os.environ.get("TRTKIT_PROGRESS") == "1":
        return True
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


class Progress(object):
    """A small progress bar: ``with Progress("training", total=n) as bar: bar.update()``.

    ``postfix`` lets the caller show a live figure (loss, accuracy, img/s).
    """

    def __init__(self, label, total=None, unit="it"):
        self.label = label
        self.total = total
        self.unit = unit
        self.count = 0
        self.postfix = ""
        self._start = None
        self._last_draw = 0.0
        self._live = _interactive() and not _state["quiet"]

    def __enter__(self):
        self._start = time.time()
        if not self._live:
            info("{} ...".format(self.label))
        return self

    def update(self, n=1, postfix=None):
        self.count += n
        if postfix is not None:
            self.postfix = postfix
        now = time.time()
        if self._live and (now - self._last_draw > 0.1 or (self.total and self.count >= self.total)):
            self._last_draw = now
            self._draw(now)

    def _draw(self, now):
        elapsed = now - self._start
        if self.total:
            frac = min(1.0, float(self.count) / self.total)
            filled = int(24 * frac)
            bar = "[" + "#" * filled + "." * (24 - filled) + "]"
            text = "\r{} {} {}/{} {:.0f}s".format(self.label, bar, self.count, self.total, elapsed)
        else:
            text = "\r{} {} {} {:.0f}s".format(self.label, self.count, self.unit, elapsed)
        if self.postfix:
            text += " " + self.postfix
        sys.stderr.write(text + "\033[K")
        sys.stderr.flush()

    def __exit__(self, exc_type, exc, tb):
        elapsed = time.time() - self._start
        if self._live:
            self._draw(time.time())
            sys.stderr.write("\n")
            sys.stderr.flush()
        elif exc_type is None and not _state["quiet"]:
            tail = " " + self.postfix if self.postfix else ""
            info("{} done in {:.1f}s{}".format(self.label, elapsed, tail))
        return False
