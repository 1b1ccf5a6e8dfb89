"""The ONNX front end on the ONNX Model Zoo's classic Caffe2 classifiers (replicas, tests/onnx_zoo.py) and on
graphs that are not image classifiers.

The nine replicas carry what broke the Caffe2 files: IR 3 with every
initializer an input, opset 9, weights from ConstantOfShape/Constant, LRN,
Dropout, Sum, the batch written into Reshape shapes, Softmax outputs (4-D for
DenseNet and SqueezeNet). Each gets a fitted classifier layer so its predictions depend on the image.
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_zoo
from conftest import run_cli
from trtkit.pipeline import BuildOptions, ModelOptions, build
from trtkit.contract import InputContract
from trtkit.data import load_images
from trtkit.errors import InputError
from trtkit.onnx.load import check_classifier_output, prepare_onnx
from trtkit.precision.config import CalibrationConfig


@pytest.fixture(scope="module")
def digits():
    return load_images("sample", InputContract(size=64), split="train", limit=400)


@pytest.fixture(scope="module")
def zoo_files(tmp_path_factory, digits):
    folder = tmp_path_factory.mktemp("zoo")
    files = {}
    for name in onnx_zoo.CAFFE2_MODELS:
        model = onnx_zoo.caffe2_zoo(name)
        files[name] = onnx_zoo.save(onnx_zoo.fit_head(model, digits.images, digits.labels),
                                    str(folder / (name + ".onnx")))
    return files


def _run(path, images):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: images[i:i + 1]})[0].reshape(1, -1) for i in range(len(images))])


def test_caffe2_graph_is_normalized_without_an_opset_upgrade(zoo_files, digits, tmp_path):
    src = zoo_files["shufflenet"]
    raw = onnx.load(src)
    assert raw.ir_version == 3 and raw.opset_import[0].version == 9
    assert any(i.name.endswith("__SHAPE") for i in raw.graph.initializer)
    dst = str(tmp_path / "out.onnx")
    summary, notes = prepare_onnx(src, dst)
    text = " ".join(notes)
    assert "removed" in text and "kept opset 9" in text and "made the fixed batch size 1 dynamic" in text
    assert "5 Reshape shape(s)" in text  # the channel shuffle spelled the batch out
    model = onnx.load(dst)
    ops = set(n.op_type for n in model.graph.node)
    assert not ops & {"ConstantOfShape", "Constant", "Dropout", "Sum", "BatchNormalization"}
    assert summary.batch is None and summary.output_kind == "probabilities" and summary.num_classes == 10
    images = digits.images[:6]
    session = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
    together = session.run(None, {summary.input_name: images})[0]  # a batch of 6 through a batch-1 graph's rewrite
    assert np.allclose(together, _run(src, images), atol=1e-5)


def test_four_d_probability_outputs_are_flattened(zoo_files, tmp_path):
    summary, notes = prepare_onnx(zoo_files["squeezenet"], str(tmp_path / "s.onnx"))
    assert summary.output_shape[1:] == [10] and any("flattened the output" in n for n in notes)
    assert any("without applying a softmax" in n for n in notes)


@pytest.fixture(scope="module")
def zoo_builds(zoo_files, tmp_path_factory):
    results = {}
    for name, path in zoo_files.items():
        out = str(tmp_path_factory.mktemp(name) / "engines")
        manifest = build(BuildOptions(source=ModelOptions(onnx=path), out=out, precisions="fp32,fp16,int8", backend="onnxruntime",
                                      throughput_seconds=0, verify_images=300,
                                      calibration=CalibrationConfig(method="minmax", images=256)))
        results[name] = dict((a["precision"], a) for a in manifest["artifacts"])
    return results


@pytest.mark.parametrize("name", onnx_zoo.CAFFE2_MODELS)
def test_zoo_replica_builds_fp32_and_fp16(name, zoo_builds):
    artifacts = zoo_builds[name]
    assert artifacts["fp32"]["verify"]["top1_agreement"] == 1.0
    assert artifacts["fp16"]["verify"]["top1_agreement"] >= 0.97
    assert artifacts["int8"]["int8_encoding"] == "cpu" and artifacts["int8"]["verify"]["images"] == 300


def test_at_least_seven_zoo_replicas_build_int8(zoo_builds):
    agreement = dict((n, a["int8"]["verify"]["top1_agreement"]) for n, a in zoo_builds.items())
    print("INT8 agreement", agreement)
    assert sum(v >= 0.8 for v in agreement.values()) >= 7, agreement


def test_zoo_build_from_the_command_line_prints_no_traceback(zoo_files, tmp_path):
    result = run_cli(["build", "--onnx", zoo_files["inception_v1"], "--precision", "fp32,int8", "--backend",
                      "onnxruntime", "--verify-images", "50", "--bench-seconds", "0", "--calib-images", "64",
                      "--out", str(tmp_path / "o")])
    assert result.returncode == 0, result.stderr[-1500:]
    assert "Traceback" not in result.stderr and "kept opset 9" in result.stderr


# ------------------------------------------------------------------ not image classifiers

def _graph(inputs, outputs, nodes, inits=()):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _conv(name, x, y):
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), name)
    return helper.make_node("Conv", [x, name], [y]), w


def test_graphs_that_are_not_image_classifiers_are_refused_in_one_line(tmp_path):
    image = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 8, 8])
    other = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3, 8, 8])
    conv, w = _conv("w", "a", "y")
    cases = {
        "2 inputs ('a' [1, 3, 8, 8], 'b' [1, 3, 8, 8])": _graph(
            [image, other], [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
            [conv, helper.make_node("Add", ["y", "b"], ["z"])], [w]),
        "'t' has shape [1, 3, 8] (3-D)": _graph(
            [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 3, 8])],
            [helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 3, 8])], [helper.make_node("Relu", ["t"], ["u"])]),
    }
    for words, model in cases.items():
        path = str(tmp_path / "m.onnx")
        onnx.save(model, path)
        with pytest.raises(InputError) as info:
            prepare_onnx(path, str(tmp_path / "out.onnx"))
        assert words in str(info.value) and "\n" not in str(info.value)
        assert not os.path.exists(str(tmp_path / "out.onnx"))
    # a [N, C, H, W] map is a segmentation model (issue 22): refused only when called a classifier
    path = str(tmp_path / "map.onnx")
    onnx.save(_graph([image], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [conv], [w]),
              path)
    with pytest.raises(InputError) as info:
        prepare_onnx(path, str(tmp_path / "out.onnx"), task="classification")
    assert "output 'y' [batch, 4, 8, 8] is a [N, C, H, W] map (segmentation)" in str(info.value)
    assert not os.path.exists(str(tmp_path / "out.onnx"))
    summary, _ = prepare_onnx(path, str(tmp_path / "out.onnx"))
    assert (summary.task, summary.num_classes, summary.output_kind) == ("segmentation", 4, "logits")


def test_an_output_without_a_rank_is_refused():  # what shape inference leaves when it cannot tell
    conv, w = _conv("w", "a", "y")
    model = _graph([helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [conv], [w])
    with pytest.raises(InputError, match="'y' has no fixed rank"):
        check_classifier_output(model)


def test_failed_opset_upgrade_names_the_step_that_needed_it():
    from trtkit.onnx.normalize import upgrade_opset
    conv, w = _conv("w", "a", "y")
    model = _graph([helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [conv], [w])
    model.opset_import[0].version = 9
    model.graph.node[0].input[1] = "missing"  # the converter cannot read this graph
    with pytest.raises(InputError) as info:
        upgrade_opset(model, 13, "the INT8 Q/DQ graph")
    assert "the INT8 Q/DQ graph needs ONNX opset >= 13" in str(info.value)
    assert "FP32/FP16 variants do not need it" in info.value.hint


def test_probabilities_are_compared_as_they_are():
    from trtkit.pipeline.verify import Comparison, compare
    reference = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], np.float32)
    variant = np.array([[0.6, 0.3, 0.1], [0.1, 0.5, 0.4]], np.float32)
    record = compare(variant, reference)
    assert record["top1_agreement"] == 0.5 and record["max_abs_diff"] == pytest.approx(0.2)
    stream = Comparison()
    stream.update(variant, reference)
    assert stream.result()["max_abs_diff"] == pytest.approx(0.2)  # no softmax applied on top
