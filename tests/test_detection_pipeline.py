"""Detection through the pipeline's parts: the exported network, its head, the float tail, data with boxes, and
the class mapping between a detector and a data set."""

import os

import numpy as np
import pytest

from trtkit.errors import InputError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")


def _export(tmp_path, name="retinanet_resnet18_fpn", size=128, classes=3):
    from trtkit.models.detection import create_detection_model
    from trtkit.models.detection.export import deployable
    from trtkit.onnx.export import export_onnx
    torch.manual_seed(0)
    model = deployable(create_detection_model(name, num_classes=classes, input_size=size).eval())
    path = str(tmp_path / "{}.onnx".format(name))
    export_onnx(model, path, exporter="torchscript")
    return model, path


@pytest.mark.parametrize("name", ["retinanet_resnet18_fpn", "ssdlite320_mobilenet_v3_large"])
def test_the_head_splits_the_anchors_as_the_model_does(name):
    from trtkit.detect.params import DetectionHead
    from trtkit.models.detection import create_detection_model
    from trtkit.models.detection.export import detection_head
    model = create_detection_model(name, num_classes=4).eval()
    head = DetectionHead.from_dict(detection_head(model).to_dict())  # as the manifest gives it back
    if name.startswith("retinanet"):
        assert head.background is None and head.postprocessing.per_level
        for height, width in ((800, 800), (97, 130), (320, 512)):
            assert head.level_sizes(height, width) == [int(n) for n in model.level_sizes(height, width)]
    else:
        assert head.background == 0 and head.level_sizes(320, 320) is None
    assert head.detection_classes() == ([0, 1, 2, 3] if head.background is None else [1, 2, 3])


def test_the_exported_network_is_one_decoded_tensor(tmp_path):
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    from trtkit.detect import raw
    model, path = _export(tmp_path)
    images = np.random.RandomState(0).randn(2, 3, 128, 128).astype(np.float32)
    with torch.no_grad():
        boxes, scores = model.detector.decoded(torch.from_numpy(images))
    with OnnxRuntimeRunner(path, providers=["CPUExecutionProvider"]) as runner:
        decoded = runner.infer(images)
    got_boxes, got_scores = raw.split(decoded, num_classes=3)
    assert decoded.shape == (2, sum(model.detection_head.level_sizes(128, 128)), 7)
    assert np.allclose(got_boxes, boxes.numpy(), atol=1e-3) and np.allclose(got_scores, scores.numpy(), atol=1e-5)
    with pytest.raises(InputError, match="4 score columns"):
        raw.split(np.zeros((1, 5, 8), np.float32), num_classes=3)


