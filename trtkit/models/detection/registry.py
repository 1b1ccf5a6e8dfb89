"""The detection architectures by name: what each is made of, its torchvision parameters, and recognising a
state_dict's architecture. Imports without torch (the modules are built by functions that import it).
"""

from trtkit.contract import IMAGENET_MEAN, IMAGENET_STD, InputContract
from trtkit.errors import InputError

DEFAULT_CLASSES = 91  # torchvision's default: COCO's 90 category ids and the background (0)
COCO_RETINANET_BN_EPS = 0.0  # torchvision's retinanet_resnet50_fpn runs its COCO_V1 weights with frozen eps 0

# anchors: RetinaNet's AnchorGenerator (3 sizes x 3 aspect ratios per level) and the SSDs' DefaultBoxGenerator
RETINANET_ANCHORS = {"sizes": tuple((x, int(x * 2 ** (1.0 / 3)), int(x * 2 ** (2.0 / 3)))
                                    for x in (32, 64, 128, 256, 512)),
                     "aspect_ratios": ((0.5, 1.0, 2.0),) * 5}
# the sample detector's (retinanet_sample, 128x128 inputs, objects of 8-64 px): square anchors, three sizes an
# octave apart from 8 px at stride 8 to 203 px at stride 128
SAMPLE_ANCHORS = {"sizes": tuple((x, int(round(x * 2 ** (1.0 / 3))), int(round(x * 2 ** (2.0 / 3))))
                                 for x in (8, 16, 32, 64, 128)),
                  "aspect_ratios": ((1.0,),) * 5}
SSD300_BOXES = {"aspect_ratios": [[2], [2, 3], [2, 3], [2, 3], [2], [2]],
                "scales": [0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05], "steps": [8, 16, 32, 64, 100, 300]}
SSDLITE_BOXES = {"aspect_ratios": [[2, 3]] * 6, "min_ratio": 0.2, "max_ratio": 0.95}

# name -> (kind, backbone)
DETECTION_ARCHITECTURES = {
    "retinanet_resnet18_fpn": ("retinanet", "resnet18"),
    "retinanet_resnet50_fpn": ("retinanet", "resnet50"),
    "ssd300_vgg16": ("ssd", "vgg16"),
    "ssdlite320_mobilenet_v3_large": ("ssdlite", "mobilenet_v3_large"),
    "retinanet_sample": ("retinanet_sample", "small_fpn"),  # the sample detector (models.sample)
}

# What torchvision's builders pass, per kind: the input (size, mean, std, resize), the anchors, the box coder's
# weights, the score activation, the padding multiple, the post-processing and create_detection_model's options.
# "retinanet_sample" is trtkit's own: RetinaNet's head (2 convolutions deep, GroupNorm of 16 groups), loss and
# post-processing on a small backbone (``small_fpn``) at 128x128, a model that trains from scratch in minutes on
# a CPU.
KINDS = {
    "retinanet": {
        "input": (800, IMAGENET_MEAN, IMAGENET_STD, "pad"), "anchors": RETINANET_ANCHORS,
        "box_weights": (1.0, 1.0, 1.0, 1.0),
        "activation": "sigmoid", "size_divisible": 32,
        "postprocessing": {"score_thresh": 0.05, "nms_thresh": 0.5, "detections_per_img": 300,
                           "topk_candidates": 1000, "per_level": True},
        "options": {"frozen_bn": True, "bn_eps": None},
    },
    "retinanet_sample": {
        "input": (128, IMAGENET_MEAN, IMAGENET_STD, "stretch"), "anchors": SAMPLE_ANCHORS,
        "box_weights": (1.0, 1.0, 1.0, 1.0), "activation": "sigmoid", "size_divisible": 32, "head_convs": 2,
        "head_groups": 16,
        "postprocessing": {"score_thresh": 0.05, "nms_thresh": 0.5, "detections_per_img": 100,
                           "topk_candidates": 1000, "per_level": True},
        "options": {},
    },
    "ssd": {
        "input": (300, (0.48235, 0.45882, 0.40784), (1.0 / 255.0,) * 3, "stretch"), "anchors": SSD300_BOXES,
        "box_weights": (10.0, 10.0, 5.0, 5.0), "activation": "softmax", "size_divisible": 1,
        "postprocessing": {"score_thresh": 0.01, "nms_thresh": 0.45, "detections_per_img": 200,
                           "topk_candidates": 400, "per_level": False},
        "options": {},
    },
    "ssdlite": {
        "input": (320, (0.5,) * 3, (0.5,) * 3, "stretch"), "anchors": SSDLITE_BOXES,
        "box_weights": (10.0, 10.0, 5.0, 5.0),
        "activation": "softmax", "size_divisible": 1,
        "postprocessing": {"score_thresh": 0.001, "nms_thresh": 0.55, "detections_per_img": 300,
                           "topk_candidates": 300, "per_level": False},
        "options": {"reduced_tail": True},
    },
}


