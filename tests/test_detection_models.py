"""trtkit's detectors against torchvision's own detection source, on random-init checkpoints.

For each architecture torchvision's model is built from its source (``torchvision_source``: the released wheel's
Python files, NMS as its CPU kernel decides) with a seed, its weights and BatchNorm statistics scattered so that
plenty of boxes clear the score threshold, and its state_dict loaded into trtkit's model strictly (and trtkit's
back into torchvision's). Both then run in eval mode on the same images and must give the same detections:
boxes, scores and labels, in the same order.

What each model is fed: torchvision's takes 0-1 images and resizes and normalizes them itself; the images here
are sized so that its resize is the identity (RetinaNet: ``min_size`` = the shorter side; the SSDs: their fixed
300 / 320), and trtkit's model takes the same pixels normalized by its ``input_contract``, whose mean and std
must be torchvision's. A RetinaNet input that is not a multiple of 32 is padded by both.
"""

import pytest

torch = pytest.importorskip("torch")

import torchvision_source  # noqa: E402
from test_light_import import run_python  # noqa: E402
from trtkit.models.detection import (DETECTION_ARCHITECTURES, create_detection_model,  # noqa: E402
                                     infer_detection_layout)

# torchvision.models.detection.*_Weights.COCO_V1.meta["num_params"] (91 classes; RetinaNet's BatchNorms frozen)
TORCHVISION_NUM_PARAMS = {
    "retinanet_resnet50_fpn": 34014999,
    "ssd300_vgg16": 35641826,
    "ssdlite320_mobilenet_v3_large": 3440060,
}
SMALL = 7  # a custom class count beside torchvision's 91


@pytest.fixture(scope="module")
def tv():
    wheel = torchvision_source.find_wheel()
    if wheel is None:
        message = "torchvision {}'s wheel is not in {} (get it with: {})".format(
            torchvision_source.VERSION, torchvision_source.CACHE, torchvision_source.DOWNLOAD)
        if torchvision_source.required():
            pytest.fail(message + "; CI must test against torchvision's source")
        pytest.skip(message)
    with torchvision_source.imported(wheel) as package:
        yield package


def torchvision_model(tv, name, num_classes, frozen_bn=True, min_size=800):
    """torchvision's ``name`` as its builder makes it (random init): RetinaNet with frozen BatchNorm as from
    ImageNet weights (or plain BatchNorm, from scratch), the SSDs without pretrained weights."""
    from functools import partial
    detection, ops = tv.models.detection, tv.ops
    sizes = {"min_size": min_size, "max_size": 1333}
    if name.startswith("retinanet_"):  # retinanet_resnet50_fpn's steps (any ResNet, as resnet_fpn_backbone)
        norm = ops.misc.FrozenBatchNorm2d if frozen_bn else torch.nn.BatchNorm2d
        backbone = getattr(tv.models, name.split("_")[1])(weights=None, norm_layer=partial(norm))
        backbone = detection.backbone_utils._resnet_fpn_extractor(
            backbone, 3, returned_layers=[2, 3, 4], extra_blocks=ops.feature_pyramid_network.LastLevelP6P7(256, 256))
        return detection.RetinaNet(backbone, num_classes, **sizes)
    return getattr(detection, name)(weights=None, weights_backbone=None, num_classes=num_classes)


def scattered(model, seed):
    """``model``'s state_dict with BatchNorm statistics and affine terms drawn at random and the class biases
    raised, so that the detections are many and varied."""
    generator = torch.Generator().manual_seed(seed)
    state = model.state_dict()
    for key, value in state.items():
        if not value.is_floating_point():
            continue
        noise = torch.rand(value.shape, generator=generator)
        if key.endswith("running_var"):
            state[key] = 0.5 + noise
        elif key.endswith("running_mean") or (key.endswith(".bias") and "cls_logits" not in key):
            state[key] = 0.2 * (noise - 0.5)
        elif key.endswith(".weight") and value.dim() == 1:
            state[key] = 0.75 + 0.5 * noise
    for key in [k for k in state if k.startswith("head.classification_head") and k.endswith("weight")
                and state[k].dim() == 4]:
        state[key] = state[key] * 4  # spread the class scores
    for key in [k for k in state if k.endswith("cls_logits.bias")]:
        state[key] = torch.randn(state[key].shape, generator=generator) - 2.0  # sigmoid ~0.12 > 0.05
    return state


