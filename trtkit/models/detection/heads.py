"""Detection heads in torchvision's module layout: RetinaNet's, SSD's and SSDlite's.

Each head has a ``classification_head`` and a ``regression_head`` (torchvision's names), runs on every feature
map and returns ``(class logits [N, A, C], box regressions [N, A, 4])``, a level's outputs flattened location
by location, anchor by anchor (``flatten_level``), the levels one after the other: the anchors' order.

- RetinaNet: four 3x3 convolutions with ReLU (``conv.K.0``), then ``cls_logits`` / ``bbox_reg``, shared by all
  levels; the class bias starts at ``-log((1 - 0.01) / 0.01)`` (focal loss's prior). ``convs`` sets the
  tower's depth (torchvision's 4; the small sample detector's 2, ``registry.KINDS``); ``groups`` puts a
  GroupNorm after each tower convolution (``conv.K.0`` convolution without bias, ``conv.K.1`` GroupNorm,
  ``conv.K.2`` ReLU: torchvision's RetinaNet v2 head), which the sample detector needs to train from scratch in
  minutes. Checkpoints saved before
  torchvision gave the convolutions their own ``Sequential`` (``conv.0, conv.2, ...``) are renamed on load, as
  torchvision does.
- SSD: one 3x3 convolution per level (``module_list.K``).
- SSDlite: per level a depthwise 3x3 convolution, BatchNorm and ReLU6, then a 1x1 convolution
  (``module_list.K.0.{0,1}``, ``module_list.K.1``).
"""

import math

import torch
from torch import nn

PRIOR_PROBABILITY = 0.01
RETINANET_CONVS = 4


def flatten_level(output, columns):
    """``[N, A * columns, H, W]`` -> ``[N, H * W * A, columns]`` (location-major, then anchor)."""
    n, _, height, width = output.shape
    output = output.view(n, -1, columns, height, width).permute(0, 3, 4, 1, 2)
    return output.reshape(n, -1, columns)


def conv_bn_act(cin, cout, kernel, stride=1, groups=1, eps=0.001, momentum=0.03):
    """Convolution (no bias), BatchNorm, ReLU6: torchvision's ``Conv2dNormActivation`` as SSDlite uses it."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout, eps=eps, momentum=momentum), nn.ReLU6(inplace=True))


class _PerLevel(nn.Module):
    """``module_list[k]`` on feature map k, flattened to ``columns`` per anchor (torchvision's SSDScoringHead)."""

    def __init__(self, module_list, columns):
        super(_PerLevel, self).__init__()
        self.module_list = module_list
        self.columns = columns

    def forward(self, features):
        return torch.cat([flatten_level(module(x), self.columns) for module, x in zip(self.module_list, features)],
                         dim=1)


class _Shared(nn.Module):
    """The same ``conv`` tower and final convolution on every level (a RetinaNet branch)."""

    _version = 2

    def __init__(self, channels, outputs, columns, final, convs=RETINANET_CONVS, groups=None):
        super(_Shared, self).__init__()
        if groups:
            layers = [nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                    nn.GroupNorm(groups, channels), nn.ReLU(inplace=True)) for _ in range(convs)]
        else:
            layers = [nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True))
                      for _ in range(convs)]
        self.conv = nn.Sequential(*layers)
        setattr(self, final, nn.Conv2d(channels, outputs, 3, padding=1))
        self.final = final
        self.columns = columns
        for layer in self.modules():
            if isinstance(layer, nn.Conv2d):
                nn.init.normal_(layer.weight, std=0.01)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)

    def _load_from_state_dict(self, state_dict, prefix, metadata, *args):
        if (metadata or {}).get("version") is None or metadata["version"] < 2:
            for index in range(len(self.conv)):  # version 1: conv.0, conv.2, ... (ReLUs at the odd places)
                for kind in ("weight", "bias"):
                    old = "{}conv.{}.{}".format(prefix, 2 * index, kind)
                    if old in state_dict:
                        state_dict["{}conv.{}.0.{}".format(prefix, index, kind)] = state_dict.pop(old)
        super(_Shared, self)._load_from_state_dict(state_dict, prefix, metadata, *args)

    def forward(self, features):
        final = getattr(self, self.final)
        return torch.cat([flatten_level(final(self.conv(x)), self.columns) for x in features], dim=1)


class _Head(nn.Module):
    def __init__(self, classification_head, regression_head):
        super(_Head, self).__init__()
        self.classification_head = classification_head
        self.regression_head = regression_head

    def forward(self, features):
        return self.classification_head(features), self.regression_head(features)


def retinanet_head(channels, anchors, num_classes, convs=RETINANET_CONVS, groups=None):
    classification = _Shared(channels, anchors * num_classes, num_classes, "cls_logits", convs, groups)
    nn.init.constant_(classification.cls_logits.bias, -math.log((1 - PRIOR_PROBABILITY) / PRIOR_PROBABILITY))
    return _Head(classification, _Shared(channels, anchors * 4, 4, "bbox_reg", convs, groups))


def ssd_head(channels, anchors, num_classes):
    def level_convs(columns):
        convs = nn.ModuleList([nn.Conv2d(c, a * columns, 3, padding=1) for c, a in zip(channels, anchors)])
        for conv in convs:
            nn.init.xavier_uniform_(conv.weight)
            nn.init.zeros_(conv.bias)
        return _PerLevel(convs, columns)
    return _Head(level_convs(num_classes), level_convs(4))


def ssdlite_head(channels, anchors, num_classes):
    def level_blocks(columns):
        blocks = nn.ModuleList([nn.Sequential(conv_bn_act(c, c, 3, groups=c), nn.Conv2d(c, a * columns, 1))
                                for c, a in zip(channels, anchors)])
        normal_init(blocks)
        return _PerLevel(blocks, columns)
    return _Head(level_blocks(num_classes), level_blocks(4))


def normal_init(module, std=0.03):
    """SSDlite's initialisation: every convolution's weights from N(0, std), biases 0."""
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.normal_(layer.weight, mean=0.0, std=std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
