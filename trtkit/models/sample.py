"""The sample model: a ResNet18 trained on scikit-learn's digits at 64x64, cached.

``build_engine.py`` with no checkpoint uses it, so every step of the pipeline
works on a real trained model with a real held-out accuracy, on a machine with
no network. The first call trains it (under two minutes on two idle CPU cores); later
calls load it from the cache (``~/.cache/trtkit/sample`` or $TRTKIT_CACHE).
"""

import os

from trtkit import log
from trtkit.fileio import cache_dir, made_once
from trtkit.tasks.classification import SAMPLE as SAMPLE_ARCH  # the task names its sample

SAMPLE_SIZE = 64
# 3 epochs: 99.44% held-out, as 6 gave (measured, two threads: 6 epochs 190 s on idle cores, 3 epochs about half); the
# sample is trained from scratch by every cold test run, so its cost is the landing run's largest
SAMPLE_EPOCHS = 3
RECIPE_VERSION = 4  # bump when the recipe changes, so caches retrain (2: training loop; 3: its contract; 4: 3 epochs)


def sample_contract():
    """The preprocessing the sample model is trained with, saved in its checkpoint.

    The 8x8 digits are stretched to 64x64 (a centre crop would cut their edges)
    and repeated to 3 channels, with ImageNet's mean/std; class names '0'..'9'.
    Digit image files go through the same ``trtkit.data.preprocess``.
    """
    from trtkit.contract import InputContract
    return InputContract(size=SAMPLE_SIZE, resize="stretch", class_names=[str(i) for i in range(10)])


def sample_checkpoint_path():
    return os.path.join(cache_dir("sample"), "{}-digits{}-v{}.pt".format(SAMPLE_ARCH, SAMPLE_SIZE, RECIPE_VERSION))


def sample_model(retrain=False):
    """The cached classification sample (``_sample_model``), looked for and trained under one lock: a process that wants
    it while another trains it waits and loads that one (``fileio.made_once``)."""
    with made_once(sample_checkpoint_path()):
        return _sample_model(retrain)


def _sample_model(retrain=False):
    """Return (model, checkpoint path, trained_now) for the cached sample model."""
    from trtkit.models.classifiers import create_model, load_model, save_checkpoint
    path = sample_checkpoint_path()
    if os.path.isfile(path) and not retrain:
        try:
            return load_model(SAMPLE_ARCH, path), path, False
        except Exception as exc:  # a corrupt cache is rebuilt, not fatal
            log.warn("the cached sample model is unreadable ({}); training it again".format(exc))
    from trtkit.data import load_images
    from trtkit.training import TrainConfig, fit, seed_everything
    seed_everything(0)
    model = create_model(SAMPLE_ARCH, num_classes=10, contract=sample_contract())
    train_set = load_images("sample", model.input_contract, split="train")
    heldout = load_images("sample", model.input_contract, split="heldout")
    log.info("training the sample model: {} on {} digits images at {}x{} (first run only; cached in {})".format(
        SAMPLE_ARCH, len(train_set), SAMPLE_SIZE, SAMPLE_SIZE, os.path.dirname(path)))
    config = TrainConfig(model=SAMPLE_ARCH, data="sample", input_size=SAMPLE_SIZE, epochs=SAMPLE_EPOCHS,
                         batch_size=64, lr=0.05, mode="fp32", device="cpu")
    history = fit(model, train_set, heldout, config=config, label="training sample model").history
    accuracy = history[-1].get("accuracy")
    log.info("sample model held-out accuracy: {:.2%}".format(accuracy))
    save_checkpoint(model, path, extra_meta={"dataset": "sample", "accuracy": accuracy, "mode": "fp32",
                                             "history": history})
    model.trtkit_meta = {"dataset": "sample", "accuracy": accuracy}
    return model, path, True


# ------------------------------------------------------------------ the segmentation sample

from trtkit.models.segmentation import SEGMENTATION_SAMPLE as SEGMENTATION_ARCH  # noqa: E402
SEGMENTATION_STEPS = 150
SEGMENTATION_BATCH = 32
SEGMENTATION_LR = 0.01
SEGMENTATION_RECIPE = 1  # bump when the recipe changes, so caches retrain


