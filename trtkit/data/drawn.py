"""The drawn samples' arrays, kept on disk in trtkit's cache: drawn once per machine, not once per process.

Why: the sample data sets ('shapes', 'shape-boxes') are drawn from a seed with PIL, 2000 images each, which
takes 3-9 s of a two-core CPU, and every process that builds, calibrates or verifies on a sample draws all of
it (its splits are positions in the whole set). A command-line build of the detection sample, its test
suite's subprocesses and a user's repeated ``trtkit build`` runs paid that each time; an .npz of the same
arrays loads in a fraction of a second. The file is named by the drawing's version, count and seed, so a
changed drawing (its ``*_VERSION`` bumped) is drawn again, and written atomically under a lock
(``fileio.made_once``): two processes starting at once draw it once. A cache that cannot be written (a
read-only home) only means drawing every time; an unreadable file is drawn again and replaced.
"""

import os

import numpy as np


def drawn_arrays(name, version, count, seed, draw):
    """The dict of numpy arrays ``draw()`` returns for sample ``name`` (drawing ``version``, ``count`` images
    from ``seed``), from the cache when it holds them, else drawn and kept there."""
    from trtkit.fileio import atomic_path, cache_dir, made_once
    try:
        path = os.path.join(cache_dir("data"), "{}-v{}-{}-seed{}.npz".format(name, version, count, seed))
    except OSError:  # no cache folder can be made: draw
        return draw()
    with made_once(path):
        found = _read(path)
        if found is not None:
            return found
        arrays = draw()
        try:
            with atomic_path(path) as tmp:
                with open(tmp, "wb") as handle:  # a handle: np.savez would add ".npz" to the temporary name
                    np.savez(handle, **arrays)
        except OSError:
            pass  # not kept: the next process draws again
        return arrays


def _read(path):
    import zipfile
    if not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            return dict((key, stored[key]) for key in stored.files)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # cut short or corrupt: drawn again
        return None
