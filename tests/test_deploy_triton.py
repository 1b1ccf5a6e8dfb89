"""export-triton: every config.pbtxt parses as Triton's ModelConfig and matches the artifact it serves.

Engines and their sidecars are real (built by trtkit's TensorRT-RTX backend, or
written by ``sidecar.write_sidecar``): a test that writes its own sidecar would
only check that deploy reads what the test wrote.
"""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import partial_files
from trtkit.backends.base import TensorSpec
from trtkit.backends.tensorrt.sidecar import batch_range, make_sidecar, read_sidecar, write_sidecar
from trtkit.cli import main
from trtkit.deploy import triton, triton_config
from trtkit.errors import InputError

pytest.importorskip("tritonclient")
pytest.importorskip("google.protobuf")

ORT_TO_NUMPY = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int8)": "int8",
                "tensor(int64)": "int64"}


def parse(path):
    with open(path) as handle:
        return triton_config.parse_model_config(handle.read())


def config_io(config):
    """{name: (numpy dtype, dims)} of a ModelConfig's inputs and outputs."""
    pb2 = triton_config.model_config_pb2()
    names = dict((v, k) for k, v in triton_config.TRITON_TYPES.items())
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
    pb2 = triton_config.model_config_pb2()
    for artifact in manifest["artifacts"]:
        model = artifact["name"].replace(".", "_")
        config = parse(os.path.join(repo, model, "config.pbtxt"))
        served = os.path.join(repo, model, "1", "model.onnx")
        assert config.name == model and config.backend == "onnxruntime"
        assert config_io(config) == ort_io(served)
        assert config_io(config)["input"] == ("float32", [3, 64, 64])
        assert config.max_batch_size == triton_config.DEFAULT_MAX_BATCH
        assert list(config.dynamic_batching.preferred_batch_size) == [16, 32]
        # verified on this CPU: served on the CPU (KIND_GPU would not load in a Triton without a GPU)
        assert config.instance_group[0].kind == pb2.ModelInstanceGroup.KIND_CPU
        with open(served, "rb") as a, open(os.path.join(out_dir, artifact["path"]), "rb") as b:
            assert a.read() == b.read()
    assert partial_files(repo) == []
    gpu = str(tmp_path / "gpu")
    assert main(["export-triton", out_dir, "--out", gpu, "--instance-kind", "gpu", "-q"]) == 0
    assert parse(os.path.join(gpu, "resnet18_fp32", "config.pbtxt")).instance_group[0].kind == \
        pb2.ModelInstanceGroup.KIND_GPU
    options = triton_config.TritonOptions()
    assert triton_config.instance_kind_of(options, "plan") == "gpu"
    cuda = {"device": "cuda:0", "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"]}
    assert triton_config.instance_kind_of(options, "onnx", cuda) == "gpu"
    assert triton_config.instance_kind_of(options, "onnx", manifest["artifacts"][0]["ran_on"]) == "cpu"


def test_an_onnx_verified_on_openvino_is_served_by_tritons_openvino_backend(tmp_path):
    """A blind test: --precision auto chose an INT8 ONNX that passed its gate on OpenVINO (98.33%), and
    export-triton wrote it for ONNX Runtime, on which the same file had failed it (96.67%)."""
    pytest.importorskip("openvino")
    from trtkit.pipeline import BuildOptions, build
    out = str(tmp_path / "build")
    manifest = build(BuildOptions(out=out, precisions="fp32", backend="openvino", throughput_seconds=0))
    repo = str(tmp_path / "repo")
    assert main(["export-triton", out, "--out", repo, "-q"]) == 0
    artifact = manifest["artifacts"][0]
    assert artifact["backend"] == "openvino"
    model = artifact["name"].replace(".", "_")
    config = parse(os.path.join(repo, model, "config.pbtxt"))
    pb2 = triton_config.model_config_pb2()
    assert config.backend == "openvino" and config.default_model_filename == "model.onnx"
    assert config.instance_group[0].kind == pb2.ModelInstanceGroup.KIND_CPU
    served = os.path.join(repo, model, "1", "model.onnx")
    assert config_io(config) == ort_io(served)
    with open(served, "rb") as a, open(os.path.join(out, artifact["path"]), "rb") as b:
        assert a.read() == b.read()
    with pytest.raises(InputError, match="OpenVINO, whose Triton backend runs on the CPU"):
        triton.export_repository(out, str(tmp_path / "gpu"), options=triton_config.TritonOptions(instance_kind="gpu"))
    options = triton_config.TritonOptions()
    assert triton_config.triton_backend(options, "onnx", "onnxruntime") == "onnxruntime"
    assert triton_config.triton_backend(options, "plan", "openvino") == "tensorrt"


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
    assert (group.count, group.kind) == (2, triton_config.model_config_pb2().ModelInstanceGroup.KIND_CPU)
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
                                 options=triton_config.TritonOptions(max_batch_size=8))


