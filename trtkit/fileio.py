"""Small file helpers shared by every writer: atomic writes and content hashes.

Nothing trtkit writes is ever left half-written: every artifact is written to
a temporary file in the destination folder and renamed into place, so an
interrupted or failed step leaves either the old file or nothing.
"""

import contextlib
import errno
import hashlib
import json
import os
import tempfile


def sha256_file(path, chunk=1 << 20):
    """Hex sha256 of a file's bytes (used to tie artifacts to their source)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    For writers that want a file name (torch.save, onnx.save, TensorRT). On any
    exception the temporary file is removed and ``path`` is untouched.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        os.makedirs(folder)
    handle, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    os.close(handle)
    try:
        yield tmp
        # mkstemp makes the file private (0600); give it the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path, data):
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


def write_text(path, text):
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path, obj):
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(value):
    # numpy scalars and arrays appear in metrics; JSON has no type for them.
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError("not JSON serializable: {!r}".format(type(value)))


def read_json(path):
    """Read a JSON file; raises ValueError with the path on corrupt content."""
    with open(path, "r") as handle:
        text = handle.read()
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError("{}: not valid JSON ({})".format(path, exc))


def cache_dir(*parts):
    """trtkit's cache folder ($TRTKIT_CACHE, else $XDG_CACHE_HOME/trtkit, else ~/.cache/trtkit)."""
    base = os.environ.get("TRTKIT_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "trtkit")
    path = os.path.join(base, *parts)
    if not os.path.isdir(path):
        os.makedirs(path)
    return path


def human_bytes(n):
    """'46.8 MB' style sizes for tables."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000.0 or unit == "GB":
            return "{:.1f} {}".format(n, unit) if unit != "B" else "{:d} B".format(int(n))
        n /= 1000.0
    return "{:.1f} GB".format(n)


@contextlib.contextmanager
def output_dir(path):
    """Create ``path`` (and any missing parents) for a step's outputs; on failure remove what this created.

    A failed command must not leave folders behind that it made itself; folders
    that already existed, and everything in them, are left alone.
    """
    import shutil
    path = os.path.abspath(path)
    top, probe = None, path
    while not os.path.isdir(probe):
        top = probe
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if top:
        try:
            os.makedirs(path)
        except OSError as exc:  # another process made it meanwhile (two builds at once): not ours to remove
            if exc.errno != errno.EEXIST or not os.path.isdir(path):
                raise
            top = None
    try:
        yield path
    except BaseException:
        if top:
            shutil.rmtree(top, ignore_errors=True)
        raise


@contextlib.contextmanager
def made_once(path):
    """Hold an exclusive, blocking lock named after the file ``path`` (``path + ".lock"``) while it is looked for
    and, if missing, made: a second process that wants the same cached file (two builds of the sample at once,
    the test suite's background training) waits for the first one's and then finds it, rather than making it
    again beside it. Not POSIX: no lock (trtkit's targets are Linux)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock; the empty lock file stays (removing it would race)
