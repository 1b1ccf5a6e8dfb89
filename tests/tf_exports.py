"""Regenerates ``tests/fixtures/tf_*.onnx``: a small Keras detector (NHWC input, seeded random weights, an
SSD-like anchor head whose box deltas are decoded against anchors as TensorFlow's Object Detection API's
``FasterRcnnBoxCoder`` does, sigmoid class scores) ending in TensorFlow's own selection as TF users write it,
saved as a SavedModel and converted by tf2onnx's command line as they run it:

- ``combined``: ``tf.image.combined_non_max_suppression`` (the OD API's and EfficientDet's exports): per class,
  ``max_total_size`` padded rows and ``valid_detections``; ``combined_clip`` with its default ``clip_boxes``
  (the boxes clipped to 0-1 after the selection);
- ``combined_perclass``: the same with ``max_output_size_per_class`` 4 below ``max_total_size`` 20 (a class
  keeps at most 4 of an image's 20 detections);
- ``nms``: ``tf.image.non_max_suppression`` of one image on each box's best class score (class-agnostic);
- ``padded``: ``tf.image.non_max_suppression_padded`` (``pad_to_max_output_size``) likewise; ``padded_batch``
  the same on a batch (``[N, A, 4]`` boxes, ``[N, A]`` best scores; the kept gathered with ``batch_dims`` 1);
  ``padded_clip`` one image's, returning the kept of the boxes clipped to 0-1 (a second ``[N, A, 4]`` tensor);
- ``topk``: no NMS, the best K (box, class) pairs by score (CenterNet/DETR-style): ``tf.math.top_k`` over
  one image's flattened scores, then a gather of their boxes; ``topk_batch`` the same per image of a batch
  (``tf.gather(..., batch_dims=1)``: a GatherND); ``topk_classmajor`` the same on scores transposed to
  ``[N, C, A]`` before flattening (class-major: ``index // A`` the class, ``index % A`` the anchor, as a
  CenterNet-style heatmap's channels are flattened);
- ``resize``: the image at any size, uint8, stretched to 64x64 inside (``tf.image.resize``) as the Object
  Detection API's exports take it, then ``combined_non_max_suppression``; ``resize_pixels`` a float image at any
  size resized likewise, its boxes in the image's pixels, then ``non_max_suppression``.

Needs TensorFlow and tf2onnx (not trtkit's dependencies, so the tests only read the files this writes)::

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.15.1 tf2onnx==1.16.1 "numpy<2"
    /tmp/tfvenv/bin/python tests/tf_exports.py [--opset 13] [--out tests/fixtures]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

SIZE = 64
CLASSES = 3
CELLS = 8  # stride 8
ANCHORS_PER_CELL = 2
SCALES = (10.0, 10.0, 5.0, 5.0)  # FasterRcnnBoxCoder's y, x, h, w scale factors
MAX_PER_CLASS, MAX_TOTAL, IOU, SCORE = 20, 20, 0.5, 0.3
PERCLASS_CAP = 4  # combined_perclass's max_output_size_per_class, below MAX_TOTAL
TOP_K = 20
KINDS = ("combined", "combined_clip", "combined_perclass", "nms", "padded", "padded_batch", "padded_clip", "topk",
         "topk_batch", "topk_classmajor", "resize", "resize_pixels")


def anchors():
    """[A, 4] y1 x1 y2 x2 fractions: per cell of the 8x8 grid a square and a wide box, centred on the cell."""
    rows = []
    for y in range(CELLS):
        for x in range(CELLS):
            cy, cx = (y + 0.5) / CELLS, (x + 0.5) / CELLS
            for h, w in ((0.25, 0.25), (0.2, 0.4)):
                rows.append([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2])
    return np.array(rows, np.float32)


def network(tf):
    """The Keras body and head: image [N, 64, 64, 3] in, (boxes [N, A, 4] y1 x1 y2 x2 fractions, scores
    [N, A, C] sigmoid) out."""
    tf.keras.utils.set_random_seed(0)
    image = tf.keras.Input((SIZE, SIZE, 3), name="image")
    x = image
    for filters in (8, 16, 16):
        x = tf.keras.layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(x)
    local = x - tf.reduce_mean(x, axis=[1, 2], keepdims=True)  # each cell against the image: classes spread
    deltas = tf.keras.layers.Conv2D(4 * ANCHORS_PER_CELL, 1, name="box_head")(x)
    logits = tf.keras.layers.Conv2D(CLASSES * ANCHORS_PER_CELL, 1, name="class_head",
                                    kernel_initializer=tf.keras.initializers.RandomNormal(stddev=1.5, seed=1),
                                    bias_initializer=tf.keras.initializers.Constant(-1.0))(local * 4.0)
    count = CELLS * CELLS * ANCHORS_PER_CELL
    deltas = tf.reshape(deltas, [-1, count, 4]) * 0.3
    scores = tf.sigmoid(tf.reshape(logits, [-1, count, CLASSES]))
    prior = tf.constant(anchors())
    ha, wa = prior[:, 2] - prior[:, 0], prior[:, 3] - prior[:, 1]
    yca, xca = prior[:, 0] + ha / 2, prior[:, 1] + wa / 2
    ty, tx, th, tw = tf.unstack(deltas, axis=-1)
    ty, tx, th, tw = ty / SCALES[0], tx / SCALES[1], th / SCALES[2], tw / SCALES[3]
    h, w = tf.exp(th) * ha, tf.exp(tw) * wa
    yc, xc = ty * ha + yca, tx * wa + xca
    boxes = tf.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    return tf.keras.Model(image, [boxes, scores])


def selection(tf, kind, model):
    """A tf.function of an image batch ending in ``kind``'s selection, with its outputs' names."""
    if kind.startswith("combined"):
        per_class = PERCLASS_CAP if kind == "combined_perclass" else MAX_PER_CLASS

        def select(image):
            boxes, scores = model(image)
            nmsed = tf.image.combined_non_max_suppression(
                boxes[:, :, None, :], scores, per_class, MAX_TOTAL, iou_threshold=IOU, score_threshold=SCORE,
                clip_boxes=kind == "combined_clip")
            return {"detection_boxes": nmsed.nmsed_boxes, "detection_scores": nmsed.nmsed_scores,
                    "detection_classes": nmsed.nmsed_classes, "num_detections": nmsed.valid_detections}
        return select, [None, SIZE, SIZE, 3]

    if kind == "topk_batch":
        def select(image):
            boxes, scores = model(image)
            best, index = tf.math.top_k(tf.reshape(scores, [tf.shape(scores)[0], -1]), k=TOP_K)
            anchor, label = index // CLASSES, index % CLASSES
            return {"detection_boxes": tf.gather(boxes, anchor, batch_dims=1), "detection_scores": best,
                    "detection_classes": label}
        return select, [None, SIZE, SIZE, 3]

    if kind == "padded_batch":  # the padded NMS on a batch: boxes [N, A, 4], one score per box [N, A]
        def select(image):
            boxes, scores = model(image)
            best, label = tf.reduce_max(scores, axis=-1), tf.argmax(scores, axis=-1)
            kept, valid = tf.image.non_max_suppression_padded(boxes, best, MAX_TOTAL, iou_threshold=IOU,
                                                              score_threshold=SCORE, pad_to_max_output_size=True)
            return {"detection_boxes": tf.gather(boxes, kept, batch_dims=1),
                    "detection_scores": tf.gather(best, kept, batch_dims=1),
                    "detection_classes": tf.gather(label, kept, batch_dims=1), "num_detections": valid}
        return select, [None, SIZE, SIZE, 3]

    if kind == "padded_clip":  # the padded NMS on the boxes as they are; the boxes returned clipped to 0-1
        def select(image):
            boxes, scores = model(image)
            best, label = tf.reduce_max(scores[0], axis=-1), tf.argmax(scores[0], axis=-1)
            kept, valid = tf.image.non_max_suppression_padded(boxes[0], best, MAX_TOTAL, iou_threshold=IOU,
                                                              score_threshold=SCORE, pad_to_max_output_size=True)
            return {"detection_boxes": tf.gather(tf.clip_by_value(boxes, 0.0, 1.0)[0], kept),
                    "detection_scores": tf.gather(best, kept), "detection_classes": tf.gather(label, kept),
                    "num_detections": valid}
        return select, [1, SIZE, SIZE, 3]

    if kind == "topk_classmajor":
        def select(image):
            boxes, scores = model(image)
            count = CELLS * CELLS * ANCHORS_PER_CELL
            best, index = tf.math.top_k(tf.reshape(tf.transpose(scores, [0, 2, 1]), [tf.shape(scores)[0], -1]),
                                        k=TOP_K)
            anchor, label = index % count, index // count
            return {"detection_boxes": tf.gather(boxes, anchor, batch_dims=1), "detection_scores": best,
                    "detection_classes": label}
        return select, [None, SIZE, SIZE, 3]

    def one_image(image):
        boxes, scores = model(image)
        return boxes[0], scores[0]
    if kind == "topk":
        def select(image):
            boxes, scores = one_image(image)
            best, index = tf.math.top_k(tf.reshape(scores, [-1]), k=TOP_K)
            anchor, label = index // CLASSES, index % CLASSES
            return {"detection_boxes": tf.gather(boxes, anchor), "detection_scores": best,
                    "detection_classes": label}
        return select, [1, SIZE, SIZE, 3]

    def select(image):
        boxes, scores = one_image(image)
        best, label = tf.reduce_max(scores, axis=-1), tf.argmax(scores, axis=-1)
        if kind == "nms":
            kept = tf.image.non_max_suppression(boxes, best, MAX_TOTAL, iou_threshold=IOU, score_threshold=SCORE)
            out = {"num_detections": tf.shape(kept)[0]}
        else:
            kept, valid = tf.image.non_max_suppression_padded(boxes, best, MAX_TOTAL, iou_threshold=IOU,
                                                              score_threshold=SCORE, pad_to_max_output_size=True)
            out = {"num_detections": valid}
        out.update({"detection_boxes": tf.gather(boxes, kept), "detection_scores": tf.gather(best, kept),
                    "detection_classes": tf.gather(label, kept)})
        return out
    return select, [1, SIZE, SIZE, 3]


def resized(tf, kind, model):
    """``resize``: a uint8 image of any size (``[1, None, None, 3]``, as the Object Detection API's exports take
    it), cast, scaled to 0-1 and stretched to 64x64 inside (``tf.image.resize``, bilinear), then
    ``combined_non_max_suppression``: boxes as fractions of the image. ``resize_pixels``: a 0-1 float image of any
    size, the same resize, the boxes scaled to the image's pixels before ``non_max_suppression`` of one image."""
    def network_at_size(image):
        return model(tf.image.resize(image, [SIZE, SIZE]))
    if kind == "resize":
        def select(image):
            boxes, scores = network_at_size(tf.cast(image, tf.float32) / 255.0)
            nmsed = tf.image.combined_non_max_suppression(
                boxes[:, :, None, :], scores, MAX_PER_CLASS, MAX_TOTAL, iou_threshold=IOU, score_threshold=SCORE,
                clip_boxes=False)
            return {"detection_boxes": nmsed.nmsed_boxes, "detection_scores": nmsed.nmsed_scores,
                    "detection_classes": nmsed.nmsed_classes, "num_detections": nmsed.valid_detections}
        return select, [1, None, None, 3], tf.uint8

    def select(image):
        boxes, scores = network_at_size(image)
        shape = tf.cast(tf.shape(image), tf.float32)
        boxes = boxes[0] * tf.stack([shape[1], shape[2], shape[1], shape[2]])
        best, label = tf.reduce_max(scores[0], axis=-1), tf.argmax(scores[0], axis=-1)
        kept = tf.image.non_max_suppression(boxes, best, MAX_TOTAL, iou_threshold=IOU, score_threshold=SCORE)
        return {"detection_boxes": tf.gather(boxes, kept), "detection_scores": tf.gather(best, kept),
                "detection_classes": tf.gather(label, kept), "num_detections": tf.shape(kept)[0]}
    return select, [1, None, None, 3], tf.float32


def export(kind, out, opset):
    import tensorflow as tf
    model = network(tf)
    select, shape, dtype = resized(tf, kind, model) if kind.startswith("resize") else \
        selection(tf, kind, model) + (tf.float32,)
    function = tf.function(select, input_signature=[tf.TensorSpec(shape, dtype, name="image")])
    path = os.path.join(out, "tf_{}.onnx".format(kind))
    with tempfile.TemporaryDirectory() as folder:
        module = tf.Module()
        module.model, module.serve = model, function
        tf.saved_model.save(module, folder, signatures={"serving_default": function})
        subprocess.check_call([sys.executable, "-m", "tf2onnx.convert", "--saved-model", folder, "--opset",
                               str(opset), "--output", path])
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("kinds", nargs="*", default=list(KINDS))
    args = parser.parse_args()
    for kind in args.kinds:
        print(export(kind, args.out, args.opset))


if __name__ == "__main__":
    main()
