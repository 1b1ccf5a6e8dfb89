"""Segmentation models with torchvision's exact module layout: FCN and DeepLabV3 on ResNet50/101, an FCN
on ResNet18/34 (what a Jetson Nano user trains) and LRASPP on MobileNetV3-Large (the light one).

Why not torchvision itself: it does not import everywhere trtkit runs (see
``models.classifiers``). The modules here have torchvision's names and shapes,
so a torchvision segmentation checkpoint (``backbone.*``, ``classifier.*`` and,
when it was trained with the auxiliary loss, ``aux_classifier.*``) loads with
``strict=True`` and gives the same outputs:

- the backbone keeps the ResNet's stem and ``layer1..layer4`` (torchvision's
  ``IntermediateLayerGetter``: avgpool and fc dropped), with layer3 and layer4
  dilated instead of strided for ResNet50/101 (output stride 8), plain for
  ResNet18/34 (basic blocks have no dilation in torchvision either);
- ``classifier`` is an ``FCNHead`` or a ``DeepLabHead`` (ASPP with rates 12,
  24, 36 and an image-pooling branch); ``aux_classifier`` an ``FCNHead`` on layer3;
- LRASPP's backbone is MobileNetV3-Large's ``features`` (``models.mobilenet``,
  last stage dilated) by index, tapped at 4 (``low``, output stride 8) and 16
  (``high``); its ``classifier`` is the ``LRASPPHead`` (``cbr``, ``scale``,
  ``low_classifier``, ``high_classifier``), and it has no auxiliary head;
- ``forward`` returns a dict with ``out`` (and ``aux``) upsampled bilinearly
  (``align_corners=False``) to the input size: class scores ``[N, C, H, W]``.

``deployable(model)`` is what trtkit exports: the ``out`` tensor only (the
auxiliary head is a training aid; ``keep_aux=True`` keeps it as a second output).
"""

from trtkit.contract import IMAGENET_MEAN, IMAGENET_STD, InputContract
from trtkit.deps import require
from trtkit.errors import InputError
from trtkit.tasks.segmentation import SAMPLE as SEGMENTATION_SAMPLE, SEGMENTATION

# name -> (head, backbone, dilate layer2..4 of a ResNet)
ARCHITECTURES = {
    "lraspp_mobilenet_v3_large": ("lraspp", "mobilenet_v3_large", None),
    "fcn_resnet18": ("fcn", "resnet18", (False, False, False)),
    "fcn_resnet34": ("fcn", "resnet34", (False, False, False)),
    "fcn_resnet50": ("fcn", "resnet50", (False, True, True)),
    "fcn_resnet101": ("fcn", "resnet101", (False, True, True)),
    "deeplabv3_resnet50": ("deeplabv3", "resnet50", (False, True, True)),
    "deeplabv3_resnet101": ("deeplabv3", "resnet101", (False, True, True)),
}
DEFAULT_CLASSES = 21  # torchvision's default: the 20 Pascal VOC classes and background
ASPP_RATES = (12, 24, 36)
BACKBONE_PARTS = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")


def model_names():
    return sorted(ARCHITECTURES)


def is_segmentation_name(name):
    return name in ARCHITECTURES


