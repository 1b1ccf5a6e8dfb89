"""Image sources become the same float32 NCHW batches, and bad sources get clear errors."""

import os
import pickle

import numpy as np
import pytest

from trtkit.data import is_cifar_folder, load_images, preprocess, select
from trtkit.errors import InputError
from trtkit.contract import InputContract

C32 = InputContract(size=32)


def test_sample_splits_are_disjoint_and_shaped():
    train = load_images("sample", C32, split="train")
    held = load_images("sample", C32, split="heldout")
    every = load_images("sample", C32, split="all")
    assert len(train) + len(held) == len(every) == 1797
    assert train.images.shape[1:] == (3, 32, 32) and train.images.dtype == np.float32
    assert set(held.labels.tolist()) == set(range(10))
    # disjoint: no held-out image equals a training image
    train_keys = set(x.tobytes() for x in train.images)
    assert sum(x.tobytes() in train_keys for x in held.images) < 5  # digits has a few exact duplicates
    assert train.identity != held.identity


def _write_png(path, value, size=(40, 30)):
    from PIL import Image
    Image.fromarray(np.full((size[1], size[0], 3), value, dtype=np.uint8)).save(path)


def test_image_folder(tmp_path):
    pytest.importorskip("PIL")
    for cls, value in (("cat", 10), ("dog", 200)):
        os.makedirs(str(tmp_path / cls))
        for i in range(5):
            _write_png(str(tmp_path / cls / "{}.png".format(i)), value)
    data = load_images(str(tmp_path), C32, split="all")
    assert data.images.shape == (10, 3, 32, 32)
    assert data.class_names == ["cat", "dog"]
    assert data.labels.tolist() == [0] * 5 + [1] * 5
    expected = (10 / 255.0 - C32.mean[0]) / C32.std[0]
    assert np.allclose(data.images[0, 0], expected, atol=1e-5)
    held = load_images(str(tmp_path), C32, split="heldout")
    train = load_images(str(tmp_path), C32, split="train")
    assert len(held) == 2 and len(train) == 8


