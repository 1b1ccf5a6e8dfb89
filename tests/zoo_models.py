"""Small torch classifiers beyond ResNet for tests: a MobileNetV3-style network.

``mobilenet_v3_style(num_classes, in_channels, width)`` has what MobileNetV3
has that ResNet lacks: depthwise convolutions, hardswish, squeeze-excite
(AdaptiveAvgPool -> Conv -> ReLU -> Conv -> Hardsigmoid -> Mul) and inverted
residuals. It takes any input size (it ends in global pooling). Importable by
other tests: ``from zoo_models import mobilenet_v3_style``.
"""

import torch
from torch import nn


class SqueezeExcite(nn.Module):
    def __init__(self, channels, reduction=4):
        super(SqueezeExcite, self).__init__()
        hidden = max(8, channels // reduction)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        self.fc2 = nn.Conv2d(hidden, channels, 1)

    def forward(self, x):
        s = self.fc2(torch.relu(self.fc1(self.pool(x))))
        return x * nn.functional.hardsigmoid(s)


def _conv_bn(cin, cout, k, stride=1, groups=1, act=nn.Hardswish):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, expand, cout, k, stride, se, act):
        super(InvertedResidual, self).__init__()
        layers = [] if expand == cin else [_conv_bn(cin, expand, 1, act=act)]
        layers.append(_conv_bn(expand, expand, k, stride, groups=expand, act=act))  # depthwise
        if se:
            layers.append(SqueezeExcite(expand))
        layers.append(_conv_bn(expand, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3Style(nn.Module):
    # (kernel, expanded, out, squeeze-excite, activation, stride), MobileNetV3-Small's first blocks, narrowed
    BLOCKS = ((3, 16, 16, True, nn.ReLU, 2), (3, 48, 24, False, nn.ReLU, 2), (3, 56, 24, False, nn.ReLU, 1),
              (5, 64, 32, True, nn.Hardswish, 2), (5, 96, 32, True, nn.Hardswish, 1))

    def __init__(self, num_classes=10, in_channels=3, width=1.0):
        super(MobileNetV3Style, self).__init__()

        def w(c):
            return max(8, int(round(c * width / 8.0)) * 8)

        layers = [_conv_bn(in_channels, w(16), 3, 2)]
        cin = w(16)
        for k, expand, cout, se, act, stride in self.BLOCKS:
            layers.append(InvertedResidual(cin, w(expand), w(cout), k, stride, se, act))
            cin = w(cout)
        layers.append(_conv_bn(cin, w(96), 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(w(96), w(128)), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(w(128), num_classes))
        self.num_classes = num_classes

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def mobilenet_v3_style(num_classes=10, in_channels=3, width=1.0, seed=0):
    """A MobileNetV3-style classifier (depthwise, hardswish, squeeze-excite), seeded."""
    torch.manual_seed(seed)
    return MobileNetV3Style(num_classes, in_channels, width)


def train_briefly(model, images, labels, epochs=3, batch_size=64, lr=3e-3, seed=0):
    """A few epochs of Adam on numpy ``images`` (N, C, H, W) / ``labels``; returns the model in eval mode."""
    import numpy as np
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(np.asarray(labels, dtype=np.int64))
    model.train()
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(x)))
        for start in range(0, len(x), batch_size):
            index = order[start:start + batch_size]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            loss.backward()
            optimizer.step()
    return model.eval()