def _build_classes():
    """Define the nn.Module classes on first use, so this module imports without torch."""
    torch = require("torch", "building a segmentation model")
    nn = torch.nn
    functional = torch.nn.functional

    class Backbone(nn.ModuleDict):
        """torchvision's ``IntermediateLayerGetter``: ``modules`` ((name, module) pairs) run in order, the
        outputs of those named in ``taps`` returned under the tap's key (ResNet: layer3 as ``aux``, layer4 as
        ``out``; MobileNetV3: features 4 as ``low``, 16 as ``high``)."""

        def __init__(self, modules, taps):
            super(Backbone, self).__init__(modules)
            self.taps = dict(taps)

        def forward(self, x):
            features = {}
            for name, module in self.items():
                x = module(x)
                if name in self.taps:
                    features[self.taps[name]] = x
            return features

    class LRASPPHead(nn.Module):
        def __init__(self, low_channels, high_channels, num_classes, inter_channels=128):
            super(LRASPPHead, self).__init__()
            self.cbr = nn.Sequential(nn.Conv2d(high_channels, inter_channels, 1, bias=False),
                                     nn.BatchNorm2d(inter_channels), nn.ReLU())
            self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(high_channels, inter_channels, 1,
                                                                          bias=False), nn.Sigmoid())
            self.low_classifier = nn.Conv2d(low_channels, num_classes, 1)
            self.high_classifier = nn.Conv2d(inter_channels, num_classes, 1)

        def forward(self, features):
            low, high = features["low"], features["high"]
            x = self.cbr(high) * self.scale(high)
            x = functional.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
            return self.low_classifier(low) + self.high_classifier(x)

    class FCNHead(nn.Sequential):
        def __init__(self, in_channels, channels):
            inter = in_channels // 4
            super(FCNHead, self).__init__(
                nn.Conv2d(in_channels, inter, 3, padding=1, bias=False), nn.BatchNorm2d(inter), nn.ReLU(),
                nn.Dropout(0.1), nn.Conv2d(inter, channels, 1))

    class ASPPConv(nn.Sequential):
        def __init__(self, in_channels, out_channels, dilation):
            super(ASPPConv, self).__init__(
                nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False),
                nn.BatchNorm2d(out_channels), nn.ReLU())

    class ASPPPooling(nn.Sequential):
        def __init__(self, in_channels, out_channels):
            super(ASPPPooling, self).__init__(
                nn.AdaptiveAvgPool2d(1), nn.Conv2d(in_channels, out_channels, 1, bias=False),
                nn.BatchNorm2d(out_channels), nn.ReLU())

        def forward(self, x):
            size = x.shape[-2:]
            for module in self:
                x = module(x)
            return functional.interpolate(x, size=size, mode="bilinear", align_corners=False)

    class ASPP(nn.Module):
        def __init__(self, in_channels, rates, out_channels=256):
            super(ASPP, self).__init__()
            branches = [nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, bias=False),
                                      nn.BatchNorm2d(out_channels), nn.ReLU())]
            branches += [ASPPConv(in_channels, out_channels, rate) for rate in rates]
            branches.append(ASPPPooling(in_channels, out_channels))
            self.convs = nn.ModuleList(branches)
            self.project = nn.Sequential(
                nn.Conv2d(len(branches) * out_channels, out_channels, 1, bias=False),
                nn.BatchNorm2d(out_channels), nn.ReLU(), nn.Dropout(0.5))

        def forward(self, x):
            return self.project(torch.cat([branch(x) for branch in self.convs], dim=1))

    class DeepLabHead(nn.Sequential):
        def __init__(self, in_channels, channels):
            super(DeepLabHead, self).__init__(
                ASPP(in_channels, ASPP_RATES), nn.Conv2d(256, 256, 3, padding=1, bias=False), nn.BatchNorm2d(256),
                nn.ReLU(), nn.Conv2d(256, channels, 1))

    class SegmentationModel(nn.Module):
        """torchvision's ``_SimpleSegmentationModel``: backbone, classifier, optional aux_classifier."""

        def __init__(self, backbone, classifier, aux_classifier=None):
            super(SegmentationModel, self).__init__()
            self.backbone = backbone
            self.classifier = classifier
            self.aux_classifier = aux_classifier

        def forward(self, x):
            size = x.shape[-2:]
            features = self.backbone(x)
            scores = self.classifier(features if "high" in features else features["out"])
            result = {"out": functional.interpolate(scores, size=size, mode="bilinear", align_corners=False)}
            if self.aux_classifier is not None:
                result["aux"] = functional.interpolate(self.aux_classifier(features["aux"]), size=size,
                                                       mode="bilinear", align_corners=False)
            return result

    class Deployable(nn.Module):
        """A segmentation model whose forward returns the ``out`` tensor (and ``aux`` when kept): what
        ONNX export and every runtime take."""

        def __init__(self, model, keep_aux=False):
            super(Deployable, self).__init__()
            self.model = model
            self.keep_aux = keep_aux

        def forward(self, x):
            result = self.model(x)
            if not isinstance(result, dict):
                return result
            if self.keep_aux and "aux" in result:
                return result["out"], result["aux"]
            return result["out"]

    return {"backbone": Backbone, "fcn": FCNHead, "deeplabv3": DeepLabHead, "lraspp": LRASPPHead,
            "model": SegmentationModel, "deployable": Deployable}


_CLASSES = {}


def _classes():
    if not _CLASSES:
        _CLASSES.update(_build_classes())
    return _CLASSES


