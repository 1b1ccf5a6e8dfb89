"""Real TensorFlow exports with their selection inside (``detect.decoders.tails``, ``nms``): a small Keras
detector (NHWC, SSD-like anchor head, seeded random weights) ending in TensorFlow's own selection, converted by
tf2onnx 1.16.1's command line (opset 13); the files are ``tests/fixtures/tf_*.onnx``, written by
``tests/tf_exports.py`` (which needs TensorFlow; these tests need only onnx and ONNX Runtime):

- ``combined``: ``tf.image.combined_non_max_suppression`` (per class, 20 padded rows, ``valid_detections``);
  ``combined_clip`` with its default ``clip_boxes`` (tf2onnx clips the selected boxes, after the NMS);
  ``combined_perclass`` with ``max_output_size_per_class`` 4 below ``max_total_size`` 20 (the head's
  ``max_per_class``);
- ``nms``: ``tf.image.non_max_suppression`` of one image on each box's best class score;
- ``padded``: ``tf.image.non_max_suppression_padded``, which tf2onnx writes as a Loop and Ifs (no
  NonMaxSuppression): the network's boxes and scores entering them, and the thresholds, read by structure
  (``detect.decoders.loops``); built from the tensors a user names too; ``padded_batch`` the same on a batch
  (``[N, A, 4]`` boxes and ``[N, A]`` best scores, which tf2onnx takes by a ``GlobalMaxPool``); ``padded_clip``
  returning the kept of the boxes clipped to 0-1, a second ``[N, A, 4]`` tensor beside the one the NMS reads;
- ``topk``: ``tf.math.top_k`` of the 20 best (box, class) pairs, no NMS (``--decoder topk``); ``topk_batch``
  per image of a batch (the boxes gathered by a GatherND with ``batch_dims`` 1); ``topk_classmajor`` on scores
  transposed to ``[N, C, A]`` before the flattening (class-major: the anchor is ``index % A``).

Each is built FP32 and INT8 on ONNX Runtime; FP32's detections must be the export's own (run in ONNX Runtime:
the same boxes, scores, classes and counts per image), and INT8's tail float.
"""

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from detection_tail import quantized_tail_is_float  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
SIZE = 64
IMAGES = 12
BATCHED = ("combined", "combined_clip", "combined_perclass", "padded_batch", "topk_batch",
           "topk_classmajor")  # the others take one image ([1, 64, 64, 3])


def fixture(kind):
    return os.path.join(FIXTURES, "tf_{}.onnx".format(kind))


def drawn():
    from trtkit.data.shape_boxes import draw_shape_boxes
    return draw_shape_boxes(IMAGES, size=SIZE, seed=7)[0]


