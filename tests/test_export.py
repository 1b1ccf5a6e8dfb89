"""FP32 ONNX matches PyTorch; FP16 is half the size and agrees; foreign ONNX files build."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from trtkit.pipeline import BuildOptions, ModelOptions, build  # noqa: E402
from trtkit.data import load_images  # noqa: E402
from trtkit.onnx.export import export_onnx, torch_logits, validate_export  # noqa: E402


@pytest.fixture(scope="module")
def heldout(sample):
    model, _ = sample
    return load_images("sample", model.input_contract, split="heldout")


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_fp32_onnx_matches_pytorch(tmp_path, sample, heldout, exporter):
    model, _ = sample
    path = str(tmp_path / "m.onnx")
    used, opset = export_onnx(model, path, exporter=exporter)
    assert used == exporter
    reference = torch_logits(model, heldout.images)
    diff, agreement = validate_export(path, reference, heldout.images)
    assert diff <= 1e-3
    assert agreement == 1.0
    assert not os.path.exists(path + ".data")  # one self-contained file


def test_validation_rejects_a_wrong_export(tmp_path, sample, heldout):
    from trtkit.errors import VerificationFailed
    model, _ = sample
    path = str(tmp_path / "m.onnx")
    export_onnx(model, path, exporter="torchscript")
    reference = torch_logits(model, heldout.images[:16]) + 0.01
    with pytest.raises(VerificationFailed, match="differs from PyTorch"):
        validate_export(path, reference, heldout.images[:16])


def test_sample_build_manifest(sample_build):
    out, manifest = sample_build
    assert manifest["trtkit_version"]
    model = manifest["model"]
    assert model["name"] == "resnet18" and model["num_classes"] == 10 and model["input"]["size"] == 64
    assert len(model["sha256"]) == 64
    by_precision = dict((a["precision"], a) for a in manifest["artifacts"])
    assert set(by_precision) == {"fp32", "fp16"}
    for artifact in manifest["artifacts"]:
        path = os.path.join(out, artifact["path"])
        assert os.path.getsize(path) == artifact["bytes"]
        for key in ("top1_agreement", "accuracy", "reference_accuracy", "max_abs_diff"):
            assert artifact["verify"][key] is not None
        assert artifact["throughput_ips"] > 0
    fp32, fp16 = by_precision["fp32"], by_precision["fp16"]
    assert fp32["verify"]["top1_agreement"] == 1.0 and fp32["verify"]["max_abs_diff"] <= 1e-3
    assert fp16["verify"]["top1_agreement"] >= 0.99
    assert 0.45 < fp16["bytes"] / float(fp32["bytes"]) < 0.55
    assert fp32["verify"]["reference_accuracy"] >= 0.95
    assert manifest["export"]["max_abs_diff"] <= 1e-3
    fp16_model = onnx.load(os.path.join(out, fp16["path"]))
    assert fp16_model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # FP32 I/O
    assert fp16_model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in fp16_model.graph.initializer)
    leftovers = [n for n in os.listdir(out) if n.startswith(".")]
    assert leftovers == []


def _foreign_onnx(model, path, batch=4):
    """An ONNX file as older tools write it: opset 9, initializers as inputs, fixed batch, odd names."""
    example = torch.zeros((batch,) + model.input_contract.shape)
    kwargs = dict(opset_version=9, keep_initializers_as_inputs=True, input_names=["data_0"],
                  output_names=["prob_out"], do_constant_folding=False)
    import inspect
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), path, **kwargs)


def test_foreign_onnx_builds_and_verifies(tmp_path, sample):
    model, _ = sample
    src = str(tmp_path / "foreign.onnx")
    _foreign_onnx(model, src)
    raw = onnx.load(src)
    assert raw.opset_import[0].version == 9
    assert len(raw.graph.input) > 1  # initializers listed as inputs
    out = str(tmp_path / "out")
    manifest = build(BuildOptions(source=ModelOptions(onnx=src), out=out, precisions="fp32,fp16", backend="onnxruntime",
                                  throughput_seconds=0.2, verify_images=100))
    notes = " ".join(manifest["model"]["notes"])
    assert "removed" in notes and "kept opset 9" in notes and "batch" in notes
    assert manifest["model"]["input_name"] == "data_0"
    fp32 = manifest["artifacts"][0]
    assert fp32["verify"]["top1_agreement"] == 1.0
    assert fp32["verify"]["accuracy"] >= 0.95  # real labels: the sample digits
    assert manifest["artifacts"][1]["verify"]["top1_agreement"] >= 0.99


def _fixed_batch_graph(path, mix_batch):
    """Reshape to [4, -1] then MatMul; ``mix_batch`` subtracts the batch mean (each row depends on the others)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(0)
    weight = numpy_helper.from_array(rng.randn(3 * 8 * 8, 5).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([4, -1], dtype=np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["y" if not mix_batch else "z"])]
    if mix_batch:
        nodes += [helper.make_node("ReduceMean", ["z"], ["m"], axes=[0], keepdims=1),
                  helper.make_node("Sub", ["z", "m"], ["y"])]
    graph = helper.make_graph(nodes, "fixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])], [weight, shape])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8  # what every ONNX Runtime reads
    onnx.save(proto, path)
    return path


def test_fixed_batch_onnx_keeps_batches(tmp_path):
    """A graph whose rows depend on each other keeps its batch of 4 and still verifies; one that only spells
    the batch out in a Reshape shape gets a dynamic batch."""
    path = _fixed_batch_graph(str(tmp_path / "fixed.onnx"), mix_batch=True)
    manifest = build(BuildOptions(source=ModelOptions(onnx=path), out=str(tmp_path / "o"), precisions="fp32", backend="onnxruntime",
                                  throughput_seconds=0, verify_images=10))
    assert any("kept the fixed batch size 4" in n for n in manifest["model"]["notes"])
    assert manifest["artifacts"][0]["verify"]["top1_agreement"] == 1.0
    assert manifest["artifacts"][0]["verify"]["accuracy"] is None  # 5 outputs vs 10 digit classes
    path = _fixed_batch_graph(str(tmp_path / "spelled.onnx"), mix_batch=False)
    manifest = build(BuildOptions(source=ModelOptions(onnx=path), out=str(tmp_path / "p"), precisions="fp32", backend="onnxruntime",
                                  throughput_seconds=0, verify_images=10))
    assert any("made the fixed batch size 4 dynamic (1 Reshape" in n for n in manifest["model"]["notes"])
    assert manifest["artifacts"][0]["verify"]["top1_agreement"] == 1.0
