"""Segmentation data: images/ + masks/ folders and [N, H, W] npz masks, aligned with their images."""

import os

import numpy as np
import pytest

from trtkit.contract import InputContract
from trtkit.data import select
from trtkit.data.masks import preprocess_mask
from trtkit.errors import InputError

Image = pytest.importorskip("PIL.Image")


def _scene(rng, size=(40, 30), classes=3):
    """An RGB image of coloured rectangles on grey and its class-index mask (0 background)."""
    width, height = size
    mask = np.zeros((height, width), dtype=np.uint8)
    pixels = np.full((height, width, 3), 128, dtype=np.uint8)
    colours = [(0, 0, 0), (220, 40, 40), (40, 40, 220), (40, 200, 40)]
    for cls in range(1, classes):
        x, y = rng.randint(0, width - 10), rng.randint(0, height - 10)
        mask[y:y + 10, x:x + 10] = cls
        pixels[y:y + 10, x:x + 10] = colours[cls]
    return pixels, mask


def write_mask_folder(root, count=10, seed=0, palette=True):
    rng = np.random.RandomState(seed)
    os.makedirs(os.path.join(root, "images"))
    os.makedirs(os.path.join(root, "masks"))
    for index in range(count):
        pixels, mask = _scene(rng)
        Image.fromarray(pixels).save(os.path.join(root, "images", "{:03d}.jpg".format(index)), quality=95)
        image = Image.fromarray(mask, mode="L")
        if palette:
            image = image.convert("P")
        image.save(os.path.join(root, "masks", "{:03d}.png".format(index)))
    return root


def test_mask_geometry_follows_the_image_and_never_blends_classes():
    mask = np.zeros((30, 40), dtype=np.int64)
    mask[:, 20:] = 2
    stretch = preprocess_mask(mask, InputContract(size=(15, 20), resize="stretch"))
    assert stretch.shape == (15, 20) and set(np.unique(stretch)) == {0, 2}  # nearest: no class 1 in between
    assert (stretch[:, :10] == 0).all() and (stretch[:, 10:] == 2).all()
    padded = preprocess_mask(mask, InputContract(size=(40, 40), resize="pad"))
    assert padded.shape == (40, 40) and (padded[30:] == 255).all() and (padded[:30, 20:40] == 2).all()
    crop = preprocess_mask(np.arange(64 * 64).reshape(64, 64) % 7, InputContract(size=56, resize="crop"))
    assert crop.shape == (56, 56)


def test_a_mask_folder_streams_masks_as_labels(tmp_path):
    root = write_mask_folder(str(tmp_path / "seg"))
    contract = InputContract(size=(24, 32), resize="stretch", mean=(0.5,) * 3, std=(0.5,) * 3)
    selection = select(root, contract, split="all")
    assert len(selection) == 10 and selection.annotations is not None and selection.labels is None
    seen = 0
    for images, masks in selection.batches(4, progress=False):
        assert images.shape[1:] == (3, 24, 32) and masks.shape == (len(images), 24, 32)
        assert set(np.unique(masks)) <= {0, 1, 2} and (masks > 0).any()
        red = images[:, 0] > images[:, 2] + 0.5  # the red rectangles are class 1 where the mask says so
        assert np.mean(masks[red] == 1) > 0.8  # edges blur in the bilinear image resize, not in the mask
        seen += len(images)
    assert seen == 10
    heldout, train = select(root, contract, split="heldout"), select(root, contract, split="train")
    assert len(heldout) + len(train) == 10 and not set(heldout.names) & set(train.names)


def test_npz_masks(tmp_path):
    rng = np.random.RandomState(1)
    scenes = [_scene(rng) for _ in range(6)]
    path = str(tmp_path / "seg.npz")
    np.savez(path, x=np.stack([s[0] for s in scenes]), y=np.stack([s[1] for s in scenes]))
    selection = select(path, InputContract(size=(30, 40), resize="stretch"), split="all")
    images, masks = next(iter(selection.batches(6, progress=False)))
    assert masks.shape == (6, 30, 40)
    assert np.array_equal(masks, np.stack([s[1] for s in scenes]).astype(np.int64))


def test_bad_mask_folders_are_one_line(tmp_path):
    root = write_mask_folder(str(tmp_path / "missing"), count=3)
    os.remove(os.path.join(root, "masks", "001.png"))
    with pytest.raises(InputError, match="1 of 3 images .* have no mask"):
        select(root, InputContract(size=16), split="all")
    root = write_mask_folder(str(tmp_path / "size"), count=2)
    Image.new("L", (10, 10)).save(os.path.join(root, "masks", "000.png"))
    with pytest.raises(InputError, match="is 10x10 but its image is 40x30"):
        list(select(root, InputContract(size=16), split="all").batches(2, progress=False))
    root = write_mask_folder(str(tmp_path / "rgb"), count=1)
    Image.new("RGB", (40, 30)).save(os.path.join(root, "masks", "000.png"))
    with pytest.raises(InputError, match="class indices"):
        list(select(root, InputContract(size=16), split="all").batches(1, progress=False))
