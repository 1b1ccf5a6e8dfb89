"""Training a RetinaNet-style detector (``models.detection``): RetinaNet's matcher and losses
(``detection_loss``), flips that move the boxes with the pixels, AdamW with warm-up and cosine decay, and the
held-out mAP.

Why beside ``loop.fit`` and ``dense.fit_dense``: a detector's targets are a variable number of boxes per image
that every augmentation must move, and it is judged by mAP, not accuracy or IoU. This loop is what the sample
detector (``models.sample.sample_detection_model``) is trained with: on the CPU, seeded, with a progress bar.

Inputs: ``images`` uint8 ``[N, H, W, 3]`` (normalized per batch by the model's ``input_contract``: pixel scale,
mean, std, channel order) or float32 ``[N, 3, H, W]`` already normalized; ``records`` one ``BoxRecord`` per
image with its boxes in the input's pixels (``data.boxes.input_boxes`` puts a file's there). On a GPU the
images go to the device once and every batch is gathered, flipped and normalized there (``DeviceBatches``):
a host that normalized and copied each batch (pageable memory) and read each loss back three times kept the
GPU waiting. The loss itself (the matcher, per image) still reads a few counts back per image.

Denormals: from-scratch training on a CPU produces many tiny gradients early on, and x86 arithmetic on
denormal floats is tens of times slower (a step of the sample detector took 4-6 s instead of 0.5 s), so the
loop flushes them to zero while it runs (``torch.set_flush_denormal``) and turns that off after.

mAP: ``box_map`` is the one call that scores detections (pycocotools' COCOeval today), so another evaluator
can take its place without touching the loop.
"""

import time

import numpy as np

from trtkit import log
from trtkit.deps import require
from trtkit.errors import InputError

FLIPS = ("horizontal", "vertical")


