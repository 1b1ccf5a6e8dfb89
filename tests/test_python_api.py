"""trtkit.build(): the public Python API takes the CLI's options and any torch.nn.Module."""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trtkit  # noqa: E402
from trtkit.errors import InputError  # noqa: E402


class TinyNet(torch.nn.Module):
    """Not a ResNet, not square: conv -> depthwise conv -> pool -> linear."""

    def __init__(self, classes=10):
        super(TinyNet, self).__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.Hardswish(), torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(8, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def test_a_module_builds_through_the_same_options_as_the_cli(tmp_path):
    torch.manual_seed(0)
    result = trtkit.build(model=TinyNet(), input_size=(24, 40), precision="fp32,fp16", backend="onnxruntime",
                          out=str(tmp_path / "b"), bench_seconds=0, verify_images=64, resize="stretch")
    assert isinstance(result, trtkit.BuildResult)
    with open(os.path.join(result.dir, "manifest.json")) as handle:
        assert json.load(handle) == result.manifest
    model = result.manifest["model"]
    assert model["source"] == "module" and model["name"] == "tinynet" and model["num_classes"] == 10
    assert model["input"]["height"] == 24 and model["input"]["width"] == 40 and model["input"]["resize"] == "stretch"
    fp32 = result.artifact("fp32")
    assert os.path.isfile(fp32["file"]) and fp32["verify"]["top1_agreement"] == 1.0
    assert result.manifest["options"]["verify_images"] == 64
    with pytest.raises(InputError, match="no int8 artifact"):
        result.artifact("int8")


def test_unknown_options_and_missing_sizes_are_input_errors(tmp_path):
    with pytest.raises(InputError) as info:
        trtkit.build(calib_methd="minmax", out=str(tmp_path / "x"))
    assert "no option 'calib_methd'" in str(info.value) and "calib_method" in str(info.value)
    with pytest.raises(InputError, match="needs input_size"):
        trtkit.build(model=TinyNet(), out=str(tmp_path / "x"))
    with pytest.raises(InputError, match="does not run on a 1x3x8x8 input"):
        trtkit.build(model=torch.nn.Linear(3, 2), input_size=8, out=str(tmp_path / "x"))
    assert not os.path.exists(str(tmp_path / "x"))


def test_module_weights_from_a_checkpoint_and_a_mismatch(tmp_path):
    torch.manual_seed(1)
    trained = TinyNet()
    path = str(tmp_path / "tiny.pt")
    torch.save({"state_dict": trained.state_dict()}, path)
    torch.manual_seed(2)
    mine = TinyNet().train()
    before = dict((k, v.clone()) for k, v in mine.state_dict().items())
    result = trtkit.build(model=mine, checkpoint=path, input_size=32, precision="fp32", backend="onnxruntime",
                          out=str(tmp_path / "b"), bench_seconds=0, verify_images=32)
    assert result.manifest["model"]["checkpoint"] == os.path.abspath(path)
    # the caller's module is left as it was: still training, its own weights (the build loads into a copy)
    assert mine.training and all(torch.equal(before[k], v) for k, v in mine.state_dict().items())
    with pytest.raises(InputError, match="does not fit TinyNet"):
        trtkit.build(model=TinyNet(classes=3), checkpoint=path, input_size=32, out=str(tmp_path / "c"))


def test_infer_num_classes_reads_other_heads():
    from trtkit.models.classifiers import infer_num_classes
    assert infer_num_classes({"fc.weight": np.zeros((7, 4))}) == 7
    assert infer_num_classes({"features.0.weight": np.zeros((8, 3, 3, 3)), "classifier.3.weight": np.zeros((5, 16)),
                              "classifier.3.bias": np.zeros(5)}) == 5
    assert infer_num_classes({"conv.weight": np.zeros((8, 3, 3, 3))}) is None


@pytest.fixture(scope="module")
def mobilenet_v3_module():
    """A MobileNetV3-style module (depthwise, hardswish, squeeze-excite) trained briefly on the sample at 32x48."""
    from zoo_models import mobilenet_v3_style, train_briefly
    from trtkit.contract import InputContract
    from trtkit.data import load_images
    contract = InputContract(size=(32, 48), resize="stretch")
    train = load_images("sample", contract, split="train")
    return train_briefly(mobilenet_v3_style(num_classes=10), train.images, train.labels, epochs=8)


@pytest.mark.extended  # the landing tier builds the same module at 32x48 in INT8 below (FP16 of a module: elsewhere)
def test_a_mobilenet_v3_style_module_at_32x48_keeps_accuracy_in_every_precision(mobilenet_v3_module, tmp_path):
    """Issue 14's acceptance: depthwise convolutions, hardswish and squeeze-excite, non-square, trained briefly."""
    result = trtkit.build(model=mobilenet_v3_module, input_size=(32, 48), resize="stretch", precision="fp32,fp16,int8",
                          backend="onnxruntime", out=str(tmp_path / "b"), bench_seconds=0,
                          calib_method="percentile", calib_images=256)
    figures = dict((a["precision"], a["verify"]) for a in result.artifacts)
    assert figures["fp32"]["top1_agreement"] == 1.0
    assert figures["fp16"]["top1_agreement"] >= 0.99
    assert figures["int8"]["top1_agreement"] >= 0.97, figures["int8"]
    assert figures["fp32"]["reference_accuracy"] >= 0.9  # trained: the agreement is about a working model


def test_default_int8_keeps_a_mobilenet_v3_style_module(mobilenet_v3_module, tmp_path):
    """Issue 21: the default INT8 (no calibration flags) was a coin flip on hardswish/hardsigmoid models (45.6%
    agreement): KL cuts on tensors that never come near zero collapsed. Now >= 98% and within 1 point."""
    result = trtkit.build(model=mobilenet_v3_module, input_size=(32, 48), resize="stretch", precision="fp32,int8",
                          backend="onnxruntime", out=str(tmp_path / "b"), bench_seconds=0)
    int8 = result.artifact("int8")
    figures = int8["verify"]
    assert figures["top1_agreement"] >= 0.98, figures
    assert figures["reference_accuracy"] - figures["accuracy"] <= 0.01, figures
    assert int8["status"] == "ok" and int8["calibration"]["method"] == "entropy"
    assert int8["calibration"]["rules"].get("mse", 0) > 0, "the guard should replace some KL cuts on this model"


def _build_parser():
    import argparse
    from trtkit.commands import build as build_command
    parser = argparse.ArgumentParser()
    build_command.add_arguments(parser)
    return parser


# Constructor parameters that are no flag, and why (a new parameter must be given a Field, or a reason here).
NOT_FLAGS = {
    "BuildOptions": {"source", "calibration", "tensorrt", "search", "diagnosis"},  # its parts: their fields are its flags
    # input_size: a shortcut of input={"size": ...}, which the --input-size field sets; foreign: its part
    "ModelOptions": {"input_size", "foreign"},
    "CalibrationConfig": {"seed"},  # fixed for repeatable calibrations; the manifest records it
    "SearchConfig": {"methods"},  # the calibration methods the search tries: not a user choice yet
}


def test_every_build_flag_has_an_api_keyword_and_the_reverse():
    """By the option objects' declarations (their Fields), not by argparse: every keyword trtkit.build() takes is a
    declared field of one option object, every constructor parameter is reachable by a field (or said why not),
    and the build command's parser holds exactly the declared flags."""
    import inspect
    from trtkit.contract import FIELDS as CONTRACT_FIELDS, InputContract
    from trtkit.pipeline.options import BuildOptions
    objects, parts = [], [BuildOptions]
    while parts:  # the option objects and their parts, nested ones too (ModelOptions' DecoderOptions)
        cls = parts.pop(0)
        objects.append(cls)
        parts.extend(part for _, part in cls.PARTS)
    keywords = BuildOptions.keywords()
    assert len(keywords) == len(set(keywords)), "a keyword declared by two option objects"
    assert set(keywords) == set(k for cls in objects for k in (f.keyword for f in cls.FIELDS))
    # input_dtype: read from the ONNX graph only (a uint8 input), never asked of the user
    contract_fields = set(inspect.signature(InputContract.__init__).parameters) - {"self", "input_dtype"}
    assert set(f.param for f in CONTRACT_FIELDS) == contract_fields, "an InputContract field without its flag"
    for cls in objects:
        params = set(inspect.signature(cls.__init__).parameters) - {"self"}
        declared = set(f.into or f.param for f in cls.FIELDS)
        assert declared <= params, (cls.__name__, "a field setting no constructor parameter", declared - params)
        assert params - declared == NOT_FLAGS.get(cls.__name__, set()), (cls.__name__, "reachable by no flag")
    # the CLI side: what `trtkit build` parses is the declared fields plus its own printing flags, nothing else
    parser = _build_parser()
    spelled = set(s for a in parser._actions for s in a.option_strings if s.startswith("--"))
    assert spelled == set(f.option for f in BuildOptions.fields()) | {"--help", "--json"}
    assert {"--throughput-batch", "--min-agreement"} <= spelled


def _same_options(cli, api):
    assert cli.to_keywords() == api.to_keywords()
    assert cli.to_dict("tensorrt-rtx") == api.to_dict("tensorrt-rtx")
    assert cli.calibration.to_dict() == api.calibration.to_dict() and cli.search.to_dict() == api.search.to_dict()
    assert cli.tensorrt.to_dict() == api.tensorrt.to_dict()
    assert cli.source.input_overrides() == api.source.input_overrides()
    again = type(api).from_keywords(**api.to_keywords())  # to_keywords says every choice
    assert again.to_keywords() == api.to_keywords() and again.to_dict("tensorrt") == api.to_dict("tensorrt")


def test_flags_and_keywords_make_the_same_options(tmp_path):
    from trtkit.pipeline.options import BuildOptions
    from trtkit.precision.types import DEFAULT_MIN_AGREEMENT
    parser = _build_parser()
    defaults = BuildOptions.from_args(parser.parse_args([]))
    _same_options(defaults, BuildOptions.from_keywords())
    assert defaults.min_agreement == DEFAULT_MIN_AGREEMENT and defaults.precisions == ["fp32", "fp16"]
    names = tmp_path / "names.txt"
    names.write_text("a\nb\nc\n")
    cli = BuildOptions.from_args(parser.parse_args([
        "--precision", "fp32,int8", "--backend", "onnxruntime", "--out", "elsewhere", "--input-size", "48x192",
        "--mean", "0.5,0.5,0.5", "--std", "0.25", "--resize", "height", "--channel-order", "bgr",
        "--class-names", str(names), "--output-kind", "probabilities", "--calib-method", "percentile",
        "--calib-images", "64", "--no-calib-cache", "--cpu-isa", "avx2", "--batch", "1:4:16", "--workspace", "256",
        "--min-agreement", "int8=0.97,fp16=0.995", "--throughput-batch", "4", "--verify-images", "all",
        "--bench-seconds", "0", "--strict", "--max-drop", "0.3", "--tune-images", "64", "--tolerance", "0.01",
        "--exporter", "torchscript", "--calib-percentile", "99.9", "--trt-version", "10.3.0"]))
    api = BuildOptions.from_keywords(
        precision=["fp32", "int8"], backend="onnxruntime", out="elsewhere", input_size=(48, 192), mean=(0.5, 0.5, 0.5),
        std=0.25, resize="height", channel_order="bgr", class_names=["a", "b", "c"], output_kind="probabilities",
        calib_method="percentile", calib_images=64, no_calib_cache=True, cpu_isa="avx2", batch="1:4:16",
        workspace=256, min_agreement={"int8": 0.97, "fp16": 0.995}, throughput_batch=4, verify_images="all",
        bench_seconds=0, strict=True, max_drop=0.3, tune_images=64, tolerance=0.01, exporter="torchscript",
        calib_percentile=99.9, trt_version=(10, 3, 0))
    _same_options(cli, api)
    assert api.to_keywords() != defaults.to_keywords()
    assert api.min_agreement == dict(DEFAULT_MIN_AGREEMENT, int8=0.97, fp16=0.995)
    assert api.throughput_batch == 4 and api.default_batch == (1, 4, 32) and api.tensorrt.batch == (1, 4, 16)
    assert api.out == "elsewhere" and api.source.input_size == (48, 192) and api.precisions == ["fp32", "int8"]
    assert api.calibration.use_cache is False and api.source.input_overrides()["class_names"] == ["a", "b", "c"]
    assert api.source.input_overrides()["mean"] == (0.5, 0.5, 0.5) and api.source.input_overrides()["std"] == (0.25,)
    with pytest.raises(InputError, match="did you mean calib_method"):
        BuildOptions.from_keywords(calib_methd="percentile")
    with pytest.raises(InputError, match="not a positive fraction"):
        BuildOptions.from_keywords(min_agreement="int8=-1")
    with pytest.raises(InputError, match="not N or HxW"):
        BuildOptions.from_keywords(input_size="48by192")


def test_a_step_options_object_goes_in_whole():
    from trtkit.pipeline.options import BuildOptions
    from trtkit.pipeline.source import ModelOptions
    from trtkit.precision.config import CalibrationConfig
    calibration = CalibrationConfig(method="mse", images=64)
    options = BuildOptions.from_keywords(calibration=calibration, source=ModelOptions(input_size=32), precision="int8")
    assert options.calibration is calibration and options.source.input_size == (32, 32)
    assert options.to_keywords()["calib_method"] == "mse" and options.to_keywords()["input_size"] == (32, 32)
    with pytest.raises(InputError, match="calib_images: option.* of the CalibrationConfig given as calibration="):
        BuildOptions.from_keywords(calibration=calibration, calib_images=128)
    with pytest.raises(InputError, match="calibration= takes a CalibrationConfig"):
        BuildOptions.from_keywords(calibration={"method": "mse"})
    with pytest.raises(InputError, match="options= takes a BuildOptions"):
        trtkit.build(options=calibration)


def test_step_objects_and_the_gate_keywords_reach_the_build(tmp_path):
    """trtkit.build() with a ModelOptions as the model, a SearchConfig object, and the two keywords that no flag
    or keyword reached before (throughput_batch, min_agreement): all land in the manifest."""
    from trtkit.pipeline.source import ModelOptions
    torch.manual_seed(0)
    source = ModelOptions(model=TinyNet(), input={"size": (24, 40), "resize": "stretch"})
    result = trtkit.build(model=source, precision="fp32",
                          backend="onnxruntime", out=str(tmp_path / "b"), bench_seconds=0, verify_images=32,
                          throughput_batch=4, min_agreement="fp32=0.9995")
    options = result.manifest["options"]
    assert options["throughput_batch"] == 4 and options["min_agreement"]["fp32"] == 0.9995
    assert result.manifest["model"]["input"]["width"] == 40 and result.artifact("fp32")["status"] == "ok"
