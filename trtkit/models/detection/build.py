"""Assembling a detector from its parts, as torchvision's builders do (``registry`` holds the parameters)."""

from trtkit.errors import InputError
from trtkit.models.detection.anchors import DefaultBoxes, GridAnchors
from trtkit.models.detection.boxes import BoxCoder
from trtkit.models.detection.detector import Detector
from trtkit.models.detection.fpn import resnet_fpn
from trtkit.models.detection.heads import retinanet_head, ssd_head, ssdlite_head
from trtkit.detect.params import PostProcessing
from trtkit.models.detection.ssd_backbones import mobilenet_extractor, vgg16_extractor


def _parts(kind_name, backbone_name, num_classes, kind, options):
    """(backbone, head, anchors)."""
    if kind_name == "retinanet_sample":
        from trtkit.models.detection.small_fpn import small_fpn
        anchors = GridAnchors(**kind["anchors"])
        backbone = small_fpn()
        return backbone, retinanet_head(backbone.out_channels, anchors.num_anchors_per_location()[0], num_classes,
                                        kind["head_convs"], kind["head_groups"]), anchors
    if kind_name == "retinanet":
        anchors = GridAnchors(**kind["anchors"])
        backbone = resnet_fpn(backbone_name, frozen_bn=options["frozen_bn"], bn_eps=options["bn_eps"])
        return backbone, retinanet_head(backbone.out_channels, anchors.num_anchors_per_location()[0],
                                        num_classes), anchors
    anchors = DefaultBoxes(**kind["anchors"])
    if kind_name == "ssd":
        backbone, make_head = vgg16_extractor(), ssd_head
    else:
        backbone, make_head = mobilenet_extractor(options["reduced_tail"]), ssdlite_head
    return backbone, make_head(backbone.out_channels, anchors.num_anchors_per_location(), num_classes), anchors


def build_detector(kind_name, backbone_name, num_classes, kind, options, overrides):
    """The ``Detector`` of kind ``kind_name`` (``registry.KINDS``: ``kind``, whose anchors, coder, activation
    and post-processing, with ``overrides``, it takes) on ``backbone_name``, with ``options``
    (``create_detection_model``'s)."""
    backbone, head, anchors = _parts(kind_name, backbone_name, num_classes, kind, options)
    unknown = sorted(set(overrides) - set(kind["postprocessing"]) | ({"per_level"} & set(overrides)))
    if unknown:
        raise InputError("no post-processing parameter {}".format(", ".join(unknown)),
                         hint="use {}".format(", ".join(sorted(kind["postprocessing"]))))
    postprocessing = PostProcessing(**kind["postprocessing"]).with_overrides(**overrides)
    return Detector(backbone, head, anchors, BoxCoder(kind["box_weights"]), kind["activation"], postprocessing,
                    kind["size_divisible"])