def model_names():
    return sorted(DETECTION_ARCHITECTURES)


def is_detection_name(name):
    return name in DETECTION_ARCHITECTURES


def create_detection_model(name, num_classes=DEFAULT_CLASSES, input_size=None, contract=None, postprocessing=None,
                           **options):
    """An untrained detector ``name`` (``DETECTION_ARCHITECTURES``) for ``num_classes`` classes (the SSDs' class
    0 is the background; RetinaNet's are all classes, torchvision's 91 leaving 0 unused), a
    ``models.detection.detector.Detector``. ``postprocessing``: overrides of the kind's post-processing
    (``score_thresh``, ``nms_thresh``, ``detections_per_img``, ``topk_candidates``). ``options``:

    - RetinaNet: ``frozen_bn`` (True: the backbone's BatchNorms frozen, as torchvision builds it from ImageNet
      weights; False: trainable BatchNorm, as it builds it from scratch) and ``bn_eps`` (the frozen norms' eps;
      0.0 for torchvision's own COCO weights, which it loads with eps 0);
    - SSDlite: ``reduced_tail`` (True: the last stage at half width, torchvision's published COCO model and its
      choice without an ImageNet backbone; False: its default when started from ImageNet weights).

    The model carries ``.trtkit_name``, ``.num_classes``, ``.detection_options`` and ``.input_contract``
    (torchvision's normalization and size unless ``input_size`` or ``contract``). The SSDs' input is
    torchvision's (a fixed 300 / 320 stretch). RetinaNet's is not: trtkit fits the image inside a fixed 800 x 800
    (longer side to 800, padded right and bottom), for engines of a fixed shape, while torchvision scales the
    shorter side to 800 with the longer at most 1333 (a size per image, the batch padded to a multiple of 32).
    For torchvision's scale ``s = min(800 / H, 1333 / W)`` on H x W images (H <= W), give the side that sets
    ``s`` its exact size (800, or 1333 where the cap binds) and round the other up to a multiple of 32: 480 x 640
    images, ``input_size=(800, 1088)``. trtkit resizes with PIL's antialiased filter, torchvision bilinearly
    after normalization (docs/detection.md)."""
    if name not in DETECTION_ARCHITECTURES:
        raise InputError("unknown detection model '{}'".format(name),
                         hint="choose one of {}".format(", ".join(model_names())))
    kind_name, backbone_name = DETECTION_ARCHITECTURES[name]
    kind = KINDS[kind_name]
    unknown = sorted(set(options) - set(kind["options"]))
    if unknown:
        raise InputError("{} takes no option {}".format(name, ", ".join(unknown)),
                         hint="its options: {}".format(", ".join(sorted(kind["options"])) or "none"))
    minimum = 2 if kind["activation"] == "softmax" else 1
    if int(num_classes) < minimum:
        raise InputError("{} needs at least {} classes, got {}".format(name, minimum, num_classes),
                         hint="count the background as class 0" if minimum == 2 else None)
    chosen = dict(kind["options"], **options)
    from trtkit.models.detection.build import build_detector
    model = build_detector(kind_name, backbone_name, int(num_classes), kind, chosen, postprocessing or {})
    model.trtkit_name = name
    model.num_classes = int(num_classes)
    model.detection_options = chosen
    size, mean, std, resize = kind["input"]
    if contract is None:
        contract = InputContract(size=input_size or size, mean=mean, std=std, resize=resize)
    elif input_size:
        contract = contract.with_overrides({"size": input_size})
    model.input_contract = contract
    return model


