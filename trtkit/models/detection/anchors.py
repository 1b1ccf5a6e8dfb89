"""Anchors: the reference boxes a detector's regressions are decoded against, as torchvision lays them out.

Both generators take the (padded) input size and each feature map's grid size and return ``([A, 4] anchors in
input pixels, x1 y1 x2 y2; anchors per level)``, ordered level by level, then row by row, then column by
column, then anchor by anchor at a location: the order the heads flatten their outputs in.

- ``GridAnchors`` is torchvision's ``AnchorGenerator`` (RetinaNet): per level, a set of sizes times aspect
  ratios (height / width) centred on the origin and rounded, shifted by the level's stride (input size // grid
  size, in whole pixels);
- ``DefaultBoxes`` is torchvision's ``DefaultBoxGenerator`` (SSD): per level a scale ``s_k`` (given, or spread
  evenly from ``min_ratio`` to ``max_ratio``), boxes ``s_k``, ``sqrt(s_k * s_k+1)`` and ``s_k * sqrt(r)`` by
  ``s_k / sqrt(r)`` (both ways) per aspect ratio ``r``, centred on the cells (``steps`` set the cell size in
  pixels when given), widths and heights clipped to the image as torchvision does.

Neither has parameters, so neither appears in a state_dict (torchvision's do not either).
"""

import math

import torch


def _stride(size, cells, device):
    """``size // cells`` as an int32 scalar tensor, an operation on the sizes when they are traced or symbolic
    (``torch.empty(...).fill_``, torchvision's way to keep it out of the constants), a plain division else."""
    if isinstance(size, int) and isinstance(cells, int):
        return size // cells
    return torch.empty((), dtype=torch.int64, device=device).fill_(size // cells).to(torch.int32)


class GridAnchors(object):
    def __init__(self, sizes, aspect_ratios):
        self.sizes = tuple(tuple(level) for level in sizes)
        self.aspect_ratios = tuple(tuple(level) for level in aspect_ratios)

    def num_anchors_per_location(self):
        return [len(s) * len(r) for s, r in zip(self.sizes, self.aspect_ratios)]

    def _cell(self, level):
        scales = torch.as_tensor(self.sizes[level], dtype=torch.float32)
        ratios = torch.as_tensor(self.aspect_ratios[level], dtype=torch.float32)
        tall = torch.sqrt(ratios)
        wide = 1 / tall
        widths = (wide[:, None] * scales[None, :]).reshape(-1)
        heights = (tall[:, None] * scales[None, :]).reshape(-1)
        return (torch.stack([-widths, -heights, widths, heights], dim=1) / 2).round()

    def __call__(self, image_size, grid_sizes, dtype=torch.float32, device=None):
        anchors, counts = [], []
        for level, (rows, columns) in enumerate(grid_sizes):
            # no int() of a size: under torch.onnx's exporters (TorchScript's tracer, torch.export's symbolic
            # sizes) int() bakes the export's size in as a constant, and an export with dynamic H and W would
            # give the export size's anchors at every size. Sizes stay sizes: arange, floor division and
            # broadcasting are recorded as graph operations of the feature maps' shapes (torchvision does the
            # same in its AnchorGenerator)
            stride_y = _stride(image_size[0], rows, device)
            stride_x = _stride(image_size[1], columns, device)
            xs = torch.arange(0, columns, dtype=torch.int32, device=device) * stride_x
            ys = torch.arange(0, rows, dtype=torch.int32, device=device) * stride_y
            xs, ys = xs.view(1, -1) + ys.view(-1, 1) * 0, ys.view(-1, 1) + xs.view(1, -1) * 0  # [rows, columns]
            xs, ys = xs.reshape(-1), ys.reshape(-1)
            shifts = torch.stack((xs, ys, xs, ys), dim=1)
            cell = self._cell(level).to(dtype=dtype, device=device)
            anchors.append((shifts.view(-1, 1, 4) + cell.view(1, -1, 4)).reshape(-1, 4))
            counts.append(anchors[-1].shape[0])
        return torch.cat(anchors), counts

    @staticmethod
    def follows_input_size():
        """Whether the anchors stay right at an input size other than the one trained at: yes, they are in
        pixels at each level's stride, as the features are (torchvision runs RetinaNet at any size)."""
        return True

    def __repr__(self):
        return "GridAnchors(sizes={}, aspect_ratios={})".format(self.sizes, self.aspect_ratios)


class DefaultBoxes(object):
    def __init__(self, aspect_ratios, min_ratio=0.15, max_ratio=0.9, scales=None, steps=None, clip=True):
        self.aspect_ratios = [list(level) for level in aspect_ratios]
        self.steps = list(steps) if steps is not None else None
        self.clip = clip
        levels = len(self.aspect_ratios)
        if scales is not None:
            self.scales = list(scales)
        elif levels > 1:
            self.scales = [min_ratio + (max_ratio - min_ratio) * k / (levels - 1.0) for k in range(levels)] + [1.0]
        else:
            self.scales = [min_ratio, max_ratio]
        self._sizes = [self._level_sizes(k) for k in range(levels)]

    def _level_sizes(self, k):
        scale = self.scales[k]
        between = math.sqrt(scale * self.scales[k + 1])
        pairs = [[scale, scale], [between, between]]
        for ratio in self.aspect_ratios[k]:
            root = math.sqrt(ratio)
            pairs += [[scale * root, scale / root], [scale / root, scale * root]]
        return torch.as_tensor(pairs, dtype=torch.float32)

    def num_anchors_per_location(self):
        return [2 + 2 * len(r) for r in self.aspect_ratios]

    FIXED_SIZE_REASON = ("SSD's default boxes are fractions of the input size (torchvision runs SSD300 and "
                         "SSDlite320 at one fixed size, and SSD300's steps of 8 to 300 px fit its grids at 300 "
                         "only), so at another size every box grows with the input while the features it is "
                         "decoded from do not")

    @staticmethod
    def follows_input_size():
        """No: see ``FIXED_SIZE_REASON``. A build at another fixed size (``--input-size``) stays possible."""
        return False

    def __call__(self, image_size, grid_sizes, dtype=torch.float32, device=None):
        height, width = int(image_size[0]), int(image_size[1])
        boxes, counts = [], []
        for k, (rows, columns) in enumerate(grid_sizes):
            rows, columns = int(rows), int(columns)
            if self.steps is not None:
                cells_x, cells_y = width / self.steps[k], height / self.steps[k]
            else:
                cells_x, cells_y = columns, rows
            xs = ((torch.arange(0, columns) + 0.5) / cells_x).to(dtype=dtype)
            ys = ((torch.arange(0, rows) + 0.5) / cells_y).to(dtype=dtype)
            sizes = self._sizes[k].clamp(min=0, max=1) if self.clip else self._sizes[k]
            centres = torch.stack((xs.repeat(rows), ys.repeat_interleave(columns)), dim=1)
            centres = centres.repeat_interleave(len(sizes), dim=0)
            boxes.append(torch.cat((centres, sizes.repeat(rows * columns, 1)), dim=1))
            counts.append(boxes[-1].shape[0])
        boxes = torch.cat(boxes) if device is None else torch.cat(boxes).to(device)
        scale = torch.tensor([width, height], device=boxes.device)
        corners = torch.cat([(boxes[:, :2] - 0.5 * boxes[:, 2:]) * scale, (boxes[:, :2] + 0.5 * boxes[:, 2:]) * scale],
                            -1)
        return corners, counts

    def __repr__(self):
        return "DefaultBoxes(aspect_ratios={}, scales={}, steps={}, clip={})".format(
            self.aspect_ratios, self.scales, self.steps, self.clip)
