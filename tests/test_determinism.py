"""``train --deterministic`` on CUDA (issue 23, item 6): AdaptiveAvgPool2d has no deterministic CUDA backward.

No GPU here: the plan is a pure function of the torch version and the device, and the replacement pooling
is checked on a real ResNet18 on the CPU to give the same outputs and gradients as AdaptiveAvgPool2d.
"""

import copy

import pytest

from trtkit.training.determinism import determinism_plan

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("version, cuda, warn_only, replace", [
    ("1.10.0a0+git36449ea", True, False, True),  # Jetson Nano (JetPack 4.6): no warn_only keyword
    ("1.10.2", False, False, False),
    ("1.11.0", True, True, True),  # warn_only since 1.11
    ("2.13.0+cu128", True, True, True),
    ("2.13.0+cpu", False, True, False),  # the CPU's AdaptiveAvgPool2d backward is deterministic: nothing replaced
])
def test_plan_per_torch_version_and_device(version, cuda, warn_only, replace):
    plan = determinism_plan(version, cuda)
    assert (plan.warn_only, plan.replace_pooling) == (warn_only, replace)
    if cuda:
        assert "mean over H and W" in plan.note
        assert ("no warn_only" in plan.note) == (not warn_only)


def test_set_deterministic_uses_warn_only_on_this_torch():
    from trtkit.training.determinism import set_deterministic
    before = torch.are_deterministic_algorithms_enabled()
    try:
        set_deterministic(torch, determinism_plan(torch.__version__, True).warn_only)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(before)


def _outputs_and_grads(model, x):
    model.zero_grad()
    out = model(x)
    (out * torch.linspace(-1, 1, out.shape[1])).sum().backward()
    return out.detach(), [p.grad.detach().clone() for p in model.parameters()]


def test_mean_pooling_matches_adaptive_pooling_on_resnet18():
    from trtkit.models.classifiers import resnet
    from trtkit.training.determinism import mean_pool_class, replace_global_pooling, restore_pooling
    torch.manual_seed(0)
    model = resnet("resnet18", num_classes=10).train()
    twin = copy.deepcopy(model)
    x = torch.randn(4, 3, 64, 64)
    ref_out, ref_grads = _outputs_and_grads(model, x)
    replaced = replace_global_pooling(twin)
    assert len(replaced) == 1 and isinstance(twin.avgpool, mean_pool_class())
    assert not any(isinstance(m, torch.nn.AdaptiveAvgPool2d) for m in twin.modules())
    out, grads = _outputs_and_grads(twin, x)
    assert torch.equal(out, ref_out)  # identical on this CPU (a mean of the same numbers)
    assert len(grads) == len(ref_grads)
    for got, want in zip(grads, ref_grads):
        assert torch.equal(got, want)
    assert set(twin.state_dict()) == set(model.state_dict())  # checkpoints are unchanged
    restore_pooling(replaced)
    assert isinstance(twin.avgpool, torch.nn.AdaptiveAvgPool2d)


def test_only_global_pooling_is_replaced():
    from trtkit.training.determinism import replace_global_pooling
    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d((2, 2)),
                                torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d((1, 1))))
    replaced = replace_global_pooling(model)
    assert len(replaced) == 2
    assert isinstance(model[1], torch.nn.AdaptiveAvgPool2d)
    assert not isinstance(model[0], torch.nn.AdaptiveAvgPool2d) and not isinstance(model[2][0],
                                                                                     torch.nn.AdaptiveAvgPool2d)
    x = torch.randn(2, 3, 5, 7)
    assert torch.allclose(model[0](x), torch.nn.functional.adaptive_avg_pool2d(x, 1), atol=1e-6)
