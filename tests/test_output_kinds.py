"""Every output kind real classifiers have, judged by the model's own decision rule in every step.

One small graph of each kind (class logits, softmax, log-softmax, a single logit, a single sigmoid,
multi-label sigmoids, multi-label logits) goes through ``trtkit.build`` and ``trtkit.load``: the kind is
detected (or given) and recorded, whatever build accepts load accepts, and verification compares decisions
by the kind's rule. A one-column output is never judged by an arg-max (always 0: agreement trivially 100 %).
"""

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("PIL")

from conftest import partial_files, run_cli  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from trtkit.errors import InputError  # noqa: E402
from trtkit.outputs import KINDS, OutputKind  # noqa: E402
from trtkit.pipeline.verify import Comparison  # noqa: E402

SIZE = 16
# kind -> (columns, activation, --output-kind to pass or None when the graph tells)
GRAPHS = {
    "logits": (4, None, None),
    "probabilities": (4, "Softmax", None),
    "log-probabilities": (4, "LogSoftmax", None),
    "binary-logit": (1, None, None),
    "binary-probability": (1, "Sigmoid", None),
    "multilabel-probabilities": (4, "Sigmoid", None),
    "multilabel-logits": (4, None, "multilabel-logits"),
}


def classifier_graph(path, columns, activation, seed=0):
    """image [N, 3, 16, 16] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm (centred) [-> activation]."""
    rng = np.random.RandomState(seed)
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", columns])
    inits = [numpy_helper.from_array(rng.randn(8, 3, 3, 3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.randn(columns, 8).astype(np.float32) * 2, "fc_w"),
             numpy_helper.from_array(np.zeros(columns, np.float32), "fc_b")]
    nodes = [helper.make_node("Conv", ["image", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
             helper.make_node("Flatten", ["pool"], ["flat"], axis=1),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["scores" if activation else "out"], transB=1)]
    if activation:
        attrs = {"axis": 1} if activation != "Sigmoid" else {}
        nodes.append(helper.make_node(activation, ["scores"], ["out"], **attrs))
    model = helper.make_model(helper.make_graph(nodes, "kind", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def centre(path, images):
    """Shift the Gemm bias so that each column's score is centred on these images: decisions then vary."""
    model = onnx.load(path)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    features = ort.InferenceSession(_cut(model, "flat"), providers=["CPUExecutionProvider"])
    flat = features.run(None, {"image": images})[0]
    weights = dict((i.name, numpy_helper.to_array(i)) for i in model.graph.initializer)
    bias = -np.median(flat @ weights["fc_w"].T, axis=0).astype(np.float32)
    for init in model.graph.initializer:
        if init.name == "fc_b":
            init.CopyFrom(numpy_helper.from_array(bias, "fc_b"))
    onnx.save(model, path)
    del session
    return path


def _cut(model, tensor):
    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    del cut.graph.output[:]
    cut.graph.output.extend([helper.make_tensor_value_info(tensor, TensorProto.FLOAT, None)])
    return cut.SerializeToString()


@pytest.fixture(scope="module")
def image_folders(tmp_path_factory):
    """Image folders of 2 and of 4 classes (smooth random pictures)."""
    from PIL import Image
    rng = np.random.RandomState(0)
    roots = {}
    for classes in (2, 4):
        root = str(tmp_path_factory.mktemp("kinds{}".format(classes)))
        for c in range(classes):
            os.makedirs(os.path.join(root, "class{}".format(c)))
            for i in range(24):
                base = rng.uniform(0, 255, (4, 4, 3))
                pixels = np.kron(base, np.ones((8, 8, 1))) + rng.normal(0, 20, (32, 32, 3))
                Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(
                    os.path.join(root, "class{}".format(c), "{:02d}.png".format(i)))
        roots[classes] = root
    return roots


def _images(contract, root):
    from trtkit.data import select
    return select(root, contract, split="heldout").load(progress=False).images


@pytest.mark.parametrize("kind", sorted(GRAPHS))
def test_each_kind_builds_loads_and_decides_by_its_rule(kind, image_folders, tmp_path):
    import trtkit
    from trtkit.contract import InputContract
    columns, activation, flag = GRAPHS[kind]
    root = image_folders[2 if columns == 1 else 4]
    contract = InputContract(size=SIZE, resize="stretch")
    images = _images(contract, root)
    path = centre(classifier_graph(str(tmp_path / "m.onnx"), columns, activation), images)
    result = trtkit.build(onnx=path, data=root, precision="fp32,int8", backend="onnxruntime", out=str(tmp_path / "b"),
                          bench_seconds=0, verify_images="all", input_size=SIZE, resize="stretch", output_kind=flag)
    assert result.manifest["model"]["output_kind"] == kind
    for artifact in result.artifacts:
        assert artifact["verify"]["decision"] == kind and artifact["verify"]["images"] == len(images)
    # the ONNX source's FP32 file on ONNX Runtime's CPU provider is the reference: run once, not twice
    fp32, int8 = [a["verify"] for a in sorted(result.artifacts, key=lambda a: a["precision"])]
    assert fp32["is_reference"] is True and fp32["max_abs_diff"] == 0.0 and not int8.get("is_reference")
    expected = OutputKind.parse(kind).decide(ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                                             .run(None, {"image": images})[0])
    loaded = trtkit.load(result.dir, precision="fp32")
    assert loaded.output_kind == kind
    decided = loaded.decide(images)
    assert np.array_equal(decided, expected)
    assert len(np.unique(expected)) > 1, "the graph's decisions should vary across the images"
    predictions = loaded.predict(images, top_k=4 if OutputKind.parse(kind).multilabel else 3)
    if OutputKind.parse(kind).multilabel:  # the positive labels, best first
        assert [sorted(c for c, _, _ in p) for p in predictions] == [sorted(np.nonzero(row)[0]) for row in decided]
    else:  # the decided class first; a binary model has two classes
        assert [p[0][0] for p in predictions] == list(decided)
        assert all(len(p) == (2 if columns == 1 else 3) for p in predictions)


def test_a_one_column_output_is_judged_by_its_sign_never_by_an_arg_max():
    reference = np.array([[2.0], [-1.0], [0.5], [-0.2], [3.0], [-4.0], [1.0], [-1.5], [0.1], [-0.3]], np.float32)
    flipped = reference.copy()
    flipped[[2, 3]] *= -1  # two decisions change; an arg-max over one column would still "agree" 100 %
    comparison = Comparison("binary-logit")
    comparison.update(flipped, reference, labels=(reference[:, 0] > 0).astype(np.int64))
    result = comparison.result()
    assert result["top1_agreement"] == pytest.approx(0.8) and result["decision"] == "binary-logit"
    assert result["reference_accuracy"] == 1.0 and result["accuracy"] == pytest.approx(0.8)
    with pytest.raises(InputError, match="arg-max over it is always 0"):
        Comparison("logits").update(flipped, reference)
    probabilities = Comparison("binary-probability")
    probabilities.update(1 / (1 + np.exp(-flipped)), 1 / (1 + np.exp(-reference)))
    assert probabilities.result()["top1_agreement"] == pytest.approx(0.8)


def test_multilabel_agreement_is_exact_match_and_counts_labels():
    reference = np.array([[2, -1, 1], [-1, -2, 3], [1, 1, 1], [-1, -1, -1]], np.float32)
    variant = reference.copy()
    variant[0, 1] = 0.5  # one label of one image flips
    comparison = Comparison("multilabel-logits")
    comparison.update(variant, reference, labels=np.array([0, 1, 2, 0]))
    result = comparison.result()
    assert result["top1_agreement"] == pytest.approx(0.75) and result["label_agreement"] == pytest.approx(11 / 12.)
    assert result["accuracy"] is None  # folder labels are one class per image


def test_a_verification_of_nothing_fails_its_gate():
    from trtkit.pipeline.gate import judge as _judge
    record = {"name": "m.int8", "precision": "int8", "verify": Comparison().result()}
    assert record["verify"]["top1_agreement"] is None
    _judge(record, 0.98)
    assert record["status"] == "failing" and "no image" in record["status_detail"]


def test_every_kind_parses_and_a_typo_is_told(tmp_path):
    for name, kind in KINDS.items():
        assert OutputKind.parse(name) is kind
    with pytest.raises(InputError, match="did you mean binary-logit"):
        OutputKind.parse("binary-logits")


def _refused(args, out, *phrases):
    proc = run_cli(["build", "--backend", "onnxruntime", "--precision", "fp32", "--bench-seconds", "0",
                    "--verify-images", "8", "--out", out] + args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    for phrase in phrases:
        assert phrase in last, last
    assert not os.path.exists(os.path.join(out, "manifest.json")) and not partial_files(os.path.dirname(out))


def flattened_fcn(path):
    """image [N, 3, H, W] -> Conv (4 maps) -> Reshape [N, -1]: its column count (4 x H x W) is not in the graph."""
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", "columns"])
    inits = [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"),
             numpy_helper.from_array(np.array([0, -1], np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["image", "w"], ["maps"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["maps", "flat"], ["out"])]
    model = helper.make_model(helper.make_graph(nodes, "fcn", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_an_output_kind_that_cannot_be_told_or_does_not_fit_is_one_line(image_folders, tmp_path):
    dynamic = flattened_fcn(str(tmp_path / "fcn.onnx"))
    _refused(["--onnx", dynamic, "--data", image_folders[4], "--input-size", "16"], str(tmp_path / "a"),
             "cannot tell what it holds", "--output-kind")
    one = classifier_graph(str(tmp_path / "one.onnx"), 1, None)
    _refused(["--onnx", one, "--data", image_folders[2], "--output-kind", "logits"], str(tmp_path / "b"),
             "one column", "binary-logit")


def test_a_checkpoint_with_a_one_logit_head_builds_as_binary_from_the_command_line(tmp_path):
    """A blind test: an EfficientNet-B0 checkpoint with a one-logit head was refused by `trtkit build
    --checkpoint` ("one column"), and with --output-kind binary-logit took 1 class and no names, while
    trtkit.build(model=...) of the same weights read binary-logit, 2 classes and the folder names."""
    torch = pytest.importorskip("torch")
    from trtkit.models.classifiers import create_model
    model = create_model("resnet18", num_classes=1)
    checkpoint = str(tmp_path / "binary.pth")
    torch.save(model.state_dict(), checkpoint)
    out = str(tmp_path / "b")
    done = run_cli(["build", "--checkpoint", checkpoint, "--model", "resnet18", "--input-size", "32",
                    "--data", "sample", "--precision", "fp32", "--bench-seconds", "0", "--verify-images", "8",
                    "--out", out, "-q"])
    assert done.returncode == 0, done.stderr
    import json
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert (manifest["model"]["output_kind"], manifest["model"]["num_classes"]) == ("binary-logit", 2)
