"""The legacy implicit INT8 path (TensorRT <= 10): an entropy calibrator fed by the calibration images.

TensorRT 11 and TensorRT-RTX removed calibrators; there INT8 comes only from a
Q/DQ ONNX. The calibrator class is created inside a function because its base
class lives in the tensorrt module, which trtkit never imports at top level.
A calibration cache file (``--calib-cache``) is read when it exists, so no
images are needed, and written after calibrating when it does not.
"""

import os

import numpy as np

from trtkit import log
from trtkit.errors import InputError
from trtkit.fileio import write_bytes

DEFAULT_IMAGES = 256


def calibration_images(options):
    """float32 NCHW images to calibrate on: the calibration module's set, else the train split of
    --calib-data (or --data)."""
    ctx = options.get("context")
    if ctx is None:
        raise InputError("implicit INT8 calibration needs the build's images", hint="pass --calib-cache FILE")
    calib_set = getattr(ctx, "calib_set", None)
    if calib_set is not None:
        return calib_set.images
    from trtkit.data import load_images
    limit = int(options.get("calib_images") or DEFAULT_IMAGES)
    source = options.get("calib_data") or ctx.options.data
    return load_images(source, ctx.contract, split="train", limit=limit).images


def make_calibrator(trt, options, network, batch):
    """An ``IInt8EntropyCalibrator2`` over the calibration images and/or the cache file.

    ``batch`` is the batch TensorRT calibrates with (the profile's OPT batch for a dynamic batch).
    """
    from trtkit.backends.tensorrt import api
    from trtkit.backends.tensorrt.buffers import open_device
    if not api.has(trt, "IInt8EntropyCalibrator2"):
        raise InputError("TensorRT {} has no INT8 calibrators".format(trt.__version__),
                         hint="use the Q/DQ INT8 path (the default)")
    cache_path = options.get("calib_cache")
    have_cache = bool(cache_path) and os.path.isfile(cache_path)
    images = None if have_cache else calibration_images(options)
    if images is not None and len(images) < batch:
        raise InputError("{} calibration images are fewer than the calibration batch {}".format(len(images), batch),
                         hint="use more calibration images or a smaller --batch OPT")
    input_name = network.get_input(0).name

    class EntropyCalibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.position = 0
            self.device = None if have_cache else open_device()
            self.buffer = None

        def get_batch_size(self):
            return batch

        def get_batch(self, names, p_str=None):
            if images is None or self.position + batch > len(images):
                return None
            chunk = np.ascontiguousarray(images[self.position:self.position + batch], dtype=np.float32)
            self.position += batch
            if self.buffer is None:
                self.buffer = self.device.empty(chunk.shape, np.float32)
            self.device.upload(self.buffer, chunk)
            return [self.device.address(self.buffer) if name == input_name else 0 for name in names]

        def read_calibration_cache(self):
            if have_cache:
                log.info("INT8 calibration cache: {}".format(cache_path))
                with open(cache_path, "rb") as handle:
                    return handle.read()
            return None

        def write_calibration_cache(self, cache):
            if cache_path and not have_cache:
                write_bytes(cache_path, bytes(cache))

    return EntropyCalibrator()
