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
