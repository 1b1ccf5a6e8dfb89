"""Detections on the host: what a detector's exported network answers, and everything done with it after.

The exported network of every detector ends at one tensor, ``decoded`` ``[N, A, 4 + C]`` (``raw``): every
anchor's box in the model input's pixels (x1 y1 x2 y2) and its C class probabilities (after the sigmoid or
softmax). What turns that into detections (candidates, NMS, detections per image) is described by a
``params.DetectionHead`` recorded in the manifest, and runs where the backend can run it: in the graph (ONNX
NonMaxSuppression, ``onnx_nms``) or on the host (``select``, numpy, the reference every backend is compared
with). Modules, one job each:

- ``params``: ``PostProcessing`` (torchvision's selection parameters) and ``DetectionHead`` (what the host
  needs: classes, background, levels, post-processing), as the manifest records them;
- ``raw``: the ``decoded`` tensor's layout (split into boxes and scores);
- ``records``: ``Detections``, one image's answer (boxes, scores, labels);
- ``select``: the host post-processing in numpy (candidates, NMS, best per image), as torchvision selects;
- ``onnx_nms``: the same selection appended to an ONNX graph, for runtimes that run NonMaxSuppression;
- ``metrics``: ``CocoMap``, COCO's mAP against boxes, computed by a maintained evaluator (faster-coco-eval or
  pycocotools, imported when the result is asked for);
- ``agreement``: ``DetectionAgreement``, a variant's detections against FP32's (matched F1, IoU, score shift),
  for verification without labels.

Only numpy is imported here (``import trtkit`` stays light); torch is never needed.
"""