def _per_anchor(state_dict, classification, regression):
    """Classes of a head: the class convolution's outputs over the anchors (the box convolution's / 4)."""
    anchors = int(state_dict[regression].shape[0]) // 4
    return int(state_dict[classification].shape[0]) // anchors if anchors else None


def infer_detection_layout(state_dict):
    """``(name, num_classes, options)`` of a torchvision-style detection state_dict (``options`` as
    ``create_detection_model`` takes them), or None when it is not one of ``DETECTION_ARCHITECTURES``.

    ``retinanet_sample`` by RetinaNet's ``cls_logits`` on ``backbone.body.stem``. RetinaNet is told by
    ``head.classification_head.cls_logits`` on ``backbone.body``, its ResNet by layer3's
    block count and kind, frozen norms by the absence of ``num_batches_tracked``. The frozen norms' eps is not in
    a state_dict: a frozen 91-class ``retinanet_resnet50_fpn`` is taken for torchvision's COCO_V1 checkpoint,
    which torchvision runs with eps 0 (``overwrite_eps(model, 0.0)`` in its builder), so its options say
    ``bn_eps=0.0``; any other RetinaNet keeps ``FrozenBatchNorm2d``'s 1e-5, torchvision's eps when it builds
    from ImageNet weights (a 91-class ResNet50 trained that way needs ``bn_eps=None`` passed back). SSD300 by
    ``backbone.scale_weight``; SSDlite by its head's ``module_list.0.1`` and the width of its last convolution."""
    head = "head.classification_head."
    if head + "cls_logits.weight" in state_dict and "backbone.body.stem.0.0.weight" in state_dict:
        return "retinanet_sample", _per_anchor(state_dict, head + "cls_logits.weight",
                                               "head.regression_head.bbox_reg.weight"), {}
    if head + "cls_logits.weight" in state_dict and "backbone.body.conv1.weight" in state_dict:
        blocks = 0
        while "backbone.body.layer3.{}.conv1.weight".format(blocks) in state_dict:
            blocks += 1
        bottleneck = "backbone.body.layer1.0.conv3.weight" in state_dict
        backbone = {(False, 2): "resnet18", (True, 6): "resnet50"}.get((bottleneck, blocks))
        if backbone is None:
            return None
        frozen = not any(k.startswith("backbone.body.") and k.endswith("num_batches_tracked") for k in state_dict)
        classes = _per_anchor(state_dict, head + "cls_logits.weight", "head.regression_head.bbox_reg.weight")
        options = {"frozen_bn": frozen}
        if frozen and backbone == "resnet50" and classes == DEFAULT_CLASSES:
            options["bn_eps"] = COCO_RETINANET_BN_EPS
        return "retinanet_{}_fpn".format(backbone), classes, options
    if "backbone.scale_weight" in state_dict and head + "module_list.0.weight" in state_dict:
        classes = _per_anchor(state_dict, head + "module_list.0.weight", "head.regression_head.module_list.0.weight")
        return "ssd300_vgg16", classes, {}
    last = "backbone.features.1.3.0.weight"  # SSDlite: MobileNetV3's last 1x1 convolution, 960 or 480 wide
    if head + "module_list.0.1.weight" in state_dict and last in state_dict:
        classes = _per_anchor(state_dict, head + "module_list.0.1.weight",
                              "head.regression_head.module_list.0.1.weight")
        return "ssdlite320_mobilenet_v3_large", classes, {"reduced_tail": int(state_dict[last].shape[0]) < 960}
    return None

