"""Box data in the formats people have (COCO JSON, YOLO txt, VOC XML, .npz): parsed against hand-computed truth,
and every bad annotation refused in one line naming its file and entry."""

import json
import os

import numpy as np
import pytest

from trtkit.contract import InputContract
from trtkit.data.boxes import box_format, read_boxes
from trtkit.data.boxes.names import read_yaml_names
from trtkit.errors import InputError

Image = pytest.importorskip("PIL.Image")


def _image(path, size=(64, 48), colour=(120, 30, 200), exif=None):
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder)
    image = Image.new("RGB", size, colour)
    if exif is not None:
        tags = image.getexif()
        tags[0x0112] = exif
        image.save(path, exif=tags.tobytes())
    else:
        image.save(path)
    return path


def _refused(match, function, *args, **kwargs):
    with pytest.raises(InputError) as caught:
        function(*args, **kwargs)
    assert match in caught.value.message, caught.value.message
    assert "\n" not in str(caught.value) and caught.value.hint
    return caught.value.message


# ------------------------------------------------------------------ COCO

def _coco(root, annotations=None, images=None, categories=None, name="instances_val.json"):
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    listed = images if images is not None else [
        {"id": 42, "file_name": "a.png", "width": 64, "height": 48},
        {"id": 7, "file_name": "b.png", "width": 32, "height": 40}]
    for entry in listed:
        if not os.path.exists(os.path.join(root, "images", entry["file_name"])):
            _image(os.path.join(root, "images", entry["file_name"]), (entry["width"], entry["height"]))
    data = {"images": listed, "categories": categories or [{"id": 1, "name": "person"}, {"id": 3, "name": "car"},
                                                             {"id": 90, "name": "toothbrush"}],
            "annotations": annotations if annotations is not None else [
                {"id": 1, "image_id": 42, "category_id": 90, "bbox": [10, 5, 20, 30], "iscrowd": 0},
                {"id": 2, "image_id": 42, "category_id": 1, "bbox": [40.5, 0, 24.4, 48.6], "iscrowd": 1}]}
    path = os.path.join(root, name)
    with open(path, "w") as handle:
        json.dump(data, handle)
    return path


def test_coco_boxes_classes_ids_and_crowd(tmp_path):
    path = _coco(str(tmp_path))
    boxes = read_boxes(path)
    assert box_format(path) == "coco" and boxes.format == "coco" and len(boxes) == 2
    assert boxes.class_names == ["person", "car", "toothbrush"] and boxes.category_ids == [1, 3, 90]
    first, second = boxes.records
    assert first.image == "a.png" and first.image_id == 42 and first.size == (64, 48)
    np.testing.assert_allclose(first.boxes, [[10, 5, 30, 35], [40.5, 0, 64, 48]])  # 0.4 and 0.6 px outside: clipped
    assert first.labels.tolist() == [2, 0] and first.iscrowd.tolist() == [False, True]
    assert first.ignore.tolist() == [False, True] and boxes.category_id(2) == 90
    assert second.image_id == 7 and len(second) == 0 and second.boxes.shape == (0, 4)  # listed, no objects


def test_boxes_written_as_coco_bboxes_read_back_as_the_same_boxes(tmp_path):
    from trtkit.data.boxes.coco import coco_bboxes
    boxes = np.array([[10.25, 5.5, 30.75, 35.0], [0.0, 1.0, 63.5, 47.0]])
    written = coco_bboxes(boxes)
    assert written == [[10.25, 5.5, 20.5, 29.5], [0.0, 1.0, 63.5, 46.0]]
    assert coco_bboxes(boxes[:1] + 1e-4, decimals=2) == [[10.25, 5.5, 20.5, 29.5]]
    assert coco_bboxes(np.zeros((0, 4))) == []
    path = _coco(str(tmp_path), annotations=[{"id": i + 1, "image_id": 42, "category_id": 1, "bbox": bbox,
                                              "iscrowd": 0} for i, bbox in enumerate(written)])
    np.testing.assert_allclose(read_boxes(path).records[0].boxes, boxes)


