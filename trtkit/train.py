"""Training loop used to produce the models trtkit deploys (FP32 baseline).

``fit`` trains a classifier on ImageSets with SGD + cosine schedule and light
augmentation, reporting per-epoch loss, accuracy and images/s. The
mixed-precision modes (AMP, BF16, manual ``.half()``) build on this loop.
"""

import time

import numpy as np

from trtkit import log
from trtkit.deps import require


def seed_everything(seed):
    torch = require("torch", "training")
    np.random.seed(seed)
    torch.manual_seed(seed)


def augment_batch(images, rng, pad=4, flip=False):
    """Random translation by up to ``pad`` pixels (reflect padding) and optional horizontal flip."""
    n, c, h, w = images.shape
    padded = np.pad(images, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="reflect")
    out = np.empty_like(images)
    offsets = rng.randint(0, 2 * pad + 1, size=(n, 2))
    for i in range(n):
        y, x = offsets[i]
        out[i] = padded[i, :, y:y + h, x:x + w]
    if flip:
        mask = rng.rand(n) < 0.5
        out[mask] = out[mask, :, :, ::-1]
    return out


def evaluate(model, imageset, batch_size=128):
    """Top-1 accuracy of ``model`` on an ImageSet with labels."""
    from trtkit.export import torch_logits
    logits = torch_logits(model, imageset.images, batch_size)
    return float(np.mean(logits.argmax(1) == imageset.labels))


def fit(model, train_set, heldout_set=None, epochs=6, batch_size=64, lr=0.05, weight_decay=5e-4,
        seed=0, flip=False, pad=None, label="training"):
    """Train ``model`` in FP32 on ``train_set``; returns a list of per-epoch metric dicts."""
    torch = require("torch", "training")
    from trtkit.log import Progress
    seed_everything(seed)
    rng = np.random.RandomState(seed)
    size = train_set.images.shape[-1]
    pad = pad if pad is not None else max(2, size // 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay, nesterov=True)
    steps_per_epoch = int(np.ceil(len(train_set) / float(batch_size)))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=epochs * steps_per_epoch,
                                                    pct_start=0.25)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.05) if "label_smoothing" in \
        torch.nn.CrossEntropyLoss.__init__.__code__.co_varnames else torch.nn.CrossEntropyLoss()
    history = []
    with Progress(label, total=epochs * steps_per_epoch, unit="step") as bar:
        for epoch in range(epochs):
            model.train()
            order = rng.permutation(len(train_set))
            start = time.time()
            total_loss, seen = 0.0, 0
            for step in range(steps_per_epoch):
                index = order[step * batch_size:(step + 1) * batch_size]
                if len(index) < 2:
                    continue
                images = torch.from_numpy(augment_batch(train_set.images[index], rng, pad, flip))
                labels = torch.from_numpy(train_set.labels[index])
                optimizer.zero_grad()
                loss = loss_fn(model(images), labels)
                loss.backward()
                optimizer.step()
                scheduler.step()
                total_loss += float(loss.detach()) * len(index)
                seen += len(index)
                bar.update(1, postfix="epoch {}/{} loss {:.3f}".format(epoch + 1, epochs, total_loss / max(seen, 1)))
            elapsed = time.time() - start
            record = {"epoch": epoch + 1, "loss": total_loss / max(seen, 1), "seconds": elapsed,
                      "images_per_second": seen / elapsed if elapsed > 0 else None}
            if heldout_set is not None:
                record["accuracy"] = evaluate(model, heldout_set)
                bar.postfix = "epoch {}/{} loss {:.3f} acc {:.1%}".format(epoch + 1, epochs, record["loss"],
                                                                          record["accuracy"])
            history.append(record)
            log.debug("epoch {}: {}".format(epoch + 1, record))
    model.eval()
    return history