def export_detections(kind, images):
    """Per image the export's own detections (``Detections``: x1 y1 x2 y2 in input pixels, clipped to it, as
    trtkit's predict gives them), run in ONNX Runtime on ``images / 255``."""
    from trtkit.detect.records import Detections
    session = ort.InferenceSession(fixture(kind), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    batch = images.astype(np.float32) / 255.0
    runs = [dict(zip(names, session.run(None, {"image": batch[i:i + 1]}))) for i in range(len(batch))] \
        if kind not in BATCHED else [dict(zip(names, session.run(None, {"image": batch})))]
    found = []
    for image in range(len(batch)):
        out, row = (runs[0], image) if kind in BATCHED else (runs[image], None)
        pick = (lambda v: v[row]) if row is not None else (lambda v: v)
        boxes, scores, labels = (pick(out[k]) for k in ("detection_boxes", "detection_scores", "detection_classes"))
        count = int(np.asarray(pick(out["num_detections"]))) if "num_detections" in out else len(scores)
        boxes = (boxes[:count, [1, 0, 3, 2]].astype(np.float64) * SIZE).clip(0, SIZE)
        found.append(Detections(boxes, scores[:count], labels[:count].astype(np.int64)))
    return found


def same(found, expected):
    """(F1 at IoU 0.5 by trtkit's agreement, whether every image has the export's detections exactly: counts,
    then boxes within 1e-3 px, scores within 1e-5 and classes, in score order)."""
    from trtkit.detect.agreement import DetectionAgreement
    agreement, equal = DetectionAgreement(), True
    for mine, theirs in zip(found, expected):
        agreement.update(mine, theirs)
        if len(mine) != len(theirs):
            equal = False
            continue
        a, b = np.argsort(-mine.scores, kind="stable"), np.argsort(-theirs.scores, kind="stable")
        equal = equal and np.allclose(mine.boxes[a], theirs.boxes[b], atol=1e-3) and \
            np.allclose(mine.scores[a], theirs.scores[b], atol=1e-5) and \
            np.array_equal(mine.labels[a], theirs.labels[b])
    return agreement.result()["f1"], equal


def build(tmp_path, kind, precision="fp32,int8", decoder=None, params=None):
    import trtkit
    out = str(tmp_path / kind)
    result = trtkit.build(onnx=fixture(kind), task="detection", mean=[0, 0, 0], std=[1, 1, 1], resize="stretch",
                          data="shape-boxes", precision=precision, verify_images=8, calib_images=8,
                          calib_batch_size=1, backend="onnxruntime", bench_seconds=0, out=out, decoder=decoder,
                          decoder_param=params)
    return out, result.manifest


def predicted(out, precision, images):
    import trtkit
    with trtkit.load(out, precision=precision) as detector:
        return detector.predict(list(images), score_threshold=0.0)


READ = {  # what the reading must find in each export (the values tests/tf_exports.py gave TensorFlow)
    "combined": {"class_agnostic": False, "detections": 20, "max_output_boxes_per_class": 20,
                 "score_layout": "classes_first"},
    "combined_perclass": {"class_agnostic": False, "detections": 20, "max_output_boxes_per_class": 4,
                          "score_layout": "classes_first"},
    "nms": {"class_agnostic": True, "detections": 20, "score_layout": "anchors_first"},
    "padded": {"class_agnostic": True, "detections": 20, "score_layout": "anchors_first"},
    "topk": {"class_agnostic": False, "detections": 20, "iou_threshold": 1.0, "score_threshold": 0.0,
             "score_layout": "anchors_first"},
    "topk_classmajor": {"class_agnostic": False, "detections": 20, "iou_threshold": 1.0, "score_threshold": 0.0,
                        "score_layout": "classes_first"},
}


@pytest.mark.parametrize("kind", ["combined", "nms", "padded", "topk"] + [pytest.param(kind, marks=pytest.mark.extended)
                                  for kind in ("combined_clip", "combined_perclass", "padded_batch", "padded_clip",
                                               "topk_batch", "topk_classmajor")])
def test_tf2onnx_selection_is_read_and_fp32_is_the_exports_own(tmp_path, kind):
    from trtkit.pipeline.foreign_detector import decode_graph
    family = "topk" if kind.startswith("topk") else "nms"
    model, _, params, _ = decode_graph(onnx.load(fixture(kind)), family)
    assert params["num_classes"] == 3 and params["anchors"] == 128 and params["order"] == "yxyx"
    assert params["normalized"] and params["center_point_box"] == 0
    for key, value in READ.get(kind, READ[kind.split("_")[0]]).items():
        assert params[key] == pytest.approx(value) if isinstance(value, float) else params[key] == value, key
    if family == "nms":
        assert params["iou_threshold"] == pytest.approx(0.5) and params["score_threshold"] == pytest.approx(0.3)
    ops = set(n.op_type for n in model.graph.node)
    assert not ops & {"NonMaxSuppression", "TopK", "Pad", "ScatterND", "GatherND", "Loop", "If"}, ops
    images = drawn()
    expected = export_detections(kind, images)
    counts = [len(e) for e in expected]
    assert sum(counts) >= 30 and len(set(np.concatenate([e.labels for e in expected]))) == 3, counts
    out, manifest = build(tmp_path, kind)
    assert manifest["model"]["detection"]["decoder"]["family"] == family
    if kind == "combined_perclass":  # the graph's per-class cap, recorded apart from the total
        post = manifest["model"]["detection"]["postprocessing"]
        assert post["max_per_class"] == 4 and post["detections_per_img"] == 20
    f1, equal = same(predicted(out, "fp32", images), expected)
    int8_f1 = same(predicted(out, "int8", images), expected)[0]
    print(kind, sum(counts), "detections; FP32 F1 vs the export:", f1, "equal:", equal, "INT8 F1:", int8_f1)
    assert f1 == 1.0 and equal
    assert int8_f1 >= 0.5  # random weights: a floor that catches a broken INT8, not a quality claim
    assert quantized_tail_is_float(out, manifest)


def test_a_per_class_cap_below_the_total_is_the_host_selections_too():
    """``combined_perclass`` (4 per class, 20 in all): the host selection (``select_decoded``, every backend's
    reference and TensorRT 8.2's / TensorRT-RTX's placement) on the cut graph's ``decoded`` keeps the export's
    own detections; without the cap (a class up to the total, as before) it does not."""
    from trtkit.detect.params import DetectionHead, PostProcessing
    from trtkit.detect.select import select_decoded
    from trtkit.pipeline.foreign_detector import decode_graph
    model, family, params, _ = decode_graph(onnx.load(fixture("combined_perclass")), "nms")
    post = PostProcessing(per_level=False, **family.postprocessing(params))
    assert post.max_per_class == 4 and post.per_class == 4 and post.detections_per_img == 20
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    images = drawn()
    decoded = session.run(["decoded"], {session.get_inputs()[0].name: images.astype(np.float32) / 255.0})[0]
    expected = export_detections("combined_perclass", images)
    capped = [max(np.bincount(e.labels, minlength=3)) for e in expected]
    assert max(capped) == 4 and sum(len(e) for e in expected) >= 30, capped  # the cap decides on these images

    def host(head):
        found = select_decoded(decoded, head, SIZE, SIZE)
        return [type(f)(np.clip(f.boxes, 0, SIZE), f.scores, f.labels) for f in found]
    f1, equal = same(host(DetectionHead(3, post)), expected)
    uncapped = same(host(DetectionHead(3, PostProcessing.from_dict(dict(post.to_dict(), max_per_class=None)))),
                    expected)[0]
    print("host selection F1 vs the export:", f1, "equal:", equal, "without the per-class cap:", uncapped)
    assert f1 == 1.0 and equal
    assert uncapped < 0.9


def test_old_postprocessing_records_load_without_a_per_class_cap():
    from trtkit.detect.params import PostProcessing
    old = {"score_thresh": 0.3, "nms_thresh": 0.5, "detections_per_img": 20, "topk_candidates": 128,
           "per_level": False, "class_agnostic": False}
    post = PostProcessing.from_dict(old)
    assert post.max_per_class is None and post.per_class == 20
    assert PostProcessing.from_dict(post.to_dict()) == post
    capped = PostProcessing.from_dict(dict(old, max_per_class=4))
    assert capped.per_class == 4 and capped.with_overrides(detections_per_img=3).per_class == 3
    assert capped.with_overrides(class_agnostic=True).per_class == 20  # one NMS group: the total caps it


def test_a_selection_in_a_loop_takes_the_tensors_a_user_names(tmp_path):
    """``non_max_suppression_padded`` (tf2onnx: a Loop and Ifs, no NonMaxSuppression) is read by itself (the
    parametrized test above); the boxes and scores a user names from the CLI are cut at instead, a name the graph
    lacks is one line."""
    from conftest import run_cli
    names = network_outputs(fixture("padded"))
    done = run_cli(["build", "--onnx", fixture("padded"), "--task", "detection", "--data", "shape-boxes",
                    "--backend", "onnxruntime", "--decoder", "nms", "--decoder-param", "boxes=no_such_tensor",
                    "--decoder-param", "scores=" + names["scores"], "--out", str(tmp_path / "refused")], timeout=300)
    errors = [line for line in done.stderr.splitlines() + done.stdout.splitlines() if line.startswith("error")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "boxes=no_such_tensor" in errors[0], errors
    params = ["boxes=" + names["boxes"], "scores=" + names["scores"], "iou_threshold=0.5", "score_threshold=0.3",
              "detections=20", "class_agnostic=true"]
    images = drawn()
    expected = export_detections("padded", images)
    assert sum(len(e) for e in expected) >= 30
    out, _ = build(tmp_path, "padded", precision="fp32", decoder="nms", params=params)
    f1, equal = same(predicted(out, "fp32", images), expected)
    print("padded FP32 F1 vs the export:", f1, "equal:", equal)
    assert f1 == 1.0 and equal


def network_outputs(path):
    """{boxes, scores}: the names of the Keras model's two outputs in a tf2onnx export (the boxes' ``tf.stack``
    Concat, the scores' Sigmoid), as a user reads them in Netron."""
    model = onnx.load(path)
    boxes = [n.output[0] for n in model.graph.node if n.op_type == "Concat" and "stack" in n.output[0]]
    scores = [n.output[0] for n in model.graph.node if n.op_type == "Sigmoid"]
    assert len(boxes) == 1 and len(scores) == 1
    return {"boxes": boxes[0], "scores": scores[0]}


def test_topk_refuses_a_graph_with_nms_in_one_line():
    from trtkit.errors import InputError
    from trtkit.pipeline.foreign_detector import decode_graph
    with pytest.raises(InputError) as refused:
        decode_graph(onnx.load(fixture("combined")), "topk")
    assert "TopK" in str(refused.value) and "--decoder nms" in str(refused.value.hint)


SIZES = ((48, 80), (96, 72), (64, 64), (120, 90), (40, 40), (72, 128))  # (height, width) of the images fed whole


def sized_images():
    """The drawn 64 px images resized (PIL bilinear) to each of ``SIZES`` in turn: uint8 images of 6 sizes."""
    from PIL import Image
    return [np.asarray(Image.fromarray(image).resize(SIZES[i % len(SIZES)][::-1], Image.BILINEAR))
            for i, image in enumerate(drawn())]


def resized_export_detections(kind, images):
    """Per image the export's own detections, the image fed whole at its own size (uint8 to ``resize``, 0-1 floats
    to ``resize_pixels``): ``resize``'s boxes are fractions of the image, ``resize_pixels``' its pixels."""
    from trtkit.detect.records import Detections
    session = ort.InferenceSession(fixture(kind), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    found = []
    for image in images:
        height, width = image.shape[:2]
        batch = image[None] if kind == "resize" else image[None].astype(np.float32) / 255.0
        out = dict(zip(names, session.run(None, {"image": batch})))
        pick = (lambda v: v[0]) if kind == "resize" else (lambda v: v)
        boxes, scores, labels = (pick(out[k]) for k in ("detection_boxes", "detection_scores", "detection_classes"))
        count = int(np.asarray(pick(out["num_detections"])))
        boxes = boxes[:count, [1, 0, 3, 2]].astype(np.float64)
        if kind == "resize":
            boxes = boxes * [width, height, width, height]
        boxes = boxes.clip(0, [width, height, width, height])
        found.append(Detections(boxes, scores[:count], labels[:count].astype(np.int64)))
    return found


@pytest.mark.parametrize("kind", ["resize", pytest.param("resize_pixels", marks=pytest.mark.extended)])
def test_an_export_that_resizes_inside_is_built_at_its_size_and_keeps_its_detections_at_every_size(tmp_path, kind):
    """``resize``: uint8 ``[1, None, None, 3]``, ``tf.image.resize`` to 64x64 inside, boxes as fractions of the
    image; ``resize_pixels``: floats, the same resize, boxes in the image's pixels. trtkit builds at 64x64 (no
    ``--input-size``), resizes each image itself as the graph does (``stretch``, the ``tf`` filter: the graph's
    Resize then maps 64 to 64, the identity) and maps the boxes back: on images of 6 sizes FP32 keeps exactly the
    export's own detections, each image fed to it whole; PIL's antialiased resize instead does not."""
    images = sized_images()
    expected = resized_export_detections(kind, images)
    counts = [len(e) for e in expected]
    assert sum(counts) >= 30 and len(set(np.concatenate([e.labels for e in expected]))) == 3, counts
    out, manifest = build(tmp_path, kind)
    contract = manifest["model"]["input"]
    assert (contract["height"], contract["width"], contract["resize"], contract["resize_filter"]) == \
        (64, 64, "stretch", "tf"), contract
    assert manifest["model"]["detection"]["decoder"]["params"]["inner_resize"]["size"] == [64, 64]
    f1, equal = same(predicted(out, "fp32", images), expected)
    int8_f1 = same(predicted(out, "int8", images), expected)[0]
    import trtkit
    pil = str(tmp_path / "pil")
    built = trtkit.build(onnx=fixture(kind), task="detection", mean=[0, 0, 0], std=[1, 1, 1], resize_filter="pil",
                         data="shape-boxes", precision="fp32", verify_images=8, backend="onnxruntime", bench_seconds=0,
                         out=pil)
    assert built.manifest["model"]["input"]["resize"] == "stretch"  # the graph's, where the user set none
    pil_f1, pil_equal = same(predicted(pil, "fp32", images), expected)
    print(kind, sum(counts), "detections on", len(SIZES), "sizes; FP32 F1 vs the export:", f1, "equal:", equal,
          "INT8 F1:", int8_f1, "| resized by PIL instead: F1", pil_f1, "equal:", pil_equal)
    assert f1 == 1.0 and equal
    assert int8_f1 >= 0.5
    assert quantized_tail_is_float(out, manifest)
    assert not pil_equal
    from trtkit.errors import InputError
    from trtkit.pipeline.foreign_detector import graph_size
    with pytest.raises(InputError) as refused:  # another size would resize twice
        graph_size(onnx.load(fixture(kind)), (96, 96))
    assert "resizes it to 64x64 inside" in str(refused.value) and "drop --input-size" in refused.value.hint
