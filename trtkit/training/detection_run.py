"""``trtkit train --task detection``: train a detector on data with boxes, in one precision mode or several
compared (``--compare fp32,amp,bf16``), and report the speed and memory each mode gives, as the source
documents' RetinaNet table did (it/s and memory, FP32 against FP16).

Why a runner of its own beside ``runner.run_training``: that one is the classifier recipe (epochs of crops and
flips, top-1 accuracy, resumable SGD); a detector's boxes follow its augmentations and it is judged by mAP
(``training.detection.fit_detection``, the recipe the sample detector is trained with). Each mode starts from
the same seeded weights and the same batches, so the rows differ by the mode alone.

The training split is loaded into memory (``--limit N`` bounds it): at the model's input size, as the uint8
pixels it was made from (3 bytes x H x W per image; ``as_pixels``) where the data's floats are exactly pixels,
else float32, with the boxes moved into the input's pixels.
"""

import json
import os

from trtkit import log
from trtkit.errors import DeviceUnavailable, InputError

DEFAULT_MODEL = "retinanet_sample"
DEFAULT_DATA = "shape-boxes"
DEFAULT_STEPS = 400


def input_records(records, contract):
    """The ``BoxRecord``s with their boxes in the model input's pixels (clipped; boxes left with no area
    dropped), sized as the input: what ``fit_detection`` trains on."""
    from trtkit.data.boxes import BoxRecord, input_boxes
    moved = []
    for record in records:
        boxes = input_boxes(record, contract, clip=True)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        moved.append(BoxRecord(record.image, record.image_id, (contract.width, contract.height), boxes[keep],
                               record.labels[keep], record.iscrowd[keep], record.difficult[keep]))
    return moved


def as_pixels(images, contract):
    """``images`` (normalized float32 NCHW, as data sources load them) as the uint8 RGB NHWC pixels they were made
    from when every value is one (``training.inputs.encode`` checks), else unchanged. Why: ``fit_detection`` keeps
    uint8 images on a GPU and makes each batch there (a quarter of float32's bytes, no host work per step); float
    images stay on the host and are batched there."""
    from trtkit.training.inputs import encode
    store, layout, _, _ = encode(images, contract)
    if layout != "nhwc" or store.shape[-1] != 3:
        return images
    return store[..., ::-1].copy() if contract.channel_order == "bgr" else store  # encode keeps the model's order


def _split(data, contract, split, limit):
    from trtkit.data import select
    selection = select(data, contract, split=split, limit=limit)
    if selection.holds != "boxes":
        raise InputError("{} has no boxes: a detector trains on COCO JSON, YOLO images/ + labels/, VOC or an "
                         ".npz with boxes".format(data), hint="see docs/detection-data.md")
    loaded = selection.load()
    return loaded.images, input_records(loaded.labels, contract), selection.class_names


def _model(name, classes, input_size):
    """An untrained ``name`` for ``classes``. Its BatchNorms train (torchvision's choice when it builds RetinaNet
    without ImageNet weights): frozen identity norms on random weights let the activations grow layer by layer
    (measured: RetinaNet-R18 at 128 px, the loss 2.4 -> 211 within 24 steps at lr 3e-3, and 5.7 -> 17 at 1e-3)."""
    from trtkit.data.sources import BACKGROUND_NAME
    from trtkit.models.detection import create_detection_model
    from trtkit.models.detection.registry import KINDS, DETECTION_ARCHITECTURES
    kind = KINDS[DETECTION_ARCHITECTURES[name][0]] if name in DETECTION_ARCHITECTURES else {}
    softmax = kind.get("activation") == "softmax"
    options = {"frozen_bn": False} if "frozen_bn" in kind.get("options", {}) else {}
    names = list(classes or ["object"])  # no classes: a probe for the input contract alone
    model = create_detection_model(name, num_classes=len(names) + (1 if softmax else 0), input_size=input_size,
                                   **options)
    model.input_contract.class_names = None if classes is None else \
        ([BACKGROUND_NAME] + names) if softmax else names
    return model


