"""The implicit-INT8 calibrator's own logic: which TensorRT class reads a cache, and errors inside callbacks.

TensorRT <= 10 is not installable here and TensorRT-RTX has no calibrators, so
the TensorRT side is two empty base classes: the assertions are about what
trtkit's calibrator does (the class it derives from, what get_batch returns,
what is raised after the build), never about those stand-ins.
"""

import types

import numpy as np
import pytest

from trtkit.backends.tensorrt.calibrator import calibrator_class_name, make_calibrator
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.precision.trt_cache import write_cache


class _Entropy2(object):
    def __init__(self):
        pass


class _MinMax(object):
    def __init__(self):
        pass


TRT10 = types.SimpleNamespace(__version__="10.3.0", IInt8EntropyCalibrator2=_Entropy2, IInt8MinMaxCalibrator=_MinMax)
NETWORK = types.SimpleNamespace(get_input=lambda index: types.SimpleNamespace(name="input"))


def _calibration(images, cache):
    from trtkit.data import ImageSet
    from trtkit.precision.calibrate import Int8Calibration
    return Int8Calibration(None, ImageSet(images, None, "test"), cache)


@pytest.mark.parametrize("method, class_name, base", [("entropy", "IInt8EntropyCalibrator2", _Entropy2),
                                                      ("percentile", "IInt8EntropyCalibrator2", _Entropy2),
                                                      ("minmax", "IInt8MinMaxCalibrator", _MinMax)])
def test_the_calibrator_class_matches_the_cache_header(method, class_name, base, tmp_path):
    cache = str(tmp_path / "model.calib.cache")
    write_cache(cache, {"input": 2.5, "conv": 6.0}, method, (10, 3, 0))
    assert calibrator_class_name(cache) == class_name
    calibrator = make_calibrator(TRT10, NETWORK, 8, _calibration(None, cache))
    assert isinstance(calibrator, base)
    assert calibrator.read_calibration_cache().startswith(b"TRT-100300-")


def test_a_cache_of_an_unknown_algorithm_is_refused(tmp_path):
    cache = tmp_path / "legacy.cache"
    cache.write_text(u"TRT-8502-LegacyCalibration\ninput: 3c010a14\n")
    with pytest.raises(InputError, match="LegacyCalibration"):
        calibrator_class_name(str(cache))
    cache.write_text(u"not a cache\n")
    with pytest.raises(InputError, match="not a TensorRT calibration cache"):
        calibrator_class_name(str(cache))


def test_an_error_inside_get_batch_is_kept_from_tensorrt_and_raised_after_the_build(tmp_path):
    images = np.zeros((16, 3, 8, 8), np.float32)
    calibrator = make_calibrator(TRT10, NETWORK, 8, _calibration(images, str(tmp_path / "new.cache")))
    assert calibrator.get_batch_size() == 8 and calibrator.read_calibration_cache() is None
    # no GPU here: copying the batch to the device fails inside TensorRT's callback
    assert calibrator.get_batch(["input"]) is None
    with pytest.raises(DeviceUnavailable):
        calibrator.raise_if_failed()
    calibrator.raise_if_failed()  # raised once


def test_too_few_images_and_no_cache_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="fewer than the calibration batch"):
        make_calibrator(TRT10, NETWORK, 32, _calibration(np.zeros((4, 3, 8, 8), np.float32), str(tmp_path / "c")))
    with pytest.raises(InputError, match="calibration images or a calibration cache"):
        make_calibrator(TRT10, NETWORK, 8, None, None)
    with pytest.raises(InputError, match="calibrators were removed"):
        make_calibrator(types.SimpleNamespace(__version__="1.2"), NETWORK, 8, None, None)


def test_torch2trt_calibration_items_are_whole_opt_batches():
    from trtkit.backends.tensorrt.torch2trt_path import calibration_batches
    images = np.arange(21 * 3 * 2 * 2, dtype=np.float32).reshape(21, 3, 2, 2)
    items = calibration_batches(images, 8)
    assert [item.shape for item in items] == [(8, 3, 2, 2), (8, 3, 2, 2)]  # the 5 left over are not a batch
    assert np.array_equal(np.concatenate(items), images[:16]) and all(i.flags["C_CONTIGUOUS"] for i in items)
    with pytest.raises(InputError, match="fewer than one batch of 32"):
        calibration_batches(images, 32)
