"""ResNets load torchvision-layout checkpoints strictly; bad checkpoints get clear errors."""

import json
import os

import pytest

torch = pytest.importorskip("torch")

from trtkit.errors import InputError, ModelMismatch  # noqa: E402
from trtkit.models.classifiers import create_model, guess_architecture, load_model  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "torchvision_resnet_keys.json")


def torchvision_layout(name):
    """Keys and shapes of torchvision's own ResNet (recorded from torchvision's resnet.py, not trtkit's)."""
    with open(FIXTURE) as handle:
        return [(k, tuple(s)) for k, s in json.load(handle)["models"][name]]


def state_from_layout(layout, seed=0):
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in layout:
        if key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(7)
        elif key.endswith("running_var"):
            state[key] = torch.rand(shape, generator=gen) + 0.5
        else:
            state[key] = torch.randn(shape, generator=gen) * 0.05
    return state


@pytest.mark.parametrize("name", ["resnet18", "resnet34", "resnet50"])
def test_state_dict_matches_torchvision_layout(name):
    ours = [(k, tuple(v.shape)) for k, v in create_model(name).state_dict().items()]
    assert ours == torchvision_layout(name)


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_torchvision_state_dict_loads_strictly(tmp_path, name):
    state = state_from_layout(torchvision_layout(name))
    path = str(tmp_path / "tv.pth")
    torch.save(state, path)
    model = load_model(name, path)
    assert model.num_classes == 1000
    loaded = model.state_dict()
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key
    out = model(torch.zeros(1, 3, 64, 64))
    assert out.shape == (1, 1000)


@pytest.mark.parametrize("wrap", ["plain", "state_dict", "model", "module"])
def test_checkpoint_wrappers(tmp_path, wrap):
    model = create_model("resnet18", num_classes=7)
    state = model.state_dict()
    if wrap == "state_dict":
        obj = {"state_dict": state, "epoch": 3}
    elif wrap == "model":
        obj = {"model": state, "optimizer": {}}
    elif wrap == "module":
        obj = dict(("module." + k, v) for k, v in state.items())
    else:
        obj = state
    path = str(tmp_path / "ck.pt")
    torch.save(obj, path)
    loaded = load_model("resnet18", path)
    assert loaded.num_classes == 7  # inferred from fc.weight
    assert torch.equal(loaded.fc.weight, model.fc.weight)


def test_cifar_stem_is_inferred(tmp_path):
    model = create_model("resnet18", num_classes=10, stem="cifar")
    path = str(tmp_path / "c.pt")
    torch.save(model.state_dict(), path)
    assert load_model("resnet18", path).stem == "cifar"


def test_wrong_architecture_names_the_right_one(tmp_path):
    path = str(tmp_path / "r18.pt")
    torch.save(create_model("resnet18", num_classes=10).state_dict(), path)
    with pytest.raises(ModelMismatch) as info:
        load_model("resnet34", path)
    assert "does not fit resnet34" in str(info.value)
    assert "--model resnet18" in str(info.value)


def test_guess_architecture():
    for name in ("resnet18", "resnet34", "resnet50"):
        assert guess_architecture(create_model(name).state_dict()) == name


def test_class_count_mismatch(tmp_path):
    path = str(tmp_path / "r18.pt")
    torch.save(create_model("resnet18", num_classes=10).state_dict(), path)
    with pytest.raises(ModelMismatch, match="is for 10 classes, not 5"):
        load_model("resnet18", path, num_classes=5)


def test_unknown_model_suggests_close_names():
    with pytest.raises(InputError) as info:
        create_model("resnet81")
    assert "resnet18" in str(info.value)


def test_corrupt_checkpoint(tmp_path):
    path = tmp_path / "bad.pt"
    path.write_bytes(b"\x80\x02not really a checkpoint" * 10)
    with pytest.raises(InputError, match="cannot read checkpoint"):
        load_model("resnet18", str(path))
