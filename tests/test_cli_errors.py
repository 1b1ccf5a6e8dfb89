"""Bad input: one clear line, a non-zero exit, no traceback, nothing half-written in --out."""

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from conftest import partial_files, run_script  # noqa: E402
from trtkit.cli import main  # noqa: E402


def run_build(args, capsys):
    code = main(["build", "--bench-seconds", "0"] + list(args))
    captured = capsys.readouterr()
    return code, captured.err


def assert_clean_failure(code, err, out_dir, *phrases):
    assert code != 0
    error_lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, err
    for phrase in phrases:
        assert phrase in error_lines[0], error_lines[0]
    assert "Traceback" not in err
    if os.path.isdir(out_dir):
        assert partial_files(out_dir) == []
        assert os.listdir(out_dir) == []


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "out")


def test_missing_checkpoint(out_dir, capsys):
    code, err = run_build(["--checkpoint", "/no/such/model.pt", "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "checkpoint not found", "/no/such/model.pt")


def test_corrupt_checkpoint(tmp_path, out_dir, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(os.urandom(4096))
    code, err = run_build(["--checkpoint", str(bad), "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "cannot read checkpoint", "corrupt")


def test_checkpoint_for_another_architecture(sample, out_dir, capsys):
    _, checkpoint = sample  # a resnet18
    code, err = run_build(["--checkpoint", checkpoint, "--model", "resnet34", "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "does not fit resnet34", "--model resnet18")


def test_checkpoint_for_another_class_count(sample, out_dir, capsys):
    _, checkpoint = sample
    code, err = run_build(["--checkpoint", checkpoint, "--num-classes", "1000", "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "is for 10 classes, not 1000")


def test_missing_onnx(out_dir, capsys):
    code, err = run_build(["--onnx", "/no/such.onnx", "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "ONNX file not found")


def test_corrupt_onnx(tmp_path, out_dir, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 100)
    code, err = run_build(["--onnx", str(bad), "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "bad.onnx")


def test_truncated_onnx(sample_build, tmp_path, out_dir, capsys):
    build_dir, manifest = sample_build
    with open(os.path.join(build_dir, manifest["artifacts"][0]["path"]), "rb") as handle:
        data = handle.read()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 3])
    code, err = run_build(["--onnx", str(cut), "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "cut.onnx")


def test_empty_data_folder(sample, tmp_path, out_dir, capsys):
    empty = tmp_path / "images"
    (empty / "class_a").mkdir(parents=True)
    code, err = run_build(["--data", str(empty), "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "no images in")


def test_a_stray_non_image_file_among_images_is_left_out_with_a_warning(sample, tmp_path, out_dir, capsys):
    """One labels.csv beside the images is skipped and named; a folder of mostly non-images is an error
    (tests/test_data_cli.py)."""
    pytest.importorskip("PIL")
    import numpy as np
    from PIL import Image
    folder = tmp_path / "images" / "seven"
    folder.mkdir(parents=True)
    for index in range(12):
        Image.fromarray(np.full((8, 8, 3), 20 * index, dtype=np.uint8)).save(str(folder / "{}.png".format(index)))
    (folder / "labels.csv").write_text(u"a.png,7\n")
    code, err = run_build(["--data", str(tmp_path / "images"), "--precision", "fp32", "--out", out_dir], capsys)
    assert code == 0, err
    assert "labels.csv" in err and "Traceback" not in err
    assert partial_files(out_dir) == []


def test_unknown_model_name(out_dir, capsys):
    code, err = run_build(["--model", "resnet5O", "--checkpoint", "x.pt", "--out", out_dir], capsys)
    assert_clean_failure(code, err, out_dir, "unknown model 'resnet5O'", "resnet50")


def test_existing_out_keeps_its_files(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code = main(["build", "--checkpoint", "/no/such.pt", "--out", str(out)])
    assert code != 0
    assert sorted(os.listdir(str(out))) == ["keep.txt"]


def test_script_exit_code_and_verbose_traceback(tmp_path):
    result = run_script("build_engine.py", ["--checkpoint", "/no/such.pt", "--out", str(tmp_path / "o")])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: checkpoint not found")
    assert "Traceback" not in result.stderr
    verbose = run_script("build_engine.py", ["--checkpoint", "/no/such.pt", "--out", str(tmp_path / "o"),
                                             "--verbose"])
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr


@pytest.mark.parametrize("command", [["build", "--checkpoint", "/no/such.pt"],
                                     ["calibrate", "--onnx", "/no/such.onnx"]])
def test_failed_command_leaves_no_folders_it_made(tmp_path, capsys, command):
    out = tmp_path / "new" / "nested" / "out"
    code = main(command + ["--out", str(out)])
    assert code != 0
    assert os.listdir(str(tmp_path)) == []


def test_a_quiet_command_run_in_process_leaves_the_callers_messages_on(tmp_path, capsys):
    """``main([..., "-q"])`` in an application's (or a test's) own process silenced every later message of that
    process: found when a detector test's ``predict -q`` emptied a later build's log."""
    from trtkit import log
    assert main(["build", "--onnx", str(tmp_path / "missing.onnx"), "-q"]) != 0
    capsys.readouterr()
    log.info("still said")
    assert "still said" in capsys.readouterr().err and not log.settings()["quiet"]
