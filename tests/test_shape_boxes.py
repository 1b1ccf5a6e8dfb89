"""The detection sample data ('shape-boxes'): drawn from a seed, boxes that tightly enclose what is seen of each
object, mostly hidden objects dropped, sizes from 8 px to half the image, and files trtkit reads back."""

import numpy as np

from trtkit.data.shape_boxes import (BOX_CLASS_NAMES, MIN_EXTENT, MIN_VISIBLE, draw_shape_boxes, draw_shape_objects,
                                     shape_boxes_source, write_shape_boxes)


def test_drawing_is_deterministic_from_its_seed():
    images, records = draw_shape_boxes(12, seed=5)
    again, again_records = draw_shape_boxes(12, seed=5)
    assert np.array_equal(images, again)
    assert all(np.array_equal(a.boxes, b.boxes) and np.array_equal(a.labels, b.labels)
               for a, b in zip(records, again_records))
    other, _ = draw_shape_boxes(12, seed=6)
    assert not np.array_equal(images, other)
    assert images.shape == (12, 128, 128, 3) and images.dtype == np.uint8
    assert [r.image_id for r in records] == list(range(12)) and all(r.size == (128, 128) for r in records)


def test_boxes_tightly_enclose_the_visible_pixels_and_hidden_objects_are_dropped():
    images, owners, objects = draw_shape_objects(60, seed=7)
    _, records = draw_shape_boxes(60, seed=7)
    dropped = kept = 0
    for image, owner, drawn, record in zip(images, owners, objects, records):
        assert 1 <= len(drawn) <= 6
        boxes = []
        for entry in drawn:
            mask = owner == entry["index"]
            # the owner map is the image: an object's visible pixels all have one colour, its fill
            if mask.any():
                assert len(np.unique(image[mask], axis=0)) == 1
            if entry["visible"] < MIN_VISIBLE * entry["area"]:
                assert entry["box"] is None
                dropped += 1
                continue
            kept += 1
            ys, xs = np.nonzero(mask)
            x1, y1, x2, y2 = entry["box"]
            assert (x1, y1, x2, y2) == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
            # tight: each edge row / column of the box holds a pixel of the object, nothing of it outside
            assert mask[int(y1), int(x1):int(x2)].any() and mask[int(y2) - 1, int(x1):int(x2)].any()
            assert mask[int(y1):int(y2), int(x1)].any() and mask[int(y1):int(y2), int(x2) - 1].any()
            assert mask.sum() == mask[int(y1):int(y2), int(x1):int(x2)].sum()
            boxes.append(entry["box"])
        assert np.array_equal(record.boxes, np.asarray(boxes, np.float32).reshape(-1, 4))
        assert set(record.labels.tolist()) <= {0, 1, 2}
    assert kept > 150 and dropped > 0  # occlusion happens, and only mostly hidden objects lose their box
    assert dropped < 0.15 * kept


def test_sizes_span_8_px_to_half_the_image():
    _, _, objects = draw_shape_objects(150, seed=8)
    extents = np.array([entry["extent"] for drawn in objects for entry in drawn])
    assert extents.min() >= MIN_EXTENT and extents.max() <= 64
    assert extents.min() < 9 and extents.max() > 60
    # log-uniform: about as many objects per octave (8-16, 16-32, 32-64)
    counts = np.histogram(extents, bins=[8, 16, 32, 64])[0]
    assert counts.min() > 0.25 * counts.sum()
    _, records = draw_shape_boxes(150, seed=8)
    sides = np.concatenate([np.maximum(r.boxes[:, 2] - r.boxes[:, 0], r.boxes[:, 3] - r.boxes[:, 1])
                            for r in records])
    assert sides.min() <= 9 and sides.max() >= 56


def test_every_class_appears_in_its_colour():
    images, owners, objects = draw_shape_objects(40, seed=9)
    colours = {0: [], 2: []}
    for image, owner, drawn in zip(images, owners, objects):
        for entry in drawn:
            if entry["label"] in colours and entry["box"] is not None:
                colours[entry["label"]].append(image[owner == entry["index"]][0].astype(float))
    red, blue = np.mean(colours[0], axis=0), np.mean(colours[2], axis=0)
    assert red[0] > red[2] and blue[2] > blue[0]  # circles red, triangles blue (data.shapes' hues)


def test_the_source_gives_images_records_and_names():
    images, records, names = shape_boxes_source(count=10, seed=4)
    assert names == list(BOX_CLASS_NAMES) == ["circle", "square", "triangle"]
    assert images.shape == (10, 128, 128, 3) and len(records) == 10
    assert shape_boxes_source(count=10, seed=4)[0] is images  # drawn once per process


def test_written_files_read_back_as_the_same_boxes(tmp_path):
    from trtkit.data.boxes import read_boxes
    path = write_shape_boxes(str(tmp_path), count=6, seed=2)
    box_set = read_boxes(path)
    _, records = draw_shape_boxes(6, seed=2)
    assert box_set.format == "coco" and box_set.class_names == list(BOX_CLASS_NAMES)
    assert len(box_set) == 6
    for read, drawn in zip(box_set.records, records):
        assert read.size == (128, 128)
        np.testing.assert_array_equal(read.boxes, drawn.boxes)
        np.testing.assert_array_equal(read.labels, drawn.labels)
    assert (tmp_path / "images" / "00000.png").is_file()
