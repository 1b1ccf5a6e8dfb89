"""One detector module for RetinaNet, SSD and SSDlite: ``backbone`` and ``head`` (the only parameters, under
torchvision's names), anchors, a box coder, a score activation and the post-processing parameters.

Input: a batch ``[N, 3, H, W]`` already normalized by the model's ``input_contract`` (torchvision's detectors
take a list of 0-1 images and resize and normalize them inside, in ``GeneralizedRCNNTransform``; trtkit's data
pipeline does that outside, as for every trtkit model). Like torchvision, a size that is not a multiple of
``size_divisible`` (32 for RetinaNet, 1 for SSD) is padded with zeros at the right and bottom, and boxes are
clipped to the unpadded size.

Outputs, in two stages:

- ``decoded(images)`` -> ``(boxes [N, A, 4], scores [N, A, C])``: every anchor's box in input pixels (x1 y1 x2
  y2, clipped to the image) and its class probabilities (sigmoid for RetinaNet, softmax over the classes for
  SSD, whose class 0 is the background). This is the network trtkit will export, calibrate and quantize;
  ``level_sizes(height, width)`` says how many of the A anchors each feature map holds (RetinaNet's
  candidates are chosen per level, so its ``postprocess`` requires them and raises without).
- ``forward(images)`` -> torchvision's eval-mode answer, one ``{"boxes", "scores", "labels"}`` per image:
  ``decoded`` then ``postprocess.postprocess`` with ``self.postprocessing`` (score threshold, top-k, batched
  NMS, detections per image), the part that can run on the host.

Training (the matcher and the losses) is in ``trtkit.training.detection``, on ``head_outputs``.
"""

import torch
from torch import nn
from torch.nn import functional

from trtkit.models.detection.boxes import clip_boxes
from trtkit.models.detection.postprocess import postprocess


class Detector(nn.Module):
    def __init__(self, backbone, head, anchors, box_coder, activation, postprocessing, size_divisible=1):
        super(Detector, self).__init__()
        self.backbone = backbone
        self.head = head
        self.anchor_generator = anchors
        self.box_coder = box_coder
        self.activation = activation  # "sigmoid" (one probability per class) or "softmax" (over the classes)
        self.postprocessing = postprocessing
        self.size_divisible = size_divisible

    def _padded(self, images):
        height, width = images.shape[-2:]
        step = self.size_divisible
        bottom, right = -height % step, -width % step
        if not isinstance(height, int) or not isinstance(width, int):
            # exporting with dynamic H and W (traced or symbolic sizes): pad always, by amounts the graph
            # computes (0 at a multiple); a Python ``if`` on them would fix the export size's choice (or make
            # torch.export specialize the size)
            return functional.pad(images, (0, right, 0, bottom)) if step > 1 else images
        return functional.pad(images, (0, right, 0, bottom)) if bottom or right else images

    def _raw(self, images):
        padded = self._padded(images)
        features = self.backbone(padded)
        logits, regressions = self.head(features)
        anchors, level_sizes = self.anchor_generator(padded.shape[-2:], [f.shape[-2:] for f in features],
                                                     dtype=features[0].dtype, device=features[0].device)
        return logits, regressions, anchors, level_sizes

    def head_outputs(self, images):
        """``(class logits [N, A, C], box regressions [N, A, 4], anchors [A, 4])`` of a normalized batch: what
        a training loss compares with its targets (``training.detection``), before decoding and activation."""
        logits, regressions, anchors, _ = self._raw(images)
        return logits, regressions, anchors

    def _decode(self, images):
        height, width = images.shape[-2:]
        logits, regressions, anchors, level_sizes = self._raw(images)
        boxes = clip_boxes(self.box_coder.decode(regressions, anchors), height, width)
        scores = torch.sigmoid(logits) if self.activation == "sigmoid" else functional.softmax(logits, dim=-1)
        return boxes, scores, level_sizes

    def decoded(self, images):
        """``(boxes [N, A, 4], scores [N, A, C])`` of a normalized batch: the network before post-processing."""
        boxes, scores, _ = self._decode(images)
        return boxes, scores

    def level_sizes(self, height, width):
        """Anchors per feature map for a ``height`` x ``width`` input (one backbone pass on zeros)."""
        parameter = next(self.parameters())
        with torch.no_grad():
            probe = self._padded(torch.zeros(1, 3, height, width, dtype=parameter.dtype, device=parameter.device))
            features = self.backbone(probe)
        return self.anchor_generator(probe.shape[-2:], [f.shape[-2:] for f in features])[1]

    def postprocess(self, boxes, scores, level_sizes=None):
        """torchvision's detections from ``decoded``'s outputs (``postprocess.postprocess``); RetinaNet needs
        ``level_sizes`` (``self.level_sizes(H, W)`` of the input's size) and raises ``InputError`` without."""
        return postprocess(boxes, scores, self.postprocessing, level_sizes,
                           background=0 if self.activation == "softmax" else None)

    def forward(self, images):
        boxes, scores, level_sizes = self._decode(images)
        return self.postprocess(boxes, scores, level_sizes)