def sample_segmentation_contract():
    """The shapes sample's preprocessing: its 96x96 images as they are (stretch is a no-op at that size),
    ImageNet mean/std, class names background/circle/square/triangle."""
    from trtkit.contract import InputContract
    from trtkit.data.shapes import CLASS_NAMES, SHAPES_SIZE
    return InputContract(size=SHAPES_SIZE, resize="stretch", class_names=list(CLASS_NAMES))


def sample_segmentation_path():
    from trtkit.data.shapes import SHAPES_SIZE, SHAPES_VERSION
    return os.path.join(cache_dir("sample"), "{}-shapes{}-v{}.{}.pt".format(
        SEGMENTATION_ARCH, SHAPES_SIZE, SHAPES_VERSION, SEGMENTATION_RECIPE))


def _cached(path, what, infer_layout, load):
    """The model ``load(None, path, state, meta, infer_layout(state))`` makes of the cached checkpoint at
    ``path``; None when there is none, or when it is unreadable (warned: a corrupt cache is rebuilt, not
    fatal)."""
    from trtkit.models.classifiers import read_checkpoint
    if not os.path.isfile(path):
        return None
    try:
        state, meta = read_checkpoint(path)
        return load(None, path, state, meta, infer_layout(state))
    except Exception as exc:
        log.warn("the cached {} is unreadable ({}); training it again".format(what, exc))
        return None


def sample_segmentation_model(retrain=False):
    """The cached segmentation sample (``_sample_segmentation_model``), looked for and trained under one lock: a process that wants
    it while another trains it waits and loads that one (``fileio.made_once``)."""
    with made_once(sample_segmentation_path()):
        return _sample_segmentation_model(retrain)


def _sample_segmentation_model(retrain=False):
    """Return (model, checkpoint path, trained_now) for the cached segmentation sample: LRASPP on
    MobileNetV3-Large trained on the shapes sample (``data.shapes``) for 150 steps (about a minute on two
    CPU cores; held-out mIoU about 0.9). ``trtkit build --task segmentation`` with no model uses it."""
    from trtkit.models.classifiers import save_checkpoint
    from trtkit.models.segmentation import create_segmentation_model, infer_segmentation_layout, \
        load_segmentation_model
    path = sample_segmentation_path()
    model = None if retrain else _cached(path, "segmentation sample", infer_segmentation_layout,
                                         load_segmentation_model)
    if model is not None:
        return model, path, False
    from trtkit.data import select
    from trtkit.data.sources import SHAPES
    from trtkit.training import seed_everything
    from trtkit.training.dense import fit_dense
    seed_everything(0)
    contract = sample_segmentation_contract()
    model = create_segmentation_model(SEGMENTATION_ARCH, num_classes=len(contract.class_names), contract=contract)
    train = select(SHAPES, contract, split="train").load(progress=False)
    heldout = select(SHAPES, contract, split="heldout")
    log.info("training the segmentation sample: {} on {} shapes images at {}x{} (first run only; cached in {})".format(
        SEGMENTATION_ARCH, len(train), contract.height, contract.width, os.path.dirname(path)))
    record = fit_dense(model, train.images, train.labels.astype("uint8"), len(contract.class_names),
                       SEGMENTATION_STEPS, heldout=lambda: heldout.batches(100, progress=False),
                       batch_size=SEGMENTATION_BATCH, lr=SEGMENTATION_LR, label="training segmentation sample")
    save_checkpoint(model, path, extra_meta={"dataset": SHAPES, "miou": record["miou"],
                                             "pixel_accuracy": record["pixel_accuracy"], "history": [record]})
    model.trtkit_meta = {"dataset": SHAPES, "miou": record["miou"]}
    return model, path, True


# ------------------------------------------------------------------ the detection sample

DETECTION_ARCH = "retinanet_sample"
DETECTION_STEPS = 400
DETECTION_BATCH = 16
DETECTION_LR = 3e-3
DETECTION_CROP = 96  # training windows (``fit_detection(crop=)``): cheaper steps, a steadier mAP (see below)
DETECTION_RECIPE = 3  # bump when the recipe changes, so caches retrain (2: 96x96 windows; 3: one thread)