def test_coco_folder_layout_and_its_splits(tmp_path):
    root = str(tmp_path)
    for split in ("train2017", "val2017"):
        _image(os.path.join(root, split, "x.png"))
        os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
        with open(os.path.join(root, "annotations", "instances_{}.json".format(split)), "w") as handle:
            json.dump({"images": [{"id": 1, "file_name": "x.png", "width": 64, "height": 48}], "annotations": [],
                       "categories": [{"id": 1, "name": split}]}, handle)
    assert box_format(root) == "coco"
    val = read_boxes(root, split="heldout")
    assert val.class_names == ["val2017"] and val.own_split and val.root == os.path.join(root, "val2017")
    assert read_boxes(root, split="train").class_names == ["train2017"]
    _refused("has 2 COCO files", read_boxes, root)


@pytest.mark.parametrize("annotation, message", [
    ({"id": 1234, "image_id": 42, "category_id": 1, "bbox": [10, 10, -5, 20]},
     "instances_val.json: annotation 1234 (image 42): box [10, 10, -5, 20] has non-positive width"),
    ({"id": 5, "image_id": 42, "category_id": 1, "bbox": [10, 10, 5, 0]},
     "instances_val.json: annotation 5 (image 42): box [10, 10, 5, 0] has non-positive height"),
    ({"id": 6, "image_id": 42, "category_id": 2, "bbox": [1, 1, 5, 5]},
     "instances_val.json: annotation 6 (image 42): category_id 2 is not among the categories (1..90, 3 of them)"),
    ({"id": 8, "image_id": 42, "category_id": 3, "bbox": [50, 10, 20, 5]},
     "instances_val.json: annotation 8 (image 42): [50, 10, 20, 5] x + width 70 is outside the 64-pixel-wide image"),
    ({"id": 9, "image_id": 42, "category_id": 3, "bbox": [10, -3, 5, 5]},
     "instances_val.json: annotation 9 (image 42): [10, -3, 5, 5] y -3 is outside the 48-pixel-high image"),
    ({"id": 10, "image_id": 42, "category_id": 3, "bbox": [64.5, 1, 0.4, 5]},
     "instances_val.json: annotation 10 (image 42): box [64.5, 1, 0.4, 5] is empty once clipped to the 64x48 image"),
    ({"id": 11, "image_id": 99, "category_id": 3, "bbox": [1, 1, 5, 5]},
     "instances_val.json: annotation 11 is for image 99, which is not listed"),
    ({"id": 12, "image_id": 42, "category_id": 3, "bbox": [1, 1, "5", None]},
     "instances_val.json: annotation 12 (image 42): bbox [1, 1, '5', None] is not four numbers [x, y, width, height]"),
    ({"id": 13, "image_id": 42, "category_id": 3, "bbox": [1, 1, 5, 5], "iscrowd": 2},
     "instances_val.json: annotation 13 (image 42): iscrowd 2 is not 0 or 1"),
])
def test_coco_bad_annotations_name_the_file_and_the_entry(tmp_path, annotation, message):
    path = _coco(str(tmp_path), annotations=[annotation])
    assert _refused(message, read_boxes, path) == message


def test_coco_missing_image_size_mismatch_and_malformed_file(tmp_path):
    root = str(tmp_path)
    path = _coco(root)
    os.remove(os.path.join(root, "images", "b.png"))
    _refused("instances_val.json: image 7 (b.png): image {} is listed but missing".format(
        os.path.join(root, "images", "b.png")), read_boxes, path)
    _image(os.path.join(root, "images", "b.png"), (40, 40))
    _refused("instances_val.json: image 7 (b.png): the annotation is for a 32x40 image but the image is 40x40",
             read_boxes, path)
    with open(path, "w") as handle:
        handle.write('{"images": [}')
    _refused("instances_val.json: not valid JSON", read_boxes, path)
    _coco(root, categories=[{"id": 1, "name": "a"}, {"id": 1, "name": "b"}])
    _refused("instances_val.json: category 1 is listed twice ('a', 'b')", read_boxes, path)


