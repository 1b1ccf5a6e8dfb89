"""The training input path (``training.inputs``) on the CPU, the same code a GPU runs: uint8 storage only when
exact, crops and flips equal to reflect padding + crop, every image once per epoch, and the half recipe's
multi-tensor copies."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trtkit.contract import InputContract  # noqa: E402
from trtkit.errors import InputError  # noqa: E402
from trtkit.training.inputs import BatchSource, check_placement, choose_placement, encode, pixel_affine  # noqa: E402


def normalized(pixels, contract):
    scale, shift = pixel_affine(contract)
    channels = pixels.shape[1]
    return (pixels.astype(np.float32) * scale.reshape(1, channels, 1, 1)
            + shift.reshape(1, channels, 1, 1)).astype(np.float32)


@pytest.mark.parametrize("contract", [InputContract(size=8), InputContract(size=8, channels=1),
                                      InputContract(size=8, mean=0, std=1, pixel_scale=255.0)])
def test_pixels_are_kept_as_the_exact_uint8_they_were(contract):
    rng = np.random.RandomState(0)
    pixels = rng.randint(0, 256, size=(40, contract.channels, 8, 8))
    images = normalized(pixels, contract)
    store, layout, scale, shift = encode(images, contract)
    assert layout == "nhwc" and store.dtype == np.uint8 and np.array_equal(store.transpose(0, 3, 1, 2), pixels)
    decoded = store.transpose(0, 3, 1, 2) * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
    assert np.abs(decoded - images).max() < 1e-5


def test_floats_that_are_not_pixels_stay_float32_unchanged():
    contract = InputContract(size=8)
    images = normalized(np.random.RandomState(1).randint(0, 256, size=(30, 3, 8, 8)), contract)
    images[17, 1, 2, 3] += 0.01  # one value between two pixels: the whole set stays float
    store, layout, scale, shift = encode(images, contract)
    assert layout == "nchw" and store is images  # kept as it is: no second copy of the training set
    assert np.all(scale == 1) and np.all(shift == 0)
    assert encode(images[:16], None)[1] == "nchw"  # no contract: no guess
    padded = InputContract(size=8, resize="pad")  # zeros after normalization are no pixel
    assert encode(np.zeros((2, 3, 8, 8), np.float32), padded)[1] == "nchw"


def reference(images, order, offsets, flips, pad):
    """What the loop did before: reflect-pad the batch, crop at the offsets, flip."""
    x = torch.nn.functional.pad(torch.from_numpy(images[order]), (pad, pad, pad, pad), mode="reflect")
    h, w = images.shape[2:]
    crops = torch.stack([x[i, :, oy:oy + h, ox:ox + w] for i, (oy, ox) in enumerate(offsets)])
    return torch.where(torch.from_numpy(flips)[:, None, None, None], crops.flip(3), crops)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("as_pixels", [True, False])
def test_batches_are_reflect_padded_crops_and_flips_of_every_image_once(channels_last, as_pixels):
    contract = InputContract(size=(20, 28))
    rng = np.random.RandomState(2)
    images = normalized(rng.randint(0, 256, size=(45, 3, 20, 28)), contract)
    if not as_pixels:
        images += rng.normal(0, 1e-2, size=images.shape).astype(np.float32)
    labels = np.arange(45) % 7
    pad = 5
    source = BatchSource(images, labels, "cpu", contract, pad=pad, flip=True, channels_last=channels_last)
    assert source.placement == "host" and (source.store.dtype == torch.uint8) == as_pixels
    order = rng.permutation(45)
    batches = list(source.epoch(order, np.random.RandomState(9), 16))
    assert [b[0].shape[0] for b in batches] == [16, 16, 13]
    assert all(b[0].is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
               for b in batches)
    draw = np.random.RandomState(9)  # the epoch's draws: offsets then flips, in the epoch's order
    offsets = draw.randint(0, 2 * pad + 1, size=(45, 2))
    flips = draw.rand(45) < 0.5
    assert 0 < flips.sum() < 45 and len(set(map(tuple, offsets))) > 10
    expected = reference(images, order, offsets, flips, pad)
    got = torch.cat([b[0] for b in batches])
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    assert np.array_equal(torch.cat([b[1] for b in batches]).numpy(), labels[order])


def test_a_last_batch_of_one_image_is_left_out_and_no_flip_means_none():
    contract = InputContract(size=8)
    images = normalized(np.random.RandomState(3).randint(0, 256, size=(9, 3, 8, 8)), contract)
    source = BatchSource(images, np.zeros(9), "cpu", contract, pad=0, flip=False)
    batches = list(source.epoch(np.arange(9), np.random.RandomState(0), 4))
    assert [b[0].shape[0] for b in batches] == [4, 4]  # BatchNorm needs two images
    assert torch.allclose(torch.cat([b[0] for b in batches]), torch.from_numpy(images[:8]), atol=1e-5)


def test_a_pad_as_large_as_the_image_is_narrowed_to_what_reflection_allows():
    contract = InputContract(size=4)
    images = normalized(np.random.RandomState(4).randint(0, 256, size=(6, 3, 4, 4)), contract)
    source = BatchSource(images, np.zeros(6), "cpu", contract, pad=9, flip=True)
    assert source.pad == 3
    x = torch.cat([b[0] for b in source.epoch(np.arange(6), np.random.RandomState(0), 3)])
    assert x.shape == (6, 3, 4, 4) and torch.isfinite(x).all()


def test_placement_is_checked_and_a_cpu_keeps_the_images_in_memory():
    assert choose_placement(torch, "device", "cpu", 10) == "host"
    assert check_placement("auto") == "auto"
    with pytest.raises(InputError, match="data-placement"):
        check_placement("gpu")
    from trtkit.training.config import TrainConfig
    with pytest.raises(InputError, match="data-placement"):
        TrainConfig(data_placement="pinned")


def test_the_half_recipe_hands_gradients_over_and_back_in_multi_tensor_copies():
    from trtkit.training.modes import Precision, copy_all
    targets = [torch.zeros(3), torch.zeros(2, 2)]
    sources = [torch.arange(3).half(), torch.ones(2, 2).half() * 0.5]
    copy_all(torch, targets, sources)
    assert targets[0].dtype == torch.float32 and torch.equal(targets[0], torch.arange(3).float())
    assert torch.equal(targets[1], torch.full((2, 2), 0.5))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 2))
    precision = Precision("half", "cpu")
    params = precision.prepare(model)
    buffers = None
    for step in range(2):
        model(torch.randn(2, 3, 8, 8).half()).float().sum().backward()
        fp16 = [p for p in model.parameters() if p.dtype == torch.float16]
        grads = [p.grad.float() for p in fp16]
        precision.after_backward()
        masters = [m for p, m in precision._pairs]
        assert all(torch.equal(m.grad, g) for m, g in zip(masters, grads)) and all(p.grad is None for p in fp16)
        if buffers is not None:  # the masters' gradient buffers are kept, not allocated each step
            assert all(m.grad is b for m, b in zip(masters, buffers))
        buffers = [m.grad for m in masters]
        with torch.no_grad():
            for master in masters:
                master.add_(1.0)
        precision.after_step()
        assert all(torch.equal(p.float(), m.half().float()) for p, m in precision._pairs)
        assert all(p.dtype == torch.float32 for p in params)


def test_a_saved_optimizer_loads_as_this_devices_optimizer_is_fused_or_not():
    """A checkpoint written with an unfused AdamW (a CPU run, an older trtkit) resumed by a fused one: torch puts
    a loaded ``step`` where the saved groups' flag says, so the flag is this run's before loading."""
    from trtkit.training.loop import this_devices_optimizer_state
    w = torch.nn.Parameter(torch.ones(3))
    before = torch.optim.AdamW([w], lr=0.1)
    w.sum().backward()
    before.step()
    try:
        fused = torch.optim.AdamW([w], lr=0.1, fused=True)
    except (RuntimeError, TypeError) as exc:
        pytest.skip("this torch has no fused AdamW on a CPU: {}".format(exc))
    saved = before.state_dict()
    fused.load_state_dict(this_devices_optimizer_state(fused, saved))
    assert fused.param_groups[0]["fused"] is True and saved["param_groups"][0]["fused"] is not True
    assert fused.state[w]["step"].dtype == torch.float32  # placed for the fused kernel, not as a CPU scalar
    fused.step()  # runs


def test_a_checkpoint_of_the_former_format_keeps_its_learning_rate_and_says_why_it_drifts(capsys):
    from trtkit.training.config import TrainConfig
    from trtkit.training.runner import older_run
    config = TrainConfig(batch_size=256)
    assert older_run(config, 1, "old.pt").base_lr == 0.05  # format 1's default, not 0.1 at batch 256
    assert "older trtkit" in capsys.readouterr().err
    assert older_run(config, 2, "new.pt") is config
    assert older_run(TrainConfig(lr=0.3), 1, "old.pt").base_lr == 0.3


# ---------------------------------------------------------------- the host path's worker thread

def _prefetch_threads():
    import threading
    return [t for t in threading.enumerate() if t.name == "trtkit-prefetch"]


def test_prefetched_gives_every_item_in_order_made_ahead_in_another_thread():
    import threading
    from trtkit.training.inputs import prefetched
    made = []

    def make(number):
        made.append((number, threading.current_thread().name))
        return number * number

    assert list(prefetched(make, 7, 2)) == [n * n for n in range(7)]
    assert [n for n, _ in made] == list(range(7))
    assert {name for _, name in made} == {"trtkit-prefetch"}
    assert not _prefetch_threads()


def test_prefetched_stays_at_most_its_depth_ahead_and_stops_with_its_consumer():
    import time
    from trtkit.training.inputs import prefetched
    made = []
    steps = prefetched(lambda number: made.append(number) or number, 1000, 2)
    assert next(steps) == 0
    time.sleep(0.3)  # time for the worker to run ahead as far as it may
    # the consumer holds item 0; the queue holds 2; the worker holds one more it cannot hand over
    assert 2 <= len(made) <= 4
    steps.close()
    assert not _prefetch_threads() and len(made) <= 4


def test_prefetched_raises_the_workers_error_at_its_item():
    from trtkit.training.inputs import prefetched

    def make(number):
        if number == 3:
            raise ValueError("bad batch 3")
        return number

    seen = []
    with pytest.raises(ValueError, match="bad batch 3"):
        for item in prefetched(make, 6, 2):
            seen.append(item)
    assert seen == [0, 1, 2] and not _prefetch_threads()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the host path copies to a GPU")
@pytest.mark.parametrize("worker", [False, True])
def test_on_a_gpu_host_and_device_placements_give_the_same_batches(worker, monkeypatch):
    """The host path (pinned buffers, side stream; in the loop's thread or a worker's) and the on-GPU store: the
    same pixels and labels for the same order and draws, in both memory formats."""
    from trtkit.training import inputs
    monkeypatch.setattr(inputs, "HOST_WORKER", worker)
    contract = InputContract(size=(20, 28), channels=3)
    rng = np.random.RandomState(0)
    pixels = rng.randint(0, 256, size=(37, 20, 28, 3)).astype(np.float32)
    scale, shift = pixel_affine(contract)
    images = (pixels.transpose(0, 3, 1, 2) * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)).astype(
        np.float32)
    labels = rng.randint(0, 10, size=37)
    for channels_last in (False, True):
        batches = {}
        for placement in ("device", "host"):
            source = BatchSource(images, labels, "cuda", contract, placement=placement, pad=3, flip=True,
                                 channels_last=channels_last)
            assert source.placement == placement
            batches[placement] = [(x.cpu(), y.cpu()) for x, y in
                                  source.epoch(np.random.RandomState(1).permutation(37), np.random.RandomState(2), 8)]
        assert len(batches["host"]) == len(batches["device"]) == 5
        for (xh, yh), (xd, yd) in zip(batches["host"], batches["device"]):
            assert torch.equal(xh, xd) and torch.equal(yh, yd)
    assert not _prefetch_threads()
