"""A real third-party segmentation model through trtkit: PaddleOCR's PP-OCRv4 text detector (DBNet).

``ch_PP-OCRv4_det_infer.onnx`` inside ``rapidocr-onnxruntime==1.3.24``
(``benchmarks/real_models``, entry ``ppocr_v4_det``) outputs a [N, 1, H, W]
sigmoid text-probability map. The data are generated document pages with
text-line masks (``benchmarks/real_models/dense.py``). To stay fast the pages
here are 224x224 and the package's preprocessing is the package's own
``DetPreProcess`` with ``det_limit_side_len=256`` (a parameter the package
exposes; its default 736 is what ``docs/real-models.md`` measures): the short
side scaled up to 256, BGR, ImageNet mean/std. The only skip is pip not
reaching the registry.

trtkit's default rule for a one-channel probability map is > 0.5; the
package's is > 0.3 (``DBPostProcess`` thresh). ``--threshold 0.3`` (keyword
``threshold``) makes trtkit verify, and its built model decide, by the
package's rule, recorded in the manifest as ``binary-probability@0.3``.
"""

import os
import sys

import numpy as np
import pytest

from conftest import real_model
from trtkit.deps import available

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

pytest.importorskip("onnxruntime")
pytest.importorskip("matplotlib")  # its wheel's fonts draw the pages

NAME = "ppocr_v4_det"
COUNT = 40          # trtkit splits images/ + masks/ 80/20: 32 calibrate, 8 verify
PAGE = (224, 224)
LIMIT = 256         # the package's det_limit_side_len for these pages: fed at 256x256


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """(onnx file, data folder, trtkit.build contract keywords) for the detector on 40 generated pages."""
    from benchmarks.real_models import prepare_dense
    real_model(NAME)  # skips only when the registry is unreachable
    onnx_file, folder, contract = prepare_dense(NAME, COUNT, root=str(tmp_path_factory.mktemp("pages")), size=PAGE)
    contract["input_size"] = "{0}x{0}".format(LIMIT)
    return onnx_file, folder, contract


@pytest.fixture(scope="module")
def ort_build(pages, tmp_path_factory):
    """trtkit's default FP32 + INT8 build of the detector on ONNX Runtime, verified on every held-out page."""
    import trtkit
    onnx_file, folder, contract = pages
    return trtkit.build(onnx=onnx_file, data=folder, precision="fp32,int8", backend="onnxruntime",
                        out=str(tmp_path_factory.mktemp("det") / "out"), bench_seconds=0, verify_images="all",
                        calib_batch_size=8, **contract)


@pytest.fixture(scope="module")
def package_rule_build(pages, tmp_path_factory):
    """The same build deciding as the package does: text where the probability is > 0.3 (``threshold=0.3``)."""
    import trtkit
    onnx_file, folder, contract = pages
    return trtkit.build(onnx=onnx_file, data=folder, precision="fp32,int8", backend="onnxruntime",
                        out=str(tmp_path_factory.mktemp("det03") / "out"), bench_seconds=0, verify_images="all",
                        calib_batch_size=8, threshold=0.3, **contract)


def _heldout_files(folder):
    from trtkit.data.sources import split_positions
    names = sorted(os.listdir(os.path.join(folder, "images")))
    return [names[i] for i in split_positions(len(names), "heldout")]


def test_generated_pages_are_seeded_and_masks_are_text_kernels():
    from benchmarks.real_models.dense import kernel_box, page
    image, mask = page(3, size=PAGE)
    again, again_mask = page(3, size=PAGE)
    other, _ = page(4, size=PAGE)
    assert image.size == mask.size == (PAGE[1], PAGE[0]) and image.mode == "RGB" and mask.mode == "L"
    assert image.tobytes() == again.tobytes() and mask.tobytes() == again_mask.tobytes()
    assert image.tobytes() != other.tobytes()
    values = np.asarray(mask)
    assert set(np.unique(values)) == {0, 1} and 0.01 < values.mean() < 0.3
    pixels = np.asarray(image.convert("L"), dtype=np.float32)
    assert pixels[values == 1].mean() < pixels[values == 0].mean() - 30  # text is dark ink on light paper
    # DB's shrink (PaddleOCR MakeShrinkMap): offset = area * (1 - r^2) / perimeter on each side
    assert np.allclose(kernel_box(0, 0, 100, 10, ratio=0.4), (3.8182, 3.8182, 96.1818, 6.1818), atol=1e-3)


