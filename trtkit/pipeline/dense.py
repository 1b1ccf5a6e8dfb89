"""Verification of dense (segmentation) outputs against the FP32 reference, streamed.

A segmentation model answers per pixel: the arg-max over the class channel of
``[N, C, H, W]`` scores, or for one channel ``[N, 1, H, W]`` the sign of a
logit / a probability above 0.5 (``trtkit.outputs``, the same decision rules as
classifiers, applied per pixel). A variant is judged by

- ``pixel_agreement``: the share of pixels whose decision equals FP32's (also
  written as ``top1_agreement``, the figure the agreement gate reads);
- ``miou_vs_reference`` and ``class_iou_vs_reference``: IoU of the variant's
  decision map with FP32's, per class, and averaged over the classes that cover
  at least ``VISIBLE_SHARE`` of FP32's pixels and ``MIN_CLASS_PIXELS`` (a few
  flipped pixels of a class that is barely there would swing the mean: a test
  model's FP16 read 94.7% from a class on 49 pixels). Its own gate (``MIN_MIOU_VS_REFERENCE``)
  and the budget of ``--precision auto`` without masks read it, because pixel
  agreement alone is blind to a class on few pixels: MTCNN's PNet (faces on
  ~1% of its map) agreed 99.89% per pixel in INT8 with a face IoU of 0.90 against
  FP32's (mIoU vs FP32 0.952); a BiSeNet face parser at 99.57% per pixel (0.961)
  lost 3.2 mIoU points against its masks; PaddleOCR's text detector at 99.53%
  (0.973) and a DeepLabV3 at 99.74% (0.981, +0.3 points against its masks) keep
  what they detect;
- with ground-truth masks: ``miou`` and ``class_iou`` of the variant and
  ``reference_miou`` of FP32 against them (also written as ``accuracy`` and
  ``reference_accuracy``: the budget of ``--precision auto`` is then in mIoU
  points), and ``pixel_accuracy``; pixels equal to the ignore index (255 by
  default) count nowhere.

Only confusion matrices (classes x classes integers) and sums are kept between
batches, so verifying a data set of any size needs the memory of one batch.

Each figure's 95% interval is over images, not pixels (the pixels of one image
are not independent draws): the streamed Poisson bootstrap of
``trtkit.intervals`` keeps one weighted confusion matrix per replicate (up to
1000, fewer for many classes so that they stay within ``BOOTSTRAP_BYTES``), and
every comparison of a pass resamples the same images alike, so the mIoU a
variant loses against FP32's on the masks has a paired interval. A bootstrap
of few images, or of few that differ from FP32 at all, is too narrow (one
differing pixel on one of 160 images gave a bound of 0.004 points); there, and
where the replicates would not fit, the bound is the images' own and
conservative: Wilson's upper bound on the share of images that differ, each
taken to differ everywhere (``MIN_BOOTSTRAP_IMAGES``, ``MIN_BOOTSTRAP_DIFFERING``).
"""

import numpy as np

from trtkit.data.masks import IGNORE_INDEX
from trtkit.errors import InputError, VerificationFailed
# the segmentation gates are the task's (trtkit.tasks.segmentation), named here too for this module's readers
from trtkit.tasks.segmentation import MAX_MIOU_DROP, MIN_MIOU_VS_REFERENCE, MIN_PIXEL_AGREEMENT, \
    SEGMENTATION  # noqa: F401

# mIoU against FP32's decisions (MIN_MIOU_VS_REFERENCE) is over the classes on at least this share of FP32's pixels
VISIBLE_SHARE = 0.001
BOOTSTRAP_BYTES = 32 * 2 ** 20  # per kind of replicate matrix (vs FP32, vs masks, FP32 vs masks) and variant
MIN_REPLICATES = 100            # fewer would fit in BOOTSTRAP_BYTES (thousands of classes): the images' bound
MIN_BOOTSTRAP_IMAGES = 30       # fewer images, or fewer differing from FP32, than these: the images' bound
MIN_BOOTSTRAP_DIFFERING = 10
MIN_CLASS_PIXELS = 500  # below, a few near-tie pixels move a class's IoU by points: a test model's FP16 flipped 5
                        # of the 49 pixels of its positive class (IoU 0.9) while agreeing on 99.98% of all pixels


