import numpy as np


def mp_letterbox(rgb, size, low, high):
    """ImageToTensorCalculator (CPU/OpenCV converter), keep_aspect_ratio, BORDER_ZERO: warpPerspective of the
    square ROI centred on the image onto size x size, corner-aligned (dst pixel x samples src roi_left + x*L/size),
    bilinear, zeros outside; then pixels to [low, high]."""
    h, w = rgb.shape[:2]
    side = float(max(w, h))
    left, top = (w - side) / 2.0, (h - side) / 2.0
    step = side / size
    xs = left + np.arange(size) * step
    ys = top + np.arange(size) * step
    padded = np.zeros((h + 2, w + 2, 3), np.float32)
    padded[1:-1, 1:-1] = rgb
    x = np.clip(xs + 1, 0, w + 1)
    y = np.clip(ys + 1, 0, h + 1)
    x0 = np.clip(np.floor(x).astype(int), 0, w)
    y0 = np.clip(np.floor(y).astype(int), 0, h)
    fx = (x - x0)[None, :, None]
    fy = (y - y0)[:, None, None]
    a = padded[y0][:, x0]
    b = padded[y0][:, x0 + 1]
    c = padded[y0 + 1][:, x0]
    d = padded[y0 + 1][:, x0 + 1]
    out = (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy
    # image pixels outside the padded border are zero already (the ROI's zero border)
    pad_x = (side - w) / 2.0 / side
    pad_y = (side - h) / 2.0 / side
    tensor = out * ((high - low) / 255.0) + low
    return tensor.transpose(2, 0, 1)[None].astype(np.float32), (pad_x, pad_y)


def ssd_anchors(size, strides, min_scale=0.1484375, max_scale=0.75):
    """SsdAnchorsCalculator with aspect_ratios 1.0, fixed_anchor_size, interpolated scale ratio 1: per layer 2
    anchors (ratio 1 and the interpolated one), layers of one stride share a grid: centres only (w = h = 1)."""
    anchors, layer = [], 0
    while layer < len(strides):
        last, repeats = layer, 0
        while last < len(strides) and strides[last] == strides[layer]:
            last += 1
            repeats += 2
        cells = int(np.ceil(size / float(strides[layer])))
        for y in range(cells):
            for x in range(cells):
                anchors.extend([((x + 0.5) / cells, (y + 0.5) / cells)] * repeats)
        layer = last
    return np.array(anchors, dtype=np.float64)


def _iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def mp_decode(raw, logits, anchors, size, keypoints, score_min=0.5, clip=100.0, nms_iou=0.3):
    """TensorsToDetectionsCalculator (reverse_output_order: x y w h, scale = size, fixed anchors, sigmoid of
    logits clipped to +-clip, score >= score_min) + NonMaxSuppressionCalculator WEIGHTED (IoU > nms_iou
    candidates averaged with score weights, the top one's score kept). Normalized [0, 1] coordinates."""
    raw = np.asarray(raw, np.float64).reshape(len(anchors), -1)
    logit = np.clip(np.asarray(logits, np.float64).reshape(-1), -clip, clip)
    scores = 1.0 / (1.0 + np.exp(-logit))
    cx = raw[:, 0] / size + anchors[:, 0]
    cy = raw[:, 1] / size + anchors[:, 1]
    w = raw[:, 2] / size
    h = raw[:, 3] / size
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    kp = raw[:, 4:4 + 2 * keypoints].reshape(-1, keypoints, 2) / size + anchors[:, None, :]
    keep = np.nonzero((scores >= score_min) & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))[0]
    order = list(keep[np.argsort(-scores[keep], kind="stable")])
    out = []
    while order:
        top = order[0]
        similar = [i for i in order if _iou(boxes[i], boxes[top]) > nms_iou]
        rest = [i for i in order if _iou(boxes[i], boxes[top]) <= nms_iou]
        wts = scores[similar]
        box = (boxes[similar] * wts[:, None]).sum(0) / wts.sum()
        pts = (kp[similar] * wts[:, None, None]).sum(0) / wts.sum()
        out.append((box, pts, scores[top]))
        if len(rest) == len(order):
            break
        order = rest
    return out


def mp_detect(rgb, run, size, strides, keypoints, low, high):
    """Detections in the image's pixels: boxes [N, 4], scores [N], keypoints [N, K, 2] (letterbox removed)."""
    x, (pad_x, pad_y) = mp_letterbox(rgb, size, low, high)
    raw, logits = run(x)
    found = mp_decode(raw, logits, ssd_anchors(size, strides), size, keypoints)
    h, w = rgb.shape[:2]
    boxes, scores, marks = [], [], []
    for box, pts, score in found:
        box = (box - [pad_x, pad_y, pad_x, pad_y]) / ([1 - 2 * pad_x, 1 - 2 * pad_y] * 2) * ([w, h] * 2)
        pts = (pts - [pad_x, pad_y]) / [1 - 2 * pad_x, 1 - 2 * pad_y] * [w, h]
        boxes.append(box)
        scores.append(score)
        marks.append(pts)
    return (np.array(boxes).reshape(-1, 4), np.array(scores), np.array(marks).reshape(-1, keypoints, 2))
