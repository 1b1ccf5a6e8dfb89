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


def settings():
    """The current ``configure`` keywords: a caller that configures for one command puts them back after it."""
    return dict(_state)


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


LOG_EVERY = 30.0  # seconds between a long step's status lines when stderr is no terminal
_WARNED = set()


def warn_once(message):
    """``warn``, unless this very message was already given in this process (a data folder's finding is made
    once per selection of it: calibration and verification would say it twice)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warn(message)


def _interactive():
    if os.environ.get("TRTKIT_PROGRESS") == "1":
        return True
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


def format_rate(count, seconds, unit):
    """``count`` ``unit``s in ``seconds`` as people read a rate: "12.3 img/s", or "4.2 s/img" when each takes
    longer than a second (a rate printed as "0 img/s" says nothing)."""
    if count <= 0 or seconds <= 0:
        return "- {}/s".format(unit)
    rate = count / seconds
    if rate >= 1.0:
        return "{:.1f} {}/s".format(rate, unit)
    return "{:.1f} s/{}".format(seconds / count, unit)


def format_duration(seconds):
    """"45s", "3m05s", "1h02m": how long, at the precision a wait needs."""
    seconds = int(round(max(0.0, seconds)))
    if seconds < 60:
        return "{}s".format(seconds)
    if seconds < 3600:
        return "{}m{:02d}s".format(seconds // 60, seconds % 60)
    return "{}h{:02d}m".format(seconds // 3600, (seconds % 3600) // 60)


def eta(count, total, seconds):
    """Seconds left at the rate so far (None before the first unit or without a total)."""
    if not total or count <= 0 or seconds <= 0:
        return None
    return max(0.0, (total - count) * seconds / count)


class Progress(object):
    """A small progress bar with rate and ETA: ``with Progress("training", total=n, unit="step") as bar:
    bar.update()``.

    ``postfix`` lets the caller show a live figure (loss, accuracy). Off a terminal (a log file, CI) the bar
    is not drawn: one line starts the work and one ends it, with the time and the rate. ``shown=False``: a bar
    that counts and says nothing (a caller asked for no progress), so callers keep one code path.
    """

    def __init__(self, label, total=None, unit="it", shown=True):
        self.label = label
        self.total = total
        self.unit = unit
        self.count = 0
        self.postfix = ""
        self._start = None
        self._last_draw = 0.0
        self._shown = bool(shown)
        self._live = self._shown and _interactive() and not _state["quiet"]

    def __enter__(self):
        self._start = time.time()
        if not self._live and self._shown:
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
        elif not self._live and self._shown and not _state["quiet"] and \
                now - max(self._last_draw, self._start) >= LOG_EVERY:
            self._last_draw = now  # off a terminal (a CI log, nohup): a status line now and then, not silence
            info("{}: {}{}".format(self.label, self.status(now), " " + self.postfix if self.postfix else ""))

    def status(self, now=None):
        """The bar's text without the bar: "37/128 step, 12.3 step/s, 1m05s, ETA 7s"."""
        elapsed = (now or time.time()) - self._start
        done = "{}/{}".format(self.count, self.total) if self.total else str(self.count)
        text = "{} {}, {}, {}".format(done, self.unit, format_rate(self.count, elapsed, self.unit),
                                     format_duration(elapsed))
        left = eta(self.count, self.total, elapsed)
        if left is not None and self.count < self.total:
            text += ", ETA " + format_duration(left)
        return text

    def _draw(self, now):
        if self.total:
            frac = min(1.0, float(self.count) / self.total)
            filled = int(24 * frac)
            text = "\r{} [{}{}] {}".format(self.label, "#" * filled, "." * (24 - filled), self.status(now))
        else:
            text = "\r{} {}".format(self.label, self.status(now))
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
        elif exc_type is None and self._shown and not _state["quiet"]:
            tail = " " + self.postfix if self.postfix else ""
            rate = ", " + format_rate(self.count, elapsed, self.unit) if self.count else ""
            info("{} done in {:.1f}s{}{}".format(self.label, elapsed, rate, tail))
        return False