def images_for(name, seed):
    """(torchvision's input: 0-1 images, their RetinaNet min_size) for ``name``: two images at its size (one for
    the slow backbones)."""
    generator = torch.Generator().manual_seed(seed)
    size = {"ssd300_vgg16": (300, 300), "ssdlite320_mobilenet_v3_large": (320, 320)}.get(name, (150, 200))
    count = 1 if name in ("ssd300_vgg16", "retinanet_resnet50_fpn") else 2
    return [torch.rand((3,) + size, generator=generator) for _ in range(count)], min(size)


def normalized(model, pixels):
    contract = model.input_contract
    mean = torch.as_tensor(contract.mean, dtype=torch.float32)[:, None, None]
    std = torch.as_tensor(contract.std, dtype=torch.float32)[:, None, None]
    return torch.stack([(image - mean) / std for image in pixels])


def assert_same_detections(expected, found):
    assert len(expected) == len(found)
    for theirs, ours in zip(expected, found):
        assert theirs["boxes"].shape == ours["boxes"].shape, (theirs["boxes"].shape, ours["boxes"].shape)
        assert torch.equal(theirs["labels"], ours["labels"])
        assert torch.allclose(theirs["scores"], ours["scores"], rtol=1e-5, atol=1e-6)
        assert torch.allclose(theirs["boxes"], ours["boxes"], rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("name,num_classes", [
    ("retinanet_resnet18_fpn", 91), ("retinanet_resnet18_fpn", SMALL), ("ssdlite320_mobilenet_v3_large", 91),
    ("ssdlite320_mobilenet_v3_large", SMALL), ("retinanet_resnet50_fpn", SMALL), ("ssd300_vgg16", 91),
])
def test_same_detections_as_torchvision_on_its_checkpoint(tv, name, num_classes):
    torch.manual_seed(0)
    pixels, min_size = images_for(name, seed=1)
    theirs = torchvision_model(tv, name, num_classes, min_size=min_size).eval()
    state = scattered(theirs, seed=2)
    theirs.load_state_dict(state, strict=True)
    ours = create_detection_model(name, num_classes=num_classes).eval()
    ours.load_state_dict(state, strict=True)
    assert infer_detection_layout(state)[:2] == (name, num_classes)
    assert ours.input_contract.mean == pytest.approx(theirs.transform.image_mean)
    assert ours.input_contract.std == pytest.approx(theirs.transform.image_std)
    with torch.no_grad():
        expected = theirs(pixels)
        found = ours(normalized(ours, pixels))
    assert_same_detections(expected, found)
    assert min(len(d["scores"]) for d in found) >= 20, "too few detections to compare"
    for key in ("score_thresh", "nms_thresh", "detections_per_img", "topk_candidates"):
        assert getattr(ours.postprocessing, key) == getattr(theirs, key), key
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    theirs.load_state_dict(ours.state_dict(), strict=True)  # and trtkit's checkpoint into torchvision's model
    assert all(torch.equal(value, state[key]) for key, value in theirs.state_dict().items())


def test_decoded_and_postprocess_are_the_forward_pass_split_in_two():
    model = create_detection_model("retinanet_resnet18_fpn", num_classes=SMALL).eval()
    model.load_state_dict(scattered(model, seed=3))
    x = torch.randn(2, 3, 150, 200)
    with torch.no_grad():
        boxes, scores = model.decoded(x)
        sizes = model.level_sizes(150, 200)
        detections = model(x)
    assert boxes.shape == (2, sum(sizes), 4) and scores.shape == (2, sum(sizes), SMALL)
    assert sizes == [9 * h * w for h, w in ((20, 28), (10, 14), (5, 7), (3, 4), (2, 2))]  # padded to 160x224
    assert float(boxes[..., 0::2].max()) <= 200 and float(boxes[..., 1::2].max()) <= 150  # clipped, unpadded
    assert_same_detections(detections, model.postprocess(boxes, scores, sizes))


def test_retinanet_batchnorm_checkpoints_and_version_1_keys(tv):
    """A torchvision RetinaNet trained from scratch (plain BatchNorm, as ``retinanet_resnet50_fpn`` builds it
    without ImageNet weights) loads into trtkit's frozen model and into a ``frozen_bn=False`` one (both ways); a
    checkpoint saved before torchvision's v2 key names loads too."""
    theirs = torchvision_model(tv, "retinanet_resnet18_fpn", SMALL, frozen_bn=False, min_size=150).eval()
    state = scattered(theirs, seed=4)
    theirs.load_state_dict(state)
    assert infer_detection_layout(state) == ("retinanet_resnet18_fpn", SMALL, {"frozen_bn": False})
    plain = create_detection_model("retinanet_resnet18_fpn", num_classes=SMALL, frozen_bn=False).eval()
    plain.load_state_dict(state, strict=True)
    theirs.load_state_dict(plain.state_dict(), strict=True)
    old = {}
    for key, value in state.items():  # torchvision's v1 names: conv.0, conv.2, ...; inner_blocks.K, layer_blocks.K
        for index in range(4):
            key = key.replace("_head.conv.{}.0.".format(index), "_head.conv.{}.".format(2 * index))
        for block in ("inner_blocks", "layer_blocks"):
            for index in range(3):
                key = key.replace("fpn.{}.{}.0.".format(block, index), "fpn.{}.{}.".format(block, index))
        old[key] = value
    assert "head.classification_head.conv.6.weight" in old and "backbone.fpn.inner_blocks.2.weight" in old
    frozen = create_detection_model("retinanet_resnet18_fpn", num_classes=SMALL).eval()
    frozen.load_state_dict(old, strict=True)
    public = tv.models.detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=SMALL)
    assert {k: tuple(v.shape) for k, v in public.state_dict().items()} == {  # its builder, from scratch
        k: tuple(v.shape) for k, v in create_detection_model(
            "retinanet_resnet50_fpn", num_classes=SMALL, frozen_bn=False).state_dict().items()}
    pixels = [torch.rand(3, 150, 200, generator=torch.Generator().manual_seed(5))]
    with torch.no_grad():
        expected = theirs(pixels)
        assert_same_detections(expected, plain(normalized(plain, pixels)))
        assert_same_detections(expected, frozen(normalized(frozen, pixels)))


