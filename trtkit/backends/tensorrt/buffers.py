"""GPU memory for engine I/O: torch CUDA tensors by default, pycuda where torch has no CUDA.

TensorRT takes raw device addresses. torch (NVIDIA's Jetson wheels included)
gives them with ``data_ptr()`` and is usually installed anyway; pycuda is the
fallback (cuda-python needs Python 3.9+, so it cannot serve Jetson Nano).
"""

import numpy as np

from trtkit.deps import available, require
from trtkit.errors import DeviceUnavailable


def open_device(prefer=None):
    """A TorchDevice or PycudaDevice; DeviceUnavailable when neither can reach a GPU."""
    if prefer in (None, "torch") and available("torch"):
        torch = require("torch")
        if torch.cuda.is_available():
            return TorchDevice(torch)
    if prefer in (None, "pycuda") and available("pycuda.driver"):
        try:
            return PycudaDevice()
        except Exception as exc:  # pycuda raises its own LogicError/RuntimeError without a GPU
            raise DeviceUnavailable("pycuda cannot use a GPU: {}".format(exc))
    raise DeviceUnavailable("no CUDA device memory: torch has no CUDA and pycuda is not usable",
                            hint="install a CUDA build of torch (on Jetson: NVIDIA's wheel) or 'pip install pycuda'")


class TorchDevice(object):
    """Buffers are torch CUDA tensors; the stream is torch's current stream."""

    name = "torch"

    def __init__(self, torch):
        self.torch = torch
        self.stream = torch.cuda.Stream()

    @property
    def stream_handle(self):
        return self.stream.cuda_stream

    def empty(self, shape, dtype):
        torch_dtype = getattr(self.torch, np.dtype(dtype).name)
        return self.torch.empty(tuple(shape), dtype=torch_dtype, device="cuda")

    def address(self, buffer):
        return buffer.data_ptr()

    def upload(self, buffer, array):
        with self.torch.cuda.stream(self.stream):
            buffer.copy_(self.torch.from_numpy(np.ascontiguousarray(array)), non_blocking=False)

    def download(self, buffer):
        self.synchronize()
        return buffer.cpu().numpy()

    def synchronize(self):
        self.stream.synchronize()

    def close(self):
        self.stream = None


class PycudaDevice(object):
    """Buffers are pycuda allocations (with their shape and dtype kept beside them)."""

    name = "pycuda"

    def __init__(self):
        import pycuda.autoinit  # noqa: F401  (creates the context on GPU 0)
        self.cuda = require("pycuda.driver")
        self.stream = self.cuda.Stream()

    @property
    def stream_handle(self):
        return self.stream.handle

    def empty(self, shape, dtype):
        nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        return {"memory": self.cuda.mem_alloc(nbytes), "shape": tuple(shape), "dtype": np.dtype(dtype)}

    def address(self, buffer):
        return int(buffer["memory"])

    def upload(self, buffer, array):
        host = np.ascontiguousarray(array, dtype=buffer["dtype"])
        self.cuda.memcpy_htod_async(buffer["memory"], host, self.stream)
        self.stream.synchronize()

    def download(self, buffer):
        host = np.empty(buffer["shape"], dtype=buffer["dtype"])
        self.cuda.memcpy_dtoh_async(host, buffer["memory"], self.stream)
        self.stream.synchronize()
        return host

    def synchronize(self):
        self.stream.synchronize()

    def close(self):
        self.stream = None
