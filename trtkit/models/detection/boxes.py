"""Box coding: regression outputs to boxes around anchors, as torchvision's ``BoxCoder`` decodes them.

A regression ``(dx, dy, dw, dh)`` against an anchor of centre ``(cx, cy)`` and size ``(w, h)`` is the box of
centre ``(cx + dx / wx * w, cy + dy / wy * h)`` and size ``(w * exp(dw / ww), h * exp(dh / wh))``, the size
terms clamped at ``log(1000 / 16)`` before ``exp``; ``(wx, wy, ww, wh)`` are the coder's weights (RetinaNet
1, 1, 1, 1; SSD 10, 10, 5, 5). The arithmetic is torchvision's, operation for operation, so decoded boxes
are the same floats. ``encode`` is the inverse (torchvision's ``encode_boxes``): the regression targets a
training loss compares the head's outputs with (``training.detection``).
"""

import math

import torch

SIZE_CLAMP = math.log(1000.0 / 16)


class BoxCoder(object):
    """Decodes (and encodes) ``[..., A, 4]`` regressions against ``[A, 4]`` anchors (x1 y1 x2 y2) with ``weights``."""

    def __init__(self, weights, size_clamp=SIZE_CLAMP):
        self.weights = tuple(float(w) for w in weights)
        self.size_clamp = size_clamp

    def encode(self, boxes, anchors):
        """The regressions ``[..., A, 4]`` that ``decode`` turns back into ``boxes`` ``[..., A, 4]`` around
        ``anchors`` ``[A, 4]`` (sizes within the clamp): ``wx * (x - cx) / w``, ..., ``ww * log(bw / w)``."""
        anchors = anchors.to(boxes.dtype)
        widths = anchors[:, 2] - anchors[:, 0]
        heights = anchors[:, 3] - anchors[:, 1]
        centre_x = anchors[:, 0] + 0.5 * widths
        centre_y = anchors[:, 1] + 0.5 * heights
        box_widths = boxes[..., 2] - boxes[..., 0]
        box_heights = boxes[..., 3] - boxes[..., 1]
        box_x = boxes[..., 0] + 0.5 * box_widths
        box_y = boxes[..., 1] + 0.5 * box_heights
        wx, wy, ww, wh = self.weights
        return torch.stack((wx * (box_x - centre_x) / widths, wy * (box_y - centre_y) / heights,
                            ww * torch.log(box_widths / widths), wh * torch.log(box_heights / heights)), dim=-1)

    def decode(self, codes, anchors):
        anchors = anchors.to(codes.dtype)
        widths = anchors[:, 2] - anchors[:, 0]
        heights = anchors[:, 3] - anchors[:, 1]
        centre_x = anchors[:, 0] + 0.5 * widths
        centre_y = anchors[:, 1] + 0.5 * heights
        wx, wy, ww, wh = self.weights
        dx = codes[..., 0] / wx
        dy = codes[..., 1] / wy
        dw = torch.clamp(codes[..., 2] / ww, max=self.size_clamp)
        dh = torch.clamp(codes[..., 3] / wh, max=self.size_clamp)
        x = dx * widths + centre_x
        y = dy * heights + centre_y
        half_w = 0.5 * (torch.exp(dw) * widths)
        half_h = 0.5 * (torch.exp(dh) * heights)
        return torch.stack((x - half_w, y - half_h, x + half_w, y + half_h), dim=-1)

    def __repr__(self):
        return "BoxCoder(weights={})".format(self.weights)


def clip_boxes(boxes, height, width):
    """``boxes`` ([..., 4], x1 y1 x2 y2) clamped into a ``height`` x ``width`` image. The sizes may be an
    export's traced or symbolic sizes (dynamic H and W): then the bound is a graph value, never ``int()`` of
    the export's size."""
    if isinstance(height, int) and isinstance(width, int):
        x = boxes[..., 0::2].clamp(min=0, max=width)
        y = boxes[..., 1::2].clamp(min=0, max=height)
    else:
        x = torch.minimum(boxes[..., 0::2].clamp(min=0), _bound(width, boxes))
        y = torch.minimum(boxes[..., 1::2].clamp(min=0), _bound(height, boxes))
    return torch.stack((x, y), dim=-1).flatten(-2)  # [..., 2, 2] -> x1 y1 x2 y2 (no traced shape: 4 stays 4)


def _bound(size, like):
    """A size (a traced 0-dim tensor or a symbolic int) as a scalar tensor of ``like``'s dtype."""
    if isinstance(size, torch.Tensor):
        return size.to(dtype=like.dtype, device=like.device)
    return torch.empty((), dtype=like.dtype, device=like.device).fill_(size)
