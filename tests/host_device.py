"""trtkit's GPU-memory interface (``trtkit.backends.tensorrt.buffers``: ``TorchDevice``, ``PycudaDevice``) on the
host, for the code that drives it: a seam with a real CPU implementation, not an imitation of TensorRT.

Buffers are numpy arrays. As on a CUDA stream, ``upload`` only queues its copy, which lands at ``synchronize``
(``download`` synchronizes, as both GPU devices do). The queue holds no reference to its target buffer, as a
stream holds none to a Python object, so a buffer can be freed (garbage collected) with its copy still queued;
the copy then lands in freed memory and is counted in ``writes_after_free``. ``events`` records the calls in
order: "empty", "upload", "download", "synchronize", "free" (a buffer's memory released), "close".
"""

import weakref

import numpy as np


class HostDevice(object):
    name = "host"
    stream_handle = 0

    def __init__(self):
        self.events = []
        self.writes_after_free = 0
        self._queue = []  # (weak reference to the target buffer, the data the copy will write)
        self.closed = False

    def empty(self, shape, dtype):
        from trtkit.backends.tensorrt.buffers import buffer_nbytes
        buffer_nbytes(shape, dtype)
        self.events.append("empty")
        buffer = np.zeros(tuple(shape), np.dtype(dtype))
        weakref.finalize(buffer, self.events.append, "free")
        return buffer

    def address(self, buffer):
        return buffer.ctypes.data

    def upload(self, buffer, array):
        self.events.append("upload")
        self._queue.append((weakref.ref(buffer), np.array(array, dtype=buffer.dtype, copy=True)))

    def download(self, buffer):
        self.events.append("download")
        self.synchronize()
        return buffer.copy()

    @property
    def pending(self):
        """Copies queued and not yet done."""
        return len(self._queue)

    def synchronize(self):
        self.events.append("synchronize")
        queue, self._queue = self._queue, []
        for target, data in queue:
            buffer = target()
            if buffer is None:
                self.writes_after_free += 1
            else:
                buffer[...] = data

    def close(self):
        if not self.closed:
            self.synchronize()  # as TorchDevice.close and PycudaDevice.close do
            self.events.append("close")
        self.closed = True
