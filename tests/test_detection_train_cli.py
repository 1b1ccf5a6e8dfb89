"""``trtkit train --task detection``: a detector trained on data with boxes, modes compared, a checkpoint that
builds."""

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pycocotools")


def test_train_a_detector_and_compare_modes(tmp_path, capsys):
    from trtkit.cli import main
    from trtkit.models.classifiers import read_checkpoint
    from trtkit.models.detection import infer_detection_layout, load_detection_model
    out = str(tmp_path / "run")
    code = main(["train", "--task", "detection", "--steps", "4", "--batch-size", "4", "--limit", "24",
                 "--compare", "fp32,bf16", "--optimizer", "sgd", "--out", out])
    assert code == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "ignoring --optimizer" in captured.err  # a detector trains with AdamW: the flag is said to do nothing
    assert "steps/s" in printed and "fp32" in printed and "bf16" in printed
    with open(os.path.join(out, "detection_train.json")) as handle:
        record = json.load(handle)
    fp32, bf16 = record["rows"]
    assert fp32["status"] == "ok" and fp32["steps"] == 4 and fp32["first_loss"] > 0 and fp32["map50"] is not None
    # four steps find nothing: said, with the usual cause, rather than a checkpoint handed over in silence
    assert (fp32["map50"] == 0.0) == ("finds none of the held-out boxes" in captured.err)
    assert bf16["status"] in ("ok", "skipped")  # skipped, with its reason, on a CPU without native BF16
    assert bf16["status"] == "ok" or "BF16" in bf16["reason"]
    path = os.path.join(out, "fp32", "checkpoint.pt")
    state, meta = read_checkpoint(path)
    layout = infer_detection_layout(state)
    assert layout[0] == "retinanet_sample" and layout[1] == 3
    model = load_detection_model(None, path, state, meta, layout)
    assert model.input_contract.class_names == ["circle", "square", "triangle"] and meta["mode"] == "fp32"


def test_data_without_boxes_is_refused_in_one_line(tmp_path):
    from trtkit.errors import InputError
    from trtkit.training.detection_run import train_detector
    with pytest.raises(InputError, match="has no boxes"):
        train_detector(data="sample", out=str(tmp_path / "x"), steps=1, limit=8)
    with pytest.raises(InputError, match="unknown detection model"):
        train_detector(model_name="resnet18", out=str(tmp_path / "y"), steps=1)


def test_the_training_split_is_kept_as_the_pixels_it_was_made_of():
    """``as_pixels``: the loaded floats become uint8 RGB pixels that ``normalized_batch`` turns back into the same
    floats (RGB and BGR models alike), so a GPU keeps them on the device; floats that are no pixels stay."""
    import numpy as np

    from trtkit.data import select
    from trtkit.models.sample import sample_detection_contract
    from trtkit.training.detection import normalized_batch
    from trtkit.training.detection_run import as_pixels
    for contract in (sample_detection_contract(),
                     sample_detection_contract().with_overrides({"channel_order": "bgr", "pixel_scale": 255.0})):
        floats = select("shape-boxes", contract, split="train", limit=6).load().images
        pixels = as_pixels(floats, contract)
        assert pixels.dtype == np.uint8 and pixels.shape == (6, contract.height, contract.width, 3)
        np.testing.assert_allclose(normalized_batch(pixels, contract), floats, atol=1e-5)
    noise = np.random.RandomState(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    assert as_pixels(noise, sample_detection_contract()) is noise


def test_retinanet_trains_its_batchnorms_from_scratch_and_its_checkpoint_loads_for_export(tmp_path):
    """``trtkit train`` starts RetinaNet from random weights, so its BatchNorms train (torchvision's choice
    without ImageNet weights; frozen identity norms let the loss blow up); its checkpoint still loads strictly
    into the frozen layout trtkit exports, and gives the same detections there."""
    import torch

    from trtkit.models.classifiers import read_checkpoint, save_checkpoint
    from trtkit.models.detection import infer_detection_layout, load_detection_model
    from trtkit.models.detection.fpn import FrozenBatchNorm2d
    from trtkit.training.detection_run import _model
    torch.manual_seed(0)
    model = _model("retinanet_resnet18_fpn", ["a", "b"], 64)
    norms = [m for m in model.modules() if isinstance(m, (torch.nn.BatchNorm2d, FrozenBatchNorm2d))]
    assert norms and all(isinstance(m, torch.nn.BatchNorm2d) for m in norms)
    model.train()
    model.head_outputs(torch.randn(2, 3, 64, 64))  # running statistics move off the identity
    model.eval()
    path = save_checkpoint(model, str(tmp_path / "r18.pt")) or str(tmp_path / "r18.pt")
    state, meta = read_checkpoint(path)
    loaded = load_detection_model(None, path, state, meta, infer_detection_layout(state)).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected, got = model.decoded(x), loaded.decoded(x)
    for a, b in zip(expected, got):
        assert torch.allclose(a, b, atol=1e-5)
