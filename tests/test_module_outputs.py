"""PyTorch modules as packages ship them (a blind test on facenet-pytorch's MTCNN nets): a forward that ends in
nn.Softmax, and one that returns a tuple (box offsets, face probabilities).

Measured before: RNet's softmax output was taken for logits, so predict, serve and the Triton config applied a
second softmax (a face at 99.84% shown at 73%), and a tuple-returning module could not be built at all.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import trtkit  # noqa: E402
from trtkit.errors import TrtkitError  # noqa: E402

nn = torch.nn


class TwoHeads(nn.Module):
    """MTCNN's RNet in miniature: a conv body, then box offsets [N, 4] and face probabilities [N, 2] (softmax)."""

    def __init__(self):
        super(TwoHeads, self).__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.PReLU(8), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten())
        self.boxes, self.face = nn.Linear(8, 4), nn.Linear(8, 2)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        features = self.body(x)
        return self.boxes(features), self.softmax(self.face(features) * 4.0)


class SoftmaxEnd(nn.Module):
    def __init__(self):
        super(SoftmaxEnd, self).__init__()
        self.net = TwoHeads()

    def forward(self, x):
        return self.net(x)[1]


def _build(tmp_path, module, name, **keywords):
    return trtkit.build(model=module, input_size=24, resize="stretch", data="sample", precision="fp32",
                        backend="onnxruntime", out=str(tmp_path / name), verify_images=16, bench_seconds=0,
                        **keywords)


def test_a_module_ending_in_softmax_is_read_as_probabilities_and_predicted_without_a_second_softmax(tmp_path,
                                                                                                   capsys):
    module = SoftmaxEnd().eval()
    result = _build(tmp_path, module, "soft")
    assert result.manifest["model"]["output_kind"] == "probabilities"
    # 16 held-out images: a flip moves agreement by 6%, and the build says the gates rest on little
    assert "verified on 16 held-out image(s) only" in capsys.readouterr().err
    from trtkit.data import load_images
    contract = trtkit.contract.InputContract.from_dict(result.manifest["model"]["input"])
    images = load_images("sample", contract, split="heldout", limit=4).images
    with torch.no_grad():
        expected = module(torch.from_numpy(images)).numpy()
    with trtkit.load(result.dir) as classifier:
        top = classifier.predict(images, top_k=1)
    got = np.array([row[0][2] for row in top])
    assert np.allclose(got, expected.max(axis=1), atol=1e-4)  # the module's own probability, not softmax(p)
    forced = _build(tmp_path, module, "forced", output_kind="logits")  # the user's word still wins
    assert forced.manifest["model"]["output_kind"] == "logits"


def test_a_module_returning_a_tuple_builds_the_output_named_and_refuses_without_one(tmp_path):
    module = TwoHeads().eval()
    with pytest.raises(TrtkitError) as error:
        _build(tmp_path, module, "none")
    text = str(error.value)
    assert "a tuple of 2 outputs (0: [1, 4], 1: [1, 2])" in text and "output=INDEX" in text
    assert not (tmp_path / "none").exists()
    result = _build(tmp_path, module, "face", output=1)
    model = result.manifest["model"]
    assert (model["output_kind"], model["num_classes"]) == ("probabilities", 2)
    assert model["class"].endswith(".TwoHeads")
    assert result.manifest["artifacts"][0]["status"] == "ok"
    with pytest.raises(TrtkitError) as error:
        _build(tmp_path, module, "bad", output=2)
    assert "names no element" in str(error.value)
    with pytest.raises(TrtkitError) as error:
        trtkit.build(checkpoint=None, output="x", precision="fp32", out=str(tmp_path / "c"))
    assert "--output picks one output" in str(error.value)


class ChannelsLastScores(nn.Module):
    """EasyOCR's CRAFT in miniature: an NCHW image in, region/link score maps out channels-last
    [N, H/2, W/2, 2], in a tuple with a feature map."""

    def __init__(self):
        super(ChannelsLastScores, self).__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))

    def forward(self, x):
        scores = self.body(x)
        return scores.permute(0, 2, 3, 1), scores


