"""Where a detector's NMS runs in a build, per backend, and the check that the graph's selection is the host's.

Variants are made of the network up to ``decoded`` (what is calibrated and quantized); the selection is placed
after, per backend (``Backend.nms_placement``): in the graph where the runtime runs ONNX ``NonMaxSuppression``
(ONNX Runtime, OpenVINO, TensorRT from 8.5), appended to each variant with ``decoded`` kept as its first
output; on the host elsewhere (TensorRT 8.2, TensorRT-RTX, PyTorch). Verification always judges ``decoded`` with
the host's selection (``detect.select``, the reference), so every backend is judged alike; where the graph
selects, ``check_graph_nms`` compares its detections with the host's on the same run, and the manifest records
both the placement and that comparison.
"""

import os

import numpy as np

from trtkit import log


def place_nms(backend, onnx_path, head, path):
    """(the ONNX to build for ``backend``, the manifest's ``nms`` record): ``onnx_path`` itself when the host
    selects, else a copy with ``detect.onnx_nms`` appended (``decoded`` kept first) written to ``path``."""
    from trtkit.detect.host_decoder import is_host
    where, why = backend.nms_placement()
    if is_host(head):  # the graph ends before decoding: its decoder, and so NMS, run on the host
        where, why = "host", "the decoder is a Python function ({}), run on the host after the network".format(
            head.decoder["params"]["function"])
    elif head.landmarks and where == "graph":  # the graph's selection answers boxes, not the kept anchors
        where, why = "host", "each detection's {} landmarks are taken from the anchor it came from, on the " \
                             "host".format(head.landmarks)
    record = {"placement": where, "reason": why, "postprocessing": head.postprocessing.to_dict()}
    if where != "graph":
        if (head.decoder or {}).get("family") == "nms":  # the user's graph had its NMS inside: say where it went
            log.info("{}: the graph's NonMaxSuppression (cut off before the network was built) runs on the host "
                     "({})".format(os.path.basename(onnx_path), why))
        return onnx_path, record
    import onnx

    from trtkit.detect.onnx_nms import append_nms
    from trtkit.fileio import atomic_path
    model = append_nms(onnx.load(onnx_path), head, equal_suppresses=backend.nms_equal_suppresses,
                       keep_decoded=True)
    with atomic_path(path) as tmp:
        onnx.save(model, tmp)
    record["onnx"] = os.path.basename(path)
    return path, record


def check_graph_nms(runner, images, head, contract):
    """How the graph's own detections (``det_*`` outputs) compare with the host's selection of its ``decoded``
    on ``images`` (one batch the runner takes): {"images", "identical_images", "max_box_diff", "max_score_diff"}; None when the artifact
    has no ``det_*`` outputs. An image is identical when it keeps the same number of detections with the same
    labels, boxes within 1e-3 px and scores within 1e-5, in one order (by score, then label and box: equal
    scores, common in FP16 and INT8 variants, come out of the two in different orders). Where tied boxes
    overlap, the two can keep different ones: the ``detect.onnx_nms`` docstring says where they can differ."""
    from trtkit.detect.onnx_nms import graph_detections, selects_in_graph
    from trtkit.detect.raw import OUTPUT_NAME
    from trtkit.detect.select import select_decoded
    if not selects_in_graph(spec.name for spec in runner.outputs()):
        return None
    chunk = images[:runner.accepted_batch(len(images))]
    outputs = runner.infer_all(chunk)
    host = select_decoded(np.asarray(outputs[OUTPUT_NAME], np.float32), head, contract.height, contract.width)
    identical, box_diff, score_diff, count = 0, 0.0, 0.0, 0
    for found, expected in zip(graph_detections(outputs), host):
        graph, mine = _canonical(found), _canonical(expected)
        same = len(found) == len(expected) and np.array_equal(graph[2], mine[2])
        if same and len(found):
            boxes, scores = float(np.abs(graph[0] - mine[0]).max()), float(np.abs(graph[1] - mine[1]).max())
            box_diff, score_diff = max(box_diff, boxes), max(score_diff, scores)
            same = boxes <= 1e-3 and scores <= 1e-5
        identical += int(same)
        count += 1
    result = {"images": count, "identical_images": identical, "max_box_diff": box_diff,
              "max_score_diff": score_diff}
    if identical < count:
        log.warn("the graph's NMS differs from the host's selection on {} of {} images (ties or an IoU at the "
                 "threshold; docs/detection.md)".format(count - identical, count))
    return result


def _canonical(found):
    """A ``Detections``' (boxes, scores, labels) in one order: score descending, then label, then box corners."""
    boxes, scores, labels = found.boxes, found.scores, found.labels
    order = np.lexsort((boxes[:, 3], boxes[:, 2], boxes[:, 1], boxes[:, 0], labels, -scores))
    return boxes[order], scores[order], labels[order]
