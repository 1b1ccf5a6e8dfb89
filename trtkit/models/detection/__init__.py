"""Object detectors with torchvision's exact module layout: SSD300-VGG16, SSDlite320-MobileNetV3-Large,
RetinaNet-ResNet50-FPN and a RetinaNet on a ResNet18-FPN; and trtkit's own ``retinanet_sample``, RetinaNet's head
on a small ResNet-FPN (``small_fpn``), the sample detector that trains from scratch in minutes on a CPU.

The designs, parameter names and numbers follow torchvision's detection models (``torchvision.models.detection``,
BSD-3-Clause, Copyright (c) Soumith Chintala 2016 and the torchvision contributors); the code here is trtkit's
own, written to the same layout. Why not torchvision itself: it does not import everywhere trtkit runs (see
``models.classifiers``), and its NMS is a compiled operator. Because the names and shapes are torchvision's, a
torchvision detection checkpoint loads with ``strict=True``, and the same anchors, box coder, score activation
and post-processing parameters give the same detections (``tests/test_detection_models.py`` runs torchvision's
own source beside these).

The modules, one job each:

- ``registry``: the architectures by name, their torchvision parameters, ``create_detection_model`` and
  ``infer_detection_layout`` (imports without torch; what the rest of trtkit imports);
- ``fpn`` (RetinaNet's ResNet-FPN, frozen BatchNorm), ``small_fpn`` (the sample's), ``ssd_backbones`` (VGG16,
  MobileNetV3), ``heads``;
- ``anchors``, ``boxes`` (box coding), ``nms`` (plain-PyTorch NMS deciding as torchvision's),
  ``postprocess`` (candidates, NMS, detections per image);
- ``detector``: the module: ``decoded(images)`` -> (boxes ``[N, A, 4]``, scores ``[N, A, C]``), the network to
  export; ``forward(images)`` -> torchvision's list of ``{"boxes", "scores", "labels"}``;
- ``build``: assembling one from its parts.
"""

from trtkit.models.detection.checkpoint import load_detection_model  # noqa: F401
from trtkit.models.detection.registry import (DEFAULT_CLASSES, DETECTION_ARCHITECTURES, create_detection_model,  # noqa
                                              infer_detection_layout, is_detection_name, model_names)