def dense_agreement(pixel_agreement, miou_vs_reference):
    """What ``--precision auto``'s budget reads of a segmentation variant without masks: the lower of its pixel
    agreement and its mIoU against FP32's decisions (either None: the other)."""
    present = [v for v in (pixel_agreement, miou_vs_reference) if v is not None]
    return min(present) if present else None


def visible_miou(versus_reference):
    """The mean IoU against FP32's decisions over the classes on at least ``VISIBLE_SHARE`` of FP32's pixels
    (rows of the confusion matrix) and at least ``MIN_CLASS_PIXELS`` of them, or None when none is."""
    matrix = np.asarray(versus_reference, dtype=np.float64)
    ious, _ = class_iou(matrix)
    counts = matrix.sum(axis=1)
    total = counts.sum()
    visible = [iou for iou, count in zip(ious, counts) if iou is not None and total > 0
               and count >= max(VISIBLE_SHARE * total, MIN_CLASS_PIXELS)]
    return float(np.mean(visible)) if visible else None


def confusion(expected, got, classes, valid=None):
    """The (classes, classes) int64 matrix counting pixels of class ``expected`` decided as ``got``."""
    expected = np.asarray(expected, dtype=np.int64).ravel()
    got = np.asarray(got, dtype=np.int64).ravel()
    if valid is not None:
        valid = np.asarray(valid, dtype=bool).ravel()
        expected, got = expected[valid], got[valid]
    return np.bincount(expected * classes + got, minlength=classes * classes).reshape(classes, classes)


def image_confusions(expected, got, classes, valid=None):
    """(images, classes**2) float64: each image's confusion matrix (``confusion``), flattened."""
    count = len(expected)
    expected = np.asarray(expected, dtype=np.int64).reshape(count, -1)
    got = np.asarray(got, dtype=np.int64).reshape(count, -1)
    index = expected * classes + got + (np.arange(count, dtype=np.int64) * classes * classes)[:, None]
    if valid is not None:
        index = index[np.asarray(valid, dtype=bool).reshape(count, -1)]
    return np.bincount(index.ravel(), minlength=count * classes * classes).reshape(
        count, classes * classes).astype(np.float64)


