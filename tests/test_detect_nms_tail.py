"""Graphs with NMS inside (``detect.decoders.nms``): cut at NonMaxSuppression's inputs, ``decoded`` rebuilt, the
NMS's own parameters read into the head, and the build's detections the graph's own.

Three graphs, none downloaded: trtkit's trained detection sample exported with its selection appended
(``onnx_nms.append_nms``, no trtkit metadata: a foreign graph); an ultralytics ``nms=True``-style graph (boxes
cx cy w h in pixels, the best class per box by ReduceMax, class-agnostic NMS, a GatherND tail); a
TensorFlow-style one (channels-last input, normalized y1 x1 y2 x2 boxes, per-class NMS). Each is built FP32 and
INT8 on ONNX Runtime; its detections are compared with what the original graph's own NMS keeps on the same
images. A fourth writes per-class NMS as ultralytics and torchvision do, one NMS on boxes shifted by class, whose
cut must read the unshifted boxes; and (extended, with ultralytics installed) ultralytics' own random-weight
``nms=True`` export, exported in the test and never stored (AGPL-3.0).
"""

import os

import numpy as np
import pytest

from detection_tail import quantized_tail_is_float
from trtkit.errors import InputError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn
helper, TensorProto, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper

SIZE = 64


def run(model_or_path, feeds):
    source = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


class Head(nn.Module):
    """Convolutions to stride 8, then per cell a box and C sigmoid scores: ``style`` "ultralytics" (cx cy w h in
    input pixels, NCHW input) or "tf" (y1 x1 y2 x2 as fractions of the input, NHWC input)."""

    def __init__(self, style, classes=3):
        super(Head, self).__init__()
        torch.manual_seed(0)
        self.style = style
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())
        self.box, self.cls = nn.Conv2d(8, 4, 1), nn.Conv2d(8, classes, 1)
        nn.init.normal_(self.cls.weight, std=3.0)
        nn.init.constant_(self.cls.bias, -1.0)

    def forward(self, x):
        if self.style == "tf":
            x = x.permute(0, 3, 1, 2)
        f = self.body(x)
        cells = f.shape[-1]
        ys, xs = torch.meshgrid(torch.arange(cells), torch.arange(cells), indexing="ij")
        centre = (torch.stack([xs, ys]).float().reshape(1, 2, -1) + 0.5) / cells + 0.1 * torch.tanh(
            self.box(f)[:, :2].flatten(2))
        size = 0.6 * torch.sigmoid(self.box(f)[:, 2:].flatten(2)) + 0.05
        local = (f - f.mean(dim=(2, 3), keepdim=True)) * 4  # each cell against the image: classes spread
        scores = torch.sigmoid(self.cls(local)).flatten(2).transpose(1, 2)  # [N, A, C]
        if self.style == "tf":
            low, high = centre - size / 2, centre + size / 2
            boxes = torch.stack([low[:, 1], low[:, 0], high[:, 1], high[:, 0]], -1)  # y1 x1 y2 x2, fractions
        else:
            boxes = torch.cat([centre, size], 1).transpose(1, 2) * SIZE  # cx cy w h, pixels
        return boxes, scores


def _with_selection_outputs(model, out):
    """``model`` ending in its exporter's selection outputs (``selected``, ``det_boxes``, ``det_scores``,
    ``det_classes``), checked and saved to ``out``; returns ``out``."""
    g = model.graph
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3]),
                     helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [None, 4]),
                     helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, [None]),
                     helper.make_tensor_value_info("det_classes", TensorProto.INT64, [None])])
    onnx.checker.check_model(model)
    onnx.save(model, out)
    return out