def train_detector(model_name=None, data=None, out="runs/train-detection", modes=("fp32",), steps=None,
                   batch_size=16, lr=3e-3, input_size=None, device="cpu", limit=None, seed=0):
    """Train ``model_name`` on ``data`` once per mode of ``modes``; write OUT/MODE/checkpoint.pt (the last mode
    also as OUT/checkpoint.pt) and OUT/detection_train.json; returns the rows (mode, steps/s, images/s, peak
    memory, loss, held-out mAP@.5 and mAP)."""
    from trtkit.models.classifiers import save_checkpoint
    from trtkit.models.detection import is_detection_name
    from trtkit.training import seed_everything
    from trtkit.training.detection import fit_detection
    name = model_name or DEFAULT_MODEL
    if not is_detection_name(name):
        from trtkit.models.detection import model_names
        raise InputError("unknown detection model '{}'".format(name), hint="use one of " + ", ".join(model_names()))
    data = data or DEFAULT_DATA
    probe = _model(name, None, input_size)  # the contract the data is read with
    train_images, train_records, classes = _split(data, probe.input_contract, "train", limit)
    train_images = as_pixels(train_images, probe.input_contract)
    heldout = _split(data, probe.input_contract, "heldout", limit)[:2]
    rows = []
    for mode in modes:
        seed_everything(seed)
        model = _model(name, classes, input_size)
        try:
            record = fit_detection(model, train_images, train_records, steps or DEFAULT_STEPS,
                                   batch_size=batch_size, lr=lr, heldout=heldout, mode=mode, device=device,
                                   seed=seed, label="training {} ({})".format(name, mode))
        except DeviceUnavailable as exc:  # a mode this machine cannot run: its row says why, the others go on
            if len(modes) == 1:
                raise
            log.warn("{}: {}".format(mode, exc.args[0]))
            rows.append({"mode": mode, "model": name, "status": "skipped", "reason": exc.args[0]})
            continue
        folder = os.path.join(out, mode) if len(modes) > 1 else out
        path = save_checkpoint(model, os.path.join(folder, "checkpoint.pt"),
                               extra_meta={"dataset": str(data), "mode": mode, "map50": record.get("map50"),
                                           "map": record.get("map"), "history": [record]}) or \
            os.path.join(folder, "checkpoint.pt")
        rows.append(dict(record, mode=mode, model=name, checkpoint=path, status="ok"))
        log.info("{} {}: {:.2f} steps/s, held-out mAP@.5 {:.3f}".format(name, mode, _rate(record),
                                                                          record.get("map50") or 0.0))
        if record.get("map50") == 0.0:
            log.warn("{} {}: it finds none of the held-out boxes (mAP@.5 0.000). From scratch the usual cause is a "
                     "learning rate too high for the model (RetinaNet-R18 on shape-boxes: --lr 3e-3 gave 0.000, "
                     "--lr 3e-4 0.609 in 600 steps), else too few --steps".format(name, mode))
    from trtkit.fileio import atomic_path
    with atomic_path(os.path.join(out, "detection_train.json")) as tmp:
        with open(tmp, "w") as handle:
            json.dump({"model": name, "data": str(data), "device": device, "rows": rows}, handle, indent=2,
                      default=str)
    return rows


def _rate(row):
    """Steps per second of a row: the timed steps' (after ``fit_detection``'s warm-up) where it says."""
    if row.get("steps_per_second"):
        return row["steps_per_second"]
    return row["steps"] / max(row["seconds"], 1e-9)


def format_rows(rows):
    """The comparison table: mode, steps/s, images/s, speed-up over the first mode, peak memory, mAP@.5."""
    header = ["mode", "steps/s", "img/s", "speed-up", "peak MB", "loss", "mAP@.5", "mAP"]
    done = [row for row in rows if row.get("status") == "ok"]
    base = _rate(done[0]) if done else None
    lines = []
    for row in rows:
        if row.get("status") != "ok":
            lines.append([row["mode"], "skipped: " + row.get("reason", "")[:60]] + [""] * 6)
            continue
        rate = _rate(row)
        lines.append([row["mode"], "{:.2f}".format(rate), "{:.1f}".format(row.get("images_per_second") or 0.0),
                      "{:.2f}x".format(rate / base) if base else "-",
                      "{:.0f}".format(row["peak_memory_mb"]) if row.get("peak_memory_mb") else "-",
                      "{:.3f}".format(row.get("loss") or 0.0),
                      "-" if row.get("map50") is None else "{:.3f}".format(row["map50"]),
                      "-" if row.get("map") is None else "{:.3f}".format(row["map"])])
    widths = [max(len(str(r[i])) for r in lines + [header]) for i in range(len(header))]
    text = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    return "\n".join(text + ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines])