def test_box_decoding_and_scores_stay_float_in_int8_and_fp16(tmp_path):
    """The tail after the last convolutions (decoding, sigmoid, concat) gets no Q/DQ and stays FP32 in FP16."""
    from trtkit.precision.fp16 import convert_fp16, tail_nodes
    from trtkit.precision.qdq import Graph
    from trtkit.precision.qdq_place import cpu_edges, float_tail, tensorrt_edges
    _, path = _export(tmp_path)
    model = onnx.load(path)
    graph = Graph(model)
    tail = float_tail(graph)
    ops = dict((out, node.op_type) for node in model.graph.node for out in node.output)
    tail_ops = set(ops[t] for t in tail)
    assert {"Sigmoid", "Exp", "Concat"} <= tail_ops and "decoded" in tail
    assert not any(ops.get(t) == "Relu" for t in tail)  # the backbone's activations are quantized
    for edges in (cpu_edges(graph), tensorrt_edges(graph)):
        quantized = set(edge[0] for edge in edges)
        assert quantized and not quantized & tail
    names = set(tail_nodes(onnx.load(path)))
    assert names and all(n for n in names)
    fp16 = str(tmp_path / "fp16.onnx")
    convert_fp16(path, fp16)
    converted = onnx.load(fp16)
    types = dict((v.name, v.type.tensor_type.elem_type) for v in converted.graph.value_info)
    exp_outputs = [n.output[0] for n in converted.graph.node if n.op_type == "Exp"]
    assert exp_outputs and all(types.get(o, onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT for o in exp_outputs)
    convs = [n.input[1] for n in converted.graph.node if n.op_type == "Conv"]
    inits = dict((i.name, i.data_type) for i in converted.graph.initializer)
    assert any(inits.get(w) == onnx.TensorProto.FLOAT16 for w in convs)  # the network itself is FP16


class _Selection(object):
    holds = "boxes"

    def __init__(self, names, ids=None):
        from trtkit.data.boxes.record import BoxLabels, BoxSet
        self.annotations = BoxLabels(BoxSet([], names, ".", "coco" if ids else "yolo", ".", ids))


def test_model_classes_meet_the_data_by_name_ids_or_index():
    from trtkit.detect.params import DetectionHead, PostProcessing
    from trtkit.pipeline.detections import data_labels
    post = PostProcessing(0.05, 0.5, 100, 100, False)
    ssd = DetectionHead(4, post, background=0)
    assert data_labels(ssd, None, _Selection(["a", "b", "c"])).tolist() == [-1, 0, 1, 2]
    assert data_labels(ssd, ["__background__", "Cat", "dog", "bird_x"], _Selection(["bird x", "cat"])).tolist() \
        == [-1, 1, -1, 0]
    coco = DetectionHead(91, post, background=0)  # torchvision's COCO: label = category id
    mapping = data_labels(coco, None, _Selection(["person", "car", "toothbrush"], ids=[1, 3, 90]))
    assert mapping[1] == 0 and mapping[3] == 1 and mapping[90] == 2 and (mapping >= 0).sum() == 3
    retina = DetectionHead(3, PostProcessing(0.05, 0.5, 100, 100, True), levels=[(8, 9)])
    assert data_labels(retina, None, _Selection(["a", "b", "c"])).tolist() == [0, 1, 2]
    with pytest.raises(InputError, match="the data has 4 classes, the detector 3"):
        data_labels(retina, None, _Selection(["a", "b", "c", "d"]))
    with pytest.raises(InputError, match="none of the model's class names"):
        data_labels(ssd, ["bg", "x", "y", "z"], _Selection(["a"]))
    assert data_labels(ssd, None, None) is None


def test_a_coco_file_is_a_data_source_with_boxes(tmp_path):
    import json

    from PIL import Image

    from trtkit.contract import InputContract
    from trtkit.data import select
    os.makedirs(str(tmp_path / "images"))
    listed = []
    for index in range(6):
        Image.new("RGB", (40 + 4 * index, 30), (index * 20, 0, 0)).save(str(tmp_path / "images" / "{}.png".format(
            index)))
        listed.append({"id": 100 + index, "file_name": "{}.png".format(index), "width": 40 + 4 * index, "height": 30})
    annotations = [{"id": i + 1, "image_id": 100 + i, "category_id": 7, "bbox": [1, 2, 10, 12], "iscrowd": 0}
                   for i in range(6)]
    path = str(tmp_path / "instances_val.json")
    with open(path, "w") as handle:
        json.dump({"images": listed, "annotations": annotations, "categories": [{"id": 7, "name": "thing"}]}, handle)
    selection = select(path, InputContract(size=32, resize="letterbox"), split="all")
    assert selection.holds == "boxes" and selection.class_names == ["thing"] and selection.labels is None
    batches = list(selection.batches(4, progress=False))
    assert [len(images) for images, _ in batches] == [4, 2]
    records = [record for _, labels in batches for record in labels]
    assert [r.image_id for r in records] == [100 + i for i in range(6)]
    assert [r.size for r in records] == [(40 + 4 * i, 30) for i in range(6)]
    loaded = selection.load(progress=False)
    assert isinstance(loaded.labels, list) and len(loaded.labels) == 6


def test_an_exported_detector_carries_its_head_and_an_onnx_without_one_is_refused_first(tmp_path):
    import trtkit
    from trtkit.onnx.load import detection_metadata
    model, path = _export(tmp_path)
    assert detection_metadata(onnx.load(path)) == model.detection_head.to_dict()
    bare = onnx.load(path)
    kept = [p for p in bare.metadata_props if p.key != "trtkit.detection_head"]
    del bare.metadata_props[:]
    bare.metadata_props.extend(kept)
    other = str(tmp_path / "other.onnx")
    onnx.save(bare, other)
    with pytest.raises(InputError, match="has no trtkit detection head in its metadata") as caught:
        trtkit.build(onnx=other, task="detection", data="shape-boxes", out=str(tmp_path / "out"))
    assert "--checkpoint" in caught.value.hint and not os.path.exists(str(tmp_path / "out"))
