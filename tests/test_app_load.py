"""trtkit.load(): which artifact a path means, its input contract, predict/logits, and the errors users meet.

Most tests use a tiny ONNX classifier written here (a 1x2x2 input, a MatMul to
3 classes, optionally a Softmax) so that logits and probabilities are known
exactly; the sample build checks the real thing.
"""

import json
import os
import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("PIL")

import trtkit  # noqa: E402
from trtkit.outputs import LOGITS  # noqa: E402

softmax = LOGITS.probabilities  # the one softmax: what an application's probabilities() uses
from trtkit.app.locate import locate  # noqa: E402
from trtkit.contract import InputContract  # noqa: E402
from trtkit.errors import InputError  # noqa: E402

WEIGHTS = np.array([[1.0, 0.0, -1.0], [0.0, 2.0, 0.0], [0.5, 0.5, 0.5], [-1.0, 0.0, 3.0]], dtype=np.float32)
CONTRACT = InputContract(size=2, channels=1, mean=(0.0,), std=(1.0,), resize="stretch",
                         class_names=["cat", "dog", "owl"])


def tiny_onnx(path, batch="N", probabilities=False, contract=CONTRACT, dims=(1, 2, 2)):
    """x (batch, 1, 2, 2) -> flatten -> @ WEIGHTS -> (Softmax) -> y (batch, 3); the contract in its metadata."""
    from onnx import TensorProto, helper
    from trtkit.onnx.load import set_contract_metadata
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], axis=1),
             helper.make_node("MatMul", ["flat", "w"], ["scores" if probabilities else "y"])]
    if probabilities:
        nodes.append(helper.make_node("Softmax", ["scores"], ["y"], axis=1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch] + list(dims))
    graph = helper.make_graph(nodes, "tiny", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
                              initializer=[helper.make_tensor("w", TensorProto.FLOAT, [4, 3], WEIGHTS.reshape(-1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    if contract is not None:
        set_contract_metadata(model, contract)
    onnx.save(model, str(path))
    return str(path)


def tiny_build(folder, artifacts, output_kind=None, selection=None, probabilities=False):
    """A build folder: one tiny ONNX per artifact record (``precision``, ``status``, ``throughput_ips``)."""
    os.makedirs(str(folder), exist_ok=True)
    records = []
    for record in artifacts:
        name = "tiny.{}".format(record["precision"])
        tiny_onnx(os.path.join(str(folder), name + ".onnx"), probabilities=probabilities)
        records.append(dict({"name": name, "backend": "onnxruntime", "path": name + ".onnx", "onnx": name + ".onnx"},
                            **record))
    model = {"name": "tiny", "input": CONTRACT.to_dict(), "num_classes": 3}
    if output_kind:
        model["output_kind"] = output_kind
    manifest = {"manifest_version": 1, "model": model, "artifacts": records,
                "files": sorted(r["path"] for r in records)}
    if selection is not None:
        manifest["selection"] = selection
    with open(os.path.join(str(folder), "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    return str(folder)


def pixels(batch):
    """Raw uint8 2x2 images whose preprocessing (stretch, /255, mean 0, std 1) is ``batch``'s rows."""
    return [np.round(row.reshape(2, 2) * 255).astype(np.uint8) for row in batch]


def test_build_folder_takes_the_fastest_passing_artifact_and_precision_picks(tmp_path):
    folder = tiny_build(tmp_path / "b", [{"precision": "fp32", "status": "ok", "throughput_ips": 100.0},
                                         {"precision": "fp16", "status": "ok", "throughput_ips": 300.0},
                                         {"precision": "int8", "status": "failing", "throughput_ips": 900.0}])
    with trtkit.load(folder) as model:
        assert model.precision == "fp16" and model.backend == "onnxruntime"
        assert model.class_names == CONTRACT.class_names
    assert locate(os.path.join(folder, "manifest.json")).precision == "fp16"
    assert locate(folder, precision="fp32").precision == "fp32"
    assert locate(folder, precision="INT8").precision == "int8"  # asked for by name: loaded, with a warning
    chosen = tiny_build(tmp_path / "c", [{"precision": "fp32", "status": "ok", "throughput_ips": 100.0},
                                         {"precision": "fp16", "status": "ok", "throughput_ips": 300.0}],
                        selection={"chosen": "tiny.fp32"})
    assert locate(chosen).precision == "fp32"  # the manifest's choice beats the fastest


def test_a_failing_artifact_loaded_by_its_file_is_said_to_fail(tmp_path, capsys):
    """A blind test: trtkit.load("efficientnet.int8.onnx") ran a build's failing INT8 silently, while the same
    artifact loaded from the build with precision="int8" was warned about."""
    folder = tiny_build(tmp_path / "b", [{"precision": "fp32", "status": "ok", "throughput_ips": 100.0},
                                         {"precision": "int8", "status": "failing", "throughput_ips": 900.0,
                                          "status_detail": "top-1 agreement 88.64% is below 98%"}])
    capsys.readouterr()
    with trtkit.load(os.path.join(folder, "tiny.int8.onnx")) as model:
        assert model.precision == "int8"
    assert "tiny.int8: top-1 agreement 88.64% is below 98%" in capsys.readouterr().err
    with trtkit.load(os.path.join(folder, "tiny.fp32.onnx")):
        pass
    assert "below" not in capsys.readouterr().err
    # one file verified on two runtimes: passing on OpenVINO, failing on ONNX Runtime, on which a lone file runs
    with open(os.path.join(folder, "manifest.json")) as handle:
        manifest = json.load(handle)
    failing = manifest["artifacts"][1]
    manifest["artifacts"].insert(1, dict(failing, name="tiny.int8-openvino", backend="openvino", status="ok"))
    with open(os.path.join(folder, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    with trtkit.load(os.path.join(folder, "tiny.int8.onnx")):
        pass
    assert "tiny.int8: top-1 agreement 88.64% is below 98%" in capsys.readouterr().err


def test_load_errors_say_what_is_wrong(tmp_path):
    folder = tiny_build(tmp_path / "b", [{"precision": "fp32", "status": "ok", "throughput_ips": 1.0}])
    with pytest.raises(InputError, match="no such file or folder"):
        trtkit.load(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no manifest.json"):
        trtkit.load(str(tmp_path / "empty"))
    with pytest.raises(InputError) as info:
        trtkit.load(folder, precision="int8")
    assert "no int8 artifact" in str(info.value) and "it has fp32" in str(info.value)
    with pytest.raises(InputError, match="no tensorrt artifact"):
        trtkit.load(folder, backend="tensorrt")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="neither a build folder"):
        trtkit.load(str(tmp_path / "notes.txt"))
    failing = tiny_build(tmp_path / "f", [{"precision": "fp32", "status": "failing", "throughput_ips": 1.0}])
    with pytest.raises(InputError, match="passed verification"):
        trtkit.load(failing)
    os.remove(os.path.join(folder, "tiny.fp32.onnx"))
    with pytest.raises(InputError, match="artifact file missing"):
        trtkit.load(folder)
    with pytest.raises(InputError, match="is a fp32 artifact, not fp16"):
        trtkit.load(tiny_onnx(tmp_path / "m.fp32.onnx"), precision="fp16")


def test_logits_and_predict_on_every_input_kind(tmp_path):
    batch = np.random.RandomState(0).randint(0, 256, (7, 1, 2, 2)).astype(np.float32) / 255.0
    expected = batch.reshape(7, 4) @ WEIGHTS
    from PIL import Image
    files = []
    for i, image in enumerate(pixels(batch)):
        files.append(str(tmp_path / "{}.png".format(i)))
        Image.fromarray(image, "L").save(files[-1])
    with trtkit.load(tiny_onnx(tmp_path / "m.onnx"), batch_size=3) as model:
        assert model.batch_size == 3 and model.num_classes == 3
        for inputs in (batch, list(batch), pixels(batch), files, [Image.open(f) for f in files],
                       [open(f, "rb").read() for f in files], np.stack(pixels(batch))[..., None]):
            np.testing.assert_allclose(model.logits(inputs), expected, atol=1e-5)
        top = model.predict(files, top_k=2)
        probabilities = softmax(expected)
        assert len(top) == 7 and all(len(t) == 2 for t in top)
        for row, result in zip(probabilities, top):
            best = int(row.argmax())
            assert result[0][0] == best and result[0][1] == CONTRACT.class_names[best]
            assert result[0][2] == pytest.approx(float(row[best]), abs=1e-6) and result[0][2] >= result[1][2]
        assert len(model.predict(files[0], top_k=10)[0]) == 3  # one path, top-k capped at the class count
        np.testing.assert_allclose(model.probabilities(batch).sum(axis=1), 1.0, atol=1e-6)
        assert model.logits([]).shape == (0, 3)


def test_probabilities_are_not_softmaxed_twice(tmp_path):
    batch = np.random.RandomState(1).rand(5, 1, 2, 2).astype(np.float32)
    expected = softmax(batch.reshape(5, 4) @ WEIGHTS)
    records = [{"precision": "fp32", "status": "ok", "throughput_ips": 1.0}]
    with trtkit.load(tiny_build(tmp_path / "p", records, output_kind="probabilities", probabilities=True)) as model:
        assert model.output_kind == "probabilities"
        np.testing.assert_allclose(model.logits(batch), expected, atol=1e-6)  # the model's own output
        np.testing.assert_allclose(model.probabilities(batch), expected, atol=1e-6)
        top = model.predict(batch, top_k=3)
        np.testing.assert_allclose([[p for _, _, p in t] for t in top], -np.sort(-expected, axis=1), atol=1e-6)
    with trtkit.load(tiny_build(tmp_path / "l", records, probabilities=True)) as model:  # said logits: softmaxed
        assert model.output_kind == "logits"
        np.testing.assert_allclose(model.probabilities(batch), softmax(expected), atol=1e-6)


def test_large_inputs_run_in_batches_a_fixed_batch_model_accepts(tmp_path):
    """A graph with a fixed batch of 4 gets every chunk padded to 4; 10 images come back in order."""
    batch = np.random.RandomState(2).rand(10, 1, 2, 2).astype(np.float32)
    with trtkit.load(tiny_onnx(tmp_path / "fixed.onnx", batch=4), batch_size=32) as model:
        assert model.runner.batch_range() == (4, 4, 4) and model.batch_size == 4
        np.testing.assert_allclose(model.logits(batch), batch.reshape(10, 4) @ WEIGHTS, atol=1e-5)
        assert len(model.predict(list(batch)[:3])) == 3


def test_bad_inputs_are_input_errors(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with trtkit.load(tiny_onnx(tmp_path / "m.onnx")) as model:
        with pytest.raises(InputError, match="bad.png as an image"):
            model.predict([str(tmp_path / "bad.png")])
        with pytest.raises(InputError, match="image not found"):
            model.predict(str(tmp_path / "missing.png"))
        with pytest.raises(InputError, match="must be 1x2x2"):
            model.logits(np.zeros((2, 3, 2, 2), dtype=np.float32))
        with pytest.raises(InputError, match="no image"):
            model.predict(np.zeros((5, 5, 5), dtype=np.uint8))
        with pytest.raises(InputError, match="int32"):
            model.predict(np.zeros((2, 2), dtype=np.int32))
        with pytest.raises(InputError, match="top_k"):
            model.predict(np.zeros((2, 2), dtype=np.uint8), top_k=0)


def test_lone_onnx_contract_from_metadata_manifest_or_fixed_dims(tmp_path, capsys):
    with trtkit.load(tiny_onnx(tmp_path / "meta.onnx")) as model:
        assert model.contract == CONTRACT  # recorded by a trtkit export
    bare = tiny_onnx(tmp_path / "bare.onnx", contract=None)
    capsys.readouterr()
    with trtkit.load(bare) as model:
        assert model.contract.shape == (1, 2, 2) and model.class_names is None
        assert model.predict(np.zeros((1, 1, 2, 2), np.float32))[0][0][1] is None
    assert "records no input contract" in capsys.readouterr().err
    with pytest.raises(InputError, match="cannot tell what"):
        trtkit.load(tiny_onnx(tmp_path / "dynamic.onnx", contract=None, dims=(1, "h", "w")))
    folder = tiny_build(tmp_path / "b", [{"precision": "fp16", "status": "ok", "throughput_ips": 1.0}])
    shutil.copyfile(bare, os.path.join(folder, "tiny.fp16.onnx"))  # no metadata: the manifest beside it says
    target = locate(os.path.join(folder, "tiny.fp16.onnx"))
    assert target.contract == CONTRACT and target.precision == "fp16" and target.artifact["name"] == "tiny.fp16"


def test_lone_engine_contract_from_its_sidecar_or_an_error(tmp_path, capsys):
    from trtkit.backends.tensorrt.sidecar import make_sidecar, write_sidecar
    engine = str(tmp_path / "m.fp16.engine")
    with open(engine, "wb") as handle:
        handle.write(b"\0" * 64)
    with pytest.raises(InputError, match="no sidecar"):
        locate(engine)
    io = [("x", True, [-1, 3, 24, 40], "float32"), ("y", False, [-1, 5], "float32")]
    write_sidecar(engine, make_sidecar(engine, "tensorrt-rtx", (1, 2, 0), None, "fp16", io,
                                       {"x": [[1, 3, 24, 40], [4, 3, 24, 40], [16, 3, 24, 40]]}, "0" * 64, 1.0))
    capsys.readouterr()
    target = locate(engine)
    assert target.backend == "tensorrt-rtx" and target.precision == "fp16"
    assert (target.contract.channels, target.contract.height, target.contract.width) == (3, 24, 40)
    assert "records no input contract" in capsys.readouterr().err
    with pytest.raises(InputError, match="not onnxruntime"):
        locate(engine, backend="onnxruntime")


def test_sample_build_predicts_held_out_digits(sample_build):
    from trtkit.data.arrays import digits
    from trtkit.data.sources import split_positions
    out, manifest = sample_build
    images, labels = digits()
    held = split_positions(len(images), "heldout")[:64]
    with trtkit.load(out, precision="fp32") as model:
        assert repr(model).startswith("Classifier(resnet18.fp32, onnxruntime, fp32, input 3x64x64")
        top = model.predict([images[i] for i in held], top_k=3)
    assert np.mean([t[0][0] == labels[i] and t[0][1] == str(labels[i]) for t, i in zip(top, held)]) >= 0.95


def test_serve_picks_passing_artifacts_or_the_named_ones(tmp_path):
    from trtkit.app.locate import read_build, serving_targets
    from trtkit.app.triton_models import model_names
    manifest = read_build(tiny_build(tmp_path / "b", [
        {"precision": "fp32", "status": "ok", "throughput_ips": 1.0},
        {"precision": "int8", "status": "failing", "throughput_ips": 9.0}]))
    assert [t.precision for t in serving_targets(manifest)] == ["fp32"]
    assert [t.precision for t in serving_targets(manifest, ["int8"])] == ["int8"]  # named: served anyway
    assert model_names(serving_targets(manifest)[0]) == ("tiny_fp32", "tiny_fp32_images")
    assert model_names(locate(tiny_onnx(tmp_path / "m.fp16.onnx"))) == ("m_fp16", "m_fp16_images")
    with pytest.raises(InputError, match="no fp16 artifact"):
        serving_targets(manifest, ["fp32", "fp16"])
