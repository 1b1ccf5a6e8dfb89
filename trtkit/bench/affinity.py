"""CPU pinning for benchmarks: the benchmark's threads run on exactly the cores it states.

Why: an unpinned thread migrates between cores and lands on whichever one the
OS or a neighbour is busy with, so the same run gives different figures. When
the benchmark uses fewer threads than there are cores, trtkit pins every
thread of the process (ONNX Runtime's and PyTorch's pools included) to that
many cores and leaves the rest, CPU 0 first, to the OS and other work. With as
many threads as cores there is nothing to choose and nothing is changed.

Linux only (``os.sched_setaffinity``); elsewhere the run is simply unpinned
and says so.
"""

import contextlib
import os


def usable_cores():
    """The cores this process may run on, sorted (all of them where affinity is not supported)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def choose_cores(threads, usable):
    """The ``threads`` highest-numbered usable cores: CPU 0 takes most interrupts and housekeeping."""
    threads = max(1, int(threads))
    return sorted(usable)[-threads:] if threads < len(usable) else sorted(usable)


def _thread_ids():
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def _set_all(mask_of):
    """Apply ``mask_of(tid)`` to every thread of the process; threads that ended meanwhile are skipped."""
    for tid in _thread_ids():
        mask = mask_of(tid)
        if not mask:
            continue
        try:
            os.sched_setaffinity(tid, mask)
        except (OSError, ValueError):
            pass


@contextlib.contextmanager
def pinned(threads, enabled=True):
    """Run the block with every thread of the process on ``choose_cores(threads)``.

    Yields the list of cores when pinned, or None when not (disabled, as many
    threads as cores, or no affinity support). Threads started inside the block
    inherit the mask; on exit every thread gets its previous mask back (new
    ones get the process's original mask).
    """
    usable = usable_cores()
    if not enabled or not hasattr(os, "sched_setaffinity") or int(threads) >= len(usable):
        yield None
        return
    cores = set(choose_cores(threads, usable))
    before = {}
    for tid in _thread_ids():
        try:
            before[tid] = os.sched_getaffinity(tid)
        except OSError:
            pass
    original = os.sched_getaffinity(0)
    _set_all(lambda tid: cores)
    try:
        yield sorted(cores)
    finally:
        _set_all(lambda tid: before.get(tid, original))


def describe_pinning(threads, cores):
    """'1 (pinned to core 1)' / '2 (all usable cores)' / '3 (not pinned)' for reports."""
    if cores:
        return "{} (pinned to core{} {})".format(threads, "s" if len(cores) > 1 else "",
                                                 ",".join(str(c) for c in cores))
    if threads >= len(usable_cores()):
        return "{} (all usable cores)".format(threads)
    return "{} (not pinned)".format(threads)
