"""RetinaNet's backbone in torchvision's layout: a ResNet ``body`` with a feature pyramid ``fpn`` on top.

- ``body``: trtkit's ResNet (``models.classifiers``) up to layer4 (torchvision's ``IntermediateLayerGetter``,
  ``models.segmentation.intermediate_layers``), returning layer2, layer3 and layer4 (strides 8, 16, 32);
  its BatchNorms are frozen by default (``FrozenBatchNorm2d``: the statistics and affine terms as buffers, no
  ``num_batches_tracked``), as torchvision builds RetinaNet whenever its backbone starts from ImageNet weights,
  the way every published RetinaNet checkpoint was made;
- ``fpn``: 1x1 lateral convolutions (``inner_blocks.K.0``), nearest-neighbour top-down sums and 3x3 output
  convolutions (``layer_blocks.K.0``) to 256 channels, then ``extra_blocks`` P6 (a stride-2 3x3 convolution
  of P5, as torchvision's ``LastLevelP6P7(256, 256)`` for RetinaNet v1) and P7 (the same on ReLU(P6)).

``FrozenBatchNorm2d`` computes ``x * scale + shift`` with ``scale = weight * rsqrt(var + eps)``, torchvision's
arithmetic, and drops a checkpoint's ``num_batches_tracked`` on load, so BatchNorm checkpoints load into it
strictly too. torchvision sets its eps to 0 when it loads its own COCO RetinaNet weights (``bn_eps=0.0``).
"""

import torch
from torch import nn
from torch.nn import functional

FPN_CHANNELS = 256
RETURNED_LAYERS = (2, 3, 4)


class FrozenBatchNorm2d(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super(FrozenBatchNorm2d, self).__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(channels))
        self.register_buffer("bias", torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def _load_from_state_dict(self, state_dict, prefix, *args):
        state_dict.pop(prefix + "num_batches_tracked", None)
        super(FrozenBatchNorm2d, self)._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, x):
        scale = self.weight.reshape(1, -1, 1, 1) * (self.running_var.reshape(1, -1, 1, 1) + self.eps).rsqrt()
        shift = self.bias.reshape(1, -1, 1, 1) - self.running_mean.reshape(1, -1, 1, 1) * scale
        return x * scale + shift

    def extra_repr(self):
        return "{}, eps={}".format(self.weight.shape[0], self.eps)


def freeze_batch_norm(module, eps=None):
    """``module`` with every ``BatchNorm2d`` replaced by a ``FrozenBatchNorm2d`` holding its values (``eps``:
    the norms' own unless given)."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            frozen = FrozenBatchNorm2d(child.num_features, child.eps if eps is None else eps)
            for key in ("weight", "bias", "running_mean", "running_var"):
                getattr(frozen, key).copy_(getattr(child, key).detach())
            setattr(module, name, frozen)
        else:
            freeze_batch_norm(child, eps)
    return module


class LastLevelP6P7(nn.Module):
    def __init__(self, channels):
        super(LastLevelP6P7, self).__init__()
        self.p6 = nn.Conv2d(channels, channels, 3, 2, 1)
        self.p7 = nn.Conv2d(channels, channels, 3, 2, 1)
        for conv in (self.p6, self.p7):
            nn.init.kaiming_uniform_(conv.weight, a=1)
            nn.init.zeros_(conv.bias)

    def forward(self, pyramid):
        p6 = self.p6(pyramid[-1])
        return pyramid + [p6, self.p7(functional.relu(p6))]


class FeaturePyramid(nn.Module):
    _version = 2

    def __init__(self, in_channels, channels=FPN_CHANNELS):
        super(FeaturePyramid, self).__init__()
        self.inner_blocks = nn.ModuleList([nn.Sequential(nn.Conv2d(c, channels, 1)) for c in in_channels])
        self.layer_blocks = nn.ModuleList([nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1))
                                           for _ in in_channels])
        for layer in self.modules():
            if isinstance(layer, nn.Conv2d):
                nn.init.kaiming_uniform_(layer.weight, a=1)
                nn.init.zeros_(layer.bias)
        self.extra_blocks = LastLevelP6P7(channels)

    def _load_from_state_dict(self, state_dict, prefix, metadata, *args):
        if (metadata or {}).get("version") is None or metadata["version"] < 2:
            for block in ("inner_blocks", "layer_blocks"):  # version 1: plain convolutions, no Sequential
                for index in range(len(self.inner_blocks)):
                    for kind in ("weight", "bias"):
                        old = "{}{}.{}.{}".format(prefix, block, index, kind)
                        if old in state_dict:
                            state_dict["{}{}.{}.0.{}".format(prefix, block, index, kind)] = state_dict.pop(old)
        super(FeaturePyramid, self)._load_from_state_dict(state_dict, prefix, metadata, *args)

    def forward(self, features):
        top = self.inner_blocks[-1](features[-1])
        pyramid = [self.layer_blocks[-1](top)]
        for index in range(len(features) - 2, -1, -1):
            lateral = self.inner_blocks[index](features[index])
            top = lateral + functional.interpolate(top, size=lateral.shape[-2:], mode="nearest")
            pyramid.insert(0, self.layer_blocks[index](top))
        return self.extra_blocks(pyramid)


class BackboneWithFPN(nn.Module):
    def __init__(self, body, fpn):
        super(BackboneWithFPN, self).__init__()
        self.body = body
        self.fpn = fpn
        self.out_channels = fpn.layer_blocks[0][0].out_channels  # FPN_CHANNELS but for the sample's small one

    def forward(self, x):
        return self.fpn(list(self.body(x).values()))


def resnet_fpn(name, frozen_bn=True, bn_eps=None):
    """The ResNet ``name`` (``models.classifiers.ARCHITECTURES``) with an FPN and P6/P7, as torchvision's
    ``_resnet_fpn_extractor(resnet, returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))``."""
    from trtkit.models.classifiers import resnet
    from trtkit.models.segmentation import BACKBONE_PARTS, intermediate_layers
    trunk = resnet(name)
    if frozen_bn:
        freeze_batch_norm(trunk, bn_eps)
    body = intermediate_layers([(part, getattr(trunk, part)) for part in BACKBONE_PARTS],
                               {"layer{}".format(k): str(i) for i, k in enumerate(RETURNED_LAYERS)})
    widest = trunk.fc.in_features  # layer4's channels: 512 (basic blocks) or 2048 (bottlenecks)
    in_channels = [widest // 2 ** (4 - k) for k in RETURNED_LAYERS]
    return BackboneWithFPN(body, FeaturePyramid(in_channels))
