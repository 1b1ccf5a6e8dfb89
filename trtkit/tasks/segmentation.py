"""Semantic segmentation: a class per pixel from [N, C, H, W] score maps (or a one-channel map).

Verified per pixel against FP32 (``pipeline.dense.DenseComparison``: pixel
agreement and mIoU against FP32's decisions, mIoU against masks) with gates of
its own (below); ``trtkit.load`` gives a ``Segmenter``; ``predict`` prints each
image's classes by share of pixels and draws masks and overlays (``--out``);
``serve`` answers a palette PNG of the mask and the class fractions. Its
sample is an LRASPP-MobileNetV3 on the drawn shapes (``models.sample``).
"""

import numpy as np

from trtkit import log
from trtkit.errors import InputError
from trtkit.tasks.base import Task

SAMPLE = "lraspp_mobilenet_v3_large"  # the built-in sample's architecture (models.sample)

# the segmentation gates: pixel agreement per precision (unless --min-agreement sets it) and, with masks, the
# mIoU points a quantized variant may lose against FP32's (measured cases in pipeline.dense)
MIN_PIXEL_AGREEMENT = {"fp16": 0.995, "int8": 0.98, "mixed": 0.98}
MAX_MIOU_DROP = 0.01

# mIoU against FP32's decision maps a variant needs (its second gate), over the classes on at least
# dense.VISIBLE_SHARE of FP32's pixels
MIN_MIOU_VS_REFERENCE = {"fp16": 0.99, "int8": 0.97, "mixed": 0.97}


class Segmentation(Task):
    name = "segmentation"
    aliases = ("segment", "semantic-segmentation", "seg")
    summary = "a class per pixel from [N, C, H, W] score maps"
    dense = True
    class_axis = 1  # a map's classes are its channels
    multilabel = False  # a sigmoid per channel of a map: overlapping masks, not one class per pixel
    flat = False
    output_text = "a [N, C, H, W] map (segmentation)"
    labels = "masks"
    accuracy_name = "mIoU"
    agreement_columns = (("pixel agree", "pixel_agreement"), ("mIoU vs FP32", "miou_vs_reference"))
    # "agreement" is the lower of pixel agreement and mIoU against FP32's decisions
    budget_labels = {"accuracy": "mIoU", "agreement": "agreement (pixels, mIoU vs FP32)"}
    min_agreement = MIN_PIXEL_AGREEMENT
    miou_gates = MIN_MIOU_VS_REFERENCE
    max_miou_drop = MAX_MIOU_DROP
    sample_name = SAMPLE
    sample_title = "the segmentation sample"
    sample_data = "shapes"  # data.sources.SHAPES: the drawn shapes with masks
    predict_verb = "segmenting"
    draws = "masks"
    architectures = "trtkit.models.segmentation:is_segmentation_name"
    app = "trtkit.app.segmenter:Segmenter"
    comparison = "trtkit.pipeline.dense:DenseComparison"
    sample = "trtkit.models.sample:sample_segmentation_model"
    predict = "trtkit.commands.predict:segment_files"

    def recognises(self, dims):
        """[N, C, H, W] with H and W not both 1 (or dynamic)."""
        dims = list(dims or [])
        return len(dims) == 4 and dims[2:] != [1, 1]

    def sample_model(self):
        """The sample through ``models.segmentation.deployable``: its ``out`` tensor, not the dict."""
        from trtkit.tasks.base import resolve
        model, path = Task.sample_model(self)
        return resolve("trtkit.models.segmentation:deployable")(model), path

    def labels_of(self, labels):
        """Masks ((N, H, W)); a folder's per-image labels are no masks."""
        return labels if labels is not None and labels.ndim == 3 else None

    def usable_labels(self, selection, num_classes, data):
        if selection.holds != "masks":
            log.info("{} has no masks (images/ + masks/ with the same names): verification reports pixel "
                     "agreement with FP32, not mIoU against ground truth".format(data))
            return False
        return True

    def agreement_name(self, kind):
        return "pixel"

    def triton_note(self, io, label, info=None):
        output = io.outputs[0]
        if len(output.dims) != 4:
            raise InputError("{}: the build is a segmentation model but its output '{}' has dims {}, not "
                             "[N, C, H, W]".format(label, output.name, output.dims), hint="rebuild it with this trtkit")
        return ("\nsegmentation: '{}' holds [C, H, W] scores per pixel of the model input; decide each pixel by the "
                "rule above".format(output.name))

    def serve_outputs(self, Tensor, model, k, logits_out):
        """Masks and class fractions (no score maps: they are the model input's size, not the image's)."""
        return [Tensor(name="mask", dtype=bytes, shape=(1,)),
                Tensor(name="fractions", dtype=np.float32, shape=(model.num_classes or -1,))]

    def serve_answer(self, model, logits, sizes, k):
        """Base64 palette PNGs of the masks at each image's size and the class fractions."""
        import base64
        from trtkit.app.palette import encode_png, mask_image
        masks = model.masks(logits, sizes)
        return {"mask": np.asarray([[base64.b64encode(encode_png(mask_image(mask)))] for mask in masks],
                                   dtype=object),
                "fractions": np.asarray([model.fractions(mask) for mask in masks], dtype=np.float32)}


SEGMENTATION = Segmentation()