def test_a_corrupt_image_alone_is_an_error_naming_it(tmp_path):
    pytest.importorskip("PIL")
    os.makedirs(str(tmp_path / "a"))
    (tmp_path / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    with pytest.raises(InputError, match="1 of 1 images .* unreadable.*broken.jpg"):
        load_images(str(tmp_path), C32)


def test_empty_folders(tmp_path):
    with pytest.raises(InputError, match="no images in"):
        load_images(str(tmp_path), C32)
    os.makedirs(str(tmp_path / "cls"))
    with pytest.raises(InputError, match="no images in class folder .*cls"):
        load_images(str(tmp_path), C32)


def test_npy_uint8_is_resized_and_float_must_match(tmp_path):
    raw = np.random.RandomState(0).randint(0, 255, size=(6, 16, 16, 3)).astype(np.uint8)
    np.save(str(tmp_path / "raw.npy"), raw)
    data = load_images(str(tmp_path / "raw.npy"), C32)
    assert data.images.shape == (6, 3, 32, 32) and data.labels is None
    np.save(str(tmp_path / "wrong.npy"), np.zeros((4, 3, 28, 28), dtype=np.float32))
    with pytest.raises(InputError, match="shape"):
        load_images(str(tmp_path / "wrong.npy"), C32)
    np.savez(str(tmp_path / "set.npz"), images=np.zeros((4, 3, 32, 32), np.float32), labels=np.arange(4))
    data = load_images(str(tmp_path / "set.npz"), C32)
    assert data.labels.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("layout", ["nhwc", "nchw", "nhw"])
@pytest.mark.parametrize("fmt", ["npy", "npz", "npz-compressed"])
def test_uint8_arrays_are_pixels_read_row_by_row(tmp_path, layout, fmt):
    pixels = np.random.RandomState(0).randint(0, 256, size=(40, 20, 24, 3)).astype(np.uint8)
    stored = {"nhwc": pixels, "nchw": pixels.transpose(0, 3, 1, 2), "nhw": pixels[..., 0]}[layout]
    labels = np.arange(40) % 3
    path = str(tmp_path / "set.{}".format(fmt[:3]))
    if fmt == "npy":
        np.save(path, stored)
    else:
        (np.savez_compressed if fmt.endswith("compressed") else np.savez)(path, x=stored, y=labels)
    contract = InputContract(size=(16, 12), resize="pad")
    selection = select(path, contract, split="heldout", limit=5, seed=4)
    rows = np.sort(np.random.RandomState(0).permutation(40)[:8])  # the held-out 20%
    rows = rows[np.sort(np.random.RandomState(4).permutation(8)[:5])]
    expected = np.stack([preprocess(pixels[i] if layout != "nhw" else pixels[i, :, :, 0], contract) for i in rows])
    np.testing.assert_array_equal(selection.load().images, expected)
    assert selection.labels is None if fmt == "npy" else selection.labels.tolist() == (rows % 3).tolist()


def test_a_large_npy_is_memory_mapped_and_npz_streamed_not_read_whole(tmp_path):
    import tracemalloc
    pixels = np.random.RandomState(0).randint(0, 256, size=(200, 96, 96, 3)).astype(np.uint8)  # 5.5 MB
    np.save(str(tmp_path / "big.npy"), pixels)
    np.savez_compressed(str(tmp_path / "big.npz"), images=pixels)
    del pixels
    contract = InputContract(size=8, resize="stretch")
    for name in ("big.npy", "big.npz"):
        tracemalloc.start()
        try:
            count = sum(len(b) for b, _ in select(str(tmp_path / name), contract).batches(16))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert count == 200 and peak < 2e6, "{}: peak {:.1f} MB".format(name, peak / 1e6)


def test_float_arrays_are_taken_as_preprocessed_and_must_match_the_contract(tmp_path):
    values = np.random.RandomState(1).randn(6, 1, 8, 8).astype(np.float32)
    np.save(str(tmp_path / "gray.npy"), values[:, 0])  # (N, H, W) for a 1-channel model
    gray = InputContract(size=8, channels=1, mean=0.5, std=0.5)
    np.testing.assert_array_equal(load_images(str(tmp_path / "gray.npy"), gray).images, values)
    with pytest.raises(InputError, match=r"preprocessed \(float\) images of shape 1x8x8; the model expects 3x8x8"):
        select(str(tmp_path / "gray.npy"), InputContract(size=8))
    np.save(str(tmp_path / "ints.npy"), np.zeros((2, 8, 8, 3), np.int32))
    with pytest.raises(InputError, match="int32 values; expected uint8 pixels or float"):
        select(str(tmp_path / "ints.npy"), InputContract(size=8))


def test_wrong_channel_count(tmp_path):
    np.save(str(tmp_path / "four.npy"), np.zeros((2, 4, 32, 32), dtype=np.uint8))
    with pytest.raises(InputError, match="channels"):
        load_images(str(tmp_path / "four.npy"), C32)


def test_cifar_folder(tmp_path, capfd):
    rng = np.random.RandomState(1)
    for name, n in (("data_batch_1", 20), ("test_batch", 10)):
        with open(str(tmp_path / name), "wb") as handle:
            pickle.dump({b"data": rng.randint(0, 255, (n, 3072)).astype(np.uint8),
                         b"labels": list(rng.randint(0, 10, n))}, handle)
    with open(str(tmp_path / "batches.meta"), "wb") as handle:
        pickle.dump({b"label_names": [("c%d" % i).encode() for i in range(10)]}, handle)
    train = load_images(str(tmp_path), C32, split="train")
    held = load_images(str(tmp_path), C32, split="heldout")
    assert len(train) == 20 and len(held) == 10 and train.images.shape[1:] == (3, 32, 32)
    assert held.class_names == ["c%d" % i for i in range(10)]
    subset = select(str(tmp_path), C32, split="all", limit=7, seed=2)
    rows = np.concatenate([_cifar_rows(str(tmp_path / n)) for n in ("data_batch_1", "test_batch")])
    chosen = np.sort(np.random.RandomState(2).permutation(30)[:7])
    expected = [preprocess(rows[i].reshape(3, 32, 32).transpose(1, 2, 0), C32) for i in chosen]
    np.testing.assert_array_equal(subset.load().images, np.stack(expected))
    assert select(str(tmp_path), InputContract(size=32, class_names=["a", "b"])).labels is None  # not the model's
    assert "has 10 classes but the model's class names list 2" in capfd.readouterr().err
    renamed = select(str(tmp_path), InputContract(size=32, class_names=["c%d" % i for i in range(9, -1, -1)]),
                     split="heldout")
    assert renamed.labels.tolist() == (9 - held.labels).tolist()  # mapped by name


def _cifar_rows(path):
    with open(path, "rb") as handle:
        return pickle.load(handle)[b"data"]


def test_cifar_folder_detection(tmp_path):
    assert not is_cifar_folder(str(tmp_path)) and not is_cifar_folder(str(tmp_path / "missing"))
    (tmp_path / "test_batch").write_bytes(b"x")
    assert is_cifar_folder(str(tmp_path))
    assert not is_cifar_folder(str(tmp_path / "test_batch"))  # the batch file itself is no folder


def test_sample_digit_files_preprocess_as_the_sample_arrays(tmp_path):
    from PIL import Image
    from sklearn.datasets import load_digits
    from trtkit.models.sample import sample_contract
    contract = sample_contract()
    held = select("sample", contract, split="heldout")
    digits = load_digits()
    positions = np.sort(np.random.RandomState(0).permutation(1797)[:359])  # the held-out split
    for index in positions:
        folder = tmp_path / str(digits.target[index])
        folder.mkdir(exist_ok=True)
        pixels = np.round(digits.images[index] * 255 / 16).astype(np.uint8)  # 0..16 -> 0..255 grey levels
        Image.fromarray(pixels, "L").save(str(folder / "{:04d}.png".format(index)))
    files = select(str(tmp_path), contract)
    by_index = dict((int(os.path.basename(n)[:4]), i) for i, n in enumerate(files.names))
    arrays, images = held.load().images, files.load().images
    assert held.class_names == files.class_names == [str(i) for i in range(10)]
    order = [by_index[i] for i in positions]
    np.testing.assert_array_equal(images[order], arrays)
    assert files.labels[order].tolist() == held.labels.tolist()
    assert arrays.shape == (359, 3, 64, 64) and arrays[:, 0].std() > 0.5  # stretched, not cropped


def test_the_sample_model_carries_the_contract_it_was_trained_with(sample):
    from trtkit.models.classifiers import load_model
    from trtkit.models.sample import sample_contract
    model, path = sample
    assert model.input_contract == sample_contract() and model.input_contract.resize == "stretch"
    assert load_model(None, path).input_contract.class_names == [str(i) for i in range(10)]
    assert model.trtkit_meta["accuracy"] > 0.95


def test_missing_source():
    with pytest.raises(InputError, match="data not found"):
        load_images("/nonexistent/folder", C32)


def test_class_folders_named_otherwise_than_the_model_s_classes_are_said(capsys):
    """A blind test: folders man/ and woman/ for a gender model whose classes are female, male took the labels
    from the sorted folder order (man = female) without a word: 13% accuracy instead of 73%."""
    from trtkit.data.sources import reconcile_classes
    labels = np.array([0, 1, 1, 0])
    names, got = reconcile_classes(["man", "woman"], labels, ["female", "male"], "data/gender")
    assert names == ["female", "male"] and got.tolist() == labels.tolist()
    err = capsys.readouterr().err
    assert "not named as the model's classes" in err and "man=female, woman=male" in err
    names, got = reconcile_classes(["male", "female"], np.array([0, 1]), ["female", "male"], "data/named")
    assert got.tolist() == [1, 0]  # folders named as the classes: mapped by name, silently
    reconcile_classes(["n01440764", "n01443537"], np.array([0, 1]), ["tench", "goldfish"], "imagenet")
    reconcile_classes(["0", "1"], np.array([0, 1]), ["zero", "one"], "digits")
    assert "not named" not in capsys.readouterr().err  # synsets and numbers are the norm, not a mistake


def test_an_ssd_s_background_is_not_a_class_the_data_lacks(capsys):
    """An SSD trained by trtkit on shape-boxes names its class 0 '__background__'; the data's 3 classes are all
    of its object classes, so no "3 of the model's 4 classes" warning (seen on every SSDlite320 build)."""
    from trtkit.data.sources import BACKGROUND_NAME, reconcile_classes
    names, got = reconcile_classes(["circle", "square"], np.array([0, 1]), [BACKGROUND_NAME, "circle", "square"],
                                   "boxes/ssd")
    assert names == [BACKGROUND_NAME, "circle", "square"] and got.tolist() == [1, 2]
    assert "of the model's" not in capsys.readouterr().err
    reconcile_classes(["circle"], np.array([0]), [BACKGROUND_NAME, "circle", "square"], "boxes/fewer")
    assert "boxes/fewer has 1 of the model's 2 classes" in capsys.readouterr().err