def normalized_batch(images, contract):
    """float32 NCHW of a batch: uint8 NHWC scaled and normalized by ``contract``; float NCHW as it is."""
    if images.dtype != np.uint8:
        return np.ascontiguousarray(images, dtype=np.float32)
    x = images.astype(np.float32) * np.float32(contract.pixel_scale / 255.0)
    if contract.channel_order == "bgr":
        x = x[..., ::-1]
    x = (x - np.asarray(contract.mean, np.float32)) / np.asarray(contract.std, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def flip_boxes(boxes, extent, axis):
    """``boxes`` ([M, 4] x1 y1 x2 y2) mirrored across an image ``extent`` pixels wide (``axis`` 0) or high (1)."""
    flipped = boxes.copy()
    flipped[:, axis] = extent - boxes[:, axis + 2]
    flipped[:, axis + 2] = extent - boxes[:, axis]
    return flipped


def augmented(x, records, rng, flips):
    """(x, [(boxes, labels)]) with each of ``flips`` applied to each image with probability 1/2, the boxes
    moved with the pixels: the host path (``DeviceBatches`` makes the same batches where the model runs)."""
    height, width = x.shape[-2:]
    drawn, targets = drawn_flips(records, rng, flips, height, width)
    for axis, chosen in drawn:
        if chosen.any():
            x[chosen] = x[chosen][..., ::-1] if axis == 0 else x[chosen][..., ::-1, :]
    return x, targets


def drawn_flips(records, rng, flips, height, width):
    """([(axis, chosen)], [(boxes, labels)]): ``augmented``'s draws from ``rng`` (the same numbers in the same
    order) and its boxes, without touching pixels: ``axis`` 0 horizontal, 1 vertical; ``chosen`` a bool per
    image."""
    targets = [(record.boxes.copy(), record.labels) for record in records]
    drawn = []
    for name in flips:
        chosen = rng.rand(len(records)) < 0.5
        axis = 0 if name == "horizontal" else 1
        drawn.append((axis, chosen))
        targets = [(flip_boxes(boxes, width if axis == 0 else height, axis) if flip else boxes, labels)
                   for (boxes, labels), flip in zip(targets, chosen)]
    return drawn, targets


class DeviceBatches(object):
    """``fit_detection``'s batches, made where the model runs. On CUDA the images go to the device once (uint8
    NHWC: a quarter of float32's bytes) and each step gathers, flips and normalizes there, from one small
    host-to-device copy of the indices and flip choices; the boxes are flipped on the host (numpy, a few
    numbers per image) with flips drawn from the seeded ``rng`` exactly as ``augmented`` draws them, and go to
    the device as one copy of boxes and one of labels. Float32 images (4x the bytes: they stay on the host), and
    any on a CPU, are batched as before, by numpy (``augmented(normalized_batch(...))``: measured 11 ms a batch
    of 16 at 128x128 on a CPU against 70-120 ms for torch's gather and normalization there); ``on_device=True``
    runs the device path on a CPU, which gives the same numbers bit for bit (``tests/test_gpu_check_detection.py``)."""

    def __init__(self, images, records, contract, device, flips, label_offset=0, on_device=None, crop=None):
        torch = self.torch = require("torch", "training")
        self.crop = crop
        self.records, self.flips, self.device, self.label_offset = records, tuple(flips), device, int(label_offset)
        self.contract, self.uint8 = contract, images.dtype == np.uint8
        self.on_device = (str(device).startswith("cuda") and self.uint8) if on_device is None else bool(on_device)
        self.host = images
        if not self.on_device:
            return
        source = torch.from_numpy(np.ascontiguousarray(images if self.uint8 else images.astype(np.float32, copy=False)))
        self.images = source.to(device)  # once
        # (height, width) and the dimensions a horizontal (axis 0) and vertical (axis 1) flip reverse
        self.size = tuple(images.shape[1:3] if self.uint8 else images.shape[-2:])
        self.dims = (2, 1) if self.uint8 else (3, 2)
        if self.uint8:
            def constant(values):
                return torch.from_numpy(np.asarray(values, np.float32).reshape(-1, 1, 1)).to(device)
            self.scale = constant(contract.pixel_scale / 255.0)
            self.mean, self.std = constant(contract.mean), constant(contract.std)
            self.bgr = contract.channel_order == "bgr"

    def batch(self, index, rng):
        """(x float32 [B, 3, H, W] on the device, [(boxes, labels)] on the device) of the images at ``index``."""
        torch = self.torch
        if not self.on_device:
            x, targets = augmented(normalized_batch(self.host[index], self.contract),
                                   [self.records[i] for i in index], rng, self.flips)
            if self.crop:
                x, targets = cropped(x, targets, rng, self.crop)
            return torch.from_numpy(np.ascontiguousarray(x)).to(self.device), [
                (torch.from_numpy(boxes).to(self.device), torch.from_numpy(labels + self.label_offset).to(self.device))
                for boxes, labels in targets]
        drawn, targets = drawn_flips([self.records[i] for i in index], rng, self.flips, *self.size)
        chosen = [c for _, c in drawn]
        picks = torch.from_numpy(np.concatenate([np.asarray(index, np.int64)] + [c.astype(np.int64) for c in chosen]))
        picks = picks.to(self.device)  # one copy: the indices, then each flip's choice per image
        count = len(index)
        x = self.images[picks[:count]]
        for number, (axis, choice) in enumerate(drawn):
            if choice.any():
                mask = picks[count * (number + 1):count * (number + 2)].bool().view(-1, 1, 1, 1)
                x = torch.where(mask, x.flip(self.dims[axis]), x)
        if self.uint8:  # NCHW in bytes first, then float: each channel's plane normalized in one pass
            x = x.permute(0, 3, 1, 2).contiguous().float() * self.scale
            if self.bgr:
                x = x.flip(1)
            x = (x - self.mean) / self.std
        if self.crop:  # the same windows ``cropped`` draws, cut on the device
            corners, targets = windows_of(targets, rng, self.crop, *self.size)
            if corners is not None:
                size_h, size_w = min(self.crop, self.size[0]), min(self.crop, self.size[1])
                x = torch.stack([x[i, :, top:top + size_h, left:left + size_w] for i, (top, left) in enumerate(corners)])
        return x.contiguous(), self._targets(targets)

    def _targets(self, targets):
        """One copy of every box and one of every label, split back per image on the device."""
        torch = self.torch
        counts = [len(boxes) for boxes, _ in targets]
        boxes = torch.from_numpy(np.concatenate([b for b, _ in targets])).to(self.device).split(counts)
        labels = torch.from_numpy(np.concatenate([l + self.label_offset for _, l in targets])).to(self.device)
        return list(zip(boxes, labels.split(counts)))


def cropped(x, targets, rng, size, min_inside=0.5):
    """(x, targets) of a random ``size`` x ``size`` window of each image (``x`` NCHW), the boxes moved with it and
    clipped to it; a box with less than ``min_inside`` of its area inside is dropped (as the shape-boxes sample
    drops an object with less than half of it visible). Why: a window costs ``(size / side) ** 2`` of the whole
    image, and the detector is convolutional, so it learns the same objects from fewer pixels."""
    height, width = x.shape[-2:]
    corners, kept = windows_of(targets, rng, size, height, width, min_inside)
    if corners is None:
        return x, targets
    size_h, size_w = min(size, height), min(size, width)
    windows = np.empty(x.shape[:2] + (size_h, size_w), x.dtype)
    for index, (top, left) in enumerate(corners):
        windows[index] = x[index, :, top:top + size_h, left:left + size_w]
    return windows, kept


def windows_of(targets, rng, size, height, width, min_inside=0.5):
    """([(top, left)] per image, the targets moved into those windows) for ``cropped`` and the device path of
    ``DeviceBatches`` alike (the same draws from ``rng``, in the same order); (None, targets) when the window is
    the whole image."""
    if size >= height and size >= width:
        return None, targets
    size_h, size_w = min(size, height), min(size, width)
    corners, kept = [], []
    for boxes, labels in targets:
        top, left = rng.randint(0, height - size_h + 1), rng.randint(0, width - size_w + 1)
        corners.append((top, left))
        moved = boxes - np.asarray([left, top, left, top], boxes.dtype)
        clipped = np.clip(moved, 0, [size_w, size_h, size_w, size_h]).astype(boxes.dtype)
        area = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
        inside = (area > 0) & (area >= min_inside * (moved[:, 2] - moved[:, 0]) * (moved[:, 3] - moved[:, 1]))
        kept.append((clipped[inside], labels[inside]))
    return corners, kept


def _check(images, records, model, flips):
    if len(images) != len(records) or not len(images):
        raise InputError("{} images but {} box records".format(len(images), len(records)),
                         hint="give one BoxRecord per image")
    unknown = sorted(set(flips) - set(FLIPS))
    if unknown:
        raise InputError("unknown flip {}".format(", ".join(unknown)), hint="use {}".format(", ".join(FLIPS)))
    height, width = (images.shape[1:3] if images.dtype == np.uint8 else images.shape[-2:])
    for record in records:
        if tuple(record.size) != (width, height):
            raise InputError("{} is {}x{} but the images are {}x{}: the boxes must be in the input's pixels".format(
                record.image, record.size[0], record.size[1], width, height),
                hint="put them there with data.boxes.input_boxes(record, contract)")
        classes = model.num_classes - (1 if model.activation == "softmax" else 0)  # SSD's background
        if len(record) and int(record.labels.max()) >= classes:
            raise InputError("{} has class {} but the model has {} object classes".format(
                record.image, int(record.labels.max()), classes))


def fit_detection(model, images, records, steps, batch_size=32, lr=2e-3, heldout=None, mode="fp32", device="cpu",
                  seed=0, flips=("horizontal",), warmup=0.05, weight_decay=1e-4, clip_grad=10.0, crop=None,
                  label="training detector", timed_after=0):
    """Train ``model`` (a ``models.detection`` ``Detector``: RetinaNet's losses for sigmoid scores, SSD's for
    softmax ones, whose class 0 is the background and the records' class k is column k + 1) for ``steps``
    batches of ``batch_size`` drawn in a seeded order, epoch after epoch, from ``images`` and ``records``
    (module doc), with ``flips`` ('horizontal', 'vertical': the latter only for data that has no up, like
    drawn shapes). ``mode``: ``training.modes``' fp32, tf32, amp or bf16 (autocast; the loss in FP32).
    Learning rate: ``loop.lr_at`` (warm-up over ``warmup`` of the run from lr/25, then cosine decay);
    gradients clipped at norm ``clip_grad``. ``crop``: train on a random ``crop`` x ``crop`` window of each
    image (``cropped``), after the flips; None trains on whole images.
    ``heldout``: (images, records) scored at the end. ``timed_after``: steps left out of the time and of the
    peak memory, as a warm-up (cuDNN's algorithm search, the allocator's first blocks): ``seconds`` and
    images/s count the steps after them, and the peak is reset once they are done (0: the whole run).
    Batches are made where the model runs (``DeviceBatches``), and the loss values come back to the host
    once a step, in one copy, after the step is queued. Returns a history record: steps, loss (and its
    classification and box parts, the mean of the last 10 steps), seconds, images/s, ``timed_steps``,
    ``peak_memory_mb`` (CUDA) and, with ``heldout``, ``map50`` and ``map`` (COCO's mAP@[.5:.95])."""
    torch = require("torch", "training")
    from trtkit.log import Progress
    from trtkit.training.detection_loss import retinanet_loss, ssd_loss
    from trtkit.training.loop import lr_at
    from trtkit.training.modes import Precision
    if mode == "half":
        raise InputError("the half recipe is not offered for detectors", hint="use fp32, tf32, amp or bf16")
    _check(images, records, model, flips)
    precision = Precision(mode, device)
    rng = np.random.RandomState(seed)
    torch.manual_seed(seed)
    params = precision.prepare(model)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    scaler = precision.make_scaler()
    contract = model.input_contract
    softmax = model.activation == "softmax"  # SSD: class 0 is the background, the data's classes follow
    loss_fn = ssd_loss if softmax else retinanet_loss
    model.train()
    on_gpu = str(device).startswith("cuda")
    batches = DeviceBatches(images, records, contract, device, flips, label_offset=int(softmax), crop=crop)
    timed_after = max(0, min(int(timed_after), steps - 1))
    start, history, order = time.time(), [], np.array([], dtype=np.int64)
    if on_gpu:  # the peak of this run alone (the mode comparison reads it), again after the warm-up steps
        torch.cuda.reset_peak_memory_stats()
    torch.set_flush_denormal(True)
    from trtkit.training.fp32math import fp32_math
    try:  # strict FP32 for fp32, TF32 for tf32 (on a GPU; PyTorch's default would run fp32 as TF32 there)
        with fp32_math(torch, precision.fp32_math), Progress(label, total=steps, unit="step") as bar:
            for step in range(steps):
                if step == timed_after:
                    if on_gpu:
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                    start = time.time()
                if len(order) < batch_size:
                    order = np.concatenate([order, rng.permutation(len(images))])
                index, order = np.sort(order[:batch_size]), order[batch_size:]
                x, targets = batches.batch(index, rng)
                x = precision.inputs(x)
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, steps, lr, warmup)
                optimizer.zero_grad(set_to_none=True)
                with precision.autocast():
                    logits, regressions, anchors = model.head_outputs(x)
                losses = loss_fn(logits, regressions, anchors, targets, model.box_coder)
                scaler.backward(losses["loss"])
                scaler.unscale(optimizer, params)
                torch.nn.utils.clip_grad_norm_(params, clip_grad)
                scaler.step(optimizer)
                scaler.update()
                values = torch.stack([losses[k].detach().float() for k in ("loss", "classification",
                                                                          "box_regression")]).tolist()  # one copy
                if not np.isfinite(values[0]):
                    raise InputError("the detection loss is not finite at step {} ({} mode)".format(step, mode),
                                     hint="lower the learning rate, or train in fp32")
                history.append(values)
                bar.update(1, postfix="loss {:.3f}".format(np.mean([h[0] for h in history[-10:]])))
        if on_gpu:
            torch.cuda.synchronize()
    finally:
        torch.set_flush_denormal(False)
    seconds = time.time() - start
    timed = steps - timed_after
    last = np.mean(history[-10:], axis=0)
    record = {"steps": steps, "loss": float(last[0]), "classification": float(last[1]),
              "box_regression": float(last[2]), "first_loss": history[0][0], "seconds": round(seconds, 1),
              "timed_steps": timed, "steps_per_second": round(timed / max(seconds, 1e-9), 3),
              "images_per_second": round(timed * batch_size / max(seconds, 1e-9), 1), "mode": mode,
              "peak_memory_mb": round(torch.cuda.max_memory_allocated() / 2.0 ** 20, 1) if on_gpu else None}
    model.eval()
    if heldout is not None:
        record.update(evaluate_detection(model, heldout[0], heldout[1], device=device))
        log.info("held-out mAP@.5 {:.3f}, mAP@[.5:.95] {:.3f}".format(record["map50"], record["map"]))
    return record