def with_nms_tail(path, style, max_out, iou, score):
    """The exported head with the selection inside, as its exporter writes it: NonMaxSuppression then a
    GatherND tail to ``selected`` [M, 3], ``det_boxes`` [M, 4], ``det_scores`` [M], ``det_classes`` [M]."""
    model = onnx.load(path)
    g = model.graph
    consts = {"max_out": np.array([max_out], np.int64), "iou": np.array([iou], np.float32),
              "score": np.array([score], np.float32), "cols02": np.array([0, 2], np.int64),
              "col1": np.array([1], np.int64), "ax2": np.array([2], np.int64)}
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    nodes = [helper.make_node("Transpose", ["scores"], ["scores_t"], perm=[0, 2, 1])]  # [N, C, A]
    if style == "ultralytics":  # the best class per box, then one NMS across classes (max_wh offsets unused)
        nodes += [helper.make_node("ReduceMax", ["scores_t"], ["best"], axes=[1], keepdims=1),
                  helper.make_node("ArgMax", ["scores"], ["best_class"], axis=2, keepdims=0),
                  helper.make_node("NonMaxSuppression", ["boxes", "best", "max_out", "iou", "score"], ["selected"],
                                   center_point_box=1),
                  helper.make_node("Gather", ["selected", "cols02"], ["image_anchor"], axis=1),
                  helper.make_node("GatherND", ["best", "selected"], ["det_scores"]),
                  helper.make_node("GatherND", ["best_class", "image_anchor"], ["det_classes"])]
    else:  # per class, as TensorFlow's NonMaxSuppressionV5 per class
        nodes += [helper.make_node("NonMaxSuppression", ["boxes", "scores_t", "max_out", "iou", "score"],
                                   ["selected"], center_point_box=0),
                  helper.make_node("Gather", ["selected", "cols02"], ["image_anchor"], axis=1),
                  helper.make_node("GatherND", ["scores_t", "selected"], ["det_scores"]),
                  helper.make_node("Gather", ["selected", "col1"], ["class_col"], axis=1),
                  helper.make_node("Squeeze", ["class_col", "col1"], ["det_classes"])]
    nodes.append(helper.make_node("GatherND", ["boxes", "image_anchor"], ["det_boxes"]))
    g.node.extend(nodes)
    return _with_selection_outputs(model, path.replace(".onnx", ".nms.onnx"))


def export(tmp_path, style):
    shape = (1, SIZE, SIZE, 3) if style == "tf" else (1, 3, SIZE, SIZE)
    path = str(tmp_path / "{}.onnx".format(style))
    torch.onnx.export(Head(style).eval(), torch.zeros(*shape), path, input_names=["image"],
                      output_names=["boxes", "scores"], opset_version=13, dynamo=False,
                      dynamic_axes={"image": {0: "N"}, "boxes": {0: "N"}, "scores": {0: "N"}})
    return path


def graph_detections(path, batch, style):
    """Per image the detections the graph's own NMS keeps (``Detections``: corner boxes in input pixels,
    clipped to it), from its outputs."""
    from trtkit.detect.records import Detections
    out = run(path, {"image": batch})
    found = []
    for image in range(len(batch)):
        rows = out["selected"][:, 0] == image
        boxes = out["det_boxes"][rows].astype(np.float64)
        if style == "tf":
            boxes = boxes[:, [1, 0, 3, 2]] * SIZE
        else:
            boxes = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], 1)
        boxes = boxes.clip(0, SIZE)  # the packages' postprocessing clips to the image, as trtkit's predict does
        found.append(Detections(boxes, out["det_scores"][rows], out["det_classes"][rows]))
    return found


def f1(found, expected):
    from trtkit.detect.agreement import box_iou
    matched = total = 0
    for mine, theirs in zip(found, expected):
        total += len(mine) + len(theirs)
        if len(mine) and len(theirs):
            iou = box_iou(mine.boxes, theirs.boxes) * (mine.labels[:, None] == theirs.labels[None, :])
            matched += int(((iou >= 0.5).sum(axis=1) > 0).sum())
    return 2.0 * matched / max(1, total)


