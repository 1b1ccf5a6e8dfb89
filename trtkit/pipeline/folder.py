"""The build folder (``--out``): one build at a time, always consistent, even after a SIGKILL.

What a reader of ``OUT`` may rely on: when ``OUT/manifest.json`` exists, it
lists every file of the build (``files``) and each of them is that build's.
How that holds:

* **One writer.** A build holds an exclusive ``flock`` on the folder itself for
  its whole run (no lock file to leave behind; the kernel drops the lock when
  the process dies, however it dies). A second build into the same folder is
  refused at once with one line, before it does any work.
* **Staging.** Every file is written into a hidden staging folder inside
  ``OUT`` and moved into place only when the whole build succeeded.
* **Publishing.** A journal naming every file about to change is written first,
  then the old manifest is removed, the new files are moved in, files of the
  old build that the new one lacks are removed, and the new manifest is moved
  in last. A kill in that window leaves no manifest (so nothing claims a
  half-replaced set of files) and a journal that the next build uses to clean up.
* **Recovery.** Before building, the next build (holding the lock, so no other
  build is running) removes leftover staging folders, atomic-write temporaries
  and the files a leftover journal names that no manifest lists.

Files in ``OUT`` that no trtkit build ever listed are left alone.
"""

import contextlib
import os
import re
import shutil
import tempfile

from trtkit import log
from trtkit.errors import InputError
from trtkit.fileio import output_dir, read_json, write_json
from trtkit.pipeline.manifest import MANIFEST_NAME, manifest_files

STAGING_PREFIX = ".trtkit-build-"
JOURNAL_NAME = ".trtkit-publish.json"
# fileio.atomic_path's temporaries: "." + final name + "." + random + ".tmp"
_ATOMIC_TMP = re.compile(r"^\..+\.[^.]+\.tmp$")


class BuildFolder(object):
    """``path``: the output folder (absolute); ``staging``: where this build writes its files."""

    def __init__(self, path, staging):
        self.path = path
        self.staging = staging

    def stage_path(self, file_name):
        return os.path.join(self.staging, file_name)

    def staged_files(self):
        """Names of the files staged so far (the build's files, manifest excluded)."""
        return sorted(n for n in os.listdir(self.staging) if n != MANIFEST_NAME and not _ATOMIC_TMP.match(n))

    def publish(self):
        """Move the staged build (its manifest must be staged already) into ``path``; see the module doc."""
        new = self.staged_files()
        if not os.path.isfile(self.stage_path(MANIFEST_NAME)):
            raise RuntimeError("publish() needs the manifest staged first")
        old = _current_files(self.path)
        write_json(os.path.join(self.path, JOURNAL_NAME), {"files": sorted(set(old) | set(new) | {MANIFEST_NAME})})
        _remove_file(os.path.join(self.path, MANIFEST_NAME))
        for name in new:
            os.replace(self.stage_path(name), os.path.join(self.path, name))
        for name in sorted(set(old) - set(new)):
            _remove_file(os.path.join(self.path, name))
        os.replace(self.stage_path(MANIFEST_NAME), os.path.join(self.path, MANIFEST_NAME))
        _remove_file(os.path.join(self.path, JOURNAL_NAME))


@contextlib.contextmanager
def build_folder(out):
    """Create/lock ``out``, clean what killed builds left, and yield a BuildFolder with a fresh staging folder.

    On failure the staging folder is removed, and ``out`` too when this build created it.
    """
    with output_dir(out) as path:
        with _exclusive(path):
            recover(path)
            staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=path)
            try:
                yield BuildFolder(path, staging)
            finally:
                shutil.rmtree(staging, ignore_errors=True)


def recover(path):
    """Remove what interrupted builds left in ``path``: staging folders, temporaries, journaled files.

    Call only while holding the folder's lock. Returns the names removed.
    """
    removed = []
    journal = os.path.join(path, JOURNAL_NAME)
    if os.path.isfile(journal):
        try:
            listed = read_json(journal).get("files", [])
        except (ValueError, AttributeError):
            listed = []
        keep = set(_current_files(path)) | {MANIFEST_NAME}
        for name in listed:
            if name not in keep and os.path.basename(name) == name and _remove_file(os.path.join(path, name)):
                removed.append(name)
        _remove_file(journal)
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if name.startswith(STAGING_PREFIX) and os.path.isdir(full):
            shutil.rmtree(full, ignore_errors=True)
            removed.append(name)
        elif _ATOMIC_TMP.match(name) and os.path.isfile(full):
            _remove_file(full)
            removed.append(name)
    if removed:
        log.info("removed {} file(s) left in {} by an interrupted build".format(len(removed), path))
    return removed


def _current_files(path):
    """Files the folder's current manifest lists ([] when it has none or it is unreadable)."""
    manifest_path = os.path.join(path, MANIFEST_NAME)
    if not os.path.isfile(manifest_path):
        return []
    try:
        return manifest_files(read_json(manifest_path))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warn("{} is unreadable; its files are not cleaned up".format(manifest_path))
        return []


def _remove_file(path):
    try:
        os.remove(path)
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _exclusive(path):
    """Hold an exclusive, non-blocking flock on the folder ``path`` (InputError when another build has it)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no locking (trtkit's targets are Linux)
        yield
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (IOError, OSError):
            raise InputError("another trtkit build is writing into {}".format(path),
                             hint="wait for it to finish, or build into another --out")
        yield
    finally:
        os.close(fd)