def sample_detection_contract():
    """The shape-boxes sample's preprocessing: its 128x128 images as they are (stretch is a no-op at that size),
    ImageNet mean/std, class names circle/square/triangle (RetinaNet's sigmoid classes: no background)."""
    from trtkit.contract import InputContract
    from trtkit.data.shape_boxes import BOX_CLASS_NAMES, SHAPE_BOXES_SIZE
    return InputContract(size=SHAPE_BOXES_SIZE, resize="stretch", class_names=list(BOX_CLASS_NAMES))


def sample_detection_path():
    from trtkit.data.shape_boxes import SHAPE_BOXES_SIZE, SHAPE_BOXES_VERSION
    return os.path.join(cache_dir("sample"), "{}-shapeboxes{}-v{}.{}.pt".format(
        DETECTION_ARCH, SHAPE_BOXES_SIZE, SHAPE_BOXES_VERSION, DETECTION_RECIPE))


def sample_detection_data(split):
    """(uint8 images, BoxRecords) of ``split`` ('train', 'heldout', 'all') of the shape-boxes sample: the
    seeded 80/20 cut every row source uses (``data.sources.split_positions``)."""
    from trtkit.data.shape_boxes import shape_boxes_source
    from trtkit.data.sources import split_positions
    images, records, _ = shape_boxes_source()
    positions = split_positions(len(images), split)
    return images[positions], [records[i] for i in positions]


def sample_detection_model(retrain=False):
    """The cached detection sample (``_sample_detection_model``), looked for and trained under one lock: a process that wants
    it while another trains it waits and loads that one (``fileio.made_once``)."""
    with made_once(sample_detection_path()):
        return _sample_detection_model(retrain)


def _sample_detection_model(retrain=False):
    """Return (model, checkpoint path, trained_now) for the cached detection sample: ``retinanet_sample`` (a
    RetinaNet head on a small ResNet-FPN, ``models.detection.small_fpn``) trained from scratch on the
    shape-boxes sample (``data.shape_boxes``) with RetinaNet's focal and L1 losses (``training.detection``),
    flipped both ways, on 96x96 windows of the 128x128 images (``DETECTION_CROP``): 400 steps of 16 windows,
    to a held-out mAP@.5 of 0.74 (mAP@[.5:.95] 0.34), saved in the checkpoint. Why windows: a step costs 0.6-0.75
    of a whole image's. Why on one thread, whatever the machine has: the number of threads changes the order of
    float sums, which a from-scratch run amplifies (two threads gave 0.69, whole images 0.61 vs 0.80), so one
    thread makes the sample the same on every core count; and a step is many small operations whose two
    threads wait for each other: on a loaded two-core machine two threads took 1549 s where one took 548 s
    (about 2 minutes for two threads on idle cores)."""
    from trtkit.models.classifiers import save_checkpoint
    from trtkit.models.detection import create_detection_model, infer_detection_layout, load_detection_model
    path = sample_detection_path()
    model = None if retrain else _cached(path, "detection sample", infer_detection_layout, load_detection_model)
    if model is not None:
        return model, path, False
    from trtkit.data.shape_boxes import SHAPE_BOXES
    from trtkit.training import seed_everything
    from trtkit.training.detection import fit_detection
    seed_everything(0)
    contract = sample_detection_contract()
    model = create_detection_model(DETECTION_ARCH, num_classes=len(contract.class_names), contract=contract)
    images, records = sample_detection_data("train")
    log.info("training the detection sample: {} on {} shape-boxes images at {}x{} (first run only; cached in {})"
             .format(DETECTION_ARCH, len(images), contract.height, contract.width, os.path.dirname(path)))
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the docstring says why
    try:
        record = fit_detection(model, images, records, DETECTION_STEPS, batch_size=DETECTION_BATCH,
                               lr=DETECTION_LR, heldout=sample_detection_data("heldout"),
                               flips=("horizontal", "vertical"), crop=DETECTION_CROP,
                               label="training detection sample")
    finally:
        torch.set_num_threads(threads)
    save_checkpoint(model, path, extra_meta={"dataset": SHAPE_BOXES, "map50": record["map50"], "map": record["map"],
                                             "history": [record]})
    model.trtkit_meta = {"dataset": SHAPE_BOXES, "map50": record["map50"], "map": record["map"]}
    return model, path, True