def test_exif_turned_photos_are_read_as_the_model_sees_them(tmp_path):
    root = str(tmp_path)
    _image(os.path.join(root, "images", "p.jpg"), (64, 32), exif=6)  # stored 64x32, shown upright as 32x64
    upright = [{"id": 1, "file_name": "p.jpg", "width": 32, "height": 64}]
    path = _coco(root, images=upright, annotations=[{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 40, 20, 20]}])
    message = _refused("the annotation is for a 32x64 image but the image is 64x32 as read", read_boxes, path)
    assert "image 1 (p.jpg)" in message
    boxes = read_boxes(path, contract=InputContract(exif_orientation="apply"))
    assert boxes.records[0].size == (32, 64) and boxes.exif_orientation == "apply"
    np.testing.assert_allclose(boxes.records[0].boxes, [[2, 40, 22, 60]])
    _refused("were sized with EXIF orientation 'apply'", boxes.labels_reader().read, [0], InputContract())


# ------------------------------------------------------------------ YOLO

def _yolo(root, labels, names=("cat", "dog", "bird"), sizes=None):
    sizes = sizes or {}
    for stem, lines in labels.items():
        _image(os.path.join(root, "images", stem + ".jpg"), sizes.get(stem, (200, 100)))
        if lines is not None:
            os.makedirs(os.path.join(root, "labels"), exist_ok=True)
            with open(os.path.join(root, "labels", stem + ".txt"), "w") as handle:
                handle.write("\n".join(lines) + "\n")
    if names is not None:
        with open(os.path.join(root, "classes.txt"), "w") as handle:
            handle.write("\n".join(names) + "\n")
    return root


def test_yolo_normalized_centres_become_pixels(tmp_path):
    root = _yolo(str(tmp_path), {"0001": ["1 0.5 0.5 0.2 0.4", "", "0 0.1 0.1 0.2 0.2"],
                                 "0002": None, "0003": ["2 0.1 0.2 0.5 0.2 0.3 0.6"]})  # a polygon
    boxes = read_boxes(root)
    assert box_format(root) == "yolo" and boxes.class_names == ["cat", "dog", "bird"] and len(boxes) == 3
    first, second, third = boxes.records
    assert first.image == os.path.join("images", "0001.jpg") and first.size == (200, 100)
    np.testing.assert_allclose(first.boxes, [[80, 30, 120, 70], [0, 0, 40, 20]], atol=1e-4)
    assert first.labels.tolist() == [1, 0] and len(second) == 0  # no label file: no objects
    np.testing.assert_allclose(third.boxes, [[20, 20, 100, 60]], atol=1e-4)


def test_yolo_bad_labels_name_the_file_and_the_line(tmp_path):
    names = ["c{}".format(i) for i in range(10)]
    root = _yolo(str(tmp_path / "a"), {"0007": ["0 0.5 0.5 0.1 0.1", "1 0.5 0.5 0.1 0.1", "12 0.5 0.5 0.1 0.1"]},
                 names=names)
    assert _refused("labels/0007.txt line 3: class 12 but classes.txt names 10 classes", read_boxes, root) == \
        "labels/0007.txt line 3: class 12 but classes.txt names 10 classes"
    for lines, message in (
            (["0 0.5 0.5 0.1"], "labels/0001.txt line 1: expected 'class cx cy w h'"),
            (["x 0.5 0.5 0.1 0.1"], "labels/0001.txt line 1: class 'x' is not a class index"),
            (["0 0.5 0.5 -0.1 0.1"], "labels/0001.txt line 1: box '0 0.5 0.5 -0.1 0.1' has non-positive width"),
            (["0 0.9 0.5 0.4 0.1"], "labels/0001.txt line 1: '0 0.9 0.5 0.4 0.1' right edge 220 is outside the "
                                    "200-pixel-wide image"),
            (["0 0.5 nan 0.1 0.1"], "labels/0001.txt line 1: expected")):
        root = _yolo(str(tmp_path / str(abs(hash(message)))), {"0001": lines})
        _refused(message, read_boxes, root)
    root = _yolo(str(tmp_path / "orphan"), {"0001": ["0 0.5 0.5 0.1 0.1"]})
    with open(os.path.join(root, "labels", "0002.txt"), "w") as handle:
        handle.write("0 0.5 0.5 0.1 0.1\n")
    _refused("labels/0002.txt: a label file for no image (no 0002.* in images/)", read_boxes, root)