def detect(model, images, batch_size=64, device="cpu"):
    """One (boxes [D, 4], scores [D], labels [D]) numpy triple per image: ``model``'s detections (its
    post-processing) in the input's pixels."""
    torch = require("torch", "detection")
    was_training = model.training
    model.eval()
    found = []
    with torch.no_grad():
        for first in range(0, len(images), batch_size):
            x = torch.from_numpy(normalized_batch(images[first:first + batch_size], model.input_contract))
            for image in model(x.to(device)):
                found.append(tuple(image[k].cpu().numpy() for k in ("boxes", "scores", "labels")))
    model.train(was_training)
    return found


def evaluate_detection(model, images, records, batch_size=64, device="cpu"):
    """{"map50", "map"} of ``model`` on ``images`` against ``records`` (``box_map``); a softmax model's columns
    1.. are the records' classes 0..."""
    found = detect(model, images, batch_size, device)
    background = int(model.activation == "softmax")  # SSD's detections are of columns 1..: the data's classes + 1
    found = [(boxes, scores, labels - background) for boxes, scores, labels in found]
    map50, mean_ap = box_map(found, records, model.num_classes - background)
    return {"map50": map50, "map": mean_ap}


def box_map(detections, records, num_classes):
    """(mAP@.5, mAP@[.5:.95]) of ``detections`` ((boxes, scores, labels) per image) against ``records``, by
    ``detect.metrics.CocoMap`` (the maintained COCO evaluator verification uses, so training and verification
    report the same figure). No detections or no boxes at all score 0."""
    from trtkit.detect.metrics import CocoMap
    from trtkit.detect.records import Detections
    scores = CocoMap(num_classes=num_classes)
    for position, (record, (boxes, found, labels)) in enumerate(zip(records, detections)):
        scores.update(position, record.boxes, record.labels, Detections(boxes, found, labels), record.iscrowd,
                      record.difficult)
    result = scores.result()
    return float(result["map50"] or 0.0), float(result["map"] or 0.0)