def _write_manifest(folder, artifacts):
    with open(os.path.join(folder, "manifest.json"), "w") as handle:
        json.dump({"artifacts": artifacts}, handle)


@pytest.mark.parametrize("profile, batching", [
    ({"x": [[1, 3, 32, 32], [8, 3, 32, 32], [64, 3, 32, 32]]}, (64, [8, 64])),
    (None, (0, [])),
])
def test_engine_batching_comes_from_the_sidecar_trtkit_writes(tmp_path, profile, batching):
    """The sidecar's profile ({input: [min, opt, max] shapes}) sets max_batch_size; no profile: a fixed batch."""
    engine = str(tmp_path / "m.fp16.engine")
    with open(engine, "wb") as handle:
        handle.write(b"not a real engine, but its size and sha256 are recorded")
    batch = -1 if profile else 2
    io = [("x", True, (batch, 3, 32, 32), "float16"), ("y", False, (batch, 10), "float32")]
    write_sidecar(engine, make_sidecar(engine, "tensorrt-rtx", (1, 2, 0, 54), None, "fp16", io, profile, None, 1.0))
    assert batch_range(read_sidecar(engine)) == ((1, 8, 64) if profile else None)
    _write_manifest(str(tmp_path), [{"name": "m.fp16", "precision": "fp16", "backend": "tensorrt-rtx",
                                     "path": "m.fp16.engine", "status": "built"}])
    written = triton.export_repository(str(tmp_path), str(tmp_path / "repo"))
    config = parse(str(tmp_path / "repo" / "m_fp16" / "config.pbtxt"))
    assert (config.max_batch_size, list(config.dynamic_batching.preferred_batch_size)) == batching
    cut = 1 if profile else 0
    assert config_io(config) == {"x": ("float16", [batch, 3, 32, 32][cut:]), "y": ("float32", [batch, 10][cut:])}
    assert written[0]["inputs"] == [{"name": "x", "dtype": "float16", "shape": [batch, 3, 32, 32]}]
    assert written[0]["io_source"] == "sidecar:m.fp16.engine.json"
    with open(engine, "ab") as handle:
        handle.write(b"changed after the build")
    with pytest.raises(InputError, match="truncated or damaged"):
        triton.export_repository(str(tmp_path), str(tmp_path / "repo2"))


@pytest.fixture(scope="module")
def rtx_build(sample, tmp_path_factory):
    """``trtkit build --backend tensorrt-rtx --precision fp16 --batch 1:4:16`` of the sample model: (out, manifest)."""
    pytest.importorskip("tensorrt_rtx")
    out = str(tmp_path_factory.mktemp("rtx") / "engines")
    assert main(["build", "--backend", "tensorrt-rtx", "--precision", "fp16", "--batch", "1:4:16",
                 "--verify-images", "32", "--bench-seconds", "0", "--out", out, "-q"]) == 0
    with open(os.path.join(out, "manifest.json")) as handle:
        return out, json.load(handle)


def _engine(rtx_build):
    out, manifest = rtx_build
    artifact = [a for a in manifest["artifacts"] if a["precision"] == "fp16"][0]
    return os.path.join(out, artifact["path"])