@pytest.mark.parametrize("style", ["ultralytics", "tf"])
def test_nms_inside_is_cut_read_and_built_fp32_and_int8(tmp_path, style):
    import trtkit
    from trtkit.pipeline.foreign_detector import decode_graph
    path = with_nms_tail(export(tmp_path, style), style, max_out=20, iou=0.45, score=0.3)
    model, family, params, _ = decode_graph(onnx.load(path), "nms")
    assert params["class_agnostic"] == (style == "ultralytics") and params["num_classes"] == 3
    assert params["iou_threshold"] == pytest.approx(0.45) and params["score_threshold"] == pytest.approx(0.3)
    assert params["normalized"] == (style == "tf") and params["order"] == ("yxyx" if style == "tf" else "xyxy")
    assert params["center_point_box"] == (style == "ultralytics") and params["detections"] == (20 if style ==
                                                                                               "ultralytics" else 60)
    assert "NonMaxSuppression" not in [n.op_type for n in model.graph.node]
    from trtkit.data.shape_boxes import draw_shape_boxes
    images = draw_shape_boxes(6, size=SIZE, seed=5)[0]
    batch = images.astype(np.float32) / 255.0
    batch = batch if style == "tf" else batch.transpose(0, 3, 1, 2)
    raw = run(export(tmp_path, style), {"image": batch})
    raw["scores_t"] = raw["scores"].transpose(0, 2, 1)  # what NMS (or its ReduceMax) reads: [N, C, A]
    decoded = run(model, {"image": batch})["decoded"]
    assert np.abs(decoded - family.reference(raw, params, (SIZE, SIZE))).max() < 1e-4
    expected = graph_detections(path, batch, style)
    assert sum(len(e) for e in expected) >= 20 and len(set(np.concatenate([e.labels for e in expected]))) > 1
    out = str(tmp_path / "build")
    result = trtkit.build(onnx=path, task="detection", mean=[0, 0, 0], std=[1, 1, 1], resize="stretch",
                          data="shape-boxes", precision="fp32,int8", verify_images=8, calib_images=8,
                          calib_batch_size=8, backend="onnxruntime", bench_seconds=0, out=out)
    head = result.manifest["model"]["detection"]
    assert head["decoder"]["family"] == "nms" and head["postprocessing"]["class_agnostic"] == (style == "ultralytics")
    scores = {}
    for precision in ("fp32", "int8"):
        with trtkit.load(out, precision=precision) as detector:
            scores[precision] = f1(detector.predict(list(images), score_threshold=0.0), expected)
    print(style, "F1 vs the graph's own NMS:", scores)
    assert scores["fp32"] >= 0.99 and scores["int8"] >= 0.6
    assert quantized_tail_is_float(out, result.manifest)
    assert all(a["nms"]["placement"] == "graph" for a in result.manifest["artifacts"])


def test_trtkits_own_export_with_its_nms_fed_back_as_a_foreign_graph(tmp_path):
    """The trained sample exported with ``append_nms`` (no trtkit metadata): ``decoded`` rebuilt equal to the
    export's own, the NMS's parameters read back, and the build's FP32 detections the graph's (F1 1.0)."""
    import trtkit
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.detect.onnx_nms import append_nms, graph_detections as appended_detections
    from trtkit.models.detection.export import detection_head
    from trtkit.models.sample import sample_detection_model
    from trtkit.pipeline.foreign_detector import decode_graph
    from trtkit.tasks.detection import DETECTION
    model = sample_detection_model()[0].eval()
    contract = model.input_contract
    head = detection_head(model).with_postprocessing(per_level=False, topk_candidates=100000)
    deployable = DETECTION.sample_model()[0].eval()
    plain = str(tmp_path / "sample.onnx")
    torch.onnx.export(deployable, torch.zeros(1, 3, 128, 128), plain, input_names=["images"],
                      output_names=["decoded"], opset_version=13, dynamo=False,
                      dynamic_axes={"images": {0: "N"}, "decoded": {0: "N"}})
    path = str(tmp_path / "sample.nms.onnx")
    onnx.save(append_nms(onnx.load(plain), head), path)
    images, _ = draw_shape_boxes(16, seed=321)
    batch = (images.astype(np.float32) / 255.0 - np.array(contract.mean, np.float32)) / np.array(
        contract.std, np.float32)
    batch = batch.transpose(0, 3, 1, 2).astype(np.float32)
    cut, _, params, _ = decode_graph(onnx.load(path), "nms")
    assert params["iou_threshold"] == pytest.approx(head.postprocessing.nms_thresh)
    assert params["score_threshold"] == pytest.approx(head.postprocessing.score_thresh)
    assert params["detections"] == head.postprocessing.detections_per_img and not params["class_agnostic"]
    assert params["dropped"]["outputs"] == ["det_boxes", "det_scores", "det_labels", "det_count"]
    original = run(plain, {"images": batch})["decoded"]
    assert np.array_equal(run(cut, {"images": batch})["decoded"], original)
    expected = appended_detections(run(path, {"images": batch}))
    assert sum(len(e) for e in expected) >= 16
    out = str(tmp_path / "build")
    result = trtkit.build(onnx=path, task="detection", mean=list(contract.mean), std=list(contract.std),
                          resize="stretch", data="shape-boxes", precision="fp32", verify_images=8,
                          backend="onnxruntime", bench_seconds=0, out=out)
    assert result.manifest["model"]["detection"]["decoder"]["family"] == "nms"
    with trtkit.load(out, precision="fp32") as detector:
        found = detector.predict(list(images), score_threshold=0.0)
    assert f1(found, expected) == 1.0
    assert [len(d) for d in found] == [len(e) for e in expected]


