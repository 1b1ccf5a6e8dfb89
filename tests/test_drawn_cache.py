"""The drawn samples' disk cache (``data.drawn``): what comes back from it is what drawing gives."""

import os

import numpy as np
import pytest


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_shape_boxes_from_the_cache_equal_the_drawn_ones(own_cache):
    import trtkit.data.shape_boxes as shape_boxes
    drawn_images, drawn_records = shape_boxes.draw_shape_boxes(24, seed=5)
    first = shape_boxes.shape_boxes_source(count=24, seed=5)
    shape_boxes._DRAWN.clear()  # a new process: read from the file
    stored = [name for name in os.listdir(str(own_cache / "data")) if name.endswith(".npz")]
    assert stored == ["shape-boxes-v{}-24-seed5.npz".format(shape_boxes.SHAPE_BOXES_VERSION)]
    again = shape_boxes.shape_boxes_source(count=24, seed=5)
    shape_boxes._DRAWN.clear()
    for images, records, names in (first, again):
        assert names == list(shape_boxes.BOX_CLASS_NAMES)
        assert np.array_equal(images, drawn_images)
        assert [r.image for r in records] == [r.image for r in drawn_records]
        assert sum(len(r) for r in records) > 24
        for mine, theirs in zip(records, drawn_records):
            assert (mine.image_id, mine.size) == (theirs.image_id, theirs.size)
            assert np.array_equal(mine.boxes, theirs.boxes) and np.array_equal(mine.labels, theirs.labels)


def test_drawn_once_and_a_corrupt_file_is_drawn_again(own_cache):
    from trtkit.data.drawn import drawn_arrays
    calls = []

    def draw():
        calls.append(1)
        return {"a": np.arange(6).reshape(2, 3), "b": np.ones(2, np.uint8)}
    first = drawn_arrays("t", 1, 2, 0, draw)
    second = drawn_arrays("t", 1, 2, 0, draw)
    assert len(calls) == 1 and all(np.array_equal(first[k], second[k]) for k in ("a", "b"))
    drawn_arrays("t", 2, 2, 0, draw)  # another drawing version is drawn anew
    assert len(calls) == 2
    path = own_cache / "data" / "t-v1-2-seed0.npz"
    path.write_bytes(path.read_bytes()[:40])  # cut short, as by a full disk
    third = drawn_arrays("t", 1, 2, 0, draw)
    assert len(calls) == 3 and np.array_equal(third["a"], first["a"])
    assert drawn_arrays("t", 1, 2, 0, draw) and len(calls) == 3  # replaced by a whole file
    assert not [n for n in os.listdir(str(own_cache / "data")) if n.endswith(".tmp")]
