"""The SSD backbones in torchvision's layout: VGG16 for SSD300, MobileNetV3-Large for SSDlite320.

Each returns its feature maps as a list, highest resolution first (six of them), and says its channels in
``out_channels``.

- ``vgg16_extractor``: VGG16's convolutions up to conv4_3 (``features``, indices as in VGG16's ``features``,
  the third max-pool rounding up), conv4_3's map L2-normalised per location and scaled by the learned
  ``scale_weight`` (20 to start); then ``extra``: conv5 with the 3x3 stride-1 max-pool and the dilated fc6/fc7
  convolutions (``extra.0``, fc6/fc7 at ``extra.0.7``), and four blocks of 1x1 and 3x3 convolutions
  (``extra.1`` to ``extra.4``): maps of 512, 1024, 512, 256, 256 and 256 channels (38 to 1 at 300x300).
- ``mobilenet_extractor``: MobileNetV3-Large's ``features`` (``models.mobilenet``) split inside the last strided
  block: ``features.0`` runs up to that block's expansion convolution (672 channels, stride 16),
  ``features.1`` the rest (960, or 480 with ``reduced_tail``); then four ``extra`` blocks (1x1, depthwise 3x3
  stride 2, 1x1, BatchNorm and ReLU6 each) of 512, 256, 256 and 128 channels.
"""

import torch
from torch import nn
from torch.nn import functional

from trtkit.models.detection.heads import conv_bn_act, normal_init

VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
# (input, squeezed, output, kernel, stride, padding) of SSD300's extra blocks after fc7
VGG_EXTRA = ((1024, 256, 512, 3, 2, 1), (512, 128, 256, 3, 2, 1), (256, 128, 256, 3, 1, 0), (256, 128, 256, 3, 1, 0))
SSDLITE_EXTRA = (512, 256, 256, 128)
L2_SCALE = 20.0


def _vgg16_layers():
    layers, channels = [], 3
    for setting in VGG16_LAYERS:
        if setting == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(channels, setting, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            channels = setting
    return layers


def _xavier(module):
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    return module


class SSDFeatures(nn.Module):
    """``features`` then each of ``extra`` in turn, each one's map an output; with ``split``, each part of
    ``features`` gives a map. ``scale_weight`` (with ``l2_scale``) rescales the first map after L2-normalising
    it (SSD300's conv4_3)."""

    def __init__(self, features, extra, out_channels, l2_scale=False, split=False):
        super(SSDFeatures, self).__init__()
        if l2_scale:
            self.scale_weight = nn.Parameter(torch.ones(out_channels[0]) * L2_SCALE)
        self.features = features
        self.extra = extra
        self.out_channels = list(out_channels)
        self.split = split

    def forward(self, x):
        outputs = []
        for part in (self.features if self.split else [self.features]):
            x = part(x)
            outputs.append(x)
        if hasattr(self, "scale_weight"):
            outputs[0] = self.scale_weight.view(1, -1, 1, 1) * functional.normalize(x)
        for block in self.extra:
            x = block(x)
            outputs.append(x)
        return outputs


def vgg16_extractor():
    layers = _vgg16_layers()
    pools = [i for i, layer in enumerate(layers) if isinstance(layer, nn.MaxPool2d)]
    layers[pools[2]].ceil_mode = True
    fc = _xavier(nn.Sequential(
        nn.MaxPool2d(kernel_size=3, stride=1, padding=1), nn.Conv2d(512, 1024, kernel_size=3, padding=6, dilation=6),
        nn.ReLU(inplace=True), nn.Conv2d(1024, 1024, kernel_size=1), nn.ReLU(inplace=True)))
    extra = [_xavier(nn.Sequential(nn.Conv2d(cin, mid, kernel_size=1), nn.ReLU(inplace=True),
                                   nn.Conv2d(mid, cout, kernel_size=kernel, stride=stride, padding=padding),
                                   nn.ReLU(inplace=True)))
             for cin, mid, cout, kernel, stride, padding in VGG_EXTRA]
    extra.insert(0, nn.Sequential(*(layers[pools[3]:-1] + [fc])))  # conv5 (without pool5), then fc6/fc7
    channels = [512, 1024] + [setting[2] for setting in VGG_EXTRA]
    return SSDFeatures(nn.Sequential(*layers[:pools[3]]), nn.ModuleList(extra), channels, l2_scale=True)


def _extra_block(cin, cout):
    mid = cout // 2
    return nn.Sequential(conv_bn_act(cin, mid, 1), conv_bn_act(mid, mid, 3, stride=2, groups=mid),
                         conv_bn_act(mid, cout, 1))


def mobilenet_extractor(reduced_tail=False):
    from trtkit.models.mobilenet import large_blocks, large_features
    backbone = large_features(reduced_tail=reduced_tail)
    normal_init(nn.ModuleList(backbone))  # torchvision's SSDlite when not started from ImageNet weights
    for layer in nn.ModuleList(backbone).modules():
        if isinstance(layer, nn.BatchNorm2d):
            layer.momentum = 0.03  # SSDlite's norm layer (MobileNetV3's own uses 0.01)
    c4 = 1 + max(i for i, setting in enumerate(large_blocks(reduced_tail)) if setting[6] > 1)  # the last strided
    expand = backbone[c4].block[0]
    features = nn.Sequential(nn.Sequential(*(backbone[:c4] + [expand])),
                             nn.Sequential(backbone[c4].block[1:], *backbone[c4 + 1:]))
    channels = [expand.out_channels, backbone[-1].out_channels] + list(SSDLITE_EXTRA)
    extra, cin = [], channels[1]
    for cout in SSDLITE_EXTRA:
        extra.append(_extra_block(cin, cout))
        cin = cout
    extra = nn.ModuleList(extra)
    normal_init(extra)
    return SSDFeatures(features, extra, channels, split=True)