def with_class_offset_nms_tail(path, max_out, iou, score, max_wh=7680.0):
    """The ultralytics-style head with per-class NMS as ultralytics' ``nms=True`` and torchvision's
    ``batched_nms`` write it: the best class per box (ReduceMax, ArgMax), each box's centre shifted by
    ``class x max_wh`` so that one NonMaxSuppression keeps classes apart, the outputs gathered from the unshifted
    boxes (``selected``, ``det_boxes``, ``det_scores``, ``det_classes`` as ``with_nms_tail``)."""
    model = onnx.load(path)
    g = model.graph
    consts = {"max_out": np.array([max_out], np.int64), "iou": np.array([iou], np.float32),
              "score": np.array([score], np.float32), "cols02": np.array([0, 2], np.int64),
              "ax2": np.array([2], np.int64), "max_wh": np.array([max_wh, max_wh, 0, 0], np.float32)}
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    g.node.extend([
        helper.make_node("Transpose", ["scores"], ["scores_t"], perm=[0, 2, 1]),
        helper.make_node("ReduceMax", ["scores_t"], ["best"], axes=[1], keepdims=1),  # [N, 1, A]
        helper.make_node("ArgMax", ["scores"], ["best_class"], axis=2, keepdims=0),  # [N, A]
        helper.make_node("Unsqueeze", ["best_class", "ax2"], ["class_column"]),
        helper.make_node("Cast", ["class_column"], ["class_float"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["class_float", "max_wh"], ["offset"]),  # [N, A, 4]: centres apart by class
        helper.make_node("Add", ["boxes", "offset"], ["nms_boxes"]),
        helper.make_node("NonMaxSuppression", ["nms_boxes", "best", "max_out", "iou", "score"], ["selected"],
                         center_point_box=1),
        helper.make_node("Gather", ["selected", "cols02"], ["image_anchor"], axis=1),
        helper.make_node("GatherND", ["best", "selected"], ["det_scores"]),
        helper.make_node("GatherND", ["best_class", "image_anchor"], ["det_classes"]),
        helper.make_node("GatherND", ["boxes", "image_anchor"], ["det_boxes"])])
    return _with_selection_outputs(model, path.replace(".onnx", ".offset_nms.onnx"))


def test_class_offset_boxes_are_read_unshifted_and_nms_runs_per_class(tmp_path):
    """Per-class NMS written as one NMS on class-shifted boxes: the cut reads the Add's box operand (the shifted
    boxes put every class but 0 thousands of pixels off the image), NMS per class on each box's best class; the
    FP32 build keeps the graph's own detections (F1 1.0)."""
    import trtkit
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.pipeline.foreign_detector import decode_graph
    plain = export(tmp_path, "ultralytics")
    path = with_class_offset_nms_tail(plain, max_out=20, iou=0.45, score=0.3)
    model, family, params, _ = decode_graph(onnx.load(path), "nms")
    assert params["boxes"] == "boxes" and params["class_offset"] == "offset" and params["scores"] == "scores_t"
    assert not params["class_agnostic"] and params["best_class"] and params["num_classes"] == 3
    assert params["center_point_box"] == 1 and not params["normalized"]
    assert params["detections"] == 20  # NMS's 20 per "class": its one best-class score row holds every class
    images = draw_shape_boxes(6, size=SIZE, seed=5)[0]
    batch = images.astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    raw = run(plain, {"image": batch})
    raw["scores_t"] = raw["scores"].transpose(0, 2, 1)
    decoded = run(model, {"image": batch})["decoded"]
    assert np.abs(decoded - family.reference(raw, params, (SIZE, SIZE))).max() < 1e-4
    assert np.abs(decoded[..., :4]).max() < 2 * SIZE  # the boxes, not the class-shifted ones
    expected = graph_detections(path, batch, "ultralytics")
    labels = np.concatenate([e.labels for e in expected])
    assert sum(len(e) for e in expected) >= 20 and (labels > 0).sum() >= 5
    out = str(tmp_path / "build")
    result = trtkit.build(onnx=path, task="detection", mean=[0, 0, 0], std=[1, 1, 1], resize="stretch",
                          data="shape-boxes", precision="fp32", verify_images=8, backend="onnxruntime",
                          bench_seconds=0, out=out)
    assert result.manifest["model"]["detection"]["postprocessing"]["class_agnostic"] is False
    with trtkit.load(out, precision="fp32") as detector:
        found = detector.predict(list(images), score_threshold=0.0)
    assert f1(found, expected) == 1.0
    assert [len(d) for d in found] == [len(e) for e in expected]


def _ultralytics_random_yolov8n(folder):
    """A random-weight YOLOv8n (no download: built from its yaml), its BatchNorm statistics set on drawn images so
    that its outputs depend on the image, its class biases at -2.5 (some boxes above ultralytics' conf 0.25),
    exported with ``nms=True`` at 160 px by ultralytics itself (AGPL-3.0: run, never copied). Skips when
    ultralytics or torchvision's C++ NMS (which the export calls) is missing."""
    pytest.importorskip("ultralytics")
    try:
        from torchvision.ops import nms
        nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
    except Exception as error:  # a torchvision wheel whose C++ ops do not load raises RuntimeError, OSError
        pytest.skip("torchvision's nms does not run here: {}".format(error))
    from trtkit.data.shape_boxes import draw_shape_boxes
    from ultralytics import YOLO
    torch.manual_seed(0)
    yolo = YOLO("yolov8n.yaml")
    net = yolo.model
    drawn = torch.from_numpy(draw_shape_boxes(16, size=160, seed=11)[0]).permute(0, 3, 1, 2).float() / 255
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None
            module.reset_running_stats()
    net.train()
    with torch.no_grad():
        net(drawn)
        generator = torch.Generator().manual_seed(1)
        for branch in net.model[-1].cv3:
            branch[-1].bias.copy_(torch.randn(branch[-1].bias.shape, generator=generator) * 0.5 - 2.5)
    net.eval()
    cwd = os.getcwd()
    os.chdir(folder)  # a yaml-built model exports into the working folder
    try:
        return os.path.abspath(yolo.export(format="onnx", imgsz=160, nms=True, batch=1, device="cpu", verbose=False))
    finally:
        os.chdir(cwd)


@pytest.mark.extended
def test_a_real_ultralytics_nms_export_builds_to_the_graphs_own_detections(tmp_path):
    """ultralytics' own ``nms=True`` graph: per-image candidates ``score > conf`` (GatherND of NonZero), boxes
    scaled by ``1 / imgsz / C`` and shifted by ``class / C``, one NMS on the best class per box, ``keep[:300]``.
    trtkit's FP32 build keeps what the graph outputs: the same boxes (within 1e-3 px), scores and classes."""
    import trtkit
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.detect.records import Detections
    from trtkit.pipeline.foreign_detector import decode_graph
    path = _ultralytics_random_yolov8n(str(tmp_path))
    params = decode_graph(onnx.load(path), "nms")[2]
    assert params["class_offset"] and params["best_class"] and not params["class_agnostic"]
    assert params["candidate_threshold"] == pytest.approx(0.25) and params["score_threshold"] == pytest.approx(0.25)
    assert params["detections"] == 300 and params["anchors"] == 525 and params["num_classes"] == 80
    images = draw_shape_boxes(8, size=160, seed=7)[0]
    expected = []
    for image in images:
        rows = run(path, {"images": image.astype(np.float32).transpose(2, 0, 1)[None] / 255.0})["output0"][0]
        rows = rows[rows[:, 4] > 0]  # the zero padding to 300 rows
        expected.append(Detections(rows[:, :4].astype(np.float64).clip(0, 160), rows[:, 4],
                                   rows[:, 5].astype(np.int64)))
    assert sum(len(e) for e in expected) >= 100 and len(set(np.concatenate([e.labels for e in expected]))) > 10
    folder = tmp_path / "images"
    folder.mkdir()
    from PIL import Image
    for index, image in enumerate(images):
        Image.fromarray(image).save(str(folder / "{}.png".format(index)))
    out = str(tmp_path / "build")
    trtkit.build(onnx=path, task="detection", mean=[0, 0, 0], std=[1, 1, 1], resize="letterbox", pad_value=114,
                 data=str(folder), precision="fp32", backend="onnxruntime", bench_seconds=0, out=out)
    with trtkit.load(out, precision="fp32") as detector:
        found = detector.predict(list(images), score_threshold=0.0)
    assert f1(found, expected) == 1.0
    for mine, theirs in zip(found, expected):
        assert len(mine) == len(theirs)
        a, b = np.lexsort(np.c_[mine.boxes, mine.labels].T), np.lexsort(np.c_[theirs.boxes, theirs.labels].T)
        assert np.array_equal(mine.labels[a], theirs.labels[b])
        assert np.abs(mine.boxes[a] - theirs.boxes[b]).max() < 1e-3
        assert np.abs(np.sort(mine.scores) - np.sort(theirs.scores)).max() < 1e-5


def test_nms_that_cannot_be_found_or_placed_is_refused_in_one_line(tmp_path):
    from trtkit.pipeline.foreign_detector import decode_graph
    plain = export(tmp_path, "ultralytics")
    with pytest.raises(InputError, match="the graph has no NonMaxSuppression node to cut at"):
        decode_graph(onnx.load(plain), "nms")
    model = onnx.load(with_nms_tail(plain, "ultralytics", 20, 0.45, 0.3))
    flat = helper.make_node("Reshape", ["boxes", "flat_shape"], ["flat_boxes"])  # boxes [N, A x 4 / 2, 2]
    model.graph.initializer.append(numpy_helper.from_array(np.array([0, -1, 2], np.int64), "flat_shape"))
    model.graph.node.insert(0, flat)
    for node in model.graph.node:
        if node.op_type == "NonMaxSuppression":
            node.input[0] = "flat_boxes"
    with pytest.raises(InputError, match=r"boxes input 'flat_boxes' \[N, 128, 2\] is not \[N, A, 4\]"):
        decode_graph(model, "nms")


def test_an_input_smaller_than_the_models_stride_is_refused_in_one_line(tmp_path):
    from test_foreign_decoders import YoloxRaw, _export
    from trtkit.pipeline.foreign_detector import decode_graph
    path = _export(YoloxRaw(), tmp_path / "yolox.onnx", ["output"], size=(16, 16))  # strides 8, 16, 32 at 16 px
    with pytest.raises(InputError, match="the input 16x16 is smaller than the model's stride 32"):
        decode_graph(onnx.load(path), "yolo", {"strides": "8,16,32"})
