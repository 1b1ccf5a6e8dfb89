"""TensorRT's log goes through trtkit: kept for the exception, printed by trtkit's log, never by TensorRT.

The routing and the one-line reason are pure functions. The logger itself is
checked on the real TensorRT-RTX: a network whose input names H and W alike
(as paddle2onnx does) parses, and the builder refuses its 8x16 profile for
real; the refusal is kept, quoted in the exception, and printed only with
``--verbose``.
"""

import numpy as np
import pytest

from trtkit import log
from trtkit.backends.tensorrt.logger import KEEP_AT_MOST, capturing_logger, reason, route
from trtkit.deps import available
from trtkit.errors import InputError

needs_rtx = pytest.mark.skipif(not (available("tensorrt_rtx") and available("onnx")),
                               reason="tensorrt-rtx-cu12 and onnx are needed")


def test_route_keeps_errors_and_warnings_and_prints_warnings_only_when_forwarding():
    assert route("ERROR", forward=True, verbose=False) == (True, None)  # the exception quotes it once
    assert route("INTERNAL_ERROR", forward=False, verbose=True) == (True, "debug")
    assert route("WARNING", forward=True, verbose=False) == (True, "warn")
    assert route("WARNING", forward=False, verbose=False) == (True, None)
    assert route("WARNING", forward=False, verbose=True) == (True, "debug")
    assert route("INFO", forward=True, verbose=False) == (False, None)
    assert route("INFO", forward=True, verbose=True) == (False, "debug")
    assert route("VERBOSE", forward=True, verbose=True) == (False, None)


def test_reason_is_the_last_errors_on_one_line():
    said = ["WARNING: weights are FP32", "ERROR: first\nsecond line", "WARNING: late", "ERROR: [network]  no  way"]
    assert reason(said) == "ERROR: first second line | ERROR: [network] no way"
    assert reason(said, count=1) == "ERROR: [network] no way"
    assert reason(["WARNING: only this"]) == "WARNING: only this"
    assert reason([]) == ""
    assert len(reason(["ERROR: " + "x" * 2000])) == 700


def _shared_name_onnx(path):
    """Conv -> global pool -> flatten on x [N, 3, ?, ?]: H and W share the name '?'."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    weight = numpy_helper.from_array(np.random.RandomState(0).randn(2, 3, 3, 3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              ["N", 3, "?", "?"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _refused_build(tmp_path):
    from trtkit.backends.base import BuildInputs
    from trtkit.backends.tensorrt.builder import build_engine
    from trtkit.contract import InputContract
    path = _shared_name_onnx(str(tmp_path / "shared.onnx"))
    with pytest.raises(InputError) as info:
        build_engine("tensorrt-rtx", path, "fp32", str(tmp_path / "shared.fp32.engine"),
                     BuildInputs(contract=InputContract(size=(8, 16)), default_batch=(1, 2, 2)))
    return info.value


@needs_rtx
def test_tensorrts_refusal_is_kept_and_quoted_not_printed(tmp_path, capfd):
    error = _refused_build(tmp_path)
    message = str(error)
    assert "\n" not in message and "could not build an engine from shared.onnx: ERROR:" in message
    assert "Input dimensions with this name" in message and "names them apart" in error.hint
    assert error.tensorrt_log and error.tensorrt_log[-1].startswith("ERROR: ")
    out, err = capfd.readouterr()  # TensorRT printed nothing itself, and trtkit printed the error only once: raised
    assert "Input dimensions with this name" not in out + err


@needs_rtx
def test_verbose_shows_tensorrts_messages_as_trtkit_debug_lines(tmp_path, capfd):
    log.configure(verbose=True)
    try:
        _refused_build(tmp_path)
    finally:
        log.configure()
    out, err = capfd.readouterr()
    assert "Input dimensions with this name" not in out
    lines = [line for line in err.splitlines() if "Input dimensions with this name" in line]
    assert lines and all(line.startswith("[debug] TensorRT-RTX ERROR: ") for line in lines), err[-2000:]


@needs_rtx
def test_the_logger_is_a_tensorrt_ilogger_and_keeps_a_bounded_tail():
    import tensorrt_rtx as trt
    messages = []
    logger = capturing_logger(trt, messages)
    assert isinstance(logger, trt.ILogger) and not isinstance(logger, trt.Logger)
    trt.Builder(logger)  # TensorRT accepts it as the builder's logger
    for i in range(KEEP_AT_MOST + 5):
        logger.log(trt.ILogger.Severity.ERROR, "error {}".format(i))
    logger.log(trt.ILogger.Severity.INFO, "not kept")
    assert len(messages) == KEEP_AT_MOST and messages[-1] == "ERROR: error {}".format(KEEP_AT_MOST + 4)


def test_the_collector_never_runs_inside_tensorrt_calls():
    """A collection inside TensorRT's log callback freed an earlier builder whose destructor waited on the lock
    TensorRT held (a hang seen in this suite: createInferBuilder -> PyLogger.log -> gc -> IBuilder dealloc).
    TensorRT calls run with the collector paused; cycles are collected before and after, outside them."""
    import gc
    import weakref
    from trtkit.backends.tensorrt.logger import collector_paused

    class Node(object):
        pass

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        node = Node()
        node.self = node  # a cycle: only the collector frees it
        ref = weakref.ref(node)
        del node
        assert ref() is not None  # not collected while TensorRT may be calling back
    assert gc.isenabled() and ref() is None  # collected on the way out
    try:
        with collector_paused():
            raise ValueError("a refused build")
    except ValueError:
        pass
    assert gc.isenabled()
