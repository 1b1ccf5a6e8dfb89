"""The TensorRT runner and its GPU buffers, as far as a machine without a GPU can check them.

A real TensorRT-RTX engine (a one-convolution ONNX, built ahead of time in a
fraction of a second) stands in for a model. Which GPU is "here" comes from
trtkit's own probe (``gpu.probe``), replaced per test; TensorRT is never
imitated. Buffer sizing is a pure function; the buffers themselves are tested
only where a GPU is (torch CUDA, pycuda), on the real device.
"""

import os

import numpy as np
import pytest

from trtkit.backends.tensorrt import api, gpu as gpu_probe
from trtkit.backends.tensorrt.runner import TensorRTRunner, probe_engine, unrunnable_reason
from trtkit.deps import available
from trtkit.errors import DeviceUnavailable, InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TENSORRT_DIR = os.path.join(ROOT, "trtkit", "backends", "tensorrt")
H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "count": 1}
RTX_3090 = {"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6", "count": 1}
needs_rtx = pytest.mark.skipif(not (available("tensorrt_rtx") and available("onnx")),
                               reason="tensorrt-rtx-cu12 and onnx are needed")


def _tiny_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    weight = numpy_helper.from_array(np.random.RandomState(0).randn(4, 3, 3, 3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]), helper.make_node("Flatten", ["g"], ["logits"])]
    graph = helper.make_graph(nodes, "tiny",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    """A TensorRT-RTX FP32 engine (+ sidecar) of a one-convolution model, built for RTX's default targets."""
    from trtkit.backends.base import BuildInputs
    from trtkit.backends.tensorrt.builder import build_engine
    from trtkit.contract import InputContract
    folder = tmp_path_factory.mktemp("tiny")
    onnx_path = _tiny_onnx(str(folder / "tiny.onnx"))
    engine = str(folder / "tiny.fp32.engine")
    saved = dict(gpu_probe._CACHE)
    gpu_probe._CACHE["devices"] = []  # build ahead of time even on a GPU machine: RTX's default target set
    try:
        build_engine("tensorrt-rtx", onnx_path, "fp32", engine,
                     BuildInputs(contract=InputContract(size=8), default_batch=(1, 2, 4)))
    finally:
        gpu_probe._CACHE.clear()
        gpu_probe._CACHE.update(saved)
    return engine


@needs_rtx
def test_rtx_engine_on_a_gpu_without_a_target_is_unavailable_with_the_reason(tiny_engine, monkeypatch):
    import tensorrt_rtx as trt
    version = ".".join(str(p) for p in api.version_tuple(trt)[:2])
    monkeypatch.setattr(gpu_probe, "probe", lambda: H100)
    with pytest.raises(DeviceUnavailable) as info:
        TensorRTRunner(tiny_engine, "tensorrt-rtx").check()
    assert "TensorRT-RTX {} has no target for NVIDIA H100 80GB HBM3 (SM 9.0)".format(version) in str(info.value)
    assert "8.6" in info.value.hint and "--backend tensorrt" in info.value.hint
    monkeypatch.setattr(gpu_probe, "probe", lambda: RTX_3090)  # the same engine on a GPU RTX has a target for
    assert TensorRTRunner(tiny_engine, "tensorrt-rtx").check() is trt
    monkeypatch.setattr(gpu_probe, "probe", lambda: None)
    with pytest.raises(DeviceUnavailable) as info:
        TensorRTRunner(tiny_engine, "tensorrt-rtx").check()
    assert str(info.value).startswith("no NVIDIA GPU here")


@needs_rtx
def test_the_reason_names_only_gpus_tensorrt_rtx_cannot_serve():
    import tensorrt_rtx as trt
    assert unrunnable_reason(trt, "tensorrt-rtx", RTX_3090) is None
    assert "SM 9.0" in unrunnable_reason(trt, "tensorrt-rtx", H100)
    assert unrunnable_reason(trt, "tensorrt", H100) is None  # classic TensorRT builds for the GPU it runs on
    assert unrunnable_reason(trt, "tensorrt-rtx", None) == "no NVIDIA GPU here"


@needs_rtx
def test_probe_engine_reports_tensorrt_rtx_in_its_own_words(tiny_engine):
    result = probe_engine(tiny_engine, "tensorrt-rtx")
    gpu = gpu_probe.probe()
    if gpu is None:  # TensorRT-RTX itself refuses without a GPU, through its logger
        assert result["deserialized"] is False and result["context"] is False
        assert result["messages"] and all(m.split(":")[0] in ("ERROR", "INTERNAL_ERROR", "WARNING")
                                          for m in result["messages"])
    elif api.rtx_supports(__import__("tensorrt_rtx"), gpu["compute_capability"]):
        assert result["deserialized"] and result["context"] and result["kernel_specialization"] == "eager"


@needs_rtx
def test_eager_kernel_specialization_names_exist_in_tensorrt_rtx():
    import tensorrt_rtx as trt
    strategy = trt.DynamicShapesKernelSpecializationStrategy
    assert strategy.EAGER != strategy.LAZY
    prop = vars(trt.IRuntimeConfig)["dynamic_shapes_kernel_specialization_strategy"]
    assert isinstance(prop, property) and prop.fset is not None  # create_context assigns it
    assert hasattr(trt.ICudaEngine, "create_runtime_config")


@pytest.mark.skipif(not available("pycuda.driver"), reason="needs pycuda and a CUDA GPU")
def test_pycuda_buffers_use_the_primary_context_and_pinned_copies():
    """On a GPU: the primary context (never autoinit's second one), pinned host memory, round trips."""
    from trtkit.backends.tensorrt.buffers import PycudaDevice
    import pycuda.driver as driver
    device = PycudaDevice()
    try:
        assert driver.Context.get_current() is not None
        buffer = device.empty((2, 3), "float32")
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        device.upload(buffer, data)
        first = device.download(buffer)
        device.upload(buffer, data * 10)
        assert np.array_equal(first, data)  # a download is a copy, not the reused pinned buffer
        assert np.array_equal(device.download(buffer), data * 10)
    finally:
        device.close()


@pytest.mark.skipif(not available("torch") or not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_torch_buffers_round_trip_through_pinned_memory():
    import torch
    from trtkit.backends.tensorrt.buffers import TorchDevice
    device = TorchDevice(torch)
    buffer = device.empty((4, 5), "float16")
    assert buffer.trtkit_host.is_pinned()
    data = np.random.RandomState(0).randn(4, 5).astype(np.float16)
    device.upload(buffer, data)
    assert np.array_equal(device.download(buffer), data)
    device.close()


def test_buffer_sizes_follow_shape_and_dtype_and_refuse_unresolved_dims():
    from trtkit.backends.tensorrt.buffers import buffer_nbytes
    assert buffer_nbytes((8, 3, 48, 192), "float16") == 8 * 3 * 48 * 192 * 2
    assert buffer_nbytes([32, 1000], np.float32) == 128000 and buffer_nbytes((4, 2), "int8") == 8
    assert buffer_nbytes((0, 10), "float32") == 1  # CUDA cannot allocate 0 bytes
    with pytest.raises(InputError, match="still dynamic"):
        buffer_nbytes((-1, 10), "float32")  # unchecked, -40 bytes would reach the allocator
