"""Segmentation builds put to work (issue 22, item 6): masks at each photo's own size from ``trtkit.load``,
``trtkit predict`` (palette mask PNGs, overlays, class fractions) and the Triton export.

The model is a 1x1 convolution copying the normalized colour channels: its arg-max per pixel is the dominant
colour (0 red, 1 green, 2 blue), so the right mask of a photo of coloured shapes is known, and a mask put back
at the wrong place, scale or crop is seen.
"""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")

from conftest import partial_files, run_cli  # noqa: E402
import trtkit  # noqa: E402
from trtkit.app import maps  # noqa: E402
from trtkit.contract import InputContract  # noqa: E402
from trtkit.data.preprocess import preprocess  # noqa: E402

COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)
NAMES = ["red", "green", "blue"]


class ColourSegmenter(torch.nn.Module):
    """Class scores = the normalized R, G, B channels (an identity 1x1 convolution)."""

    def __init__(self):
        super(ColourSegmenter, self).__init__()
        self.conv = torch.nn.Conv2d(3, 3, 1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.eye(3).reshape(3, 3, 1, 1))
            self.conv.bias.zero_()

    def forward(self, x):
        return self.conv(x)


def scene(width, height, seed=0):
    """A photo of width x height: blue ground, a red rectangle, a green disc; and its true class per pixel."""
    rng = np.random.RandomState(seed)
    truth = np.full((height, width), 2, dtype=np.uint8)
    x0, y0 = rng.randint(0, width // 3), rng.randint(0, height // 3)
    truth[y0:y0 + height // 2, x0:x0 + width // 2] = 0
    yy, xx = np.mgrid[:height, :width]
    truth[(yy - height * 0.6) ** 2 + (xx - width * 0.7) ** 2 < (min(width, height) * 0.25) ** 2] = 1
    return COLOURS[truth], truth


def agreement(mask, truth):
    seen = mask != maps.UNSEEN
    return float(np.mean(mask[seen] == truth[seen]))


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Photo files of three sizes in two folders (two share a stem), and their true masks by path."""
    root = tmp_path_factory.mktemp("photos")
    truth = {}
    for folder, name, size in (("a", "wide.png", (90, 60)), ("a", "tall.jpg", (41, 97)), ("b", "wide.png", (64, 64))):
        os.makedirs(str(root / folder), exist_ok=True)
        pixels, mask = scene(size[0], size[1], seed=len(truth))
        path = str(root / folder / name)
        Image.fromarray(pixels).save(path, quality=98)
        truth[path] = mask
    return str(root), truth


@pytest.mark.parametrize("resize, size", [("crop", (32, 32)), ("pad", (32, 32)), ("stretch", (24, 40)),
                                          ("height", (16, 48))])
def test_maps_go_back_through_each_resize_mode(resize, size):
    """The model input of a photo, taken as its own score map, comes back onto the photo where it was."""
    contract = InputContract(size=size, resize=resize)
    pixels, truth = scene(90, 60)
    scores = preprocess(pixels, contract)  # the colour segmenter's output, in numpy
    mask = maps.to_original(scores, "logits", contract, (90, 60))
    assert mask.shape == (60, 90) and mask.dtype == np.uint8
    assert agreement(mask, truth) > 0.95, resize  # only pixels on shape borders may differ
    if resize == "crop":  # a 90x60 photo is scaled to 54x36 and 32x32 cut from its middle: 11 columns off each side
        new_w, new_h = 54, 36
        seen_cols = np.flatnonzero(mask[30] != maps.UNSEEN)
        assert abs(seen_cols[0] - 11 * 90 / new_w) <= 1 and abs(seen_cols[-1] + 1 - 43 * 90 / new_w) <= 1
        assert abs(maps.coverage(mask) - (32.0 / new_w) * (32.0 / new_h)) < 0.03
    else:  # padding is no part of the photo: every pixel was seen
        assert maps.coverage(mask) == 1.0
    same = maps.to_original(scores, "logits", contract)  # no original size: the input's own, undecided nowhere
    assert np.array_equal(same, scores.argmax(0))


def test_one_channel_maps_use_their_rule_and_fractions_sum_to_one():
    probability = np.zeros((1, 8, 8), dtype=np.float32)
    probability[0, :, 4:] = 0.9
    mask = maps.to_original(probability, "binary-probability", InputContract(size=8, resize="stretch"), (16, 8))
    assert set(np.unique(mask[:, :7])) == {0} and set(np.unique(mask[:, 9:])) == {1}
    fractions = maps.class_fractions(mask, 2)
    assert fractions.sum() == pytest.approx(1.0) and fractions[1] == pytest.approx(0.5, abs=0.07)
    assert maps.top_classes(fractions, 1, ["bg", "fg"])[0][1] in ("bg", "fg")
    wide = maps.to_original(np.random.RandomState(0).randn(300, 4, 4), "logits", InputContract(size=4, resize="crop"),
                            (9, 5))
    assert wide.dtype == np.int32 and (wide == maps.UNSEEN_WIDE).any()  # 255 is a class of such a model


def test_load_predict_returns_masks_at_each_photos_size(seg_build, photos):
    _, truth = photos
    files = sorted(truth)
    with trtkit.load(seg_build) as model:
        assert isinstance(model, trtkit.Segmenter) and model.task == "segmentation" and model.num_classes == 3
        assert repr(model).startswith("Segmenter(coloursegmenter.fp")
        masks = model.predict(files)
        for path, mask in zip(files, masks):
            assert mask.shape == truth[path].shape and mask.dtype == np.uint8
            assert agreement(mask, truth[path]) > 0.95, path
            assert set(np.unique(mask)) <= {0, 1, 2, maps.UNSEEN}
            assert maps.UNSEEN in mask  # a centre crop of a non-square photo cuts off its sides
            assert model.fractions(mask).sum() == pytest.approx(1.0)
        pixels, _ = scene(50, 30)
        from_array, from_pil = model.predict([pixels, Image.fromarray(pixels)])
        assert from_array.shape == (30, 50) and np.array_equal(from_array, from_pil)
        batch = np.stack([preprocess(pixels, model.contract)] * 2)
        assert [m.shape for m in model.predict(batch)] == [(32, 32)] * 2  # preprocessed: the input's size
        assert model.logits(batch).shape == (2, 3, 32, 32)
        assert model.top(from_array, 2)[0][1] in NAMES


def test_predict_writes_palette_masks_overlays_and_fractions(seg_build, photos, tmp_path):
    root, truth = photos
    out = str(tmp_path / "masks")
    result = run_cli(["predict", seg_build, root, "--out", out, "--json", "--top-k", "2", "--precision", "fp32"])
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["image"] for r in records] == sorted(truth)
    with trtkit.load(seg_build, precision="fp32") as model:
        expected = model.predict(sorted(truth))
    names = set()
    for record, mask in zip(records, expected):
        assert (record["width"], record["height"]) == (mask.shape[1], mask.shape[0])
        assert sum(record["fractions"]) == pytest.approx(1.0, abs=1e-5) and len(record["fractions"]) == 3
        assert [t["name"] for t in record["top"]] == [NAMES[t["class"]] for t in record["top"]]
        assert 0 < record["coverage"] < 1
        with Image.open(record["mask"]) as saved:
            assert saved.mode == "P" and saved.size == (mask.shape[1], mask.shape[0])
            assert np.array_equal(np.asarray(saved), mask)
            assert saved.getpalette()[3 * 2:3 * 3] == [0, 128, 0]  # VOC's colour of class 2
        with Image.open(record["overlay"]) as overlay, Image.open(record["image"]) as photo:
            assert overlay.mode == "RGB" and overlay.size == photo.size
            drawn, original = np.asarray(overlay).astype(int), np.asarray(photo.convert("RGB")).astype(int)
        painted = (mask == 1) | (mask == 2)
        assert np.array_equal(drawn[~painted], original[~painted])  # background (class 0) and unseen untouched
        assert np.abs(drawn[painted] - original[painted]).mean() > 40
        names.add(os.path.relpath(record["mask"], out))
    assert names == {os.path.join("a", "tall.mask.png"), os.path.join("a", "wide.mask.png"),
                     os.path.join("b", "wide.mask.png")}
    assert partial_files(out) == []

    table = run_cli(["predict", seg_build] + sorted(truth)[:2] + ["--top-k", "2"])
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert len(lines) == 3 and lines[1].startswith(sorted(truth)[0]) and lines[1].count("%") == 2


def test_triton_export_has_the_maps_dims(seg_build, tmp_path):
    pytest.importorskip("tritonclient")
    pytest.importorskip("google.protobuf")
    from trtkit.deploy import triton_config
    repo = str(tmp_path / "repo")
    result = run_cli(["export-triton", seg_build, "--out", repo, "--json"])
    assert result.returncode == 0, result.stderr
    written = json.loads(result.stdout)
    assert sorted(r["model"] for r in written) == ["coloursegmenter_fp16", "coloursegmenter_fp32"]
    for record in written:
        with open(os.path.join(repo, record["model"], "config.pbtxt")) as handle:
            text = handle.read()
        config = triton_config.parse_model_config(text)
        assert [list(t.dims) for t in config.input] == [[3, 32, 32]]
        assert [list(t.dims) for t in config.output] == [[3, 32, 32]]
        assert "segmentation" in text and record["task"] == "segmentation"


def test_out_is_refused_for_a_classifier_in_one_line(tmp_path):
    class Tiny(torch.nn.Module):
        def __init__(self):
            super(Tiny, self).__init__()
            self.fc = torch.nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(x.mean((2, 3)))

    build = str(tmp_path / "cls")
    trtkit.build(model=Tiny(), input_size=16, data="sample", precision="fp32", backend="onnxruntime", out=build,
                 verify_images=8, bench_seconds=0)
    photo = str(tmp_path / "x.png")
    Image.fromarray(scene(20, 20)[0]).save(photo)
    result = run_cli(["predict", build, photo, "--out", str(tmp_path / "o")])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(errors) == 1 and "--out writes the masks of a segmentation build" in \
        errors[0], result.stderr
    assert "Traceback" not in result.stderr and not os.path.exists(str(tmp_path / "o"))
    with trtkit.load(build) as model:
        assert isinstance(model, trtkit.Classifier) and len(model.predict(photo, top_k=2)[0]) == 2


def test_output_names_are_unique_and_keep_the_folders():
    from trtkit.app.mask_files import output_names
    files = [os.path.join("p", "a", "x.jpg"), os.path.join("p", "a", "x.png"), os.path.join("p", "b", "x.jpg"),
             os.path.join("p", "b", "y.jpg"), os.path.join("p", "b", "y.jpg")]
    assert output_names(files) == [os.path.join("a", "x_jpg"), os.path.join("a", "x_png"), os.path.join("b", "x"),
                                   os.path.join("b", "y"), os.path.join("b", "y_2")]
    assert output_names([os.path.join("p", "only.png")]) == ["only"]
