"""The user's own Python decoder of a foreign detector's raw heads (``detect.host_decoder``).

The trained detection sample is exported without its decoding (raw regressions and logits) and built with a
decoder written as a user would write it, in a file of their own: its detections must be the sample's own.
The refusals (a function that raises, answers the wrong shapes, cannot be imported) are each one line, before
anything is built.
"""

import os
import textwrap

import numpy as np
import pytest

from conftest import run_cli
from test_foreign_decoders import _f1, sample_raw
from trtkit.errors import InputError

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

USER_DECODER = textwrap.dedent('''
    """A user's decoder of a RetinaNet's raw heads (torchvision's box coder, weights 1, 1, 1, 1)."""
    import os
    import numpy as np

    ANCHORS = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "anchors.npy"))  # x1 y1 x2 y2
    CLAMP = np.log(1000.0 / 16)

    def decode(outputs, input_hw):
        deltas, logits = outputs["regressions"], outputs["logits"]
        widths, heights = ANCHORS[:, 2] - ANCHORS[:, 0], ANCHORS[:, 3] - ANCHORS[:, 1]
        cx, cy = ANCHORS[:, 0] + 0.5 * widths, ANCHORS[:, 1] + 0.5 * heights
        px, py = deltas[..., 0] * widths + cx, deltas[..., 1] * heights + cy
        pw = np.exp(np.minimum(deltas[..., 2], CLAMP)) * widths
        ph = np.exp(np.minimum(deltas[..., 3], CLAMP)) * heights
        boxes = np.stack([px - 0.5 * pw, py - 0.5 * ph, px + 0.5 * pw, py + 0.5 * ph], axis=-1)
        height, width = input_hw
        boxes = np.minimum(np.maximum(boxes, 0), np.array([width, height, width, height], np.float32))
        return boxes, 1.0 / (1.0 + np.exp(-logits))

    def raises(outputs, input_hw):
        return outputs["nothing"]
''')


class TwoHeads(torch.nn.Module):
    """Raw (boxes [N, 16, 4], logits [N, 16, 3]) of an 8x8-stride grid on a 32x32 input."""

    def __init__(self):
        super(TwoHeads, self).__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 7, 8, 8)

    def forward(self, x):
        rows = self.stem(x).flatten(2).transpose(1, 2)
        return rows[..., :4], rows[..., 4:]


def _two_heads(tmp_path):
    path = str(tmp_path / "two_heads.onnx")
    torch.onnx.export(TwoHeads().eval(), torch.zeros(1, 3, 32, 32), path, input_names=["image"],
                      output_names=["boxes", "logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"image": {0: "N"}, "boxes": {0: "N"}, "logits": {0: "N"}})
    return path


def _corners(outputs, input_hw):
    return np.abs(outputs["boxes"]) * 4, 1.0 / (1.0 + np.exp(-outputs["logits"]))


def test_raw_heads_are_packed_into_one_output_and_unpacked_as_the_graph_made_them(tmp_path):
    import onnxruntime as ort
    from trtkit.detect import host_decoder
    from trtkit.detect.params import DetectionHead
    from trtkit.pipeline.foreign_detector import host_graph
    path = _two_heads(tmp_path)
    reference = host_decoder.register(_corners)
    model, params, size = host_graph(onnx.load(path), reference)
    assert size == (32, 32) and params["num_classes"] == 3 and params["anchors"] == 16
    assert params["outputs"] == [["boxes", [16, 4]], ["logits", [16, 3]]]
    assert [o.name for o in model.graph.output] == [host_decoder.PACKED]
    images = np.random.RandomState(0).rand(2, 3, 32, 32).astype(np.float32)
    packed = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"image": images})[0]
    boxes, logits = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"image": images})
    assert packed.shape == (2, 16 * 7)
    head = DetectionHead(3, dict(host_decoder.POSTPROCESSING, per_level=False),
                         decoder={"family": host_decoder.FAMILY, "params": params})
    decoded = host_decoder.decoded(packed, head, size)
    expected = np.concatenate(_corners({"boxes": boxes, "logits": logits}, size), axis=-1)
    assert np.array_equal(decoded, expected)  # unpacked exactly: the function saw the graph's own outputs
    with pytest.raises(InputError, match="raw heads are \\[100\\] values per image, 112 expected"):
        host_decoder.decoded(packed[:, :100], head, size)


