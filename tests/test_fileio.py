"""Atomic writes: all or nothing, with ordinary permissions."""

import os
import stat

import pytest

from trtkit.fileio import atomic_path, write_text


def test_atomic_write_has_umask_permissions(tmp_path):
    path = str(tmp_path / "a.txt")
    write_text(path, "hello")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~mask


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path):
    path = str(tmp_path / "b.txt")
    write_text(path, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            with open(tmp, "w") as handle:
                handle.write("half")
            raise RuntimeError("interrupted")
    with open(path) as handle:
        assert handle.read() == "old"
    assert os.listdir(str(tmp_path)) == ["b.txt"]
