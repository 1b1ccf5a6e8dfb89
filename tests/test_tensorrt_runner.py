"""The TensorRT runner and its GPU buffers, as far as a machine without a GPU can check them.

A real TensorRT-RTX engine (a one-convolution ONNX, built ahead of time in a
fraction of a second) stands in for a model. Which GPU is "here" comes from
trtkit's own probe (``gpu.probe``), replaced per test; TensorRT is never
imitated. The pycuda buffer test records what ``PycudaDevice`` asks of a
stand-in for ``pycuda.driver``: the primary context, pinned host memory.
"""

import ast
import os
import sys
import types

import numpy as np
import pytest

from trtkit.backends.tensorrt import api, gpu as gpu_probe
from trtkit.backends.tensorrt.runner import TensorRTRunner, probe_engine, unrunnable_reason
from trtkit.deps import available
from trtkit.errors import DeviceUnavailable

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


def _calls(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def test_execution_contexts_come_only_from_the_bridge():
    """Only api.create_context makes contexts, so every runner gets the RTX runtime config."""
    makers = {}
    for name in sorted(os.listdir(TENSORRT_DIR)):
        if name.endswith(".py"):
            found = [c for c in _calls(os.path.join(TENSORRT_DIR, name))
                     if isinstance(c.func, ast.Attribute) and c.func.attr == "create_execution_context"]
            if found:
                makers[name] = len(found)
    assert makers == {"api.py": 2}
    runner_calls = [c.func.attr for c in _calls(os.path.join(TENSORRT_DIR, "runner.py"))
                    if isinstance(c.func, ast.Attribute)]
    assert runner_calls.count("create_context") >= 2


def test_buffers_never_create_a_second_cuda_context():
    with open(os.path.join(TENSORRT_DIR, "buffers.py")) as handle:
        tree = ast.parse(handle.read())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m and "autoinit" in m]
    attributes = set(node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute))
    assert {"retain_primary_context", "pagelocked_empty"} <= attributes
    assert "make_context" not in attributes


class _Recorder(object):
    """Stands in for ``pycuda.driver``: keeps what PycudaDevice asks for, moves bytes like the real one."""

    def __init__(self):
        self.events = []
        self.memory = {}
        self.pinned = []
        recorder = self

        class Context(object):
            def push(self):
                recorder.events.append("push")

            def pop(self):
                recorder.events.append("pop")

        class Device(object):
            def __init__(self, ordinal):
                recorder.events.append("device {}".format(ordinal))

            def retain_primary_context(self):
                recorder.events.append("retain primary")
                return Context()

        class Stream(object):
            handle = 1234

            def synchronize(self):
                recorder.events.append("sync")

        self.Device, self.Stream = Device, Stream

    def init(self):
        self.events.append("init")

    def mem_alloc(self, nbytes):
        address = 4096 * (len(self.memory) + 1)
        self.memory[address] = np.zeros(nbytes, dtype=np.uint8)
        return address

    def pagelocked_empty(self, shape, dtype):
        array = np.empty(shape, dtype)
        self.pinned.append(array)
        return array

    def memcpy_htod_async(self, dest, source, stream):
        assert any(source is p for p in self.pinned), "host->device copy from pageable memory"
        self.memory[int(dest)][:source.nbytes] = source.view(np.uint8).ravel()

    def memcpy_dtoh_async(self, dest, source, stream):
        assert any(dest is p for p in self.pinned), "device->host copy into pageable memory"
        dest.view(np.uint8).ravel()[:] = self.memory[int(source)][:dest.nbytes]


def test_pycuda_buffers_use_the_primary_context_and_pinned_copies(monkeypatch):
    from trtkit.backends.tensorrt.buffers import PycudaDevice
    driver = _Recorder()
    package = types.ModuleType("pycuda")
    module = types.ModuleType("pycuda.driver")
    for name in ("init", "Device", "Stream", "mem_alloc", "pagelocked_empty", "memcpy_htod_async",
                 "memcpy_dtoh_async"):
        setattr(module, name, getattr(driver, name))
    package.driver = module
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", module)
    device = PycudaDevice()
    assert driver.events[:4] == ["init", "device 0", "retain primary", "push"]
    buffer = device.empty((2, 3), "float32")
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    device.upload(buffer, data)
    first = device.download(buffer)
    device.upload(buffer, data * 10)
    assert np.array_equal(first, data)  # a download is a copy, not the reused pinned buffer
    assert np.array_equal(device.download(buffer), data * 10)
    device.close()
    assert driver.events[-1] == "pop" and driver.events.count("pop") == 1


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
