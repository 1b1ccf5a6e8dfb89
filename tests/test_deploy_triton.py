"""export-triton: every config.pbtxt parses as Triton's ModelConfig and matches the artifact it serves."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import partial_files
from trtkit.cli import main
from trtkit.deploy import triton
from trtkit.errors import InputError

pytest.importorskip("tritonclient")
pytest.importorskip("google.protobuf")

ORT_TO_NUMPY = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int8)": "int8",
                "tensor(int64)": "int64"}


def parse(path):
    with open(path) as handle:
        return triton.parse_model_config(handle.read())


def config_io(config):
    """{name: (numpy dtype, dims)} of a ModelConfig's inputs and outputs."""
    pb2 = triton.model_config_pb2()
    names = dict((v, k) for k, v in triton.TRITON_TYPES.items())
    return dict((t.name, (names[pb2.DataType.Name(t.data_type)], list(t.dims)))
                for t in list(config.input) + list(config.output))


def ort_io(path, batched=True):
    """The same, read independently with ONNX Runtime; the batch axis dropped when ``batched``."""
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    found = {}
    for t in session.get_inputs() + session.get_outputs():
        dims = [d if isinstance(d, int) else -1 for d in t.shape]
        found[t.name] = (ORT_TO_NUMPY[t.type], dims[1:] if batched else dims)
    return found


def test_onnx_repository_matches_artifacts(sample_build, tmp_path):
    out_dir, manifest = sample_build
    repo = str(tmp_path / "repo")
    assert main(["export-triton", out_dir, "--out", repo, "-q"]) == 0
    assert sorted(os.listdir(repo)) == ["resnet18_fp16", "resnet18_fp32"]
    pb2 = triton.model_config_pb2()
    for artifact in manifest["artifacts"]:
        model = artifact["name"].replace(".", "_")
        config = parse(os.path.join(repo, model, "config.pbtxt"))
        served = os.path.join(repo, model, "1", "model.onnx")
        assert config.name == model and config.backend == "onnxruntime"
        assert config_io(config) == ort_io(served)
        assert config_io(config)["input"] == ("float32", [3, 64, 64])
        assert config.max_batch_size == triton.DEFAULT_MAX_BATCH
        assert list(config.dynamic_batching.preferred_batch_size) == [16, 32]
        assert config.instance_group[0].kind == pb2.ModelInstanceGroup.KIND_GPU
        with open(served, "rb") as a, open(os.path.join(out_dir, artifact["path"]), "rb") as b:
            assert a.read() == b.read()
    assert partial_files(repo) == []


