"""Image sources become the same float32 NCHW batches, and bad sources get clear errors."""

import os
import pickle

import numpy as np
import pytest

from trtkit.data import _interp_matrix, is_cifar_folder, load_images, resize_bilinear
from trtkit.errors import InputError
from trtkit.models import InputContract

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


def test_resize_bilinear_properties():
    flat = np.full((1, 1, 8, 8), 0.25, dtype=np.float32)
    assert np.allclose(resize_bilinear(flat, 20), 0.25)
    ramp = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8).repeat(8, axis=2)
    half = resize_bilinear(ramp, 4)
    assert np.allclose(half[0, 0, 0], [0.5, 2.5, 4.5, 6.5])  # averages of pixel pairs


@pytest.mark.parametrize("shape,size", [((2, 3, 24, 32), 20), ((1, 1, 8, 8), 64), ((1, 3, 30, 17), 17)])
def test_resize_bilinear_equals_the_separable_weights_applied_in_one_contraction(shape, size):
    images = np.random.RandomState(3).rand(*shape).astype(np.float32)
    wy, wx = _interp_matrix(shape[2], size), _interp_matrix(shape[3], size)
    reference = np.einsum("oh,nchw,pw->ncop", wy, images, wx)  # the former formula, written out
    result = resize_bilinear(images, size)
    assert result.dtype == np.float32 and result.shape == shape[:2] + (size, size)
    np.testing.assert_allclose(result, reference, rtol=1e-5, atol=1e-6)


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


def test_non_image_file_is_named(tmp_path):
    pytest.importorskip("PIL")
    os.makedirs(str(tmp_path / "a"))
    _write_png(str(tmp_path / "a" / "1.png"), 5)
    (tmp_path / "a" / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="not an image: .*notes.txt"):
        load_images(str(tmp_path), C32)


def test_corrupt_image_is_named(tmp_path):
    pytest.importorskip("PIL")
    os.makedirs(str(tmp_path / "a"))
    (tmp_path / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    with pytest.raises(InputError, match="cannot decode image .*broken.jpg"):
        load_images(str(tmp_path), C32)


def test_empty_folder(tmp_path):
    os.makedirs(str(tmp_path / "cls"))
    with pytest.raises(InputError, match="no images in"):
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


def test_wrong_channel_count(tmp_path):
    np.save(str(tmp_path / "four.npy"), np.zeros((2, 4, 32, 32), dtype=np.uint8))
    with pytest.raises(InputError, match="channels"):
        load_images(str(tmp_path / "four.npy"), C32)


def test_cifar_folder(tmp_path):
    rng = np.random.RandomState(1)
    for name, n in (("data_batch_1", 20), ("test_batch", 10)):
        with open(str(tmp_path / name), "wb") as handle:
            pickle.dump({b"data": rng.randint(0, 255, (n, 3072)).astype(np.uint8),
                         b"labels": list(rng.randint(0, 10, n))}, handle)
    train = load_images(str(tmp_path), C32, split="train")
    held = load_images(str(tmp_path), C32, split="heldout")
    assert len(train) == 20 and len(held) == 10 and train.images.shape[1:] == (3, 32, 32)


def test_cifar_folder_detection(tmp_path):
    assert not is_cifar_folder(str(tmp_path)) and not is_cifar_folder(str(tmp_path / "missing"))
    (tmp_path / "test_batch").write_bytes(b"x")
    assert is_cifar_folder(str(tmp_path))
    assert not is_cifar_folder(str(tmp_path / "test_batch"))  # the batch file itself is no folder


def test_missing_source():
    with pytest.raises(InputError, match="data not found"):
        load_images("/nonexistent/folder", C32)
