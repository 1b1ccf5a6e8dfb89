"""Selections: the same files give the same arrays by every path; streaming stays in bounded memory; subsets
are chosen from the listing without decoding; unreadable files are skipped and counted, too many are an error."""

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from trtkit.contract import InputContract
from trtkit.data import load_images, select
from trtkit.errors import InputError

Image = pytest.importorskip("PIL.Image")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C32 = InputContract(size=32)


def make_folder(root, classes=("cat", "dog"), per_class=6, size=(40, 30), fmt="png", seed=0):
    rng = np.random.RandomState(seed)
    for name in classes:
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            w, h = size if i % 2 else (size[1] + 7, size[0] - 3)  # two aspect ratios
            pixels = rng.randint(0, 256, size=(h, w, 3)).astype(np.uint8)
            Image.fromarray(pixels).save(os.path.join(root, name, "{:03d}.{}".format(i, fmt)))
    return root


def test_the_same_files_give_the_same_arrays_by_every_path(tmp_path):
    from trtkit.precision.calibrate import load_calibration_images
    root = make_folder(str(tmp_path / "data"), per_class=12, size=(200, 150), fmt="jpg")  # large enough for draft
    make_folder(root, classes=("eel",), per_class=5, fmt="png", seed=1)
    contract = InputContract(size=(24, 40))
    selection = select(root, contract, split="train", limit=20, seed=3)
    loaded = selection.load()
    assert loaded.images.shape == (20, 3, 24, 40) and loaded.labels.tolist() == selection.labels.tolist()
    for batch_size in (1, 3, 7, 64):
        parts = list(selection.batches(batch_size))
        assert all(len(images) == batch_size for images, _ in parts[:-1])
        np.testing.assert_array_equal(np.concatenate([images for images, _ in parts]), loaded.images)
        assert np.concatenate([labels for _, labels in parts]).tolist() == loaded.labels.tolist()
    via_load_images = load_images(root, contract, split="train", limit=20, seed=3)
    calibration = load_calibration_images(root, contract, count=20, seed=3)
    for other in (via_load_images, calibration):
        np.testing.assert_array_equal(other.images, loaded.images)
        assert other.identity == loaded.identity == selection.identity
    one_worker = select(root, contract, split="train", limit=20, seed=3, workers=1).load()
    np.testing.assert_array_equal(one_worker.images, loaded.images)


def test_identity_follows_files_subset_and_preprocessing_not_class_names(tmp_path):
    root = make_folder(str(tmp_path / "data"))
    base = select(root, C32, limit=5, seed=0).identity
    assert select(root, C32, limit=5, seed=0).identity == base
    assert select(root, InputContract(size=32, class_names=["cat", "dog"]), limit=5).identity == base
    others = [select(root, C32, limit=5, seed=1).identity, select(root, C32, limit=6).identity,
              select(root, C32, split="train").identity, select(root, InputContract(size=32, resize="pad"),
                                                                limit=5).identity]
    assert len(set(others + [base])) == 5
    chosen = select(root, C32, limit=5, seed=0).names[0]
    os.utime(chosen, (1, 1))
    assert select(root, C32, limit=5, seed=0).identity != base


def test_streaming_a_folder_keeps_peak_memory_to_a_few_batches(tmp_path):
    root = str(tmp_path / "many")
    rng = np.random.RandomState(0)
    for c in range(4):
        os.makedirs(os.path.join(root, str(c)))
        for i in range(600):
            Image.fromarray(rng.randint(0, 256, (8, 8, 3)).astype(np.uint8)).save(
                os.path.join(root, str(c), "{:04d}.png".format(i)))
    contract = InputContract(size=48, resize="stretch")
    selection = select(root, contract)
    whole = len(selection) * 3 * 48 * 48 * 4  # what .load() of all would hold: 66 MB
    list(select(root, contract, limit=40).batches(32, progress=False))  # first use imports the thread pool
    tracemalloc.start()
    try:
        count = sum(len(images) for images, _ in selection.batches(32, progress=False))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == len(selection) == 2400
    assert peak < whole / 10, "peak {:.1f} MB while streaming; all images are {:.1f} MB".format(
        peak / 1e6, whole / 1e6)


def test_subsets_are_deterministic_and_chosen_without_decoding_the_rest(tmp_path):
    root = make_folder(str(tmp_path / "data"), per_class=30)
    chosen = select(root, C32, limit=7, seed=11).names
    assert select(root, C32, limit=7, seed=11).names == chosen
    assert select(root, C32, limit=7, seed=12).names != chosen
    for cls in ("cat", "dog"):  # every file not chosen becomes garbage: listing unchanged, decoding would fail
        for name in os.listdir(os.path.join(root, cls)):
            path = os.path.join(root, cls, name)
            if path not in chosen:
                with open(path, "wb") as handle:
                    handle.write(b"not an image")
    again = select(root, C32, limit=7, seed=11, max_unreadable=0.0)
    assert again.names == chosen
    assert len(again.load()) == 7 and again.skipped == []
    with pytest.raises(InputError, match="unreadable"):
        select(root, C32, limit=20, seed=11, max_unreadable=0.0).load()


