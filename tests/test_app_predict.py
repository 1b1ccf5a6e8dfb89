"""trtkit predict on image files: held-out digits written as PNGs are classified by the sample build.

Acceptance (issue 15): >= 95 % correct with class names, and the Python API and
the command line give the same classes for the same files.
"""

import json
import os

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("PIL")
pytest.importorskip("sklearn")

from conftest import run_cli  # noqa: E402
import trtkit  # noqa: E402


@pytest.fixture(scope="module")
def digit_files(tmp_path_factory):
    """Every held-out sample digit as an 8x8 grayscale PNG (the pixels the sample build verified on), and labels."""
    from PIL import Image
    from trtkit.data.arrays import digits
    from trtkit.data.sources import split_positions
    images, labels = digits()
    folder = tmp_path_factory.mktemp("digits")
    truth = {}
    for index in split_positions(len(images), "heldout"):
        path = str(folder / "{:04d}.png".format(index))
        Image.fromarray(images[index], "L").save(path)
        truth[path] = int(labels[index])
    (folder / "README.txt").write_text("not an image: left out of the folder's listing")
    return str(folder), truth


def test_cli_and_api_classify_held_out_digit_files(sample_build, digit_files):
    out, _ = sample_build
    folder, truth = digit_files
    result = run_cli(["predict", out, folder, "--json", "--top-k", "3", "--batch-size", "50"])
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["image"] for r in records] == sorted(truth)  # the folder, expanded and sorted; README.txt left out
    assert all(len(r["top_k"]) == 3 for r in records)
    correct = [r["top_k"][0]["class"] == truth[r["image"]] and r["top_k"][0]["name"] == str(truth[r["image"]])
               for r in records]
    assert len(records) == 359 and np.mean(correct) >= 0.95, np.mean(correct)
    with open(os.path.join(out, "manifest.json")) as handle:
        fastest = max(json.load(handle)["artifacts"], key=lambda a: a["throughput_ips"])
    with trtkit.load(out) as model:  # the CLI and the API pick the same artifact: the fastest passing one
        assert model.precision == fastest["precision"]
        api = model.predict(sorted(truth), top_k=3)
    assert [[c for c, _, _ in top] for top in api] == [[t["class"] for t in r["top_k"]] for r in records]
    for top, record in zip(api[:20], records):
        assert [round(p, 6) for _, _, p in top] == [t["probability"] for t in record["top_k"]]


def test_table_output_and_errors(sample_build, digit_files, tmp_path):
    out, _ = sample_build
    folder, truth = digit_files
    first = sorted(truth)[:2]
    result = run_cli(["predict", out] + first + ["--top-k", "2", "--precision", "fp32"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["image", "top-1", "top-2"] and len(lines) == 3
    with trtkit.load(out, precision="fp32") as model:
        expected = model.predict(first, top_k=2)
    for line, path, top in zip(lines[1:], first, expected):
        cells = line.split()
        assert cells[0] == path and line.count("%") == 2
        assert cells[1:] == ["{}".format(top[0][0]), "({:.2%})".format(top[0][2]),
                             "{}".format(top[1][0]), "({:.2%})".format(top[1][2])]
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8 truncated")
    for args, phrase in ((["predict", out, str(bad)], "broken.jpg as an image"),
                         (["predict", out, str(tmp_path / "none.png")], "image not found"),
                         (["predict", str(tmp_path), first[0]], "holds no manifest.json"),
                         (["predict", out, first[0], "--precision", "int8"], "no int8 artifact")):
        result = run_cli(args)
        assert result.returncode == 2, (args, result.stderr)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and phrase in errors[0], result.stderr
        assert "Traceback" not in result.stderr


def test_predict_skips_an_unreadable_file_names_it_and_predicts_the_others(sample_build, digit_files, tmp_path):
    """A corrupt file among many costs only its own prediction: a warning names it, the others are predicted,
    and the exit code and the last line say that one was skipped."""
    import shutil
    out, _ = sample_build
    folder, truth = digit_files
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    good = sorted(truth)[:3]
    for path in good:
        shutil.copy(path, str(mixed / os.path.basename(path)))
    (mixed / "0_broken.png").write_bytes(b"\x89PNG not really")
    result = run_cli(["predict", out, str(mixed), "--json", "--precision", "fp32"])
    assert result.returncode == 2, result.stderr
    predicted = [record["image"] for record in json.loads(result.stdout)]
    assert sorted(os.path.basename(p) for p in predicted) == sorted(os.path.basename(p) for p in good)
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 1 and "0_broken.png" in warnings[0]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "1 of 4 images could not be read" in errors[0] and "0_broken.png" in errors[0]
    assert "Traceback" not in result.stderr