def test_rtx_engine_built_with_batch_1_4_16_exports_max_batch_16(rtx_build, tmp_path, capsys):
    """Acceptance (issue 11): the config of a real engine built with --batch 1:4:16 is what Triton loads."""
    out, _ = rtx_build
    record = read_sidecar(_engine(rtx_build))
    assert batch_range(record) == (1, 4, 16)
    repo = str(tmp_path / "repo")
    assert main(["export-triton", out, "--out", repo, "--json", "-q"]) == 0
    written = json.loads(capsys.readouterr().out)
    config = parse(os.path.join(repo, "resnet18_fp16", "config.pbtxt"))
    assert config.backend == "tensorrt" and config.name == "resnet18_fp16"
    assert config.max_batch_size == 16
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 16]
    engine_io = dict((t["name"], (t["dtype"], t["shape"][1:])) for t in record["inputs"] + record["outputs"])
    assert config_io(config) == engine_io == {"input": ("float32", [3, 64, 64]), "logits": ("float32", [10])}
    assert written[0]["max_batch_size"] == 16 and written[0]["io_source"] == "sidecar:resnet18.fp16.engine.json"
    with open(os.path.join(repo, "resnet18_fp16", "1", "model.plan"), "rb") as a, open(_engine(rtx_build), "rb") as b:
        assert a.read() == b.read()
    assert partial_files(repo) == []


def test_rtx_engine_limits_are_enforced(rtx_build, tmp_path, capsys):
    out, _ = rtx_build
    assert main(["export-triton", out, "--out", str(tmp_path / "r1"), "--max-batch-size", "32"]) == 2
    assert "above the engine profile's maximum batch 16" in capsys.readouterr().err
    with pytest.raises(InputError, match="GPU only"):
        triton.export_repository(out, str(tmp_path / "r2"), options=triton_config.TritonOptions(instance_kind="cpu"))
    written = triton.export_repository(out, str(tmp_path / "r3"),
                                       options=triton_config.TritonOptions(max_batch_size=8,
                                                                           preferred_batch_sizes=[2, 8]))
    assert (written[0]["max_batch_size"], written[0]["preferred_batch_sizes"]) == (8, [2, 8])
    assert not os.path.exists(str(tmp_path / "r1" / "resnet18_fp16"))


def test_rtx_engine_without_sidecar_takes_io_from_its_source_onnx(rtx_build, tmp_path, capsys):
    """An engine copied without its .json: I/O from the ONNX it was built from; the batch limit must be given."""
    out, manifest = rtx_build
    build = str(tmp_path / "build")
    os.mkdir(build)
    artifact = [a for a in manifest["artifacts"] if a["precision"] == "fp16"][0]
    for name in (artifact["path"], artifact["onnx"], "manifest.json"):
        shutil.copyfile(os.path.join(out, name), os.path.join(build, name))
    written = triton.export_repository(build, str(tmp_path / "r1"),
                                       options=triton_config.TritonOptions(max_batch_size=16))
    config = parse(os.path.join(str(tmp_path / "r1"), "resnet18_fp16", "config.pbtxt"))
    assert config_io(config) == {"input": ("float32", [3, 64, 64]), "logits": ("float32", [10])}
    assert config.max_batch_size == 16 and written[0]["io_source"].startswith("source onnx")
    capsys.readouterr()
    triton.export_repository(build, str(tmp_path / "r2"))
    assert "profile is unknown" in capsys.readouterr().err


def test_bad_inputs():
    with pytest.raises(InputError, match="cannot serve"):
        triton_config.triton_type(TensorSpec("x", (None, 3), "complex64"))
    assert triton_config.triton_type(TensorSpec("x", (None, 3), "float16")) == "TYPE_FP16"
    assert TensorSpec("x", ("batch", 3, None, 0), "float32").dims == [-1, 3, -1, 0]
    with pytest.raises(InputError, match="ModelConfig"):
        triton_config.parse_model_config('name: "m"\nmax_batch_size: "many"\n')
    with pytest.raises(InputError, match="no build manifest"):
        triton.export_repository("/nonexistent/build", "/tmp/unused-repo")
