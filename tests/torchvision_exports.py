"""Real torchvision detection exports, made here: what a user's ``torch.onnx.export(retinanet)`` writes.

torchvision's compiled operators do not load beside this torch (``torchvision_source``), and its NMS is one of
them: a model's ``batched_nms`` calls ``torch.ops.torchvision.nms``, which the TorchScript exporter turns into
an ONNX ``NonMaxSuppression`` through the symbolic torchvision registers (``ops/_register_onnx_ops.py``). So
this helper defines ``torchvision::nms`` as a real custom operator (``torch.library``) whose CPU kernel is
``torchvision_source.reference_nms`` (plain PyTorch, deciding as the C++ kernel), points
``torchvision.ops.boxes.nms`` back at that operator (the source shim had replaced it by the plain function),
registers torchvision's own symbolic from the downloaded source, and exports with the TorchScript exporter
(``dynamo=False``) as torchvision's ``test/test_onnx.py`` does. The graph then holds what a user's export
holds: the transform (normalize, resize, pad), the network, and the whole post-processing (per-level score
filter and top-k, decoding of the kept candidates, ``batched_nms``'s class offsets, one NonMaxSuppression,
``[:detections_per_img]``, the resize back).

The input is one 4-D ``[1, 3, H, W]`` tensor of 0-1 RGB (torchvision's models iterate over it as over a list
of images), fixed in size; the model's own transform is sized so that its resize is the identity (RetinaNet:
``min_size = max_size`` = the side; the SSDs: their fixed 300 / 320).

Weights: random init shaped as ``test_detection_models.spread`` shapes them (scores spread, boxes of many sizes,
RetinaNet's per-level top-k truncating), measured on drawn shape-boxes images; nothing downloaded.
"""

import os

import numpy as np
import torch

import torchvision_source

SIZES = {"retinanet_resnet18_fpn": 256, "ssdlite320_mobilenet_v3_large": 320, "ssd300_vgg16": 300}
OPSET = 17
_LIBRARY = []  # the torch.library.Library defining torchvision::nms, kept alive once made


source = torchvision_source.for_tests  # torchvision's source for a test (skip where missing, fail under CI)


def _nms_kernel(boxes, scores, iou_threshold):
    return torchvision_source.reference_nms(boxes, scores, iou_threshold)


def register_nms(tv):
    """``torchvision::nms`` as a custom operator (CPU kernel: ``reference_nms``), its ONNX symbolic torchvision's
    own, and ``tv.ops.boxes.nms`` calling it, as torchvision's ``nms`` does once its C++ library is loaded."""
    import sys
    if not _LIBRARY:
        library = torch.library.Library("torchvision", "DEF")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.impl("nms", _nms_kernel, "CPU")
        _LIBRARY.append(library)
    __import__("torchvision.ops._register_onnx_ops")
    sys.modules["torchvision.ops._register_onnx_ops"]._register_custom_op()
    sys.modules["torchvision.ops.boxes"].nms = operator_nms


def operator_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision's ``ops.boxes.nms`` once its operators are loaded (annotated: its ``batched_nms`` is scripted
    when traced, and so is this)."""
    return torch.ops.torchvision.nms(boxes, scores, iou_threshold)


def drawn(count, size, seed):
    """(``count`` drawn shape-boxes images [N, H, W, 3] uint8, their 0-1 NCHW float tensor)."""
    from trtkit.data.shape_boxes import draw_shape_boxes
    images = draw_shape_boxes(count, size=size, seed=seed)[0]
    return images, torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0


def shaped_model(tv, name, num_classes, seed=2, min_size=None):
    """torchvision's ``name`` (random init, eval), its weights shaped on drawn images (``spread``) as
    ``test_detection_models`` shapes them, its transform's resize the identity at ``SIZES[name]`` (RetinaNet:
    to ``min_size`` instead when given)."""
    from test_detection_models import normalized, scattered, spread, torchvision_model
    from trtkit.models.detection import create_detection_model
    size = SIZES[name]
    torch.manual_seed(seed)  # torchvision's random init: the same model in every process
    theirs = torchvision_model(tv, name, num_classes, min_size=min_size or size).eval()
    if name.startswith("retinanet_"):
        theirs.transform.max_size = min_size or size
    ours = create_detection_model(name, num_classes=num_classes).eval()
    pixels = list(drawn(4, size, seed=100 + seed)[1])
    state = spread(ours, scattered(theirs, seed), normalized(ours, pixels))
    theirs.load_state_dict(state, strict=True)
    return theirs


def export(tv, name, folder, num_classes=7, seed=2, min_size=None):
    """(path of ``name``'s ONNX export at ``SIZES[name]``, the torchvision model) made in ``folder``."""
    register_nms(tv)
    model = shaped_model(tv, name, num_classes, seed, min_size)
    size = SIZES[name]
    path = os.path.join(str(folder), "{}.onnx".format(name))
    example = drawn(1, size, seed=7)[1]
    with torch.no_grad():
        torch.onnx.export(model, (example,), path, opset_version=OPSET, dynamo=False, do_constant_folding=True,
                          input_names=["images"], output_names=["boxes", "scores", "labels"])
    return path, model


def eager(model, batch):
    """torchvision's own detections of each image of ``batch`` (``[N, 3, H, W]`` 0-1): one dict per image."""
    with torch.no_grad():
        return [dict((k, v.numpy()) for k, v in model([image])[0].items()) for image in batch]


def graph_detections(path, batch):
    """The export's own detections (ONNX Runtime) of each image of ``batch``: one dict per image."""
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    found = []
    for image in np.asarray(batch, dtype=np.float32):
        boxes, scores, labels = session.run(None, {"images": image[None]})
        found.append({"boxes": boxes, "scores": scores, "labels": labels})
    return found