def test_the_detector_finds_the_masked_text_with_its_own_package_rule(pages):
    """The model is real on this data: its FP32 map > 0.3 (DBPostProcess' thresh), fed by the package's own
    preprocessing, overlaps the text masks far above chance (chance: about the text share, < 0.1)."""
    from benchmarks.real_models import SEGMENTERS
    from benchmarks.real_models.dense import text_iou
    onnx_file, folder, _ = pages
    figures = text_iou(onnx_file, folder, limit_side_len=LIMIT, thresh=0.3)
    assert figures["images"] == COUNT and figures["text_share"] < 0.15
    assert figures["text_iou"] >= SEGMENTERS[NAME].test_bound, figures


def test_trtkit_contract_reproduces_the_package_preprocessing(pages, ort_build):
    """The [N, 1, H, W] sigmoid is detected as segmentation with a probability rule, and trtkit's FP32 mIoU on
    the held-out pages through the BGR / ImageNet / stretch-to-256 contract is the package-preprocessed one."""
    from benchmarks.real_models.dense import text_iou
    onnx_file, folder, _ = pages
    assert ort_build.manifest["model"]["task"] == "segmentation"
    verify = ort_build.artifact("fp32")["verify"]
    assert verify["decision"] == "binary-probability" and verify["task"] == "segmentation"
    files = _heldout_files(folder)
    assert verify["images"] == len(files) == COUNT // 5
    package = text_iou(onnx_file, folder, limit_side_len=LIMIT, thresh=0.5, files=files)  # trtkit's rule: p > 0.5
    assert abs(verify["miou"] - package["miou"]) <= 0.01, (verify["miou"], package)
    assert abs(verify["class_iou"][1] - package["text_iou"]) <= 0.01


def test_default_int8_keeps_the_detector(ort_build):
    """With no calibration flags, INT8 passes the segmentation gate: pixel agreement with FP32 >= 98 % and at
    most 1 mIoU point lost against the masks."""
    int8 = ort_build.artifact("int8")
    figures = int8["verify"]
    assert int8["calibration"]["method"] == "entropy" and int8["calibration"]["images"] == COUNT - COUNT // 5
    assert figures["pixel_agreement"] >= 0.98, figures
    assert figures["reference_miou"] - figures["miou"] <= 0.01, figures
    assert int8["status"] == "ok"


@pytest.mark.skipif(not (available("tensorrt_rtx") and available("onnx")), reason="tensorrt-rtx-cu12 and onnx are "
                                                                                   "needed")
def test_tensorrt_rtx_builds_the_detector_in_fp16_and_int8_at_256(pages, tmp_path):
    """paddle2onnx names N, H and W apart ('p2o.DynamicDimension.0..2'), so a square fixed profile builds; the
    engines are real but, with no GPU here, recorded as built and not run."""
    import onnx
    import trtkit
    onnx_file, folder, contract = pages
    out = str(tmp_path / "rtx")
    result = trtkit.build(onnx=onnx_file, data=folder, backend="tensorrt-rtx", precision="fp16,int8", out=out,
                          bench_seconds=0, verify_images=4, calib_batch_size=8, batch="1:4:8", **contract)
    for precision in ("fp16", "int8"):
        artifact = result.artifact(precision)
        info = artifact["backend_info"]
        assert artifact["status"] in ("built", "ok"), artifact
        assert info["precision_built"] == precision and info["strongly_typed"] is True
        assert info["profile"]["x"] == [[1, 3, LIMIT, LIMIT], [4, 3, LIMIT, LIMIT], [8, 3, LIMIT, LIMIT]]
        assert os.path.getsize(os.path.join(out, artifact["path"])) == artifact["bytes"] > 1 << 20
        ops = set(node.op_type for node in onnx.load(os.path.join(out, artifact["onnx"])).graph.node)
        assert ("QuantizeLinear" in ops) == (precision == "int8")