def test_yolo_splits_and_names_from_data_yaml(tmp_path):
    root = str(tmp_path)
    for split in ("train", "val"):
        _image(os.path.join(root, "images", split, "x.jpg"))
        os.makedirs(os.path.join(root, "labels", split))
        with open(os.path.join(root, "labels", split, "x.txt"), "w") as handle:
            handle.write("1 0.5 0.5 0.5 0.5\n")
    with open(os.path.join(root, "data.yaml"), "w") as handle:
        handle.write("path: .\ntrain: images/train\nval: images/val\nnames:\n  0: person  # people\n  1: 'traffic light'\n")
    val = read_boxes(root, split="heldout")
    assert val.own_split and val.images == [os.path.join("images", "val", "x.jpg")]
    assert val.class_names == ["person", "traffic light"] and val.records[0].labels.tolist() == [1]
    assert len(read_boxes(root)) == 2 and not read_boxes(root).own_split


@pytest.mark.parametrize("text, names", [
    ("nc: 2\nnames: ['a', 'b']\n", ["a", "b"]),
    ("names: [person, 'x, y', \"z\"]  # three\n", ["person", "x, y", "z"]),
    ("names: [\n  a,\n  b\n]\nnc: 2\n", ["a", "b"]),
    ("names: {0: a, 1: b}\n", ["a", "b"]),
    ("names:\n  - a\n  - b c\ntrain: x\n", ["a", "b c"]),
    ("names:\n- a\n- b\n", ["a", "b"]),
    ("names:\n  0: a\n  1: b\n", ["a", "b"]),
    ("train: x\n", None),
])
def test_data_yaml_names_without_pyyaml(tmp_path, monkeypatch, text, names):
    import trtkit.data.boxes.names as module
    monkeypatch.setattr(module, "_pyyaml_names", lambda path, text: pytest.fail("PyYAML asked for " + text))
    path = str(tmp_path / "data.yaml")
    with open(path, "w") as handle:
        handle.write(text)
    assert read_yaml_names(path) == names


def test_data_yaml_of_another_form_is_read_by_pyyaml_or_refused(tmp_path):
    path = str(tmp_path / "data.yaml")
    with open(path, "w") as handle:
        handle.write("names: &n\n  0: a\n")
    pytest.importorskip("yaml")
    assert read_yaml_names(path) == ["a"]
    with open(path, "w") as handle:
        handle.write("names:\n  0: a\n  2: b\n")
    _refused("names are keyed [0, 2] but must be 0..1", read_yaml_names, path)


# ------------------------------------------------------------------ VOC

VOC = """<annotation><filename>{stem}.jpg</filename><size><width>{w}</width><height>{h}</height><depth>3</depth></size>
{objects}</annotation>"""
OBJECT = ("<object><name>{name}</name><difficult>{difficult}</difficult><bndbox><xmin>{box[0]}</xmin>"
          "<ymin>{box[1]}</ymin><xmax>{box[2]}</xmax><ymax>{box[3]}</ymax></bndbox></object>")


