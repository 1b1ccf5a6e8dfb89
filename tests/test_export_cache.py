"""A rebuild of the same checkpoint reuses its validated FP32 export (``trtkit.onnx.export_cache``), and a cached
graph that does not match the model is caught by the validation every build runs and exported again."""

import glob
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _build(checkpoint, out, **extra):
    import trtkit
    keywords = dict(checkpoint=checkpoint, precision="fp32", backend="onnxruntime", out=str(out), verify_images=32,
                    bench_seconds=0, exporter="torchscript", input_size=32)
    keywords.update(extra)
    return trtkit.build(**keywords)


def _graph(result):
    return os.path.join(result.dir, result.artifact("fp32")["onnx"])


def test_a_rebuild_reuses_the_export_and_a_wrong_entry_is_exported_again(sample, tmp_path, monkeypatch):
    from onnx import numpy_helper
    monkeypatch.setenv("TRTKIT_CACHE", str(tmp_path / "cache"))
    _, checkpoint = sample
    first = _build(checkpoint, tmp_path / "a")
    assert first.manifest["export"]["cached"] is False
    entries = glob.glob(str(tmp_path / "cache" / "export" / "*.onnx"))
    assert len(entries) == 1

    second = _build(checkpoint, tmp_path / "b")
    assert second.manifest["export"]["cached"] is True
    assert second.manifest["export"]["exporter"] == first.manifest["export"]["exporter"]
    with open(_graph(first), "rb") as a, open(_graph(second), "rb") as b:
        assert a.read() == b.read()
    assert second.manifest["export"]["max_abs_diff"] == first.manifest["export"]["max_abs_diff"]

    # another option is another key: a second entry, exported for real
    other = _build(checkpoint, tmp_path / "c", opset=17)
    assert other.manifest["export"]["cached"] is False and other.manifest["export"]["opset"] == 17
    assert len(glob.glob(str(tmp_path / "cache" / "export" / "*.onnx"))) == 2

    # an entry whose graph is not the model's (its first convolution's weights scaled) fails the validation: the
    # build exports again, and the entry is replaced by the right graph
    model = onnx.load(entries[0])
    weight = next(t for t in model.graph.initializer if numpy_helper.to_array(t).ndim == 4)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    onnx.save(model, entries[0])
    third = _build(checkpoint, tmp_path / "d")
    assert third.manifest["export"]["cached"] is False
    assert third.manifest["export"]["max_abs_diff"] == first.manifest["export"]["max_abs_diff"]
    restored = onnx.load(entries[0])
    again = next(t for t in restored.graph.initializer if t.name == weight.name)
    original = next(t for t in onnx.load(_graph(first)).graph.initializer if t.name == weight.name)
    assert np.array_equal(numpy_helper.to_array(again), numpy_helper.to_array(original))


def test_no_key_for_a_module_object_or_with_the_cache_off(monkeypatch):
    from trtkit.onnx.export_cache import export_key
    from trtkit.pipeline.source import ModelOptions
    options = ModelOptions()
    info = {"source": "checkpoint", "sha256": "ab" * 32, "name": "resnet18", "input": {"size": 64}}
    assert export_key(info, options, None)
    assert export_key(info, options, (8, 2)) != export_key(info, options, None)  # the parser's opset limit counts
    assert export_key(dict(info, source="module"), options, None) is None  # its code is not in any key
    monkeypatch.setenv("TRTKIT_EXPORT_CACHE", "0")
    assert export_key(info, options, None) is None
