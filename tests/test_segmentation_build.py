"""Segmentation through the one build recipe: task detected from the model, verified per pixel."""

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import trtkit  # noqa: E402
from trtkit.errors import InputError, ModelMismatch  # noqa: E402


class TinySegmenter(nn.Module):
    """Class-score maps at the input size: two convolutions, a stride-4 bottleneck and a bilinear upsampling
    (the Resize a segmentation export ends with). ``channels`` 1 with ``sigmoid``: a one-channel probability
    map. ``as_dict``: torchvision's {"out": ...}."""

    def __init__(self, channels=3, sigmoid=False, as_dict=False):
        super(TinySegmenter, self).__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Conv2d(32, channels, 1)
        self.sigmoid, self.as_dict = sigmoid, as_dict

    def forward(self, x):
        out = nn.functional.interpolate(self.head(self.body(x)), size=x.shape[-2:], mode="bilinear",
                                        align_corners=False)
        out = torch.sigmoid(out) if self.sigmoid else out
        return {"out": out} if self.as_dict else out


def _onnx(module, path, size=32):
    torch.onnx.export(module.eval(), torch.zeros(1, 3, size, size), str(path), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17,
                      dynamo=False)
    return str(path)


def test_fcn_resnet18_module_builds_three_precisions_verified_per_pixel(tmp_path):
    from trtkit.models.segmentation import create_segmentation_model
    torch.manual_seed(0)
    model = create_segmentation_model("fcn_resnet18", num_classes=4).eval()
    result = trtkit.build(model=model, input_size=64, data="sample", precision="fp32,fp16,int8",
                          backend="onnxruntime", out=str(tmp_path / "b"), verify_images=48, calib_images=48,
                          bench_seconds=0)
    manifest = result.manifest
    assert manifest["model"]["task"] == "segmentation" and manifest["model"]["num_classes"] == 4
    assert manifest["model"]["name"] == "fcn_resnet18"
    assert "pixel agreement" not in manifest["export"]  # the export record keeps its keys
    verify = dict((a["precision"], a["verify"]) for a in manifest["artifacts"])
    assert verify["fp32"]["pixel_agreement"] == 1.0 and verify["fp32"]["miou_vs_reference"] == 1.0
    assert verify["fp32"]["pixels"] == 48 * 64 * 64 and verify["fp32"]["task"] == "segmentation"
    assert verify["fp16"]["pixel_agreement"] >= 0.99
    assert 0.0 < verify["int8"]["pixel_agreement"] < 1.0  # really compared, pixel by pixel
    assert len(verify["int8"]["class_iou_vs_reference"]) == 4
    assert verify["int8"]["accuracy"] is None  # the sample's labels are per image: no masks, no mIoU vs truth


def test_onnx_maps_are_detected_with_their_decision_rule(tmp_path):
    scores = _onnx(TinySegmenter(channels=3), tmp_path / "scores.onnx")
    result = trtkit.build(onnx=scores, data="sample", precision="fp32,fp16", backend="onnxruntime",
                          out=str(tmp_path / "s"), verify_images=32, bench_seconds=0)
    model = result.manifest["model"]
    assert (model["task"], model["output_kind"], model["num_classes"]) == ("segmentation", "logits", 3)
    assert result.manifest["artifacts"][1]["verify"]["pixel_agreement"] >= 0.99
    single = _onnx(TinySegmenter(channels=1, sigmoid=True), tmp_path / "mask.onnx")
    result = trtkit.build(onnx=single, data="sample", precision="fp32", backend="onnxruntime",
                          out=str(tmp_path / "m"), verify_images=32, bench_seconds=0)
    model = result.manifest["model"]
    assert (model["task"], model["output_kind"], model["num_classes"]) == ("segmentation", "binary-probability", 2)
    assert result.manifest["artifacts"][0]["verify"]["decision"] == "binary-probability"


def test_a_dict_output_module_exports_its_out_map(tmp_path):
    result = trtkit.build(model=TinySegmenter(channels=2, as_dict=True), input_size=32, data="sample",
                          precision="fp32", backend="onnxruntime", out=str(tmp_path / "d"), verify_images=16,
                          bench_seconds=0)
    assert result.manifest["model"]["task"] == "segmentation"
    assert result.manifest["artifacts"][0]["verify"]["pixel_agreement"] == 1.0


