"""trtkit's detectors against torchvision's own detection source, on random-init checkpoints.

For each architecture torchvision's model is built from its source (``torchvision_source``: the released wheel's
Python files, NMS as its CPU kernel decides) with a seed, and its state_dict loaded into trtkit's model strictly
(and trtkit's back into torchvision's). Both then run in eval mode on the same images and must give the same
detections: boxes, scores and labels, in the same order.

Random-init weights alone make a useless comparison: the features grow so large that every score is 1.0 (or the
softmax's uniform value) and boxes sit at the image's clipped edges. So the weights are shaped (``spread``): the
BatchNorm statistics are scattered, and the last convolution of each head is scaled and shifted, measured on the
test's own images, so that the class logits and box codes have a chosen mean and spread. The tests then assert
that the comparison means something: scores spread (few near 1, many distinct values), NMS drops boxes, and
RetinaNet's per-level top-k truncates.

What each model is fed: torchvision's takes 0-1 images and resizes and normalizes them itself; the images here
are sized so that its resize is the identity (RetinaNet: ``min_size`` = the shorter side; the SSDs: their fixed
300 / 320), and trtkit's model takes the same pixels normalized by its ``input_contract``, whose mean and std
must be torchvision's. A RetinaNet input that is not a multiple of 32 is padded by both.
``test_retinanet_at_torchvisions_transform`` runs torchvision's real transform (800 / 1333) instead.
"""

import pytest

torch = pytest.importorskip("torch")

import torchvision_source  # noqa: E402
from test_light_import import run_python  # noqa: E402
from trtkit.models.detection import (DETECTION_ARCHITECTURES, create_detection_model,  # noqa: E402
                                     infer_detection_layout)
from trtkit.models.detection import postprocess as postprocess_module  # noqa: E402
from trtkit.models.detection.registry import KINDS  # noqa: E402

# torchvision.models.detection.*_Weights.COCO_V1.meta["num_params"] (91 classes; RetinaNet's BatchNorms frozen)
TORCHVISION_NUM_PARAMS = {
    "retinanet_resnet50_fpn": 34014999,
    "ssd300_vgg16": 35641826,
    "ssdlite320_mobilenet_v3_large": 3440060,
}
SMALL = 7  # a custom class count beside torchvision's 91
# per kind: (class logits' mean, their spread, the box codes' spread per coordinate): RetinaNet's sigmoid scores
# mostly under its 0.05 threshold with a tail up to ~0.8 (thousands of candidates per level, beyond its top-1000);
# the SSDs' softmax scores spread by the logits' spread; codes of a third to a half of an anchor (through the
# coder's weights: SSD's codes are 10, 10, 5, 5 times the box offsets)
SPREAD = {"retinanet": (-5.0, 1.2, (0.3, 0.3, 0.6, 0.6)), "ssd": (0.0, 1.5, (3.0, 3.0, 3.0, 3.0)),
          "ssdlite": (0.0, 2.0, (3.0, 3.0, 3.0, 3.0))}


@pytest.fixture(scope="module")
def tv():
    with torchvision_source.for_tests() as package:
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
    """``model``'s state_dict with BatchNorm statistics and affine terms and the other biases drawn at random
    (``spread`` then shapes the heads' outputs)."""
    generator = torch.Generator().manual_seed(seed)
    state = model.state_dict()
    for key, value in state.items():
        if not value.is_floating_point():
            continue
        noise = torch.rand(value.shape, generator=generator)
        if key.endswith("running_var"):
            state[key] = 0.5 + noise
        elif key.endswith("running_mean") or key.endswith(".bias"):
            state[key] = 0.2 * (noise - 0.5)
        elif key.endswith(".weight") and value.dim() == 1:
            state[key] = 0.75 + 0.5 * noise
    return state


def last_convolutions(head):
    """The convolutions that end a classification or regression head (one shared, or one per level)."""
    for name in ("cls_logits", "bbox_reg"):
        if hasattr(head, name):
            return [getattr(head, name)]
    return [m if isinstance(m, torch.nn.Conv2d) else m[-1] for m in head.module_list]


