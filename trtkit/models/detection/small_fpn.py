"""The sample detector's backbone (``retinanet_sample``): a small residual network with a 64-channel feature
pyramid, in the ResNet-FPN's layout (``backbone.body``, ``backbone.fpn``, P3-P7).

Why not ResNet18-FPN: on two CPU cores a training step of it at 128x128 takes about 4 s for 16 images, so the
few minutes the sample may take would be some forty steps from scratch (there are no pretrained weights to
start from). This network does the same job a tenth of the work: a stride-4 stem of two 3x3 convolutions, one
residual block per stage (strides 4, 8, 16, 32; ``WIDTHS`` channels), BatchNorm that trains (nothing here
starts from ImageNet statistics), and ``fpn.FeaturePyramid`` at ``CHANNELS`` on layer2..layer4 with P6/P7, so
the head, anchors and post-processing are RetinaNet's own.
"""

from torch import nn

from trtkit.models.detection.fpn import BackboneWithFPN, FeaturePyramid

WIDTHS = (32, 64, 128, 192)  # layer1..layer4
STEM = 16  # the first convolution's channels
CHANNELS = 64  # the pyramid's


def conv_bn_relu(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Residual(nn.Module):
    """``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))``, the shortcut a strided 1x1 convolution and
    BatchNorm when the shape changes (a ResNet basic block)."""

    def __init__(self, cin, cout, stride=1):
        super(Residual, self).__init__()
        self.conv1 = conv_bn_relu(cin, cout, stride)
        self.conv2 = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.conv2(self.conv1(x)) + self.shortcut(x))


def small_fpn():
    """The ``BackboneWithFPN`` of ``retinanet_sample``: maps at strides 8..128 of ``CHANNELS`` channels."""
    from trtkit.models.segmentation import intermediate_layers
    stem = nn.Sequential(conv_bn_relu(3, STEM, 2), conv_bn_relu(STEM, WIDTHS[0], 2))
    stages = [("stem", stem)]
    previous = WIDTHS[0]
    for index, width in enumerate(WIDTHS):
        stages.append(("layer{}".format(index + 1), Residual(previous, width, 1 if index == 0 else 2)))
        previous = width
    for module in nn.ModuleList([m for _, m in stages]).modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    body = intermediate_layers(stages, {"layer2": "0", "layer3": "1", "layer4": "2"})
    return BackboneWithFPN(body, FeaturePyramid(list(WIDTHS[1:]), CHANNELS))
