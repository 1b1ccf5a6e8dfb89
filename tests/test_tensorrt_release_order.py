"""Release order of the TensorRT runner's and calibrator's GPU memory: synchronize the stream, then free.

The runner and the calibrator get their device memory from ``buffers.open_device`` (an interface: ``empty``,
``address``, ``upload``, ``download``, ``synchronize``, ``close``). Here they are handed ``HostDevice``
(tests/host_device.py), that interface implemented on the host with a real queue of copies, so the order of
the calls and any copy landing in freed memory are observed, with no GPU and no TensorRT: the code under test
is the runner's own buffer handling (``_buffers_for``, ``deactivate``) and ``CalibrationFeed``.
"""

import numpy as np
import pytest

from host_device import HostDevice
from trtkit.backends.tensorrt.calibrator import CalibrationFeed
from trtkit.backends.tensorrt.runner import TensorRTRunner


def _runner_on(device):
    """A TensorRTRunner as ``_load`` leaves it, with ``device`` as its memory and one dynamic-batch input."""
    runner = TensorRTRunner("never-loaded.engine")
    runner._memory = device
    runner._io = [("input", True, [-1, 3, 4, 4], np.float32)]
    runner.active = True
    return runner


def _first(events, name):
    return events.index(name) if name in events else len(events)


def test_deactivate_synchronizes_the_stream_before_freeing_the_buffers():
    device = HostDevice()
    runner = _runner_on(device)
    buffer = runner._buffers_for((2, 3, 4, 4))["input"]
    device.upload(buffer, np.ones((2, 3, 4, 4), np.float32))  # as stage() leaves it: queued, not done
    del buffer
    runner.deactivate()
    assert "free" in device.events and device.events[-1] == "close"
    assert _first(device.events, "synchronize") < _first(device.events, "free"), device.events
    assert device.writes_after_free == 0 and device.pending == 0
    assert runner._memory is None and runner._buffers == {} and not runner.active


def test_a_new_input_shape_waits_for_the_old_buffers_queued_work_before_dropping_them():
    device = HostDevice()
    runner = _runner_on(device)
    old = runner._buffers_for((2, 3, 4, 4))["input"]
    device.upload(old, np.full((2, 3, 4, 4), 7, np.float32))
    del old
    fresh = runner._buffers_for((4, 3, 4, 4))["input"]  # another batch size: the old buffers go
    assert fresh.shape == (4, 3, 4, 4)
    assert device.events.count("free") == 1
    assert _first(device.events, "synchronize") < _first(device.events, "free"), device.events
    assert device.writes_after_free == 0
    runner.deactivate()


def test_deactivate_frees_everything_even_when_synchronize_fails():
    class FailingOnce(HostDevice):
        failed = False

        def synchronize(self):
            super(FailingOnce, self).synchronize()
            if not self.failed:
                self.failed = True
                raise RuntimeError("CUDA error: an illegal memory access was encountered")

    device = FailingOnce()
    runner = _runner_on(device)
    runner._buffers_for((1, 3, 4, 4))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        runner.deactivate()
    assert runner._buffers == {} and runner._memory is None and device.closed


def test_the_calibration_batch_is_on_the_device_when_get_batch_returns():
    images = np.arange(16 * 3 * 2 * 2, dtype=np.float32).reshape(16, 3, 2, 2)
    feed = CalibrationFeed(images, 8, None, "input")
    device = feed.device = HostDevice()
    addresses = feed.get_batch(["input"])
    assert feed.error is None
    # TensorRT reads the memory as soon as get_batch returns: no copy may still be queued
    assert device.pending == 0
    assert addresses == [device.address(feed.buffer)] and np.array_equal(feed.buffer, images[:8])
    assert feed.get_batch(["input"]) is not None and np.array_equal(feed.buffer, images[8:])
    assert device.pending == 0


def test_the_calibrator_synchronizes_then_frees_its_buffer_when_closed():
    images = np.zeros((8, 3, 2, 2), np.float32)
    feed = CalibrationFeed(images, 8, None, "input")
    device = feed.device = HostDevice()
    feed.get_batch(["input"])
    device.upload(feed.buffer, images)  # work still queued at the end of the build
    events_before = len(device.events)
    feed.close()
    after = device.events[events_before:]
    assert after[0] == "synchronize" and "free" in after and after[-1] == "close", after
    assert device.writes_after_free == 0 and feed.device is None and feed.buffer is None