def test_a_decoder_that_raises_answers_wrong_shapes_or_cannot_be_imported_is_one_line(tmp_path):
    from trtkit.detect import host_decoder
    from trtkit.pipeline.foreign_detector import DecoderOptions, host_graph
    path = _two_heads(tmp_path)

    def divides(outputs, input_hw):
        return 1 / 0

    with pytest.raises(InputError, match="raised ZeroDivisionError: division by zero") as caught:
        host_graph(onnx.load(path), host_decoder.register(divides))
    assert "'boxes' [1, 16, 4], 'logits' [1, 16, 3]" in caught.value.hint
    for answer, said in (((np.zeros((1, 16, 3)), np.zeros((1, 16, 2))), "boxes \\[1, 16, 3\\] and scores"),
                         (np.zeros((2, 16, 7)), "2 images for a batch of 1"), ("text", "a str")):
        with pytest.raises(InputError, match="returned " + said):
            host_graph(onnx.load(path), host_decoder.register(lambda outputs, hw, answer=answer: answer))
    with pytest.raises(InputError, match="'no_such_module_here:decode' cannot be loaded: ModuleNotFoundError"):
        host_graph(onnx.load(path), "no_such_module_here:decode")
    with pytest.raises(InputError, match="--decoder-param is for the built-in decoders"):
        DecoderOptions(decoder="mine.py:decode", params=["strides=8"])
    assert DecoderOptions(decoder=_corners).decoder.endswith("test_host_decoder:_corners")
    first, second = (host_decoder.register(lambda outputs, hw, k=k: k) for k in (1, 2))
    assert first != second and host_decoder.resolve(first)(None, None) == 1  # two lambdas are not one decoder


def test_the_cli_names_a_failing_decoder_file_in_one_line_before_building(tmp_path):
    path = _two_heads(tmp_path)
    (tmp_path / "mine.py").write_text(USER_DECODER)
    np.save(str(tmp_path / "anchors.npy"), np.zeros((16, 4), np.float32))
    out = tmp_path / "out"
    result = run_cli(["build", "--onnx", path, "--task", "detection", "--decoder",
                      str(tmp_path / "mine.py") + ":raises", "--out", str(out)])
    assert result.returncode != 0
    assert "raised KeyError: 'nothing'" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists() or not any(out.iterdir())


def test_the_trained_sample_built_with_a_users_decoder_file_finds_what_it_finds(tmp_path):
    """FP32 and INT8 built through ``decoder="file.py:decode"``: NMS on the host on ONNX Runtime too, the
    detections the sample's own (F1 >= 0.99 FP32); loaded again by the name in the manifest alone, and with
    ``decoder=`` given a function that finds nothing, nothing is found (the function given is the one used)."""
    import trtkit
    import trtkit.deps
    from trtkit.detect import host_decoder
    model, images, expected, anchors, path = sample_raw(tmp_path)
    contract, post = model.input_contract, model.postprocessing
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "retina_decode.py").write_text(USER_DECODER)
    np.save(str(folder / "anchors.npy"), anchors.astype(np.float32))
    out = str(tmp_path / "build")
    result = trtkit.build(onnx=path, task="detection", decoder=str(folder / "retina_decode.py") + ":decode",
                          score_threshold=post.score_thresh, nms_iou=post.nms_thresh,
                          max_detections=post.detections_per_img, mean=list(contract.mean), std=list(contract.std),
                          resize="stretch", data="shape-boxes", precision="fp32,int8", verify_images=16,
                          calib_images=16, calib_batch_size=8, backend="onnxruntime", bench_seconds=0, out=out)
    head = result.manifest["model"]["detection"]
    assert head["decoder"]["family"] == "python" and head["num_classes"] == 3
    fp32 = [a for a in result.manifest["artifacts"] if a["precision"] == "fp32"][0]
    assert fp32["nms"]["placement"] == "host" and "Python function" in fp32["nms"]["reason"]
    assert fp32["verify"]["map50"] > 0.5
    if trtkit.deps.available("tritonclient") and trtkit.deps.available("google.protobuf"):
        from trtkit.cli import main
        repo = tmp_path / "repo"
        assert main(["export-triton", out, "--out", str(repo), "-q"]) == 0
        config = (repo / "retinanet_raw_fp32" / "config.pbtxt").read_text()
        assert "retina_decode.py:decode" in config and "'regressions' [1023, 4]" in config
    host_decoder._FUNCTIONS.clear()  # loaded again as an application would: by the name in the manifest
    scores = {}
    for precision in ("fp32", "int8"):
        with trtkit.load(out, precision=precision) as detector:
            scores[precision] = _f1(detector.predict(images), expected)
            assert detector.decoded(images[:2]).shape == (2, anchors.shape[0], 7)
    print("F1 vs the sample's own detections:", scores)
    assert scores["fp32"] >= 0.99
    assert scores["int8"] >= 0.95
    with trtkit.load(out, precision="fp32",
                     decoder=lambda outputs, hw: (np.zeros(outputs["regressions"].shape, np.float32),
                                                  np.zeros(outputs["logits"].shape, np.float32))) as detector:
        assert sum(len(found) for found in detector.predict(images[:4])) == 0
    host_decoder._FUNCTIONS.clear()
    os.remove(str(folder / "retina_decode.py"))
    with pytest.raises(InputError, match="retina_decode.py:decode' cannot be loaded") as caught:
        with trtkit.load(out, precision="fp32") as detector:
            detector.predict(images[:1])
    assert "decoder=function" in caught.value.hint
