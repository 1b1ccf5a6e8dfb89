"""The implicit-INT8 calibrator's own logic, run for real: which TensorRT class reads a cache, which images each
batch holds, and errors inside callbacks.

``CalibrationFeed`` is everything the calibrator does apart from TensorRT, so it runs here as it runs inside a
build (on this GPU-less machine its first device upload fails for real); the TensorRT class around it only
forwards. The batching and the answer to ``get_batch`` are pure functions. TensorRT-RTX is the real module that
has no calibrators. Nothing here imitates TensorRT or a GPU.
"""

import numpy as np
import pytest

from trtkit.backends.tensorrt.calibrator import (CalibrationFeed, batch_spans, calibrator_class_name,
                                                input_addresses, make_calibrator)
from trtkit.deps import available
from trtkit.errors import DeviceUnavailable, InputError
from trtkit.precision.trt_cache import write_cache


@pytest.mark.parametrize("method, class_name", [("entropy", "IInt8EntropyCalibrator2"),
                                                ("percentile", "IInt8EntropyCalibrator2"),
                                                ("minmax", "IInt8MinMaxCalibrator")])
def test_the_calibrator_class_matches_the_cache_header(method, class_name, tmp_path):
    cache = str(tmp_path / "model.calib.cache")
    write_cache(cache, {"input": 2.5, "conv": 6.0}, method, (10, 3, 0))
    assert calibrator_class_name(cache) == class_name
    assert calibrator_class_name(str(tmp_path / "absent.cache")) == "IInt8EntropyCalibrator2"
    feed = CalibrationFeed(None, 8, cache, "input")  # a cache alone is enough: no images needed
    assert feed.read_calibration_cache().startswith(b"TRT-100300-")
    feed.write_calibration_cache(b"never overwrites a cache it read")
    with open(cache, "rb") as handle:
        assert handle.read().startswith(b"TRT-100300-")


def test_a_cache_of_an_unknown_algorithm_is_refused(tmp_path):
    cache = tmp_path / "legacy.cache"
    cache.write_text(u"TRT-8502-LegacyCalibration\ninput: 3c010a14\n")
    with pytest.raises(InputError, match="LegacyCalibration"):
        calibrator_class_name(str(cache))
    cache.write_text(u"not a cache\n")
    with pytest.raises(InputError, match="not a TensorRT calibration cache"):
        calibrator_class_name(str(cache))


@pytest.mark.skipif(available("torch") and __import__("torch").cuda.is_available(), reason="checks the no-GPU path")
def test_an_error_inside_get_batch_is_kept_from_tensorrt_and_raised_after_the_build(tmp_path):
    images = np.zeros((16, 3, 8, 8), np.float32)
    cache = str(tmp_path / "new.cache")
    feed = CalibrationFeed(images, 8, cache, "input")
    assert feed.get_batch_size() == 8 and feed.read_calibration_cache() is None
    # no GPU here: opening the device for the first batch fails inside TensorRT's callback
    assert feed.get_batch(["input"]) is None
    first = feed.error
    assert isinstance(first, DeviceUnavailable)
    assert feed.get_batch(["input"]) is None and feed.error is first  # calibration ended: the first error is kept
    with pytest.raises(DeviceUnavailable):
        feed.raise_if_failed()
    feed.raise_if_failed()  # raised once
    feed.write_calibration_cache(b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")  # a new cache is written
    with open(cache, "rb") as handle:
        assert handle.read().startswith(b"TRT-100300-")


def test_too_few_images_and_no_cache_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="fewer than the calibration batch"):
        CalibrationFeed(np.zeros((4, 3, 8, 8), np.float32), 32, str(tmp_path / "c"), "input")
    with pytest.raises(InputError, match="calibration images or a calibration cache"):
        CalibrationFeed(None, 8, None, "input")
    cache = str(tmp_path / "have.cache")
    write_cache(cache, {"input": 1.0}, "entropy", (8, 2, 1))
    feed = CalibrationFeed(np.zeros((4, 3, 8, 8), np.float32), 32, cache, "input")  # too few, but a cache: read
    assert feed.images is None and feed.get_batch(["input"]) is None and feed.error is None


def test_tensorrt_rtx_has_no_calibrators_and_says_so():
    trt = pytest.importorskip("tensorrt_rtx")
    network = trt.Builder(trt.Logger(trt.Logger.ERROR)).create_network(0)
    with pytest.raises(InputError, match="calibrators were removed"):
        make_calibrator(trt, network, 8, None, None)


def test_torch2trt_calibration_items_are_whole_opt_batches():
    from trtkit.backends.tensorrt.torch2trt_path import calibration_batches
    images = np.arange(21 * 3 * 2 * 2, dtype=np.float32).reshape(21, 3, 2, 2)
    items = calibration_batches(images, 8)
    assert [item.shape for item in items] == [(8, 3, 2, 2), (8, 3, 2, 2)]  # the 5 left over are not a batch
    assert np.array_equal(np.concatenate(items), images[:16]) and all(i.flags["C_CONTIGUOUS"] for i in items)
    with pytest.raises(InputError, match="fewer than one batch of 32"):
        calibration_batches(images, 32)


def test_batches_are_whole_and_in_the_order_given():
    assert batch_spans(21, 8) == [(0, 8), (8, 16)]  # the 5 left over would be read past their end
    assert batch_spans(16, 8) == [(0, 8), (8, 16)] and batch_spans(7, 8) == []
    assert batch_spans(3, 1) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(InputError):
        batch_spans(16, 0)


def test_get_batch_answers_the_calibrated_input_and_null_for_others():
    assert input_addresses(["input"], "input", 140234) == [140234]
    assert input_addresses(["mask", "input", "scale"], "input", 7) == [0, 7, 0]
    assert input_addresses(["other"], "input", 7) == [0]
