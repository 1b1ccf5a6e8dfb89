"""The tune split, and how an ONNX graph scores on it.

The precision search ranks layers and sizes the mixed variant on images that
are *not* the final held-out split (those only give the final figures): the
tune split is drawn seeded from the train split, like the calibration images
but with another seed. Graphs are scored with ONNX Runtime on the CPU
whatever the target backend: it runs both Q/DQ encodings, and the scores only
rank and compare candidates; the target backend's own figures come from the
build's verification pass.
"""

import numpy as np

from trtkit import tasks
from trtkit.deps import require

TUNE_SEED = 1  # the calibration images use seed 0


class TuneSet(object):
    """Tune images (float32 NCHW, in memory: ``--tune-images`` bounds them), their labels (or None), the
    FP32 graph's outputs on them, the identity of the selection (for caches), and the model's output
    kind (``trtkit.outputs``), whose decision rule scores every graph. ``dense`` (a segmentation model):
    ``reference`` holds the FP32 graph's decision maps (N, H, W), not its scores (all class scores of a
    tune split at 512x512 would take gigabytes), ``labels`` are masks, agreement is per pixel and the
    accuracy is the mIoU against the masks."""

    def __init__(self, images, labels, reference, identity, kind=None, dense=False, detections=None, task=None):
        from trtkit.outputs import LOGITS, OutputKind
        self.images = images
        self.labels = labels
        self.reference = reference
        self.identity = identity
        self.kind = OutputKind.parse(kind) if kind is not None else LOGITS
        self.dense = bool(dense)
        # a detector: the comparison that selects and scores its detections (pipeline.detections), given a fresh
        # one per graph by ``detections()``; ``reference`` then holds FP32's detections per image, ``labels`` the
        # BoxRecords
        self.detections = detections
        self.task = task  # the model's task (a name), for the budget's chance level (select.budget_metric)
        self.forced_metric = None

    @property
    def metric(self):
        """"accuracy" when the tune images are labelled, else "agreement" (or what ``use_metric`` set)."""
        if self.forced_metric is not None:
            return self.forced_metric
        return "accuracy" if self.labels is not None else "agreement"

    def use_metric(self, metric):
        """Score drops in ``metric`` ("agreement" when the labels say nothing about this model)."""
        if metric not in ("accuracy", "agreement"):
            raise ValueError(metric)
        self.forced_metric = metric


def load_tune_set(source, contract, count, fp32_onnx, batch_size=32, kind=None, task=None, selection=None,
                  model_info=None):
    """The TuneSet of ``selection`` (the build's ``data.plan``), else of ``count`` images drawn seeded from the
    train split of ``source``. ``model_info``: the manifest's model record (a detector's head is there)."""
    from trtkit.data import select
    from trtkit.outputs import LOGITS, OutputKind
    kind = OutputKind.parse(kind) if kind is not None else LOGITS
    if selection is None:
        selection = select(source, contract, split="train", limit=count, seed=TUNE_SEED)
    imageset = selection.load(progress=False)
    task = tasks.of(task)
    labels = task.labels_of(imageset.labels)  # class labels, or masks (a folder's per-image labels are none)
    if task.labels == "boxes":  # a detector: scored on its selected detections
        def comparison():
            return task.comparison_for(kind.name, model_info, selection)
        tune = TuneSet(imageset.images, labels, None, selection.identity, kind, detections=comparison,
                       task=task.name)
        tune.reference = outputs_of(fp32_onnx, tune, batch_size)
        if tune.labels is not None and comparison().labels is None:
            tune.labels = None
        return tune
    if task.dense:
        tune = TuneSet(imageset.images, labels, None, selection.identity, kind, dense=True, task=task.name)
        tune.reference = outputs_of(fp32_onnx, tune, batch_size)
        return tune
    reference = logits_of(fp32_onnx, imageset.images, batch_size)
    if labels is not None and (kind.multilabel or len(labels) == 0 or
                               labels.max() >= kind.classes(reference.shape[1])):
        labels = None
    return TuneSet(imageset.images, labels, reference, selection.identity, kind, task=task.name)


def outputs_of(model, tune, batch_size=32, runner=None):
    """What ``score`` takes from an ONNX graph on the tune images: its logits, or for a dense model its
    decision maps (int16, one batch of scores in memory at a time). ``runner``: an activated backend runner
    to run instead of ONNX Runtime on ``model`` (None then)."""
    if tune.detections is not None:  # each image's Detections, selected batch by batch
        select = tune.detections().select
        return logits_of(model, tune.images, batch_size, decide=select, runner=runner)
    if not tune.dense:
        return logits_of(model, tune.images, batch_size, runner=runner)
    return logits_of(model, tune.images, batch_size, decide=lambda out: tune.kind.decide(out).astype(np.int16),
                     runner=runner)


