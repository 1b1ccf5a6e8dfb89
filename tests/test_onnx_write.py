"""Big models without copies of their weights: the piece-by-piece writer (``onnx.write.save``), the weights
written beside a light graph (``onnx.weights.save_split``, ``light_copy``), FP16 of a big tensor in chunks
(``precision.fp16``). Each must give the bytes the whole-model path gives, and the writer must not hold the
serialized copies ``onnx.save`` holds (measured by the peak resident set, ``VmHWM``)."""

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

from trtkit.onnx import weights, write  # noqa: E402


def _model(big=(512, 1024)):
    """A Conv + Gemm graph with a big Gemm weight, metadata after the graph, a doc string and an explicit
    empty field: the fields on both sides of the graph and of each tensor's raw data."""
    rng = np.random.RandomState(0)
    w1 = numpy_helper.from_array(rng.randn(8, 3, 3, 3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.randn(*big).astype(np.float32), "w2")
    w2.doc_string = "after raw_data"
    shape = numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Reshape", ["c", "shape"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1, name="fc", doc_string="")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, ["N", 3, 8, 16])],
                              [helper.make_tensor_value_info("y", 1, ["N", big[0]])], [w1, w2, shape],
                              doc_string="graph doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="test")
    helper.set_model_props(model, {"trtkit": "after the graph"})
    return model


def _bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def test_save_writes_the_bytes_of_onnx_save(tmp_path):
    model = _model()
    assert len(model.graph.initializer[1].raw_data) > write.SMALL_BYTES  # the big tensor's path is taken
    onnx.save(model, str(tmp_path / "ref.onnx"))
    write.save(model, str(tmp_path / "ours.onnx"))
    assert _bytes(str(tmp_path / "ours.onnx")) == _bytes(str(tmp_path / "ref.onnx"))
    assert onnx.load(str(tmp_path / "ours.onnx")) == model


def test_light_copy_and_split_keep_the_graph(tmp_path):
    model = _model()
    light = weights.light_copy(model)
    big = light.graph.initializer[1]
    assert big.data_location == big.EXTERNAL and not big.raw_data and list(big.dims) == [512, 1024]
    assert light.graph.initializer[0] == model.graph.initializer[0]  # small tensors stay as they are
    inferred = onnx.shape_inference.infer_shapes(light)
    assert [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim][1:] == [512]
    path = str(tmp_path / "split.onnx")
    moved = weights.save_split(model, path)
    assert moved == ["w2"] and model.graph.initializer[1].raw_data  # written out, the model left as it was
    assert os.path.getsize(str(tmp_path / weights.FILE)) == 512 * 1024 * 4
    again = onnx.load(path)  # its external data read back
    np.testing.assert_array_equal(numpy_helper.to_array(again.graph.initializer[1]),
                                  numpy_helper.to_array(_model().graph.initializer[1]))


def test_fp16_in_chunks_gives_the_converters_bytes(monkeypatch):
    from trtkit.precision import fp16
    rng = np.random.RandomState(1)
    values = (rng.randn(70000) * 3e4).astype(np.float32)
    values[:4] = [1e-9, -1e-9, 1e6, -np.inf]  # clamped the converter's way
    convert, _ = fp16._converter()
    import sys
    module = sys.modules[convert.__module__]
    whole = module.convert_tensor_float_to_float16(numpy_helper.from_array(values, "t"))
    monkeypatch.setattr(fp16, "CHUNK", 4096)  # 17 chunks, the last one partial
    with fp16._ChunkedTensors(module) as chunked:
        assert module.convert_tensor_float_to_float16 == chunked.convert
        ours = module.convert_tensor_float_to_float16(numpy_helper.from_array(values, "t"))
    assert module.convert_tensor_float_to_float16 == chunked.original  # put back
    assert ours.SerializeToString() == whole.SerializeToString()


def _hwm_reset():
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except (IOError, OSError):
        pytest.skip("no /proc/self/clear_refs to reset the peak resident set")


def _status_mb(key):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) / 1024.0
    pytest.skip("no {} in /proc/self/status".format(key))


def test_save_holds_no_serialized_copy_of_the_model(tmp_path):
    """Saving a 64 MB model: ``onnx.save`` peaks at several times the model above the process (its ByteSize and
    SerializeToString each encode the whole model); the writer at about one tensor."""
    model = _model(big=(4096, 4096))
    size_mb = 4096 * 4096 * 4 / 2.0 ** 20
    path = str(tmp_path / "big.onnx")
    _hwm_reset()
    before = _status_mb("VmRSS")
    write.save(model, path)
    ours = _status_mb("VmHWM") - before
    _hwm_reset()
    before = _status_mb("VmRSS")
    onnx.save(model, str(tmp_path / "ref.onnx"))
    theirs = _status_mb("VmHWM") - before
    assert ours < 1.25 * size_mb, (ours, theirs)
    assert theirs > 1.75 * size_mb, (ours, theirs)  # what the writer is for (if onnx.save stops copying, it says so)