def test_existing_model_needs_force(sample_build, tmp_path, capsys):
    out_dir, _ = sample_build
    repo = str(tmp_path / "repo")
    args = ["export-triton", out_dir, "--out", repo, "--precision", "fp16", "--name", "digits", "-q"]
    assert main(args) == 0
    assert os.listdir(repo) == ["digits"]
    assert main(args + ["--instance-kind", "cpu", "--instances", "2"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(args + ["--instance-kind", "cpu", "--instances", "2", "--force"]) == 0
    group = parse(os.path.join(repo, "digits", "config.pbtxt")).instance_group[0]
    assert (group.count, group.kind) == (2, triton.model_config_pb2().ModelInstanceGroup.KIND_CPU)
    assert partial_files(repo) == []


def test_fixed_batch_and_int8_onnx(tmp_path):
    """A fixed-batch graph gets max_batch_size 0 and full dims; an INT8 Q/DQ ONNX is served like any ONNX."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    build = tmp_path / "build"
    build.mkdir()
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1], np.ones(12, dtype=np.float32))
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    zero = helper.make_tensor("z", TensorProto.INT8, [], [0])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Conv", ["xd", "w"], ["y"])]
    for batch, name in ((2, "fixed"), ("N", "qdq")):
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
                                  initializer=[weight, scale, zero])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
        onnx.save(model, str(build / "{}.int8.onnx".format(name)))
    manifest = {"artifacts": [
        {"name": "{}.int8".format(n), "precision": "int8", "backend": "onnxruntime", "path": "{}.int8.onnx".format(n),
         "onnx": "{}.int8.onnx".format(n), "status": "ok"} for n in ("fixed", "qdq")]}
    (build / "manifest.json").write_text(json.dumps(manifest))
    repo = str(tmp_path / "repo")
    written = triton.export_repository(str(build), repo)
    assert [w["model"] for w in written] == ["fixed_int8", "qdq_int8"]
    fixed = parse(os.path.join(repo, "fixed_int8", "config.pbtxt"))
    assert fixed.max_batch_size == 0 and not fixed.HasField("dynamic_batching")
    assert config_io(fixed) == ort_io(str(build / "fixed.int8.onnx"), batched=False)
    qdq = parse(os.path.join(repo, "qdq_int8", "config.pbtxt"))
    assert qdq.max_batch_size == 32
    assert config_io(qdq) == {"x": ("float32", [3, 8, 8]), "y": ("float32", [4, 8, 8])}
    with pytest.raises(InputError, match="fixed batch"):
        triton.export_repository(str(build), str(tmp_path / "r2"), artifacts=["fixed.int8"],
                                 options=triton.TritonOptions(max_batch_size=8))


def _rtx_build(sample_build, tmp_path, sidecar):
    """A TensorRT-RTX engine of the FP16 sample ONNX (profile batch 1/8/16), in a build folder with a manifest."""
    trt = pytest.importorskip("tensorrt_rtx")
    out_dir, _ = sample_build
    build = tmp_path / "rtx"
    build.mkdir()
    shutil.copy(os.path.join(out_dir, "resnet18.fp16.onnx"), str(build / "resnet18.fp16.onnx"))
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(build / "resnet18.fp16.onnx"))
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    inp = network.get_input(0)
    shape = tuple(inp.shape)
    profile.set_shape(inp.name, (1,) + shape[1:], (8,) + shape[1:], (16,) + shape[1:])
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None
    (build / "resnet18.fp16.engine").write_bytes(bytes(plan))
    tensors = [network.get_input(i) for i in range(network.num_inputs)] + \
              [network.get_output(i) for i in range(network.num_outputs)]
    expected = dict((t.name, (triton.normalize_dtype(t.dtype), list(t.shape)[1:])) for t in tensors)
    if sidecar:
        meta = {"inputs": [{"name": t.name, "shape": list(t.shape), "dtype": str(t.dtype)}
                           for t in tensors[:network.num_inputs]],
                "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": str(t.dtype)}
                            for t in tensors[network.num_inputs:]],
                "profile": {inp.name: {"min": [1] + list(shape[1:]), "opt": [8] + list(shape[1:]),
                                       "max": [16] + list(shape[1:])}}}
        (build / "resnet18.fp16.engine.json").write_text(json.dumps(meta))
    manifest = {"artifacts": [{"name": "resnet18.fp16", "precision": "fp16", "backend": "tensorrt-rtx",
                               "path": "resnet18.fp16.engine", "onnx": "resnet18.fp16.onnx", "status": "built"}]}
    (build / "manifest.json").write_text(json.dumps(manifest))
    return str(build), expected


def test_tensorrt_rtx_plan(sample_build, tmp_path):
    build, expected = _rtx_build(sample_build, tmp_path, sidecar=True)
    repo = str(tmp_path / "repo")
    assert main(["export-triton", build, "--out", repo, "-q"]) == 0
    config = parse(os.path.join(repo, "resnet18_fp16", "config.pbtxt"))
    assert config.backend == "tensorrt"
    assert config_io(config) == expected == {"input": ("float32", [3, 64, 64]), "logits": ("float32", [10])}
    assert config.max_batch_size == 16
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert os.path.getsize(os.path.join(repo, "resnet18_fp16", "1", "model.plan")) == \
        os.path.getsize(os.path.join(build, "resnet18.fp16.engine"))
    with pytest.raises(InputError, match="above the engine profile"):
        triton.export_repository(build, str(tmp_path / "r2"), options=triton.TritonOptions(max_batch_size=32))
    with pytest.raises(InputError, match="GPU only"):
        triton.export_repository(build, str(tmp_path / "r3"), options=triton.TritonOptions(instance_kind="cpu"))
    # without a sidecar the I/O comes from the source ONNX; the batch limit must then be given
    os.remove(os.path.join(build, "resnet18.fp16.engine.json"))
    written = triton.export_repository(build, str(tmp_path / "r4"), options=triton.TritonOptions(max_batch_size=16))
    config = parse(os.path.join(str(tmp_path / "r4"), "resnet18_fp16", "config.pbtxt"))
    assert config_io(config) == expected and config.max_batch_size == 16
    assert written[0]["io_source"].startswith("source onnx")


@pytest.mark.parametrize("meta, batches", [
    ({"inputs": [{"name": "x", "dims": [-1, 3, 32, 32], "dtype": "DataType.HALF"}],
      "outputs": {"y": {"shape": [None, 10], "dtype": "kFLOAT"}},
      "profile": [{"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [64, 3, 32, 32]}]}, (4, 64)),
    ({"inputs": [{"name": "x", "shape": ["batch", 3, 32, 32], "dtype": "float16", "max": [8, 3, 32, 32]}],
      "outputs": [{"name": "y", "shape": [-1, 10], "dtype": "float32"}]}, (None, 8)),
    ({"inputs": [{"name": "x", "shape": [-1, 3, 32, 32], "dtype": "float16"}],
      "outputs": [{"name": "y", "shape": [-1, 10], "dtype": "float32"}], "max_batch_size": 12}, (None, 12)),
])
def test_sidecar_variants(meta, batches):
    io = triton.sidecar_io(meta)
    assert [t.to_dict() for t in io.inputs] == [{"name": "x", "dtype": "float16", "shape": [-1, 3, 32, 32]}]
    assert [t.to_dict() for t in io.outputs] == [{"name": "y", "dtype": "float32", "shape": [-1, 10]}]
    assert (io.opt_batch, io.max_batch) == batches
    config = triton.parse_model_config(triton.model_config_text("m", io, "plan", triton.TritonOptions()))
    assert config.max_batch_size == batches[1] and list(config.input[0].dims) == [3, 32, 32]
    assert config.input[0].data_type == triton.model_config_pb2().TYPE_FP16


def test_bad_inputs():
    assert triton.sidecar_io({"inputs": []}) is None
    with pytest.raises(InputError, match="cannot serve"):
        triton.normalize_dtype("complex64")
    with pytest.raises(InputError, match="ModelConfig"):
        triton.parse_model_config('name: "m"\nmax_batch_size: "many"\n')
    with pytest.raises(InputError, match="no build manifest"):
        triton.export_repository("/nonexistent/build", "/tmp/unused-repo")
