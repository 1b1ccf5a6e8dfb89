"""gpu_check's detection step run for real on the CPU through the code the GPU runs (tiny sizes from the request's
options), its report, and fit_detection's device-side batches against the host path they replaced: the same
pixels and boxes, and the sample detector's training bit for bit."""

import hashlib
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _fingerprint(model):
    digest = hashlib.sha256()
    for _, value in sorted(model.state_dict().items()):
        digest.update(value.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


class HostBatches(object):
    """The batches as fit_detection made them before ``DeviceBatches``: normalized and flipped on the host."""

    def __init__(self, images, records, contract, device, flips, label_offset=0, crop=None):
        self.images, self.records, self.contract = images, records, contract
        self.device, self.flips, self.offset, self.crop = device, flips, label_offset, crop

    def batch(self, index, rng):
        from trtkit.training.detection import augmented, cropped, normalized_batch
        x, targets = augmented(normalized_batch(self.images[index], self.contract),
                               [self.records[i] for i in index], rng, self.flips)
        if self.crop:
            x, targets = cropped(x, targets, rng, self.crop)
        x = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        return x, [(torch.from_numpy(boxes).to(self.device), torch.from_numpy(labels + self.offset).to(self.device))
                   for boxes, labels in targets]


@pytest.mark.parametrize("bgr", [False, True])
def test_device_batches_are_the_host_paths_pixels_and_boxes(bgr):
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.models.sample import sample_detection_contract
    from trtkit.training.detection import DeviceBatches
    images, records = draw_shape_boxes(12, size=48, seed=5)
    contract = sample_detection_contract().with_overrides({"size": 48})
    if bgr:
        contract = contract.with_overrides({"channel_order": "bgr", "pixel_scale": 255.0})
    flips = ("horizontal", "vertical")
    new = DeviceBatches(images, records, contract, "cpu", flips, 1, on_device=True)  # the path CUDA runs
    old = HostBatches(images, records, contract, "cpu", flips, 1)
    rng_new, rng_old = np.random.RandomState(3), np.random.RandomState(3)
    for index in (np.array([0, 2, 3, 7, 9]), np.arange(12), np.array([4])):
        x_new, t_new = new.batch(index, rng_new)
        x_old, t_old = old.batch(index, rng_old)
        assert x_new.dtype == torch.float32 and x_new.is_contiguous() and x_new.shape == x_old.shape
        assert torch.equal(x_new, x_old)  # bit for bit, flips included
        for (boxes_new, labels_new), (boxes_old, labels_old) in zip(t_new, t_old):
            assert torch.equal(boxes_new, boxes_old) and torch.equal(labels_new, labels_old)
            assert boxes_new.dtype == boxes_old.dtype and labels_new.dtype == labels_old.dtype
    assert rng_new.rand() == rng_old.rand()  # the same draws, in the same order
    # float32 NCHW images (already normalized) take the same path without normalization
    floats = np.random.RandomState(0).rand(6, 3, 48, 48).astype(np.float32)
    x_new, _ = DeviceBatches(floats, records[:6], contract, "cpu", flips, on_device=True).batch(
        np.arange(6), np.random.RandomState(1))
    x_old, _ = HostBatches(floats, records[:6], contract, "cpu", flips).batch(np.arange(6), np.random.RandomState(1))
    assert torch.equal(x_new, x_old)


def test_device_batches_cut_the_same_windows_as_the_host_path():
    """With ``crop`` (the sample's recipe trains on windows): the device path cuts the windows ``cropped`` cuts,
    from the same draws, its boxes moved, clipped and dropped the same way."""
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.models.sample import sample_detection_contract
    from trtkit.training.detection import DeviceBatches
    images, records = draw_shape_boxes(12, size=48, seed=5)
    contract = sample_detection_contract().with_overrides({"size": 48})
    flips = ("horizontal", "vertical")
    new = DeviceBatches(images, records, contract, "cpu", flips, 1, on_device=True, crop=32)
    old = DeviceBatches(images, records, contract, "cpu", flips, 1, on_device=False, crop=32)
    rng_new, rng_old = np.random.RandomState(3), np.random.RandomState(3)
    dropped = 0
    for index in (np.array([0, 2, 3, 7, 9]), np.arange(12)):
        x_new, t_new = new.batch(index, rng_new)
        x_old, t_old = old.batch(index, rng_old)
        assert x_new.shape == x_old.shape == (len(index), 3, 32, 32) and torch.equal(x_new, x_old)
        for (boxes_new, labels_new), (boxes_old, labels_old), i in zip(t_new, t_old, index):
            assert torch.equal(boxes_new, boxes_old) and torch.equal(labels_new, labels_old)
            assert float(boxes_new.max()) <= 32 if len(boxes_new) else True
            dropped += len(records[i]) - len(boxes_new)
    assert dropped > 0  # some boxes fell outside their windows: the drop rule was exercised
    assert rng_new.rand() == rng_old.rand()


def test_the_sample_detectors_training_is_bit_identical_to_the_host_path(monkeypatch):
    """A few steps of the sample detector's recipe (its data, contract, flips, seed) on the CPU: the same
    losses and the same weights from fit_detection as it is (numpy batches on a CPU), with the device path
    forced, and with the host path of before."""
    import trtkit.training.detection as detection
    from trtkit.models.detection import create_detection_model
    from trtkit.models.sample import (DETECTION_ARCH, DETECTION_CROP, DETECTION_LR, sample_detection_contract,
                                      sample_detection_data)
    from trtkit.training import seed_everything
    images, records = sample_detection_data("train")
    images, records = images[:16], records[:16]

    def train():
        seed_everything(0)
        contract = sample_detection_contract()
        model = create_detection_model(DETECTION_ARCH, num_classes=len(contract.class_names), contract=contract)
        record = detection.fit_detection(model, images, records, 2, batch_size=4, lr=DETECTION_LR,
                                         flips=("horizontal", "vertical"), crop=DETECTION_CROP,
                                         label="bit-identical check")
        return record, _fingerprint(model)
    new, new_weights = train()
    device_path = detection.DeviceBatches

    def forced(*args, **kwargs):
        return device_path(*args, on_device=True, **kwargs)
    monkeypatch.setattr(detection, "DeviceBatches", forced)
    on_device, device_weights = train()
    monkeypatch.setattr(detection, "DeviceBatches", HostBatches)
    old, old_weights = train()
    for key in ("first_loss", "loss", "classification", "box_regression"):
        assert new[key] == old[key] == on_device[key], key
    assert new_weights == old_weights == device_weights
    assert new["timed_steps"] == 2 and new["peak_memory_mb"] is None


def _cpu_request(tmp_path, **extra):
    options = {"device": "cpu", "models": ["ssdlite320_mobilenet_v3_large", "retinanet_resnet18_fpn"],
               "sizes": {"ssdlite320_mobilenet_v3_large": 64, "retinanet_resnet18_fpn": 64}, "train_size": 64,
               "train_steps": 3, "train_images": 8, "train_batch": 2, "warmup_steps": 1, "batches": [1, 2]}
    options.update(extra)
    # 60 s: the timing fills its share of the step's time, so a test pays for all of it (120 s took 55 s)
    return {"step": "detection", "seconds": 60.0, "work": str(tmp_path), "options": {"detection": options}}


def test_the_detection_step_runs_on_the_cpu_and_the_report_renders_it(tmp_path):
    """The step's own functions, run for real: inference rows per model, mode and batch (each saved as it came),
    the training table (strict fp32 ran; modes the CPU lacks say why), and the report's section."""
    from trtkit.gpucheck.detection import TIMED, step_detection
    from trtkit.gpucheck.report import markdown_report, step_detail
    from trtkit.gpucheck.steps import STEP_FUNCTIONS, _bench, bench_options, saving_rows
    assert STEP_FUNCTIONS["detection"].__name__ == "step_detection"
    saved = []
    result = step_detection(_cpu_request(tmp_path), lambda r: saved.append(json.loads(json.dumps(r))),
                            bench_options, _bench, saving_rows)
    rows = result["bench"]["results"]
    ran = [r for r in rows if r["status"] == "ok"]
    assert result["status"] == "ok", result
    assert sorted((r["model"], r["batch"]) for r in ran) == [
        ("retinanet_resnet18_fpn@64", 1), ("retinanet_resnet18_fpn@64", 2),
        ("ssdlite320_mobilenet_v3_large@64", 1), ("ssdlite320_mobilenet_v3_large@64", 2)]
    for row in ran:  # what the report reads
        assert row["torch_mode"] == "fp32" and row["fps"] > 0 and row["latency_ms"]["median"] > 0
        assert row["timed"] == TIMED and row["input_size"] == 64
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert set(r["torch_mode"] for r in skipped) <= {"autocast", "half"} and all(r["reason"] for r in skipped)
    # rows were saved as they were measured: an early save holds fewer rows than the end
    counts = [len((s.get("bench") or {}).get("results") or []) for s in saved]
    assert counts[0] < len(rows) and max(counts) == len(rows)
    training = result["training"]
    fp32 = [r for r in training["rows"] if r["mode"] == "fp32"][0]
    assert fp32["status"] == "ok" and fp32["timed_steps"] == 2 and fp32["steps_per_second"] > 0
    assert fp32["speedup_vs_fp32"] == 1.0 and np.isfinite(fp32["loss"]) and training["steps"] == 3
    tf32 = [r for r in training["rows"] if r["mode"] == "tf32"][0]
    assert tf32["status"] == "skipped" and "8.0+" in tf32["reason"]
    assert [r["mode"] for r in training["rows"]] == ["fp32", "tf32", "amp", "bf16"]
    text = markdown_report({"plan": [{"step": "detection"}], "steps": {"detection": dict(result, wall_seconds=9.0)},
                            "device": {}, "started": "now", "seconds": 10, "budget_seconds": 120, "command": "x"})
    section = text[text.index("## Object detection (PyTorch)"):]
    assert "| ssdlite320_mobilenet_v3_large | 64 | fp32 | 2 |" in section
    assert "| retinanet_resnet18_fpn | 64 | half | - | skipped:" in section
    assert "| fp32 | {:.2f} |".format(fp32["steps_per_second"]) in section and "1.00x" in section
    assert "| tf32 | skipped: TF32" in section and "peak memory (reset after them)" in section
    assert "no score threshold, top-k or NMS" in section
    assert "4 of" in step_detail(result)


def test_a_model_that_fails_keeps_the_others_rows(tmp_path):
    """SSD300's extra layers need more than 64 px: its failure is its row, and the next model is still timed."""
    from trtkit.gpucheck.detection import step_detection
    from trtkit.gpucheck.steps import _bench, bench_options, saving_rows
    request = _cpu_request(tmp_path, models=["ssd300_vgg16", "ssdlite320_mobilenet_v3_large"], batches=[1],
                           sizes={"ssd300_vgg16": 64, "ssdlite320_mobilenet_v3_large": 64}, skip_training=True)
    result = step_detection(request, lambda r: None, bench_options, _bench, saving_rows)
    rows = result["bench"]["results"]
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["model"] == "ssd300_vgg16@64" and "RuntimeError" in failed[0]["reason"]
    assert any(r["status"] == "ok" and r["model"].startswith("ssdlite") for r in rows)
    assert result["status"] == "partial" and "training" not in result


def test_steps_per_mode_follow_the_time_share():
    from trtkit.gpucheck.detection import MAX_TRAIN_STEPS, planned_steps
    assert planned_steps(100.0, 0.1, 4, 3) == int((80.0 - 16.0) / 0.4)
    assert planned_steps(10.0, 1.0, 4, 3) == 5  # never fewer than the warm-up and two timed steps
    assert planned_steps(1e5, 0.01, 4, 3) == MAX_TRAIN_STEPS