def spread(model, state, batch):
    """``state`` with the last convolution of ``model``'s heads rescaled and shifted so that, on ``batch``, the
    class logits have ``SPREAD``'s mean and standard deviation (one affine map per convolution) and each box
    code coordinate its standard deviation around 0: the detections are then many, with varied scores and boxes
    (random init alone saturates every score)."""
    model.load_state_dict(state)
    heads = (("class", model.head.classification_head), ("box", model.head.regression_head))
    outputs, hooks = {}, []
    for _, head in heads:
        for conv in last_convolutions(head):
            outputs[conv] = []
            hooks.append(conv.register_forward_hook(
                lambda m, i, o: outputs[m].append((o - m.bias[:, None, None]).transpose(0, 1).flatten(1))))
    with torch.no_grad():
        model.decoded(batch)
    for hook in hooks:
        hook.remove()
    logit_mean, logit_std, code_std = SPREAD[DETECTION_ARCHITECTURES[model.trtkit_name][0]]
    names = {module: name for name, module in model.named_modules()}
    state = dict(state)
    for part, head in heads:
        for conv in last_convolutions(head):
            raw = torch.cat(outputs[conv], dim=1)  # [channels, values] before the bias
            if part == "class":
                scale = torch.full((len(raw),), logit_std / float(raw.std()))
                bias = logit_mean - scale * float(raw.mean())
            else:  # channels are anchor-major, 4 coordinates each
                per_coordinate = raw.reshape(-1, 4, raw.shape[1]).transpose(0, 1).reshape(4, -1)
                factor = torch.tensor(code_std) / per_coordinate.std(1)
                scale, bias = factor.repeat(len(raw) // 4), (-factor * per_coordinate.mean(1)).repeat(len(raw) // 4)
            state[names[conv] + ".weight"] = state[names[conv] + ".weight"] * scale[:, None, None, None]
            state[names[conv] + ".bias"] = bias
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
    """The same detections: count, scores in order, and each detection's label and box. Detections whose scores
    tie to within float32 rounding may come out in either order (measured: two boxes 40 px apart with scores
    1.8e-7 apart swapped places between runs of the same module, as oneDNN's summation order moved), so each
    detection is matched to one of the other side's with the same label, the same score and the same box."""
    assert len(expected) == len(found)
    for theirs, ours in zip(expected, found):
        assert theirs["boxes"].shape == ours["boxes"].shape, (theirs["boxes"].shape, ours["boxes"].shape)
        assert torch.allclose(theirs["scores"], ours["scores"], rtol=1e-5, atol=1e-6)
        unmatched = list(range(len(ours["scores"])))
        for row in range(len(theirs["scores"])):
            match = [i for i in unmatched if int(ours["labels"][i]) == int(theirs["labels"][row])
                     and abs(float(ours["scores"][i]) - float(theirs["scores"][row])) <= 1e-6 + 1e-5 * float(
                         theirs["scores"][row])
                     and torch.allclose(theirs["boxes"][row], ours["boxes"][i], rtol=1e-5, atol=1e-3)]
            assert match, "detection {} (label {}, score {:.6f}, box {}) has no match".format(
                row, int(theirs["labels"][row]), float(theirs["scores"][row]), theirs["boxes"][row].tolist())
            unmatched.remove(match[0])


def prepared(tv, name, num_classes, seed=2):
    """(torchvision's model, trtkit's, torchvision's images, trtkit's batch, the state both hold)."""
    pixels, min_size = images_for(name, seed=1)
    theirs = torchvision_model(tv, name, num_classes, min_size=min_size).eval()
    ours = create_detection_model(name, num_classes=num_classes).eval()
    batch = normalized(ours, pixels)
    state = spread(ours, scattered(theirs, seed), batch)
    theirs.load_state_dict(state, strict=True)
    ours.load_state_dict(state, strict=True)
    return theirs, ours, pixels, batch, state


def nms_counter(monkeypatch):
    """A list that gets (candidates, kept) for every ``batched_nms`` the post-processing calls."""
    calls = []

    def counted(boxes, scores, classes, threshold, original=postprocess_module.batched_nms):
        kept = original(boxes, scores, classes, threshold)
        calls.append((len(boxes), len(kept)))
        return kept
    monkeypatch.setattr(postprocess_module, "batched_nms", counted)
    return calls


def assert_meaningful(model, batch, found, nms_calls):
    """The detections make a comparison that can fail: scores spread (under 10% at 0.999 or more, many distinct
    values), boxes of many sizes, NMS dropping candidates in every image and, per level or per class, more
    candidates above the threshold than the top-k keeps."""
    for image in found:
        scores = image["scores"]
        assert len(scores) >= 20, "too few detections to compare"
        assert float((scores >= 0.999).float().mean()) < 0.1, "scores saturated: {}".format(scores[:10])
        assert len(torch.unique(scores)) >= 20
        assert len(torch.unique((image["boxes"][:, 2:] - image["boxes"][:, :2]).round())) >= 20, "boxes alike"
    assert nms_calls and all(kept < candidates for candidates, kept in nms_calls), nms_calls
    params = model.postprocessing
    with torch.no_grad():
        scores = model.decoded(batch)[1][0]
    if params.per_level:
        groups = scores.split(model.level_sizes(*batch.shape[-2:]))
    else:
        groups = scores[:, 1:].t()[:, :, None]  # per class but the background
    above = max(int((group > params.score_thresh).sum()) for group in groups)
    assert above > params.topk_candidates, (above, params.topk_candidates)


@pytest.mark.parametrize("name,num_classes", [
    pytest.param("retinanet_resnet18_fpn", 91, marks=pytest.mark.extended), ("retinanet_resnet18_fpn", SMALL),
    pytest.param("ssdlite320_mobilenet_v3_large", 91, marks=pytest.mark.extended),
    ("ssdlite320_mobilenet_v3_large", SMALL),
    pytest.param("retinanet_resnet50_fpn", SMALL, marks=pytest.mark.extended),
    pytest.param("ssd300_vgg16", 91, marks=pytest.mark.extended),
])
def test_same_detections_as_torchvision_on_its_checkpoint(tv, monkeypatch, name, num_classes):
    torch.manual_seed(0)
    theirs, ours, pixels, batch, state = prepared(tv, name, num_classes)
    assert infer_detection_layout(state)[:2] == (name, num_classes)
    assert ours.input_contract.mean == pytest.approx(theirs.transform.image_mean)
    assert ours.input_contract.std == pytest.approx(theirs.transform.image_std)
    assert ours.box_coder.weights == tuple(float(w) for w in theirs.box_coder.weights)
    for key in ("score_thresh", "nms_thresh", "detections_per_img", "topk_candidates"):
        assert getattr(ours.postprocessing, key) == getattr(theirs, key), key
    if ours.postprocessing.per_level:  # every NMS survivor, so that candidates past the best 1000 overall (which
        theirs.detections_per_img = 10000  # the per-level top-k keeps) reach the detections: one top-k over
        ours.postprocessing = ours.postprocessing.with_overrides(detections_per_img=10000)  # all levels fails
    calls = nms_counter(monkeypatch)
    with torch.no_grad():
        expected = theirs(pixels)
        found = ours(batch)
    assert_same_detections(expected, found)
    assert_meaningful(ours, batch, found, calls)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    theirs.load_state_dict(ours.state_dict(), strict=True)  # and trtkit's checkpoint into torchvision's model
    assert all(torch.equal(value, state[key]) for key, value in theirs.state_dict().items())


@pytest.mark.parametrize("kind", ["retinanet", "ssd"])
def test_box_decoding_is_torchvisions_beyond_the_size_clamp(tv, kind):
    """trtkit's box coder against torchvision's ``BoxCoder.decode_single`` with each kind's weights, on codes
    up to 8 box widths, so that many size terms are above ``bbox_xform_clip`` (log(1000 / 16))."""
    from trtkit.models.detection.boxes import BoxCoder
    weights = KINDS[kind]["box_weights"]
    generator = torch.Generator().manual_seed(6)
    corner = torch.rand(500, 2, generator=generator) * 300
    anchors = torch.cat([corner, corner + 1 + torch.rand(500, 2, generator=generator) * 100], dim=1)
    codes = (torch.rand(500, 4, generator=generator) - 0.5) * 16 * torch.tensor(weights)
    theirs = tv.models.detection._utils.BoxCoder(weights)
    assert float((codes[:, 2:] / torch.tensor(weights[2:]) > theirs.bbox_xform_clip).float().mean()) > 0.1
    expected = theirs.decode_single(codes, anchors)
    assert torch.equal(BoxCoder(weights).decode(codes, anchors), expected)
    assert torch.equal(BoxCoder(weights).decode(codes.expand(2, 500, 4), anchors), expected.expand(2, 500, 4))


def test_postprocess_of_decoded_is_the_forward_pass(monkeypatch):
    """``model.postprocess`` on ``model.decoded``'s outputs gives ``model(x)``; RetinaNet's needs the level sizes
    (its top-k is per level) and refuses to run without them."""
    from trtkit.errors import InputError
    for name in ("retinanet_resnet18_fpn", "ssdlite320_mobilenet_v3_large"):
        model = create_detection_model(name, num_classes=SMALL).eval()
        x = torch.randn(2, 3, 150, 200) if name.startswith("retinanet") else torch.randn(1, 3, 320, 320)
        model.load_state_dict(spread(model, scattered(model, seed=3), x))
        calls = nms_counter(monkeypatch)
        with torch.no_grad():
            boxes, scores = model.decoded(x)
            detections = model(x)
        assert_meaningful(model, x, detections, calls)
        if name.startswith("retinanet"):
            sizes = model.level_sizes(150, 200)
            assert boxes.shape == (2, sum(sizes), 4) and scores.shape == (2, sum(sizes), SMALL)
            assert sizes == [9 * h * w for h, w in ((20, 28), (10, 14), (5, 7), (3, 4), (2, 2))]  # 160x224
            assert float(boxes[..., 0::2].max()) <= 200 and float(boxes[..., 1::2].max()) <= 150  # unpadded
            with pytest.raises(InputError, match="level_sizes"):
                model.postprocess(boxes, scores)
            with pytest.raises(InputError, match="add up to"):
                model.postprocess(boxes, scores, sizes[:-1])
            assert_same_detections(detections, model.postprocess(boxes, scores, sizes))
        else:
            assert_same_detections(detections, model.postprocess(boxes, scores))


def test_coco_retinanet_batchnorm_eps_zero(tv):
    """torchvision runs its COCO_V1 RetinaNet with frozen BatchNorm eps 0 (``overwrite_eps``); trtkit's
    ``bn_eps=0.0`` gives its detections where some variances are small enough for eps to matter (1e-5, the
    default, does not), and ``infer_detection_layout`` proposes it for a 91-class ResNet50."""
    pixels, _ = images_for("retinanet_resnet18_fpn", seed=1)
    theirs = torchvision_model(tv, "retinanet_resnet18_fpn", SMALL, min_size=150).eval()
    state = scattered(theirs, seed=7)
    generator = torch.Generator().manual_seed(7)
    for key in [k for k in state if k.endswith("running_var")]:  # 30% of the variances about eps (1e-5), their
        small = torch.rand(state[key].shape, generator=generator) < 0.3  # weights scaled to keep the features'
        tiny = 1e-5 * (0.5 + torch.rand(state[key].shape, generator=generator))  # size (no overflow)
        weight = key[:-len("running_var")] + "weight"
        state[weight] = torch.where(small, state[weight] * (tiny / state[key]).sqrt(), state[weight])
        state[key] = torch.where(small, tiny, state[key])
    ours = create_detection_model("retinanet_resnet18_fpn", num_classes=SMALL, bn_eps=0.0).eval()
    batch = normalized(ours, pixels)
    state = spread(ours, state, batch)
    theirs.load_state_dict(state, strict=True)
    tv.models.detection._utils.overwrite_eps(theirs, 0.0)
    ours.load_state_dict(state, strict=True)
    default = create_detection_model("retinanet_resnet18_fpn", num_classes=SMALL).eval()
    default.load_state_dict(state, strict=True)
    with torch.no_grad():
        expected = theirs(pixels)
        assert_same_detections(expected, ours(batch))
        with pytest.raises(AssertionError):
            assert_same_detections(expected, default(batch))
    assert len(expected[0]["scores"]) >= 20
    coco = create_detection_model("retinanet_resnet50_fpn").state_dict()
    assert infer_detection_layout(coco) == ("retinanet_resnet50_fpn", 91, {"frozen_bn": True, "bn_eps": 0.0})
    assert infer_detection_layout(create_detection_model("retinanet_resnet50_fpn", SMALL).state_dict())[2] == {
        "frozen_bn": True}


def test_retinanet_at_torchvisions_transform(tv, monkeypatch):
    """torchvision's default RetinaNet transform (shorter side to 800, longer at most 1333, batch padded to a
    multiple of 32) on a wide 48x400 image, whose longer side the 1333 cap scales (by 3.3325, not 800 / 48):
    trtkit fed the same resized, normalized tensor (159x1333, padded by trtkit to 160x1344 as by torchvision's
    batching), its boxes mapped back to the image with torchvision's own ``resize_boxes``, gives torchvision's
    ``model(images)`` in the original image's pixels. (Wide to stay small: an 800-pixel short side takes a
    minute here.)"""
    image = torch.rand(3, 48, 400, generator=torch.Generator().manual_seed(8))
    theirs = torchvision_model(tv, "retinanet_resnet18_fpn", SMALL, min_size=800).eval()
    assert (theirs.transform.min_size, theirs.transform.max_size) == ((800,), 1333)
    with torch.no_grad():
        resized = theirs.transform([image])[0]
    (height, width), = resized.image_sizes
    assert (height, width) == (159, 1333) and tuple(resized.tensors.shape[-2:]) == (160, 1344)
    batch = resized.tensors[..., :height, :width]
    ours = create_detection_model("retinanet_resnet18_fpn", num_classes=SMALL).eval()
    state = spread(ours, scattered(theirs, seed=8), batch)
    theirs.load_state_dict(state, strict=True)
    ours.load_state_dict(state, strict=True)
    calls = nms_counter(monkeypatch)
    with torch.no_grad():
        expected = theirs([image])
        found = ours(batch)
    assert_meaningful(ours, batch, found, calls)
    resize_boxes = tv.models.detection.transform.resize_boxes
    for detection in found:
        detection["boxes"] = resize_boxes(detection["boxes"], (height, width), tuple(image.shape[-2:]))
    assert_same_detections(expected, found)


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
    assert options.pop("bn_eps", 0.0) == 0.0  # what torchvision runs its COCO RetinaNet with; not in a state_dict
    assert all(model.detection_options[key] == value for key, value in options.items())
    assert set(DETECTION_ARCHITECTURES) == set(TORCHVISION_NUM_PARAMS) | {"retinanet_resnet18_fpn", "retinanet_sample"}


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