def test_labels_and_class_names_come_from_the_listing(tmp_path, capfd):
    root = make_folder(str(tmp_path / "data"), classes=("b_dog", "a_cat"), per_class=4)
    selection = select(root, C32)
    assert selection.class_names == ["a_cat", "b_dog"] and selection.labels.dtype == np.int64
    assert selection.labels.tolist() == [0] * 4 + [1] * 4
    renamed = select(root, InputContract(size=32, class_names=["b_dog", "a_cat", "eel"]))
    assert renamed.class_names == ["b_dog", "a_cat", "eel"] and renamed.labels.tolist() == [1] * 4 + [0] * 4
    synsets = select(root, InputContract(size=32, class_names=["cat", "dog"]))  # folder names are not words
    assert synsets.labels.tolist() == [0] * 4 + [1] * 4 and synsets.class_names == ["cat", "dog"]
    other = select(root, InputContract(size=32, class_names=["x", "y", "z"]))
    assert other.labels is None and other.class_names == ["x", "y", "z"]
    assert "has 2 classes but the model's class names list 3 ('a_cat' is not among them)" in capfd.readouterr().err
    assert other.load().labels is None and all(labels is None for _, labels in other.batches(3))


def test_train_and_val_folders_are_the_splits(tmp_path):
    make_folder(str(tmp_path / "train"), per_class=5)
    make_folder(str(tmp_path / "val"), classes=("dog",), per_class=2)
    held = select(str(tmp_path), C32, split="heldout")
    assert len(held) == 2 and held.class_names == ["cat", "dog"] and held.labels.tolist() == [1, 1]
    assert len(select(str(tmp_path), C32, split="train")) == 10 and len(select(str(tmp_path), C32)) == 12


# ------------------------------------------------------------------ bad input

def _files_under(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


def test_corrupt_images_among_many_are_skipped_and_counted(tmp_path):
    root = make_folder(str(tmp_path / "data"), per_class=150, size=(12, 10))
    (tmp_path / "data" / "dog" / "zz_broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    good = tmp_path / "data" / "cat" / "000.png"
    Image.open(str(good)).save(str(tmp_path / "data" / "cat" / "zz_truncated.jpg"))
    data = (tmp_path / "data" / "cat" / "zz_truncated.jpg").read_bytes()
    (tmp_path / "data" / "cat" / "zz_truncated.jpg").write_bytes(data[:len(data) // 2])
    before = _files_under(root)
    selection = select(root, C32)
    loaded = selection.load()
    assert len(selection) == 302 and len(loaded) == 300 and loaded.labels.tolist() == [0] * 150 + [1] * 150
    assert sorted(os.path.basename(p) for p, _ in selection.skipped) == ["zz_broken.png", "zz_truncated.jpg"]
    assert all(reason for _, reason in selection.skipped) and loaded.skipped == selection.skipped
    for i in range(3):
        (tmp_path / "data" / "dog" / "zz_bad{}.png".format(i)).write_bytes(b"nothing")
    with pytest.raises(InputError, match=r"of 305 images in .* are unreadable, more than 1%"):
        select(root, C32).load()
    assert len(select(root, C32, max_unreadable=0.05).load()) == 300
    assert set(_files_under(root)) - set(before) == set(
        os.path.join(root, "dog", "zz_bad{}.png".format(i)) for i in range(3))  # nothing written


def test_a_few_non_image_files_are_left_out_and_counted_but_mostly_non_images_is_an_error(tmp_path):
    root = make_folder(str(tmp_path / "data"), per_class=5)
    (tmp_path / "data" / "cat" / "notes.txt").write_text("hello")
    selection = select(root, C32)
    assert len(selection) == 10 and selection.ignored[0] == 1 and selection.ignored[1][0].endswith("notes.txt")
    for i in range(12):
        (tmp_path / "data" / "dog" / "label{}.xml".format(i)).write_text("<x/>")
    with pytest.raises(InputError, match=r"most files in .*data are not images \(13 of 23"):
        select(root, C32)


def test_an_empty_class_folder_is_named(tmp_path):
    root = make_folder(str(tmp_path / "data"), per_class=3)
    os.makedirs(os.path.join(root, "emu"))
    with pytest.raises(InputError, match=r"no images in class folder \S*emu \(add its images"):
        select(root, C32)


def test_an_unreadable_folder_is_one_clear_error(tmp_path):
    import shutil
    prefix = []
    if os.geteuid() == 0:  # root reads every folder: run without the capabilities that bypass permissions
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot make a folder unreadable")
        prefix = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--"]
    root = make_folder(str(tmp_path / "data"), per_class=2)
    os.chmod(os.path.join(root, "dog"), 0o000)
    code = ("import sys; from trtkit.contract import InputContract; from trtkit.data import select\n"
            "from trtkit.errors import InputError\n"
            "try:\n    select(sys.argv[1], InputContract(size=32))\nexcept InputError as exc:\n"
            "    print(exc)\n    sys.exit(2)\n")
    try:
        result = subprocess.run(prefix + [sys.executable, "-c", code, root], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, universal_newlines=True, cwd=ROOT,
                                env=dict(os.environ, PYTHONPATH=ROOT))
    finally:
        os.chmod(os.path.join(root, "dog"), 0o755)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot read folder {}".format(os.path.join(root, "dog")) in result.stdout
    assert "Permission denied" in result.stdout and result.stdout.count("\n") == 1


def test_mean_and_std_of_the_wrong_length_are_refused_through_the_data_api(tmp_path):
    root = make_folder(str(tmp_path / "data"), per_class=2)
    with pytest.raises(InputError, match="--mean has 3 values; the model has 1 channel"):
        select(root, {"size": 32, "channels": 1, "mean": [0.1, 0.2, 0.3], "std": [0.5]})
    with pytest.raises(InputError, match="--std has 2 values; the model has 3 channel"):
        select(root, {"size": 32, "channels": 3, "std": [0.5, 0.5]})


def test_progress_shows_rate_and_eta(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("TRTKIT_PROGRESS", "1")
    root = make_folder(str(tmp_path / "data"), per_class=3)
    list(select(root, C32).batches(2, progress="reading"))
    err = capfd.readouterr().err
    assert "reading" in err and "6/6" in err and "img/s" in err and "ETA" in err
