"""Cross-layer equalization before INT8 (precision.equalize, --int8-equalize cle).

The synthetic graph is an equalization undone on purpose: conv1's output channels are scaled by factors from
1/30 to 30 and conv2's input channels by the inverse, which changes nothing in FP32 but leaves most channels of
the per-tensor quantized activation between them a few steps of the INT8 grid. Equalization must find the
chain (through a ReLU, and through a ReLU6 whose clip is inactive; depthwise -> pointwise), keep the FP32
function, and give the INT8 graph back its SQNR; a ReLU6 channel whose clip is active keeps its scale, and a
hard-swish chain is not touched.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _graph(activation="Relu", depthwise=False, spread=30.0, batch=None):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.RandomState(0)
    channels = 16
    w1 = (rng.randn(channels, 3, 3, 3) * 0.3).astype(np.float32)
    b1 = (rng.rand(channels) * 0.1).astype(np.float32)
    factors = np.exp(np.linspace(-np.log(spread), np.log(spread), channels)).astype(np.float32)
    if activation == "Clip":  # ReLU6: keep every channel below its clip but the last (active)
        factors = factors / factors.max() * 0.8
    if depthwise:
        w2 = (rng.randn(channels, 1, 3, 3) * 0.3).astype(np.float32)
    else:
        w2 = (rng.randn(8, channels, 3, 3) * 0.3).astype(np.float32)
    w1 = w1 * factors.reshape(-1, 1, 1, 1)
    b1 = b1 * factors
    w2 = w2 / (factors.reshape(-1, 1, 1, 1) if depthwise else factors.reshape(1, -1, 1, 1))
    if activation == "Clip":
        w1[-1] *= 40.0  # this channel's pre-activation passes 6: its clip is active
        b1[-1] *= 40.0
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")]
    if activation == "Clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="relu6"))
    else:
        nodes.append(helper.make_node(activation, ["c1"], ["a1"], name="act"))
    extra = {"group": channels} if depthwise else {}
    nodes += [helper.make_node("Conv", ["a1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], **extra),
              helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="gap"),
              helper.make_node("Flatten", ["p"], ["y"], name="flat")]
    graph = helper.make_graph(nodes, "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opset = 14 if activation == "HardSwish" else 13
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _images(seed, count=32):
    return np.random.RandomState(seed).rand(count, 3, 16, 16).astype(np.float32)


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0].astype(np.float64)


def _write(model, ranges):
    from trtkit.precision.qdq import write_qdq
    return write_qdq(model, ranges, "tensorrt")


def _int8_sqnr(model, calib, held):
    from trtkit.precision.equalize import int8_sqnr
    return int8_sqnr(model, calib, held, _write, "minmax")


@pytest.mark.parametrize("activation,depthwise", [("Relu", False), ("Relu", True), ("Clip", True)])
def test_equalization_keeps_fp32_and_raises_int8_sqnr(activation, depthwise):
    from trtkit.precision.equalize import equalize
    model = _graph(activation, depthwise)
    calib, held = _images(1), _images(2)
    done = equalize(model, calib)
    assert done.record["pairs"] == 1 and done.record["channels"] >= 12 and done.record["kept"]
    np.testing.assert_allclose(_run(done.model, held), _run(model, held), rtol=1e-4, atol=1e-5)
    before, after = _int8_sqnr(model, calib, held), _int8_sqnr(done.model, calib, held)
    assert after > before + 6.0, (before, after)  # at least one bit of the INT8 grid won back
    guarded = equalize(model, np.concatenate([calib, held]), write=_write, method="minmax")
    assert guarded.record["kept"] and guarded.record["sqnr_db"]["after"] > guarded.record["sqnr_db"]["before"] + 6.0


def test_a_fixed_batch_graph_is_equalized_and_checked():
    from trtkit.precision.equalize import equalize
    model = _graph("Relu", batch=1)
    done = equalize(model, _images(3, 24), write=_write, method="minmax")
    assert done.record["kept"] is True and done.record["sqnr_db"]["images"] == 8
    assert all(type(v) is float for v in (done.record["sqnr_db"]["before"], done.record["sqnr_db"]["after"]))


def test_an_active_relu6_clip_keeps_its_channel():
    from onnx import numpy_helper
    from trtkit.precision.equalize import equalize
    model = _graph("Clip", depthwise=True)
    done = equalize(model, _images(1))
    weights = [dict((i.name, numpy_helper.to_array(i)) for i in m.graph.initializer) for m in (model, done.model)]
    assert done.record["clip_kept"] == 1
    np.testing.assert_array_equal(weights[1]["w1"][-1], weights[0]["w1"][-1])  # the clipped channel: as it was
    assert not np.allclose(weights[1]["w1"][0], weights[0]["w1"][0])  # a small one: scaled up
    assert (weights[1]["w1"][:-1] != weights[0]["w1"][:-1]).any()


def test_an_already_equal_graph_is_left_as_it_is_and_hardswish_untouched():
    from trtkit.precision.equalize import equalize, find_pairs
    model = _graph("Relu", spread=1.0)
    calib, held = _images(1), _images(2)
    done = equalize(model, np.concatenate([calib, held]), write=_write, method="minmax")
    np.testing.assert_allclose(_run(done.model, held), _run(model, held), rtol=1e-4, atol=1e-5)
    # kept only where the INT8 outputs come closer to FP32: never worse on the images it checked
    assert _int8_sqnr(done.model, calib, held) >= _int8_sqnr(model, calib, held)
    assert find_pairs(_graph("HardSwish")) == []
    assert equalize(_graph("HardSwish"), calib).record["channels"] == 0


def test_the_option_is_checked_and_recorded():
    from trtkit.errors import InputError
    from trtkit.precision.config import CalibrationConfig
    assert CalibrationConfig().equalize == "off"
    config = CalibrationConfig.from_keywords(int8_equalize="cle")
    assert config.equalize == "cle" and config.to_dict()["equalize"] == "cle"
    with pytest.raises(InputError):
        CalibrationConfig(equalize="always")


def test_convs_sharing_a_bias_tensor_are_equalized_and_keep_fp32():
    """A converter merges equal constants (tf2onnx gives 28 of the 63 convs of MediaPipe's palm detector 4 bias
    tensors): conv2 and a third conv read one bias. Found no chain before (each conv must own its tensors to take
    its scales); now each conv gets its own copy, and the function stays FP32's."""
    from onnx import helper, numpy_helper
    from trtkit.precision.equalize import equalize
    model = _graph("Relu", depthwise=True)
    rng = np.random.RandomState(1)
    w3 = (rng.randn(16, 1, 3, 3) * 0.3 / np.exp(np.linspace(-3, 3, 16)).reshape(-1, 1, 1, 1)).astype(np.float32)
    model.graph.initializer.extend([numpy_helper.from_array(np.full(16, 0.05, np.float32), "shared"),
                                    numpy_helper.from_array(w3, "w3")])
    nodes = list(model.graph.node)
    nodes[2].input.append("shared")  # conv2: depthwise, now with the shared bias
    nodes[3].input[0] = "c3"
    nodes.insert(3, helper.make_node("Conv", ["c2", "w3", "shared"], ["c3"], name="conv3", pads=[1, 1, 1, 1], group=16))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    calib, held = _images(1), _images(2)
    done = equalize(model, calib)
    assert done.record["pairs"] == 2 and done.record["biases_untied"] == 1 and done.record["channels"] >= 12
    np.testing.assert_allclose(_run(done.model, held), _run(model, held), rtol=1e-4, atol=1e-5)
    assert _int8_sqnr(done.model, calib, held) > _int8_sqnr(model, calib, held) + 6.0