def test_a_channels_last_map_is_read_channels_first_from_a_module_and_an_onnx(tmp_path):
    """Measured before: CRAFT's [N, 192, 256, 2] maps (384x512 input) were built as a 192-class segmentation of
    256x2 pixels, "agreeing" 100% with FP32, and predict returned classes up to 191."""
    import onnx
    import onnxruntime as ort
    from trtkit.onnx.layout import is_channels_last_of
    assert is_channels_last_of([1, 192, 256, 2], (384, 512)) and is_channels_last_of([1, 55, 75, 2], (120, 160))
    assert not is_channels_last_of([1, 2, 192, 256], (384, 512))  # channels first already
    assert not is_channels_last_of([1, 64, 64, 64], (128, 128))  # square and as many channels: channels first
    assert not is_channels_last_of([1, 21, 512, 512], (512, 512)) and not is_channels_last_of([1, 10], (32, 32))
    module = ChannelsLastScores().eval()
    result = trtkit.build(model=module, output=0, input_size=(32, 48), resize="stretch", data="sample",
                          precision="fp32", backend="onnxruntime", out=str(tmp_path / "m"), verify_images=8,
                          bench_seconds=0)
    model = result.manifest["model"]
    assert (model["task"], model["num_classes"]) == ("segmentation", 2), model
    fp32 = str(tmp_path / "m" / result.manifest["artifacts"][0]["path"])
    session = ort.InferenceSession(fp32, providers=["CPUExecutionProvider"])
    x = np.random.RandomState(0).rand(1, 3, 32, 48).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(x))[1].numpy()  # the channels-first maps
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    assert got.shape == (1, 2, 16, 24) and np.allclose(got, expected, atol=1e-5)
    # the same maps from an ONNX with a fixed NCHW input, as another framework exports it
    path = str(tmp_path / "craft.onnx")

    class First(nn.Module):
        def __init__(self):
            super(First, self).__init__()
            self.inner = module

        def forward(self, x):
            return self.inner(x)[0]
    torch.onnx.export(First().eval(), torch.zeros(1, 3, 32, 48), path, input_names=["image"], output_names=["y"],
                      opset_version=13, dynamo=False)
    assert [d.dim_value for d in onnx.load(path).graph.output[0].type.tensor_type.shape.dim] == [1, 16, 24, 2]
    result = trtkit.build(onnx=path, resize="stretch", data="sample", precision="fp32", backend="onnxruntime",
                          out=str(tmp_path / "o"), verify_images=8, bench_seconds=0)
    model = result.manifest["model"]
    assert (model["task"], model["num_classes"]) == ("segmentation", 2), model
    assert any("channels-last" in note and "32x48 input" in note for note in model["notes"]), model["notes"]


def test_an_output_kind_that_contradicts_the_graph_s_softmax_is_warned_about(tmp_path, capsys):
    """A blind test: --output-kind logits on a Keras model ending in Softmax was taken silently, the log still
    saying the output held probabilities, and predict showed a second softmax (79.72% as 64.41%)."""
    path = str(tmp_path / "softmax.onnx")
    torch.onnx.export(SoftmaxEnd().eval(), torch.zeros(1, 3, 16, 16), path, input_names=["image"],
                      output_names=["p"], opset_version=13, dynamo=False)
    result = trtkit.build(onnx=path, output_kind="logits", data="sample", input_size=16, precision="fp32",
                          backend="onnxruntime", out=str(tmp_path / "b"), verify_images=8, bench_seconds=0)
    err = capsys.readouterr().err
    assert "--output-kind logits contradicts the graph" in err and "'p'" in err
    assert result.manifest["model"]["output_kind"] == "logits"  # the user's word stands, and is noted
    assert any("--output-kind logits replaces the probabilities" in n for n in result.manifest["model"]["notes"])
    trtkit.build(onnx=path, data="sample", input_size=16, precision="fp32", backend="onnxruntime",
                 out=str(tmp_path / "c"), verify_images=8, bench_seconds=0)
    assert "contradicts" not in capsys.readouterr().err
    _build(tmp_path, SoftmaxEnd(), "module", output_kind="logits")  # the module's exported graph, the same
    assert "--output-kind logits contradicts the graph" in capsys.readouterr().err