def create_segmentation_model(name, num_classes=DEFAULT_CLASSES, aux=False, input_size=None, contract=None):
    """An untrained segmentation model ``name`` (``ARCHITECTURES``) with ``num_classes`` output channels, the
    auxiliary head when ``aux``; it carries ``.trtkit_name``, ``.num_classes``, ``.task`` and ``.input_contract``
    (ImageNet normalization, 520 as torchvision's presets unless ``input_size``)."""
    if name not in ARCHITECTURES:
        raise InputError("unknown segmentation model '{}'".format(name),
                         hint="choose one of {}".format(", ".join(model_names())))
    head = ARCHITECTURES[name][0]
    if head == "lraspp" and aux:
        raise InputError("{} has no auxiliary head".format(name), hint="train or load it without aux")
    model = (_lraspp if head == "lraspp" else _resnet_model)(name, num_classes, aux)
    model.trtkit_name = name
    model.num_classes = num_classes
    model.task = SEGMENTATION.name
    if contract is None:
        contract = InputContract(size=input_size or 520, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    elif input_size:
        contract = contract.with_overrides({"size": input_size})
    model.input_contract = contract
    return model


def intermediate_layers(modules, taps):
    """torchvision's ``IntermediateLayerGetter`` over ``modules`` ((name, module) pairs run in order), returning
    a dict of the outputs named in ``taps`` (``{module name: key}``): the segmentation backbones, and the body of
    the detection models' ResNet-FPN (``models.detection.fpn``)."""
    return _classes()["backbone"](modules, taps)


def _resnet_model(name, num_classes, aux):
    from trtkit.models.classifiers import ARCHITECTURES as RESNETS, resnet
    head, backbone_name, dilate = ARCHITECTURES[name]
    classes = _classes()
    trunk = resnet(backbone_name, dilate=dilate)
    backbone = classes["backbone"]([(part, getattr(trunk, part)) for part in BACKBONE_PARTS],
                                   {"layer3": "aux", "layer4": "out"})
    channels = 512 * (4 if RESNETS[backbone_name][0] == "bottleneck" else 1)
    aux_classifier = classes["fcn"](channels // 2, num_classes) if aux else None
    return classes["model"](backbone, classes[head](channels, num_classes), aux_classifier)


def _lraspp(name, num_classes, aux):
    from trtkit.models.mobilenet import LAST_CHANNELS, LOW_FEATURE, large_features
    classes = _classes()
    features = large_features(dilated=True)
    backbone = classes["backbone"]([(str(index), module) for index, module in enumerate(features)],
                                   {str(LOW_FEATURE): "low", str(len(features) - 1): "high"})
    head = classes["lraspp"](features[LOW_FEATURE].out_channels, LAST_CHANNELS, num_classes)
    return classes["model"](backbone, head)


def deployable(model, keep_aux=False):
    """``model`` wrapped so that it returns a tensor (the ``out`` entry of a dict output; with ``keep_aux`` also
    ``aux``), keeping its trtkit attributes; a model that returns a tensor is returned as it is."""
    from trtkit.models.pick import carry_attributes
    return carry_attributes(model, _classes()["deployable"](model, keep_aux))


def infer_segmentation_layout(state_dict):
    """(name, num_classes, has_aux) of a torchvision-style segmentation state_dict, or None when it is not one.

    The head is told by ``classifier.0.convs.0.0.weight`` (ASPP: DeepLabV3), ``classifier.0.weight`` (FCN) or
    ``classifier.low_classifier.weight`` (LRASPP);
    the backbone by its layer3 block count and block kind; the classes by the last classifier convolution."""
    if "classifier.low_classifier.weight" in state_dict and "backbone.0.0.weight" in state_dict:
        return "lraspp_mobilenet_v3_large", int(state_dict["classifier.low_classifier.weight"].shape[0]), False
    if "backbone.conv1.weight" not in state_dict:
        return None
    head = "deeplabv3" if "classifier.0.convs.0.0.weight" in state_dict else \
        "fcn" if "classifier.0.weight" in state_dict else None
    if head is None:
        return None
    last = "classifier.4.weight"
    if last not in state_dict:
        return None
    bottleneck = "backbone.layer1.0.conv3.weight" in state_dict
    blocks = 0
    while "backbone.layer3.{}.conv1.weight".format(blocks) in state_dict:
        blocks += 1
    backbone = {(False, 2): "resnet18", (False, 6): "resnet34", (True, 6): "resnet50",
                (True, 23): "resnet101"}.get((bottleneck, blocks))
    name = "{}_{}".format(head, backbone) if backbone else None
    if name not in ARCHITECTURES:
        return None
    return name, int(state_dict[last].shape[0]), "aux_classifier.0.weight" in state_dict


def load_segmentation_model(name, checkpoint, state, meta, layout, num_classes=None):
    """The segmentation model of ``checkpoint`` (its ``state`` and trtkit ``meta`` already read; ``layout`` from
    ``infer_segmentation_layout``), loaded strictly; ``name`` (``--model``) must agree with the layout and
    ``num_classes`` with the checkpoint's."""
    from trtkit.models.classifiers import check_layout
    found, classes, aux = layout
    check_layout(checkpoint, found, classes, name, num_classes)
    contract = InputContract.from_dict(meta["input"]) if meta.get("input") else None
    model = create_segmentation_model(found, num_classes=classes, aux=aux, contract=contract)
    from trtkit.models.classifiers import _load_strict
    _load_strict(model, state, checkpoint, found)
    model.eval()
    model.trtkit_meta = meta
    return model
