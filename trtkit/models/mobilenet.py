"""MobileNetV3-Large's feature extractor with torchvision's exact module layout (``features``: the first
convolution, 15 inverted residual blocks, the last 1x1 convolution to 960 channels).

It is the backbone of LRASPP (``models.segmentation``), the segmentation model a Jetson user deploys when
FCN/DeepLabV3 are too slow. Why not torchvision itself: it does not import everywhere trtkit runs (see
``models.classifiers``). Names and shapes follow torchvision (``N.0`` convolution, ``N.1`` BatchNorm with
eps 0.001; ``block.K`` inside a residual block; squeeze-excitation ``fc1``/``fc2``), so its checkpoints load
with ``strict=True``; ``dilated=True`` trades the last stage's stride for dilation 2, as torchvision does for
segmentation (output stride 16); ``reduced_tail=True`` halves the channels of the last stage (torchvision's
``reduced_tail``, what its SSDlite uses when it is not started from an ImageNet backbone).
"""

from trtkit.deps import require

# (input, kernel, expanded, output, squeeze-excitation, hardswish, stride): MobileNetV3-Large's blocks
LARGE_BLOCKS = (
    (16, 3, 16, 16, False, False, 1), (16, 3, 64, 24, False, False, 2), (24, 3, 72, 24, False, False, 1),
    (24, 5, 72, 40, True, False, 2), (40, 5, 120, 40, True, False, 1), (40, 5, 120, 40, True, False, 1),
    (40, 3, 240, 80, False, True, 2), (80, 3, 200, 80, False, True, 1), (80, 3, 184, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1), (80, 3, 480, 112, True, True, 1), (112, 3, 672, 112, True, True, 1),
    (112, 5, 672, 160, True, True, 2), (160, 5, 960, 160, True, True, 1), (160, 5, 960, 160, True, True, 1),
)
DILATED_FROM = 12  # the last stage (C4 onwards) is dilated instead of strided for segmentation
REDUCED_FROM = 12  # reduced_tail: the C4 block's output and the two blocks after it at half width
LOW_FEATURE = 4  # the features index of the output-stride-8 map LRASPP reads (40 channels)
LAST_CHANNELS = 960


def _divisible(value, divisor=8):
    """torchvision's ``_make_divisible``: round to a multiple of 8, never below 90% of ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _build_classes():
    torch = require("torch", "building MobileNetV3")
    nn = torch.nn
    functional = torch.nn.functional

    def norm(channels):
        return nn.BatchNorm2d(channels, eps=0.001, momentum=0.01)

    class ConvNormActivation(nn.Sequential):
        def __init__(self, cin, cout, kernel, stride=1, groups=1, dilation=1, activation=None):
            layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2 * dilation, dilation=dilation,
                                groups=groups, bias=False), norm(cout)]
            if activation is not None:
                layers.append(activation())
            super(ConvNormActivation, self).__init__(*layers)
            self.out_channels = cout

    class SqueezeExcitation(nn.Module):
        def __init__(self, channels):
            super(SqueezeExcitation, self).__init__()
            squeezed = _divisible(channels // 4)
            self.fc1 = nn.Conv2d(channels, squeezed, 1)
            self.fc2 = nn.Conv2d(squeezed, channels, 1)

        def forward(self, x):
            scale = functional.adaptive_avg_pool2d(x, 1)
            scale = functional.hardsigmoid(self.fc2(functional.relu(self.fc1(scale))))
            return scale * x

    class InvertedResidual(nn.Module):
        def __init__(self, cin, kernel, expanded, cout, use_se, hardswish, stride, dilation):
            super(InvertedResidual, self).__init__()
            activation = nn.Hardswish if hardswish else nn.ReLU
            layers = []
            if expanded != cin:
                layers.append(ConvNormActivation(cin, expanded, 1, activation=activation))
            layers.append(ConvNormActivation(expanded, expanded, kernel, stride=1 if dilation > 1 else stride,
                                             groups=expanded, dilation=dilation, activation=activation))
            if use_se:
                layers.append(SqueezeExcitation(expanded))
            layers.append(ConvNormActivation(expanded, cout, 1))
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout
            self.out_channels = cout

        def forward(self, x):
            result = self.block(x)
            return result + x if self.residual else result

    def features(dilated, reduced_tail):
        layers = [ConvNormActivation(3, 16, 3, stride=2, activation=nn.Hardswish)]
        blocks = large_blocks(reduced_tail)
        for index, setting in enumerate(blocks):
            dilation = 2 if dilated and index >= DILATED_FROM else 1
            layers.append(InvertedResidual(*(setting + (dilation,))))
        last = blocks[-1][3]
        layers.append(ConvNormActivation(last, 6 * last, 1, activation=nn.Hardswish))  # 960, or 480 reduced
        return layers

    return {"features": features}


_CLASSES = {}


def large_blocks(reduced_tail=False):
    """``LARGE_BLOCKS``, or with ``reduced_tail`` the last stage at half width as torchvision's: the C4 block's
    output halved, then the two blocks after it halved throughout."""
    if not reduced_tail:
        return LARGE_BLOCKS
    first = LARGE_BLOCKS[REDUCED_FROM]
    reduced = [first[:3] + (first[3] // 2,) + first[4:]]
    reduced += [(block[0] // 2, block[1], block[2] // 2, block[3] // 2) + block[4:]
                for block in LARGE_BLOCKS[REDUCED_FROM + 1:]]
    return LARGE_BLOCKS[:REDUCED_FROM] + tuple(reduced)


def large_features(dilated=False, reduced_tail=False):
    """MobileNetV3-Large's ``features`` modules in order (17 of them), initialised as torchvision does."""
    if not _CLASSES:
        _CLASSES.update(_build_classes())
    torch = require("torch", "building MobileNetV3")
    modules = _CLASSES["features"](dilated, reduced_tail)
    for module in modules:
        for layer in module.modules():
            if isinstance(layer, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(layer.weight, mode="fan_out")
                if layer.bias is not None:
                    torch.nn.init.zeros_(layer.bias)
    return modules