def test_a_threshold_is_part_of_the_output_kind_and_moves_the_decision():
    from trtkit.errors import InputError
    from trtkit.outputs import OutputKind
    kind = OutputKind.parse("binary-probability@0.3")
    assert kind.name == "binary-probability@0.3" and kind.cutoff == 0.3 and "> 0.3" in kind.summary
    assert kind == OutputKind.parse("binary-probability").with_threshold(0.3) != OutputKind.parse("binary-probability")
    maps = np.array([[[[0.2, 0.4], [0.6, 0.31]]]], dtype=np.float32)
    assert kind.decide_maps(maps).tolist() == [[[0, 1], [1, 1]]]
    assert OutputKind.parse("binary-probability").decide_maps(maps).tolist() == [[[0, 0], [1, 0]]]
    assert OutputKind.parse("binary-logit@-0.85").decide(np.array([[-0.5], [-1.0]])).tolist() == [1, 0]
    for bad in ("logits@1.5", "binary-probability@1.5", "binary-probability@x", "binary-probability@"):
        with pytest.raises(InputError):
            OutputKind.parse(bad)


def test_a_two_class_softmax_map_decides_class_1_above_the_threshold():
    """A blind test: MTCNN's PNet calls a window a face when its softmax p(face) > 0.6; trtkit refused
    --threshold for a two-channel map and decided by the arg-max (0.5), 18% more face cells."""
    from trtkit.errors import InputError
    from trtkit.outputs import OutputKind
    kind = OutputKind.parse("probabilities@0.6")
    face = np.array([[[0.55, 0.7]], [[0.65, 0.95]]], dtype=np.float32)  # p(face) per cell
    maps = np.stack([1 - face, face], axis=1)  # (2, 2, 1, 2)
    assert kind.decide_maps(maps).tolist() == [[[0, 1]], [[1, 1]]]
    assert OutputKind.parse("probabilities").decide_maps(maps).tolist() == [[[1, 1]], [[1, 1]]]
    logits = np.log(maps)  # the same decision from the scores before the softmax
    assert OutputKind.parse("logits@0.6").decide_maps(logits).tolist() == [[[0, 1]], [[1, 1]]]
    assert "class 1 when its probability is > 0.6" in kind.summary
    kind.check_columns(2)
    with pytest.raises(InputError, match="two classes"):
        kind.check_columns(3)


def test_the_package_threshold_is_verified_and_recorded(pages, package_rule_build):
    """With threshold=0.3 the manifest's output kind is binary-probability@0.3, verification decides pixels by it
    (FP32 mIoU = the package's own preprocessing and rule on the held-out pages), the loaded model decides by it,
    and the default INT8 still passes the gate under that rule."""
    import trtkit
    from benchmarks.real_models.dense import text_iou
    onnx_file, folder, _ = pages
    build = package_rule_build
    assert build.manifest["model"]["output_kind"] == "binary-probability@0.3"
    fp32 = build.artifact("fp32")["verify"]
    assert fp32["decision"] == "binary-probability@0.3"
    files = _heldout_files(folder)
    package = text_iou(onnx_file, folder, limit_side_len=LIMIT, thresh=0.3, files=files)
    assert abs(fp32["miou"] - package["miou"]) <= 1e-6, (fp32["miou"], package)
    assert abs(text_iou(onnx_file, folder, limit_side_len=LIMIT, thresh=0.5, files=files)["miou"]
               - package["miou"]) > 1e-6  # the two rules differ on these pages, so the check above tells them apart
    int8 = build.artifact("int8")
    assert int8["verify"]["decision"] == "binary-probability@0.3" and int8["status"] == "ok"
    assert int8["verify"]["pixel_agreement"] >= 0.98 and fp32["miou"] - int8["verify"]["miou"] <= 0.01
    with trtkit.load(build.dir) as model:
        assert model.kind.cutoff == 0.3
