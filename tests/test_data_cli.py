"""Bad data through the command line: one clear error line, exit code 2, nothing left in --out."""

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")

from conftest import partial_files  # noqa: E402
from trtkit.cli import main  # noqa: E402


def build_fails(data, out, capsys, *phrases):
    code = main(["build", "--bench-seconds", "0", "--precision", "fp32", "--backend", "onnxruntime",
                 "--data", data, "--out", out])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    assert not os.path.isdir(out) or (os.listdir(out) == [] and partial_files(out) == [])


def digits_folder(root, per_class=6):
    rng = np.random.RandomState(0)
    for digit in range(10):
        os.makedirs(os.path.join(root, str(digit)))
        for i in range(per_class):
            Image.fromarray(rng.randint(0, 256, (8, 8)).astype(np.uint8), "L").save(
                os.path.join(root, str(digit), "{}.png".format(i)))
    return root


def test_a_folder_of_mostly_non_images(sample, tmp_path, capsys):
    folder = tmp_path / "images" / "seven"
    folder.mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(str(folder / "a.png"))
    for name in ("labels.csv", "notes.txt", "readme.md"):
        (folder / name).write_text("a.png,7\n")
    build_fails(str(tmp_path / "images"), str(tmp_path / "out"), capsys, "most files in", "are not images (3 of 4",
                "labels.csv")


def test_an_empty_class_folder(sample, tmp_path, capsys):
    root = digits_folder(str(tmp_path / "digits"))
    for name in os.listdir(os.path.join(root, "3")):
        os.remove(os.path.join(root, "3", name))
    build_fails(root, str(tmp_path / "out"), capsys, "no images in class folder", os.path.join(root, "3"))


def test_too_many_corrupt_images(sample, tmp_path, capsys):
    root = digits_folder(str(tmp_path / "digits"))
    for digit in range(10):
        (tmp_path / "digits" / str(digit) / "9.png").write_bytes(b"\x89PNG broken")
    build_fails(root, str(tmp_path / "out"), capsys, "unreadable, more than 1%", "9.png")
