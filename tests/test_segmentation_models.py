"""FCN and DeepLabV3 with torchvision's exact layout: a torchvision checkpoint must load strictly.

torchvision does not import here, so the layout is checked against what torchvision publishes about
its own models: the parameter count of each pretrained segmentation model (``num_params`` in its weights'
metadata, counted with the auxiliary head and 21 classes) and the state_dict names its checkpoints use.
"""

import pytest

torch = pytest.importorskip("torch")

from trtkit.models.segmentation import (ARCHITECTURES, create_segmentation_model, deployable,  # noqa: E402
                                        infer_segmentation_layout)

# torchvision.models.segmentation.*_Weights.COCO_WITH_VOC_LABELS_V1.meta["num_params"]
TORCHVISION_NUM_PARAMS = {
    "fcn_resnet50": 35322218,
    "fcn_resnet101": 54314346,
    "deeplabv3_resnet50": 42004074,
    "deeplabv3_resnet101": 60996202,
}


@pytest.mark.parametrize("name", sorted(TORCHVISION_NUM_PARAMS))
def test_parameter_count_is_torchvisions(name):
    model = create_segmentation_model(name, num_classes=21, aux=True)
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_NUM_PARAMS[name]
    assert infer_segmentation_layout(model.state_dict()) == (name, 21, True)


def test_state_dict_names_are_torchvisions():
    keys = set(create_segmentation_model("deeplabv3_resnet50", num_classes=21, aux=True).state_dict())
    for key in ("backbone.conv1.weight", "backbone.bn1.running_var", "backbone.layer4.2.conv3.weight",
                "backbone.layer3.0.downsample.0.weight",
                "classifier.0.convs.0.0.weight", "classifier.0.convs.3.0.weight", "classifier.0.convs.4.1.weight",
                "classifier.0.project.0.weight", "classifier.1.weight", "classifier.4.bias",
                "aux_classifier.0.weight", "aux_classifier.4.bias"):
        assert key in keys, key
    assert not any(k.startswith(("backbone.fc", "backbone.avgpool")) for k in keys)
    fcn = set(create_segmentation_model("fcn_resnet50", num_classes=21).state_dict())
    assert "classifier.4.weight" in fcn and not any(k.startswith("aux_classifier") for k in fcn)


def test_dilated_backbone_keeps_output_stride_8_and_the_output_the_input_size():
    model = create_segmentation_model("fcn_resnet50", num_classes=5, aux=True).eval()
    x = torch.randn(1, 3, 64, 48)
    with torch.no_grad():
        features = model.backbone(x)
        result = model(x)
        plain = deployable(model)(x)
    assert tuple(features["out"].shape) == (1, 2048, 8, 6)  # 64/8 x 48/8: layer3 and layer4 dilated
    assert tuple(features["aux"].shape) == (1, 1024, 8, 6)
    assert tuple(result["out"].shape) == tuple(result["aux"].shape) == (1, 5, 64, 48)
    assert torch.equal(plain, result["out"])  # the export takes `out`; the aux head is dropped


def test_a_loaded_checkpoint_gives_the_same_outputs():
    source = create_segmentation_model("fcn_resnet18", num_classes=3).eval()
    clone = create_segmentation_model(*infer_segmentation_layout(source.state_dict())[:2]).eval()
    clone.load_state_dict(source.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(source(x)["out"], clone(x)["out"])


def test_a_classifier_state_dict_is_not_a_segmentation_one():
    from trtkit.models.classifiers import create_model
    assert infer_segmentation_layout(create_model("resnet18", num_classes=10).state_dict()) is None
    assert set(ARCHITECTURES) >= set(TORCHVISION_NUM_PARAMS) | {"fcn_resnet18"}
