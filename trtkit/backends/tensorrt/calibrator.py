"""The legacy implicit INT8 path (TensorRT <= 10): a calibrator fed by the build's calibration images.

TensorRT 11 and TensorRT-RTX removed calibrators; there INT8 comes only from a
Q/DQ ONNX. The calibrator class is created inside a function because its base
class lives in the tensorrt module, which trtkit never imports at top level.

Two traps shape this module (see shared TRT_NOTES, "Traps"):

* TensorRT reads a calibration cache only through the calibrator class of the
  algorithm named in its header (a ``MinMaxCalibration`` cache given to an
  ``IInt8EntropyCalibrator2`` is rejected, and TensorRT then asks for images),
  so the class is chosen from the cache's header, and the images stay
  available whenever the build has them.
* An exception inside ``get_batch`` aborts the process on TensorRT 8.2 and
  silently ends calibration on 10.x, so it is caught there, calibration is told
  the data ended, and ``raise_if_failed`` re-raises it after the build.
"""

import os

import numpy as np

from trtkit import log
from trtkit.errors import InputError
from trtkit.fileio import write_bytes

# algorithm in a cache header -> TensorRT calibrator class
CALIBRATOR_CLASSES = {"EntropyCalibration2": "IInt8EntropyCalibrator2",
                      "EntropyCalibration": "IInt8EntropyCalibrator",
                      "MinMaxCalibration": "IInt8MinMaxCalibrator"}
DEFAULT_ALGORITHM = "EntropyCalibration2"


def calibrator_class_name(cache_path):
    """The TensorRT calibrator class that can read ``cache_path`` (the default one when there is no file)."""
    if not cache_path or not os.path.isfile(cache_path):
        return CALIBRATOR_CLASSES[DEFAULT_ALGORITHM]
    from trtkit.precision.trt_cache import cache_algorithm
    algorithm = cache_algorithm(cache_path)
    if algorithm not in CALIBRATOR_CLASSES:
        raise InputError("{} was written by TensorRT's {} calibrator, which trtkit does not drive".format(
            cache_path, algorithm), hint="use a cache from EntropyCalibration2, EntropyCalibration or MinMax")
    return CALIBRATOR_CLASSES[algorithm]


def batch_spans(count, batch):
    """(start, stop) of each whole batch of ``batch`` among ``count`` images, in order; the rest is left out.

    TensorRT reads a full batch (the profile's OPT) from every pointer it is given, so a short last
    batch would be read past its end; calibration sees the images in the order the build gave them.
    """
    if batch < 1:
        raise InputError("the calibration batch must be 1 or more, got {}".format(batch))
    return [(i * batch, (i + 1) * batch) for i in range(count // batch)]


def input_addresses(names, input_name, address):
    """``get_batch``'s answer: the batch's device address for the calibrated input, 0 (null) for other inputs."""
    return [int(address) if name == input_name else 0 for name in names]


class CalibrationFeed(object):
    """What a calibrator does, apart from TensorRT: hands out the calibration images ``batch`` at a time in
    device memory, reads or writes the cache, and keeps any error away from TensorRT's callbacks.

    ``images`` (float32 NCHW, or None), ``cache_path`` (read when it exists, else written after calibrating),
    ``input_name`` (the network input the images feed). Plain Python: tested here without TensorRT; the
    calibrator class TensorRT needs (``make_calibrator``) only forwards to it.
    """

    def __init__(self, images, batch, cache_path, input_name):
        have_cache = bool(cache_path) and os.path.isfile(cache_path)
        if images is None and not have_cache:
            raise InputError("implicit INT8 needs calibration images or a calibration cache",
                             hint="build with --precision int8 (it calibrates), or pass --calib-cache FILE")
        if images is not None and len(images) < batch:
            if not have_cache:
                raise InputError("{} calibration images are fewer than the calibration batch {}".format(
                    len(images), batch), hint="use more calibration images or a smaller --batch OPT")
            images = None
        self.images = images
        self.batch = batch
        self.cache_path = cache_path
        self.have_cache = have_cache
        self.input_name = input_name
        self._spans = iter(batch_spans(len(images), batch) if images is not None else ())
        self.device = None
        self.buffer = None
        self.error = None

    def get_batch_size(self):
        return self.batch

    def get_batch(self, names):
        """Device addresses of the next batch for TensorRT's ``names`` (0 for any other input), or None when
        the images are used up or anything failed (kept for ``raise_if_failed``)."""
        if self.error is not None:  # the first failure ended calibration: it is the one to re-raise
            return None
        try:
            return self._next(names)
        except BaseException as exc:  # TensorRT must not see it: 8.2 aborts, 10.x ends quietly
            self.error = exc
            return None

    def _next(self, names):
        span = next(self._spans, None)
        if span is None:
            return None
        chunk = np.ascontiguousarray(self.images[span[0]:span[1]], dtype=np.float32)
        if self.device is None:
            from trtkit.backends.tensorrt.buffers import open_device
            self.device = open_device()
        if self.buffer is None:
            self.buffer = self.device.empty(chunk.shape, np.float32)
        self.device.upload(self.buffer, chunk)
        # the upload is asynchronous: TensorRT reads the memory as soon as get_batch returns
        self.device.synchronize()
        return input_addresses(names, self.input_name, self.device.address(self.buffer))

    def read_calibration_cache(self):
        if self.have_cache:
            log.info("INT8 calibration cache: {}".format(self.cache_path))
            with open(self.cache_path, "rb") as handle:
                return handle.read()
        return None

    def write_calibration_cache(self, cache):
        if self.cache_path and not self.have_cache:
            try:
                write_bytes(self.cache_path, bytes(cache))
            except BaseException as exc:
                self.error = exc

    def close(self):
        """After the build: wait for the stream, then free the batch buffer and close the device (that order:
        a buffer freed while a copy into it is queued is memory the GPU still writes)."""
        device, self.device = self.device, None
        if device is None:
            return
        try:
            device.synchronize()
        finally:
            self.buffer = None
            device.close()

    def raise_if_failed(self):
        """Re-raise what went wrong inside TensorRT's callbacks, now that the build returned."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def make_calibrator(trt, network, batch, calibration=None, cache_path=None):
    """A TensorRT calibrator over the calibration images and/or a cache file (a ``CalibrationFeed``).

    ``batch`` is the batch TensorRT calibrates with (the profile's OPT batch for a
    dynamic batch); ``calibration`` is the build's ``Int8Calibration`` (its images,
    and the cache the calibration module wrote); ``cache_path`` a user's cache
    file (read when it exists, else written after calibrating). The class derives
    from the calibrator that reads the cache's algorithm (``calibrator_class_name``).
    """
    from trtkit.backends.tensorrt import api
    if calibration is not None and not cache_path:
        cache_path = calibration.trt_cache
    base = api.calibrator_base(trt, calibrator_class_name(cache_path))  # InputError on 11.x / RTX
    images = calibration.image_array() if calibration is not None else None
    feed = CalibrationFeed(images, batch, cache_path, network.get_input(0).name)

    class Calibrator(base):
        def __init__(self):
            base.__init__(self)
            self.feed = feed

        def get_batch_size(self):
            return feed.get_batch_size()

        def get_batch(self, names, p_str=None):
            return feed.get_batch(names)

        def read_calibration_cache(self):
            return feed.read_calibration_cache()

        def write_calibration_cache(self, cache):
            feed.write_calibration_cache(cache)

        def raise_if_failed(self):
            feed.raise_if_failed()

        def close(self):
            feed.close()

    return Calibrator()
