"""Training a segmentation model: per-pixel cross-entropy (the ignore index counts nowhere), AdamW with a
one-cycle learning rate, and the held-out pixel accuracy and mIoU.

Why beside ``loop.fit`` rather than inside it: ``fit`` is the classifier recipe (random crops and flips of
the image alone, top-1 accuracy, SGD with warm-up) that the mixed-precision comparison measures; a
segmentation model needs its masks to follow every augmentation and is judged by IoU. This loop is what the
segmentation sample (``models.sample``) is trained with: FP32 on the CPU, seeded, with a progress bar.
"""

import time

import numpy as np

from trtkit import log
from trtkit.data.masks import IGNORE_INDEX
from trtkit.deps import require


def _scores(output):
    return output["out"] if isinstance(output, dict) else output


def evaluate_dense(model, batches, classes, ignore_index=IGNORE_INDEX):
    """(pixel accuracy, mIoU, IoU per class) of ``model`` on ``batches`` of (float32 NCHW, int masks)."""
    torch = require("torch", "training")
    from trtkit.pipeline.dense import class_iou, confusion
    matrix = np.zeros((classes, classes), dtype=np.int64)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for images, masks in batches:
            decided = _scores(model(torch.from_numpy(np.ascontiguousarray(images)))).argmax(1).numpy()
            valid = masks != ignore_index
            matrix += confusion(masks, decided, classes, valid)
    model.train(was_training)
    ious, miou = class_iou(matrix)
    return float(np.trace(matrix)) / max(int(matrix.sum()), 1), miou, ious


def fit_dense(model, images, masks, classes, steps, heldout=None, batch_size=32, lr=0.01, seed=0,
              label="training"):
    """Train ``model`` for ``steps`` batches drawn (seeded) from ``images`` (float32 NCHW) and ``masks``
    (N, H, W class indices), with horizontal flips of both; ``heldout``: a callable giving fresh
    (images, masks) batches to evaluate on at the end. BatchNorm momentum is 0.1 while training (torchvision's
    MobileNetV3 sets 0.01, too slow for a few hundred steps to give usable running statistics). Returns a
    history record: loss, seconds, images/s, and the held-out pixel accuracy and mIoU."""
    torch = require("torch", "training")
    from trtkit.log import Progress
    rng = np.random.RandomState(seed)
    torch.manual_seed(seed)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.momentum = 0.1
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.15)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
    model.train()
    start, losses = time.time(), []
    with Progress(label, total=steps, unit="step") as bar:
        for step in range(steps):
            index = rng.randint(0, len(images), batch_size)
            x, y = images[index], masks[index].astype(np.int64)
            flip = rng.rand(len(index)) < 0.5
            x[flip], y[flip] = x[flip][..., ::-1], y[flip][..., ::-1]
            loss = loss_fn(_scores(model(torch.from_numpy(np.ascontiguousarray(x)))),
                           torch.from_numpy(np.ascontiguousarray(y)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
            bar.update(1, postfix="loss {:.3f}".format(np.mean(losses[-10:])))
    seconds = time.time() - start
    record = {"steps": steps, "loss": float(np.mean(losses[-10:])), "seconds": round(seconds, 1),
              "images_per_second": round(steps * batch_size / seconds, 1)}
    model.eval()
    if heldout is not None:
        record["pixel_accuracy"], record["miou"], record["iou"] = evaluate_dense(model, heldout(), classes)
        log.info("held-out pixel accuracy {:.2%}, mIoU {:.3f}".format(record["pixel_accuracy"], record["miou"]))
    return record