def test_a_task_that_contradicts_the_model_is_one_line(tmp_path):
    scores = _onnx(TinySegmenter(channels=3), tmp_path / "scores.onnx")
    with pytest.raises(InputError, match="--task classification does not fit this ONNX"):
        trtkit.build(onnx=scores, task="classification", data="sample", precision="fp32",
                     backend="onnxruntime", out=str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()
    from trtkit.models.classifiers import create_model, save_checkpoint
    from trtkit.models.segmentation import create_segmentation_model
    segmentation = str(tmp_path / "fcn.pt")
    torch.save(create_segmentation_model("fcn_resnet18", num_classes=3).state_dict(), segmentation)
    with pytest.raises(ModelMismatch, match="fcn_resnet18 segmentation checkpoint, not a classifier"):
        trtkit.build(checkpoint=segmentation, task="classification", data="sample", out=str(tmp_path / "y"))
    classifier = save_checkpoint(create_model("resnet18", num_classes=10, stem="cifar"), str(tmp_path / "c.pt"))
    with pytest.raises(ModelMismatch, match="is not a segmentation checkpoint"):
        trtkit.build(checkpoint=classifier, task="segmentation", data="sample", out=str(tmp_path / "z"))
    with pytest.raises(InputError, match="unknown task"):
        trtkit.build(task="panoptic", data="sample", out=str(tmp_path / "w"))
    with pytest.raises(ModelMismatch, match="is not a detection checkpoint"):
        trtkit.build(checkpoint=classifier, task="detection", data="sample", out=str(tmp_path / "v"))
    with pytest.raises(ModelMismatch, match="fcn.pt is not a detection checkpoint"):
        trtkit.build(checkpoint=segmentation, task="detection", data="sample", out=str(tmp_path / "u"))


def test_masks_give_miou_against_the_truth_and_gate_quantized_variants(tmp_path):
    from test_segmentation_data import write_mask_folder
    data = write_mask_folder(str(tmp_path / "seg"), count=60)
    scores = _onnx(TinySegmenter(channels=3), tmp_path / "scores.onnx")
    result = trtkit.build(onnx=scores, data=data, resize="stretch", precision="fp32,int8",
                          backend="onnxruntime", out=str(tmp_path / "b"), bench_seconds=0, calib_images=32,
                          batch_size=16)
    fp32, int8 = [a["verify"] for a in result.manifest["artifacts"]]
    assert result.manifest["data"]["labels"] is True
    assert fp32["miou"] is not None and fp32["miou"] == fp32["reference_miou"] == fp32["accuracy"]
    assert len(fp32["class_iou"]) == 3 and 0.0 <= fp32["pixel_accuracy"] <= 1.0
    assert int8["reference_miou"] == fp32["miou"]


def test_the_segmentation_gate_reads_pixel_agreement_and_the_miou_drop():
    from trtkit.pipeline.gate import judge as _judge

    def record(precision, agreement, miou, reference):
        return {"name": "m." + precision, "precision": precision,
                "verify": {"task": "segmentation", "top1_agreement": agreement, "miou": miou,
                           "reference_miou": reference}}

    ok = record("int8", 0.99, 0.700, 0.705)
    _judge(ok, 0.98)
    assert ok["status"] == "ok"
    lost = record("int8", 0.99, 0.690, 0.705)  # 1.5 mIoU points lost though 99% of pixels agree
    _judge(lost, 0.98)
    assert lost["status"] == "failing" and "mIoU 69.00% is more than 1 point below FP32's 70.50%" in \
        lost["status_detail"]
    pixels = record("int8", 0.97, None, None)
    _judge(pixels, 0.98)
    assert pixels["status"] == "failing" and pixels["status_detail"].startswith("pixel agreement 97.00%")
    fp32 = record("fp32", 1.0, 0.5, 0.6)  # FP32 is the reference: never judged on the drop
    _judge(fp32, 0.999)
    assert fp32["status"] == "ok"