def logits_of(model, images, batch_size=32, decide=None, runner=None):
    """Logits of an ONNX graph (a path or a ModelProto) on ``images``, with ONNX Runtime on the CPU, or with
    ``runner`` (an activated backend runner: its first output); ``decide``: applied to each batch's outputs as
    they come (their shape kept), its results returned."""
    if runner is not None:
        span = runner.batch_range()  # (N, N, N): an artifact of a fixed batch, padded as ONNX Runtime's is
        run, fixed = runner.infer, (span[0] if span and span[0] == span[2] else None)
    else:
        run, fixed = _session_run(model)
    size = fixed if isinstance(fixed, int) and fixed > 0 else batch_size
    outputs = []
    for start in range(0, len(images), size):
        chunk = np.ascontiguousarray(images[start:start + size], dtype=np.float32)
        real = len(chunk)
        if real < size and isinstance(fixed, int) and fixed > 0:
            chunk = np.concatenate([chunk, np.zeros((size - real,) + chunk.shape[1:], np.float32)])
        out = np.asarray(run(chunk), np.float32)
        outputs.append(decide(out)[:real] if decide is not None else out.reshape(len(chunk), -1)[:real])
    if outputs and isinstance(outputs[0], list):  # per-image records (a detector's Detections)
        return [item for part in outputs for item in part]
    return np.concatenate(outputs)


def _session_run(model):
    """(function of a batch -> the first output, the input's fixed batch or None) of an ONNX graph (a path or a
    ModelProto) on ONNX Runtime's CPU provider."""
    ort = require("onnxruntime", "the precision search")
    data = model if isinstance(model, str) else model.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own error types differ between its versions
        from trtkit.errors import InputError, first_line
        raise InputError("ONNX Runtime cannot load {}: {}".format(
            model if isinstance(model, str) else "a graph of the search", first_line(exc)))
    name = session.get_inputs()[0].name
    fixed = session.get_inputs()[0].shape[0]
    return (lambda chunk: session.run(None, {name: chunk})[0]), (fixed if isinstance(fixed, int) else None)


def score(logits, tune):
    """{"agreement", "accuracy" (None without labels)} of ``logits`` on the tune set, as fractions, by the
    model's decision rule (a multi-label image agrees when all its labels do). For a dense model ``logits``
    are decision maps (``outputs_of``): agreement per pixel, ``miou_vs_reference`` against FP32's decision maps
    (``dense.visible_miou``), accuracy the mIoU against the masks."""
    if tune.detections is not None:
        return _detection_score(logits, tune)
    if tune.dense:
        return _dense_score(logits, tune)
    got, expected = tune.kind.decide(logits), tune.kind.decide(tune.reference)
    same = np.all(got == expected, axis=1) if tune.kind.multilabel else got == expected
    accuracy = float(np.mean(got == tune.labels)) if tune.labels is not None else None
    return {"agreement": float(np.mean(same)), "accuracy": accuracy}


def _detection_score(found, tune):
    """A detector's tune figures: agreement the F1 with FP32's detections (0 where FP32 found nothing: no
    candidate can be told good then), accuracy the mAP against the boxes (None without)."""
    comparison = tune.detections()
    comparison.update_detections(found, tune.reference, tune.labels)
    result = comparison.result()
    return {"agreement": result["top1_agreement"] or 0.0, "accuracy": result["accuracy"]}


def _dense_score(decided, tune):
    from trtkit.data.masks import IGNORE_INDEX, masks_for_map
    from trtkit.pipeline.dense import class_iou, confusion, visible_miou
    accuracy = None
    labels = None if tune.labels is None else masks_for_map(tune.labels, decided.shape)  # as verification
    if labels is not None:
        classes = int(max(decided.max(), tune.reference.max(), labels[labels != IGNORE_INDEX].max()
                          if (labels != IGNORE_INDEX).any() else 0)) + 1
        accuracy = class_iou(confusion(labels, decided, classes, labels != IGNORE_INDEX))[1]
    classes = int(max(decided.max(), tune.reference.max())) + 1
    return {"agreement": float(np.mean(decided == tune.reference)), "accuracy": accuracy,
            "miou_vs_reference": visible_miou(confusion(tune.reference, decided, classes))}


def evaluate(graph, tune, reference, runner=None):
    """Figures of an ONNX graph (path or ModelProto; or of ``runner``, an activated backend runner) on the tune
    set, with ``drop``: points lost against ``reference`` (the FP32 graph's figures) in the tune set's metric."""
    figures = score(outputs_of(graph, tune, runner=runner), tune)
    return dict(figures, drop=round(drop_points(figures, reference, tune.metric), 3))


def drop_points(figures, reference, metric):
    """Top-1 points lost against the FP32 reference: accuracy points, or agreement points below 100 %."""
    if metric == "accuracy":
        return 100.0 * (reference["accuracy"] - figures["accuracy"])
    from trtkit.pipeline.dense import dense_agreement  # a segmentation map: the lower of its two agreements
    return 100.0 * (1.0 - dense_agreement(figures["agreement"], figures.get("miou_vs_reference")))
