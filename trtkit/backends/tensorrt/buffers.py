"""GPU memory for engine I/O: torch CUDA tensors by default, pycuda where torch has no CUDA.

TensorRT takes raw device addresses. torch (NVIDIA's Jetson wheels included)
gives them with ``data_ptr()`` and is usually installed anyway; pycuda is the
fallback (cuda-python needs Python 3.9+, so it cannot serve Jetson Nano).

Both share one CUDA context with TensorRT and torch: the device's *primary*
context (torch's, and the one TensorRT's runtime API uses). pycuda is never
set up through ``pycuda.autoinit``, which creates a second, non-primary
context that TensorRT's engine would not be made in. Host copies go through
page-locked (pinned) buffers, one per I/O tensor, so the copies on the stream
are truly asynchronous (from pageable memory the driver copies through a
staging buffer and blocks).
"""

import numpy as np

from trtkit.deps import available, require
from trtkit.errors import DeviceUnavailable, InputError


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


def buffer_nbytes(shape, dtype):
    """Bytes of a device buffer for ``shape`` and numpy ``dtype`` (at least 1: CUDA allocates nothing for 0).

    A negative dim means TensorRT left a shape unresolved (an output asked before the input shape was
    set): an InputError here rather than a wrapped-around allocation size.
    """
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise InputError("cannot size a buffer of shape {}: a dimension is still dynamic".format(tuple(dims)),
                         hint="set the input shape before sizing the outputs")
    return max(1, int(np.prod(dims, dtype=np.int64)) * np.dtype(dtype).itemsize)


class TorchDevice(object):
    """Buffers are torch CUDA tensors (each with a pinned host twin); copies and TensorRT share one stream."""

    name = "torch"

    def __init__(self, torch):
        self.torch = torch
        self.stream = torch.cuda.Stream()

    @property
    def stream_handle(self):
        return self.stream.cuda_stream

    def empty(self, shape, dtype):
        buffer_nbytes(shape, dtype)  # refuses unresolved (negative) dims
        torch_dtype = getattr(self.torch, np.dtype(dtype).name)
        buffer = self.torch.empty(tuple(shape), dtype=torch_dtype, device="cuda")
        # the pinned twin lives and dies with its device buffer
        buffer.trtkit_host = self.torch.empty(tuple(shape), dtype=torch_dtype, pin_memory=True)
        return buffer

    def address(self, buffer):
        return buffer.data_ptr()

    def upload(self, buffer, array):
        """Queue the copy of ``array`` into ``buffer`` on the stream (pinned, asynchronous)."""
        host = buffer.trtkit_host
        self.stream.synchronize()  # the pinned buffer may still feed the previous call's copy
        host.numpy()[...] = array
        with self.torch.cuda.stream(self.stream):
            buffer.copy_(host, non_blocking=True)

    def download(self, buffer):
        """The buffer as a new numpy array, after everything queued on the stream."""
        host = buffer.trtkit_host
        with self.torch.cuda.stream(self.stream):
            host.copy_(buffer, non_blocking=True)
        self.synchronize()
        return host.numpy().copy()

    def synchronize(self):
        self.stream.synchronize()

    def close(self):
        if self.stream is not None:
            self.stream.synchronize()
        self.stream = None


class PycudaDevice(object):
    """Buffers are pycuda allocations, each with its pinned host twin, shape and dtype kept beside it.

    The device's primary context is retained and made current while this
    object is open (``close`` pops it), so TensorRT, torch and pycuda all work
    in one context.
    """

    name = "pycuda"

    def __init__(self, ordinal=0):
        self.cuda = require("pycuda.driver", "GPU buffers through pycuda")
        self.cuda.init()
        device = self.cuda.Device(ordinal)
        self._primary = device.retain_primary_context()
        self._primary.push()
        try:
            self.stream = self.cuda.Stream()
        except Exception:
            self._primary.pop()
            raise

    @property
    def stream_handle(self):
        return self.stream.handle

    def empty(self, shape, dtype):
        dtype = np.dtype(dtype)
        return {"memory": self.cuda.mem_alloc(buffer_nbytes(shape, dtype)), "shape": tuple(shape), "dtype": dtype,
                "host": self.cuda.pagelocked_empty(tuple(shape), dtype)}

    def address(self, buffer):
        return int(buffer["memory"])

    def upload(self, buffer, array):
        """Queue the copy of ``array`` into ``buffer`` on the stream (pinned, asynchronous)."""
        self.stream.synchronize()  # the pinned buffer may still feed the previous call's copy
        buffer["host"][...] = array
        self.cuda.memcpy_htod_async(buffer["memory"], buffer["host"], self.stream)

    def download(self, buffer):
        self.cuda.memcpy_dtoh_async(buffer["host"], buffer["memory"], self.stream)
        self.stream.synchronize()
        return np.array(buffer["host"], copy=True)

    def synchronize(self):
        self.stream.synchronize()

    def close(self):
        """Finish queued work and make the primary context no longer current (it stays for torch/TensorRT)."""
        if self.stream is not None:
            self.stream.synchronize()
            self.stream = None
        if self._primary is not None:
            self._primary.pop()
            self._primary = None