def _voc(root, files, size=(640, 480)):
    os.makedirs(os.path.join(root, "Annotations"), exist_ok=True)
    for stem, objects in files.items():
        _image(os.path.join(root, "JPEGImages", stem + ".jpg"), size)
        with open(os.path.join(root, "Annotations", stem + ".xml"), "w") as handle:
            handle.write(VOC.format(stem=stem, w=size[0], h=size[1], objects="".join(
                OBJECT.format(name=n, difficult=d, box=b) for n, d, b in objects)))
    return root


def test_voc_one_based_inclusive_pixels_and_difficult(tmp_path):
    root = _voc(str(tmp_path), {"0001": [("dog", 0, (1, 1, 640, 480)), ("person", 1, (10, 20, 10, 29))],
                                "0002": []})
    boxes = read_boxes(root)
    assert box_format(root) == "voc" and boxes.class_names[11] == "dog" and len(boxes.class_names) == 20
    first = boxes.records[0]
    np.testing.assert_allclose(first.boxes, [[0, 0, 640, 480], [9, 19, 10, 29]])  # whole image; 1x10 pixels
    assert first.labels.tolist() == [11, 14] and first.difficult.tolist() == [False, True]
    assert len(boxes.records[1]) == 0
    other = _voc(str(tmp_path / "own"), {"a": [("widget", 0, (1, 1, 5, 5)), ("bolt", 0, (1, 1, 5, 5))]})
    assert read_boxes(other).class_names == ["bolt", "widget"]


def test_voc_bad_annotations_name_the_file_and_the_object(tmp_path):
    root = _voc(str(tmp_path / "a"), {"0001": [("dog", 0, (1, 1, 5, 5)), ("cat", 0, (600, 10, 700, 20))]})
    assert _refused("xmax", read_boxes, root) == \
        "Annotations/0001.xml object 2 (cat): <bndbox> xmax 700 is outside the 640-pixel-wide image"
    root = _voc(str(tmp_path / "b"), {"0001": [("dog", 0, (10, 1, 9, 5))]})
    _refused("Annotations/0001.xml object 1 (dog): <bndbox> [10, 1, 9, 5] has non-positive width", read_boxes, root)
    root = _voc(str(tmp_path / "c"), {"0001": [("dgo", 0, (1, 1, 5, 5))]})
    _refused("Annotations/0001.xml object 1 (dgo): 'dgo' is not among the class names (2 of them)",
             read_boxes, root, class_names=["cat", "dog"])
    root = _voc(str(tmp_path / "d"), {"0001": [("dog", 2, (1, 1, 5, 5))]})
    _refused("Annotations/0001.xml object 1 (dog): <difficult> 2 is not 0 or 1", read_boxes, root)
    root = _voc(str(tmp_path / "e"), {"0001": [("dog", 0, (1, 1, 5, 5))]})
    os.remove(os.path.join(root, "JPEGImages", "0001.jpg"))
    _refused("Annotations/0001.xml: its image 0001.jpg is not in JPEGImages/", read_boxes, root)
    root = _voc(str(tmp_path / "f"), {"0001": []})
    with open(os.path.join(root, "Annotations", "0001.xml"), "w") as handle:
        handle.write("<annotation><object></annotation>")
    _refused("Annotations/0001.xml: malformed XML (mismatched tag", read_boxes, root)
    with open(os.path.join(root, "Annotations", "0001.xml"), "w") as handle:
        handle.write('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xx">]><annotation>&x;</annotation>')
    _refused("Annotations/0001.xml: has a DTD", read_boxes, root)


def test_voc_image_sets_are_the_splits(tmp_path):
    root = _voc(str(tmp_path), {"a": [("dog", 0, (1, 1, 5, 5))], "b": [("cat", 0, (1, 1, 5, 5))]})
    os.makedirs(os.path.join(root, "ImageSets", "Main"))
    with open(os.path.join(root, "ImageSets", "Main", "val.txt"), "w") as handle:
        handle.write("b\n")
    val = read_boxes(root, split="heldout")
    assert val.own_split and val.images == [os.path.join("JPEGImages", "b.jpg")]
    assert read_boxes(root, split="train").images == [os.path.join("JPEGImages", p) for p in ("a.jpg", "b.jpg")]