def class_iou(matrix):
    """IoU per class of a confusion matrix (None where the class is in neither map) and their mean (None when
    no class is present)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    hits = np.diag(matrix)
    union = matrix.sum(axis=0) + matrix.sum(axis=1) - hits
    ious = [float(h / u) if u > 0 else None for h, u in zip(hits, union)]
    present = [v for v in ious if v is not None]
    return ious, (float(np.mean(present)) if present else None)


class DenseComparison(object):
    """``verify.Comparison`` for ``[N, C, H, W]`` outputs; ``update(outputs, reference, masks=None)`` per batch,
    ``result()`` at the end. ``kind``: the output kind (``trtkit.outputs``); ``ignore_index``: the mask value
    that counts nowhere."""

    def __init__(self, kind=None, ignore_index=IGNORE_INDEX):
        from trtkit.outputs import LOGITS, OutputKind
        self.kind = OutputKind.parse(kind) if kind is not None else LOGITS
        if self.kind.multilabel:
            raise InputError("a segmentation output is one class per pixel, not {}".format(self.kind.name),
                             hint="--output-kind logits, probabilities, binary-logit or binary-probability")
        self.ignore_index = ignore_index
        self.classes = None
        self.bootstrap = None      # intervals.Bootstrap, made with the class count
        self.replicates = {}       # "reference" / "masks" / "reference_masks" -> (replicates, classes**2) sums
        self.images_differing = 0  # images with at least one pixel decided otherwise than FP32
        self.images = 0
        self.pixels = 0
        self.agree = 0
        self.versus_reference = None
        self.versus_masks = None
        self.reference_versus_masks = None
        self.labelled = True
        self.max_diff = 0.0
        self.sum_diff = 0.0
        self.elements = 0

    def decide(self, outputs):
        """The decision map (N, H, W) int64 of ``outputs`` (N, C, H, W)."""
        return self.kind.decide_maps(outputs)

    def update(self, outputs, reference, masks=None):
        outputs = np.asarray(outputs, dtype=np.float32)
        reference = np.asarray(reference, dtype=np.float32)
        if outputs.shape != reference.shape:
            raise VerificationFailed(
                "the variant's output shape {} differs from the FP32 reference's {}".format(
                    outputs.shape, reference.shape),
                hint="the artifact was not built from this model: rebuild it")
        if outputs.ndim != 4:
            raise VerificationFailed("the output has shape {}; segmentation models output (N, C, H, W)".format(
                outputs.shape))
        self.kind.check_columns(outputs.shape[1], "the output's class channel")
        classes = self.kind.classes(outputs.shape[1])
        if self.classes is None:
            from trtkit.intervals import BOOTSTRAP_REPLICATES, Bootstrap
            self.classes = classes
            self.versus_reference = np.zeros((classes, classes), dtype=np.int64)
            replicates = min(BOOTSTRAP_REPLICATES, BOOTSTRAP_BYTES // (8 * classes * classes))
            self.bootstrap = Bootstrap(replicates) if replicates >= MIN_REPLICATES else None
        got, expected = self.decide(outputs), self.decide(reference)
        weights = self.bootstrap.weights(len(got)) if self.bootstrap is not None else None
        self.images += int(outputs.shape[0])
        self.pixels += int(got.size)
        same = got == expected
        self.agree += int(np.sum(same))
        self.images_differing += int(np.sum(~same.reshape(len(same), -1).all(axis=1)))
        self.versus_reference += confusion(expected, got, classes)
        self._resample("reference", weights, expected, got, classes)
        self._update_masks(masks, got, expected, classes, weights)
        diff = np.abs(outputs - reference)
        if diff.size:
            self.max_diff = max(self.max_diff, float(diff.max()))
            self.sum_diff += float(diff.sum(dtype=np.float64))
            self.elements += int(diff.size)

    def _resample(self, name, weights, expected, got, classes, valid=None):
        """Add this batch's per-image confusion matrices, weighted per replicate, to the ``name`` replicates."""
        if weights is None:
            return
        per_image = image_confusions(expected, got, classes, valid)
        if name not in self.replicates:
            self.replicates[name] = np.zeros((weights.shape[0], classes * classes), dtype=np.float64)
        self.replicates[name] += weights.dot(per_image)

    def _update_masks(self, masks, got, expected, classes, weights):
        if masks is None or not self.labelled:
            self.labelled = False
            return
        from trtkit.data.masks import masks_for_map
        fitted = masks_for_map(masks, got.shape)
        if fitted is None:
            raise InputError("masks of shape {} do not match the model's output maps {}".format(
                np.shape(masks), got.shape), hint="each mask must have its image's size (resized with it)")
        masks = fitted
        valid = masks != self.ignore_index
        if np.any(masks[valid] >= classes) or np.any(masks[valid] < 0):
            raise InputError("a mask holds class {} but the model has {} classes (0..{}; {} is ignored)".format(
                int(masks[valid].max()), classes, classes - 1, self.ignore_index),
                hint="check the masks' class indices, or set the ignore index")
        if self.versus_masks is None:
            self.versus_masks = np.zeros((classes, classes), dtype=np.int64)
            self.reference_versus_masks = np.zeros((classes, classes), dtype=np.int64)
        self.versus_masks += confusion(masks, got, classes, valid)
        self.reference_versus_masks += confusion(masks, expected, classes, valid)
        self._resample("masks", weights, masks, got, classes, valid)
        self._resample("reference_masks", weights, masks, expected, classes, valid)

    def result(self):
        record = {"images": self.images, "task": SEGMENTATION.name, "decision": self.kind.name, "metric": "miou",
                  "pixels": self.pixels, "max_abs_diff": self.max_diff,
                  "mean_abs_diff": self.sum_diff / self.elements if self.elements else 0.0,
                  "accuracy": None, "reference_accuracy": None}
        agreement = self.agree / float(self.pixels) if self.pixels else None
        record["pixel_agreement"] = record["top1_agreement"] = agreement
        if self.versus_reference is not None:
            record["class_iou_vs_reference"] = class_iou(self.versus_reference)[0]
            record["miou_vs_reference"] = visible_miou(self.versus_reference)
        labelled = self.labelled and self.versus_masks is not None and self.versus_masks.sum() > 0
        if labelled:
            ious, mean = class_iou(self.versus_masks)
            _, reference_mean = class_iou(self.reference_versus_masks)
            record.update(class_iou=ious, miou=mean, reference_miou=reference_mean, accuracy=mean,
                          reference_accuracy=reference_mean,
                          pixel_accuracy=float(np.trace(self.versus_masks)) / self.versus_masks.sum(),
                          reference_pixel_accuracy=float(np.trace(self.reference_versus_masks))
                          / self.reference_versus_masks.sum())
        if self.images:
            record["intervals"] = self._intervals(record, labelled)
        return record

    def _intervals(self, record, labelled):
        """The 95% intervals over images of the record's figures (the module's docstring says how)."""
        from trtkit.intervals import CONFIDENCE, percentile_interval, rounded
        intervals = {"confidence": CONFIDENCE}
        if self.bootstrap is None or self.images < MIN_BOOTSTRAP_IMAGES or \
                self.images_differing < MIN_BOOTSTRAP_DIFFERING:
            return self._image_bound(intervals, record, labelled)
        classes = self.classes
        matrices = [m.reshape(classes, classes) for m in self.replicates["reference"]]
        pixel = [float(np.trace(m) / m.sum()) if m.sum() > 0 else None for m in matrices]
        miou = [visible_miou(m) for m in matrices]
        agreement = [dense_agreement(p, v) for p, v in zip(pixel, miou)]
        intervals["method"] = "poisson bootstrap over images ({} replicates)".format(len(matrices))
        intervals["pixel_agreement"] = rounded(percentile_interval(pixel))
        intervals["miou_vs_reference"] = rounded(percentile_interval(miou))
        intervals["agreement_drop"] = rounded(percentile_interval([None if a is None else 1.0 - a
                                                                   for a in agreement]))
        intervals["top1_agreement"] = intervals["pixel_agreement"]
        if labelled and "masks" in self.replicates:
            got = [class_iou(m.reshape(classes, classes))[1] for m in self.replicates["masks"]]
            reference = [class_iou(m.reshape(classes, classes))[1] for m in self.replicates["reference_masks"]]
            intervals["miou"] = intervals["accuracy"] = rounded(percentile_interval(got))
            intervals["reference_miou"] = intervals["reference_accuracy"] = rounded(percentile_interval(reference))
            intervals["miou_drop"] = intervals["accuracy_drop"] = rounded(percentile_interval(
                [None if r is None or g is None else r - g for r, g in zip(reference, got)]))
        return intervals

    def _image_bound(self, intervals, record, labelled):
        """The conservative intervals of the module's docstring: at most Wilson's upper share of the images
        differ from FP32, each everywhere; a figure moves by at most that share either way."""
        from trtkit.intervals import wilson
        share = 1.0 - wilson(self.images - self.images_differing, self.images)[0]
        intervals["method"] = ("images' own bound ({} of {} differ from FP32 anywhere: Wilson's upper share, "
                               "each taken to differ everywhere)".format(self.images_differing, self.images))

        def around(value, low=0.0, high=1.0):
            return None if value is None else [round(max(low, value - share), 6), round(min(high, value + share), 6)]
        intervals["pixel_agreement"] = around(record["pixel_agreement"])
        intervals["miou_vs_reference"] = around(record.get("miou_vs_reference"))
        drop = 1.0 - dense_agreement(record["pixel_agreement"], record.get("miou_vs_reference"))
        intervals["agreement_drop"] = around(drop)
        intervals["top1_agreement"] = intervals["pixel_agreement"]
        if labelled:
            intervals["miou"] = intervals["accuracy"] = around(record["miou"])
            intervals["reference_miou"] = intervals["reference_accuracy"] = around(record["reference_miou"])
            if record["miou"] is not None and record["reference_miou"] is not None:
                intervals["miou_drop"] = intervals["accuracy_drop"] = around(
                    record["reference_miou"] - record["miou"], -1.0, 1.0)
        return intervals
