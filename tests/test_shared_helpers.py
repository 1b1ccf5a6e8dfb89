"""Small jobs with one owner each: version parsing, integer lists on the command line, output comparison.

numpy only: none of these needs torch, onnx or TensorRT.
"""

import numpy as np
import pytest

from trtkit.errors import EngineMismatch, InputError, TrtkitError, VerificationFailed
from trtkit.versions import parse_version


@pytest.mark.parametrize("text,expected", [
    ("8.6.1.post1", (8, 6, 1)), ("10.3.0.26", (10, 3, 0)), ("2.13.0+cpu", (2, 13, 0)),
    ("1.10.0a0+git36449ea", (1, 10, 0)), ("10", (10, 0, 0)), (" v8.5", (8, 5, 0)), ("535.104.05", (535, 104, 5)),
])
def test_parse_version_keeps_the_release_numbers(text, expected):
    assert parse_version(text) == expected


def test_parse_version_orders_as_numbers_and_keeps_every_number_on_request():
    assert parse_version("10.0.1") > parse_version("8.6.1")  # as strings "10.0.1" < "8.6.1"
    assert parse_version("10.3.0.26", length=None) == (10, 3, 0, 26)
    assert parse_version("8.6.1.post1", length=None) == (8, 6, 1)
    assert parse_version("1.0", length=2) == (1, 0)


def test_parse_version_refuses_text_with_a_hint():
    with pytest.raises(InputError) as info:
        parse_version("latest", what="TensorRT version")
    assert "TensorRT version" in str(info.value) and "latest" in str(info.value) and info.value.hint


def test_version_parsers_of_tensorrt_and_the_calibration_cache_are_the_one_parser():
    from trtkit.backends.tensorrt import api
    from trtkit.precision import trt_cache

    class FakeModule(object):  # only __version__ is read
        __version__ = "10.3.0.26"

    assert trt_cache.parse_version is parse_version
    assert api.version_tuple(FakeModule) == (10, 3, 0, 26)


def test_engine_compatibility_compares_three_release_numbers():
    from trtkit.backends.tensorrt.sidecar import check_compatible
    record = {"flavour": "tensorrt", "tensorrt_version": "10.3.0.26"}
    check_compatible(record, "tensorrt", (10, 3, 0, 30), None)  # another build number: same TensorRT
    with pytest.raises(EngineMismatch, match="10.3.0.26"):
        check_compatible(record, "tensorrt", (10, 13, 0, 26), None)


def test_int_list_reads_commas_and_names_the_option_when_wrong():
    from trtkit.commands import int_list
    assert int_list("1, 8,32,") == [1, 8, 32]
    assert int_list(None, "--gpus") == [] and int_list("", "--gpus") == []
    with pytest.raises(InputError) as info:
        int_list("1,eight", "--batch-sizes")
    assert "--batch-sizes '1,eight'" in info.value.message and info.value.hint == "e.g. --batch-sizes 1,8,32"


def test_compare_refuses_outputs_shaped_unlike_the_reference():
    from trtkit.pipeline.verify import compare
    reference = np.eye(4, 10, dtype=np.float32)
    record = compare(reference + 0.5 * np.eye(4, 10, dtype=np.float32), reference)
    assert record["top1_agreement"] == 1.0 and record["max_abs_diff"] == pytest.approx(0.5)
    with pytest.raises(VerificationFailed) as info:
        compare(np.zeros((4, 1000), dtype=np.float32), reference)
    assert isinstance(info.value, TrtkitError) and "(4, 1000)" in str(info.value) and info.value.hint