# ------------------------------------------------------------------ .npz, streaming

def test_npz_padded_boxes(tmp_path):
    path = str(tmp_path / "boxes.npz")
    boxes = np.zeros((3, 2, 4), dtype=np.float32)
    boxes[0] = [[1, 2, 10, 12], [0, 0, 32, 24]]
    boxes[2, 0] = [5, 5, 6, 6]
    np.savez(path, x=np.zeros((3, 24, 32, 3), dtype=np.uint8), boxes=boxes, classes=np.array([[0, 1], [0, 0], [1, 0]]),
             counts=np.array([2, 0, 1]), class_names=np.array(["a", "b"]))
    found = read_boxes(path)
    assert box_format(path) == "npz" and found.class_names == ["a", "b"] and len(found) == 3
    assert found.records[0].size == (32, 24) and found.records[0].labels.tolist() == [0, 1]
    assert len(found.records[1]) == 0 and found.records[2].boxes.tolist() == [[5, 5, 6, 6]]
    boxes[2, 0] = [5, 5, 40, 6]
    np.savez(path, x=np.zeros((3, 24, 32, 3), dtype=np.uint8), boxes=boxes, classes=np.zeros((3, 2), dtype=np.int64),
             counts=np.array([2, 0, 1]))
    _refused("boxes.npz: image 2 box 0: [5, 5, 40, 6] right 40 is outside the 32-pixel-wide image", read_boxes, path)
    np.savez(path, x=np.zeros((3, 24, 32, 3), dtype=np.uint8), boxes=boxes, labels=np.zeros((3, 2), dtype=np.int64),
             counts=np.array([2, 0, 1]))
    _refused("boxes.npz: no classes array", read_boxes, path)


def test_boxes_stream_in_step_with_their_images(tmp_path):
    from trtkit.data.boxes import input_boxes
    from trtkit.data.decode import FileReader
    root = str(tmp_path)
    labels = dict(("{:03d}".format(i), ["{} 0.5 0.5 0.5 0.5".format(i % 3)]) for i in range(10))
    sizes = dict(("{:03d}".format(i), (40 + 8 * i, 30)) for i in range(10))
    _yolo(root, labels, sizes=sizes)
    contract = InputContract(size=32, resize="letterbox")
    box_set = read_boxes(root, contract=contract)
    positions = [1, 4, 5, 9]
    images = list(FileReader(root).read([box_set.images[p] for p in positions], contract, workers=1))
    records = box_set.labels_reader().read(positions, contract)
    assert [r.image for r in records] == [box_set.images[p] for p in positions]
    for (array, _), record, position in zip(images, records, positions):
        assert record.size == sizes["{:03d}".format(position)] and record.labels.tolist() == [position % 3]
        x1, y1, x2, y2 = np.round(input_boxes(record, contract)[0]).astype(int)
        assert array.shape == (3, 32, 32) and x2 > x1 and y2 > y1


def test_nothing_is_a_box_source_unless_it_holds_boxes(tmp_path):
    _image(str(tmp_path / "cats" / "a.png"))
    assert box_format(str(tmp_path)) is None and box_format(str(tmp_path / "nothing")) is None
    _refused("no boxes found in", read_boxes, str(tmp_path))


def test_a_data_yaml_needing_pyyaml_names_the_package(tmp_path, monkeypatch):
    import sys
    from trtkit.errors import MissingDependency
    path = str(tmp_path / "data.yaml")
    with open(path, "w") as handle:
        handle.write("names: &n\n  0: a\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    with pytest.raises(MissingDependency) as caught:
        read_yaml_names(path)
    assert "data.yaml" in caught.value.message and "pip install pyyaml" in caught.value.hint
