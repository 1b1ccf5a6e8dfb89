"""A detector as trtkit exports it: the network up to ``decoded`` (``trtkit.detect.raw``), and its head record.

``deployable(model)`` wraps a ``Detector`` so that ``forward`` returns the one ``decoded`` tensor
``[N, A, 4 + C]`` (boxes, then class probabilities): that is what is exported, calibrated, quantized and
verified, and the selection after it (candidates, NMS) is described by ``detection_head(model)``, recorded in
the manifest and run by the backend or the host (``trtkit.detect``).
"""

import torch
from torch import nn

from trtkit.detect.params import DetectionHead
from trtkit.detect.raw import OUTPUT_NAME


class DecodedDetector(nn.Module):
    """``model.decoded`` as one tensor: ``cat([boxes, scores], -1)``. Carries the model's trtkit attributes."""

    def __init__(self, model):
        super(DecodedDetector, self).__init__()
        self.detector = model
        for name in ("trtkit_name", "num_classes", "input_contract", "detection_options", "trtkit_meta"):
            if hasattr(model, name):
                setattr(self, name, getattr(model, name))
        self.detection_head = detection_head(model)
        self.task = "detection"  # what pipeline.source records (tasks.DETECTION's name)
        self.output_name = OUTPUT_NAME  # the exported output's name (onnx.export.output_name)
        # with dynamic H and W, torch.export (torch 2.13) specializes the size anyway: the 1x1 top level of a
        # RetinaNet at its input size puts a size-1 guard on the sizes (a contiguity check), so the export comes
        # out fixed; the TorchScript exporter keeps the sizes as graph values (onnx.export reads this)
        self.image_sizes_exporter = "torchscript"
        self.train(model.training)  # a new module trains by default: an exporter that restores the mode would
        # otherwise put an eval() model's BatchNorms in training mode afterwards

    def forward(self, images):
        boxes, scores = self.detector.decoded(images)
        decoded = torch.cat([boxes, scores], dim=-1)
        # the columns said as a number: the traced sizes' padding and clipping leave the exporter's shape
        # inference without them, and readers of the ONNX (append_nms, the app) check 4 + C
        return decoded.reshape(decoded.shape[0], decoded.shape[1], 4 + self.detection_head.num_classes)

    def fixed_size_reason(self):
        """Why this detector cannot be built for several image sizes (``--image-sizes``), or None: its anchors
        say whether they stay right at another input size (``anchors.GridAnchors.follows_input_size``)."""
        generator = self.detector.anchor_generator
        if generator.follows_input_size():
            return None
        return generator.FIXED_SIZE_REASON


def deployable(model):
    """What trtkit exports of a detector: ``DecodedDetector(model)`` (a wrapped one passes through)."""
    return model if isinstance(model, DecodedDetector) else DecodedDetector(model)


def _levels(model):
    """(stride, anchors per location) per feature map, read from one pass at 512 x 512 and checked
    against the model's own ``level_sizes`` at a second size (so a backbone whose grids do not follow the
    rounding rule is refused here, not mis-split later)."""
    generator = model.anchor_generator
    if not hasattr(generator, "num_anchors_per_location"):
        return None
    probe_size = 512  # a multiple of every stride up to 512, so each grid is the size divided by its stride
    parameter = next(model.parameters())
    with torch.no_grad():
        features = model.backbone(torch.zeros(1, 3, probe_size, probe_size, dtype=parameter.dtype,
                                              device=parameter.device))
    strides = [probe_size // int(f.shape[-2]) for f in features]
    return list(zip(strides, generator.num_anchors_per_location()))


def detection_head(model):
    """The ``DetectionHead`` of a ``models.detection`` ``Detector``: classes, background (0 for the softmax
    SSDs), post-processing, levels for per-level candidates, padding multiple."""
    post = model.postprocessing
    levels = _levels(model) if post.per_level else None
    head = DetectionHead(model.num_classes, post, background=0 if model.activation == "softmax" else None,
                         levels=levels, size_divisible=model.size_divisible)
    if levels:
        for height, width in ((96, 160), (200, 130)):
            expected = [int(n) for n in model.level_sizes(height, width)]
            if head.level_sizes(height, width) != expected:
                raise ValueError("the levels' grids of {} do not follow strides {}: {} vs {} at {}x{}".format(
                    type(model.backbone).__name__, levels, head.level_sizes(height, width), expected, height, width))
    return head