def test_ssdlite_full_tail_layout_is_torchvisions(tv):
    """SSDlite on an ImageNet MobileNetV3 (torchvision's default builder) keeps the full-width tail."""
    from functools import partial
    norm = partial(torch.nn.BatchNorm2d, eps=0.001, momentum=0.03)
    trunk = tv.models.mobilenet_v3_large(weights=None, norm_layer=norm, reduced_tail=False)
    theirs = tv.models.detection.ssdlite._mobilenet_extractor(trunk, 6, norm)
    ours = create_detection_model("ssdlite320_mobilenet_v3_large", num_classes=SMALL, reduced_tail=False)
    expected = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert {k[len("backbone."):]: tuple(v.shape) for k, v in ours.state_dict().items()
            if k.startswith("backbone.")} == expected
    assert infer_detection_layout(ours.state_dict()) == ("ssdlite320_mobilenet_v3_large", SMALL,
                                                         {"reduced_tail": False})


@pytest.mark.parametrize("name", sorted(TORCHVISION_NUM_PARAMS))
def test_parameter_count_is_torchvisions(name):
    model = create_detection_model(name)
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_NUM_PARAMS[name]
    found, classes, options = infer_detection_layout(model.state_dict())
    assert (found, classes) == (name, 91)
    assert all(model.detection_options[key] == value for key, value in options.items())
    assert set(DETECTION_ARCHITECTURES) == set(TORCHVISION_NUM_PARAMS) | {"retinanet_resnet18_fpn"}


def test_other_state_dicts_are_not_detectors():
    from trtkit.models.classifiers import create_model
    from trtkit.models.segmentation import create_segmentation_model
    assert infer_detection_layout(create_model("resnet18", num_classes=10).state_dict()) is None
    assert infer_detection_layout(create_segmentation_model("fcn_resnet18", num_classes=3).state_dict()) is None
    assert infer_detection_layout(create_segmentation_model("lraspp_mobilenet_v3_large").state_dict()) is None


def test_registry_imports_without_torch():
    result = run_python("from trtkit.models.detection import DETECTION_ARCHITECTURES, infer_detection_layout\n"
                        "assert 'torch' not in sys.modules\nprint(sorted(DETECTION_ARCHITECTURES))")
    assert result.returncode == 0, result.stderr
    assert "retinanet_resnet18_fpn" in result.stdout
