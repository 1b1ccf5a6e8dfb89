"""The segmentation sample: shapes drawn from a seed, LRASPP on MobileNetV3-Large in torchvision's layout,
trained here and built end to end by ``trtkit build --task segmentation``."""

import json
import os

import numpy as np
import pytest

from conftest import run_cli

torch = pytest.importorskip("torch")


def test_shapes_are_drawn_alike_from_a_seed_with_masks_on_the_shapes():
    from trtkit.data.shapes import CLASS_NAMES, draw_shapes
    images, masks = draw_shapes(6, size=64, seed=3)
    again, again_masks = draw_shapes(6, size=64, seed=3)
    assert np.array_equal(images, again) and np.array_equal(masks, again_masks)
    other, _ = draw_shapes(6, size=64, seed=4)
    assert not np.array_equal(images, other)
    assert images.shape == (6, 64, 64, 3) and masks.shape == (6, 64, 64)
    assert set(np.unique(masks)) <= set(range(len(CLASS_NAMES)))
    assert all((mask > 0).mean() > 0.02 for mask in masks)  # every image has at least one shape
    # a shape's pixels are its class's colour: circles (1) redder than they are blue, triangles (3) bluer
    for cls, (more, less) in ((1, (0, 2)), (3, (2, 0))):
        pixels = images[masks == cls].astype(float)
        if len(pixels):
            assert pixels[:, more].mean() > pixels[:, less].mean()


def test_shapes_split_into_train_and_heldout_with_masks():
    from trtkit.data import select
    from trtkit.models.sample import sample_segmentation_contract
    contract = sample_segmentation_contract()
    train = select("shapes", contract, split="train", limit=8)
    heldout = select("shapes", contract, split="heldout", limit=8)
    assert train.identity != heldout.identity
    images, masks = next(iter(heldout.batches(8, progress=False)))
    assert images.shape == (8, 3, 96, 96) and masks.shape == (8, 96, 96)
    assert heldout.class_names == ["background", "circle", "square", "triangle"]


def test_lraspp_has_torchvisions_parameters_and_layout():
    from trtkit.models.segmentation import create_segmentation_model, infer_segmentation_layout
    model = create_segmentation_model("lraspp_mobilenet_v3_large").eval()
    assert sum(p.numel() for p in model.parameters()) == 3221538  # torchvision's documented num_params
    state = model.state_dict()
    shapes = {"backbone.0.0.weight": (16, 3, 3, 3), "backbone.1.block.0.0.weight": (16, 1, 3, 3),
              "backbone.4.block.2.fc1.weight": (24, 72, 1, 1), "backbone.16.0.weight": (960, 160, 1, 1),
              "classifier.cbr.0.weight": (128, 960, 1, 1), "classifier.scale.1.weight": (128, 960, 1, 1),
              "classifier.low_classifier.weight": (21, 40, 1, 1), "classifier.high_classifier.weight": (21, 128, 1, 1)}
    assert {k: tuple(state[k].shape) for k in shapes} == shapes
    assert state["backbone.1.block.0.1.running_var"].shape == (16,)
    assert infer_segmentation_layout(state) == ("lraspp_mobilenet_v3_large", 21, False)
    features = model.backbone(torch.zeros(1, 3, 128, 128))
    assert features["low"].shape[-2:] == (16, 16) and features["high"].shape[-2:] == (8, 8)  # strides 8 and 16
    copy = create_segmentation_model("lraspp_mobilenet_v3_large").eval()
    copy.load_state_dict(state, strict=True)
    x = torch.randn(1, 3, 64, 80)
    with torch.no_grad():
        assert torch.equal(model(x)["out"], copy(x)["out"]) and model(x)["out"].shape == (1, 21, 64, 80)
    with pytest.raises(Exception, match="auxiliary"):
        create_segmentation_model("lraspp_mobilenet_v3_large", aux=True)


@pytest.mark.extended
def test_build_task_segmentation_with_no_model_trains_and_verifies_the_sample(tmp_path):
    out = str(tmp_path / "seg")
    result = run_cli(["build", "--task", "segmentation", "--precision", "fp32,int8", "--out", out])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pixel agree" in result.stdout and "mIoU" in result.stdout
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["model"]["task"] == "segmentation" and manifest["model"]["source"] == "sample"
    assert manifest["data"]["source"] == "shapes" and manifest["data"]["labels"] is True
    fp32, int8 = manifest["artifacts"]
    assert fp32["verify"]["reference_miou"] > 0.8  # a trained model, not random weights
    assert int8["status"] == "ok" and int8["verify"]["top1_agreement"] >= 0.98
    assert fp32["verify"]["reference_miou"] - int8["verify"]["miou"] <= 0.01
    assert len(int8["verify"]["class_iou"]) == 4


def test_a_segmentation_name_without_checkpoint_other_than_the_sample_is_one_line(tmp_path):
    result = run_cli(["build", "--model", "fcn_resnet50", "--out", str(tmp_path / "x")])
    assert result.returncode != 0
    assert "needs --checkpoint" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.extended
def test_precision_auto_searches_a_segmentation_model_by_pixel_agreement_and_miou(tmp_path):
    """The tune split is scored per pixel (decision maps, not every class score in memory) with the mIoU
    against the masks as the budget's metric; the chosen artifact passes its gate within the budget."""
    import trtkit
    from trtkit.search.tune import load_tune_set, score
    result = trtkit.build(task="segmentation", precision="auto", backend="onnxruntime", out=str(tmp_path / "a"),
                          verify_images=64, tune_images=64, calib_images=64)
    manifest = result.manifest
    chosen = [a for a in manifest["artifacts"] if a["name"] == manifest["selection"]["chosen"]][0]
    assert chosen["status"] == "ok" and manifest["search"]["metric"] == "accuracy"
    assert chosen["verify"]["reference_miou"] - chosen["verify"]["miou"] <= 0.01
    # the budget reads as mIoU everywhere; the per-layer sensitivity ran only if plain INT8 missed the budget
    search, selection = manifest["search"], manifest["selection"]
    report = open(os.path.join(result.dir, "lraspp_mobilenet_v3_large.sensitivity.md")).read()
    assert selection["metric_label"] == "mIoU" and "points of mIoU" in report and "top-1" not in report
    assert (search["layers"] == 0) == (search["best_drop"] <= selection["max_drop"]), search
    tune_figures = [a["tune"] for a in manifest["artifacts"] if a.get("tune")]
    assert all(0.9 < t["agreement"] <= 1.0 and 0.8 < t["accuracy"] <= 1.0 for t in tune_figures), tune_figures
    from trtkit.contract import InputContract
    fp32 = str(tmp_path / "a" / "lraspp_mobilenet_v3_large.fp32.onnx")
    tune = load_tune_set("shapes", InputContract.from_dict(manifest["model"]["input"]), 16, fp32, task="segmentation")
    assert tune.dense and tune.reference.shape == (16, 96, 96) and tune.labels.shape == (16, 96, 96)
    assert score(tune.reference, tune)["agreement"] == 1.0
    wrong = tune.reference.copy()
    wrong[:, :48] = 1  # the top half of every map called a circle
    worse = score(wrong, tune)
    assert worse["agreement"] < 0.7 and worse["accuracy"] < score(tune.reference, tune)["accuracy"]
