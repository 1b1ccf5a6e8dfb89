"""Where a detector comes from, for ``pipeline.source``: a detection checkpoint (torchvision's layouts and
trtkit's sample) or an ONNX that trtkit exported from one (its head in the metadata). Apart from ``source`` so
that each task's recognition stays small and in one place.
"""

from trtkit import log, tasks
from trtkit.deps import require
from trtkit.errors import InputError, ModelMismatch


def onnx_detector(options, onnx_path, work_dir=None, name=None):
    """(head record, the ONNX to build from) of an ONNX detector: the head trtkit's export wrote in its
    metadata (``onnx.load.detection_metadata``) and the file itself; for another exporter's graph with
    ``--decoder`` (or NonMaxSuppression inside: ``--decoder nms``, said in a log line), the head and the copy
    ``pipeline.foreign_detector.adapt`` writes into ``work_dir``; (None,
    the file) for another model. Refused in one line, before anything is built, for a detector ONNX with
    neither (``--task detection`` on another exporter's graph without ``--decoder``)."""
    from trtkit.onnx.load import detection_metadata
    try:
        model = require("onnx").load(onnx_path, load_external_data=False)
    except Exception:  # a missing or broken file: prepare_onnx says what is wrong with it, in its own words
        return None, onnx_path
    head = detection_metadata(model)
    decoder = getattr(options, "foreign", None)
    if head is not None:
        if decoder is not None and decoder.given:
            raise InputError("{} is a trtkit detector (its head is in its metadata): --decoder and the head's "
                             "thresholds are for other exporters' graphs".format(options.onnx),
                             hint="drop --decoder and its options")
        return head, onnx_path
    if options.task and tasks.parse(options.task) == tasks.DETECTION:
        from trtkit.pipeline.foreign_detector import adapt
        if decoder is not None and decoder.decoder:
            return adapt(options, onnx_path, work_dir, name)
        from trtkit.detect.decoders import nms, raw_names, tails
        if tails.best_k(model):
            log.info("{} has no trtkit detection head and keeps its best K detections by a TopK, with no NMS: read "
                     "as --decoder topk (cut before the TopK; docs/detection.md)".format(options.onnx))
            return adapt(options, onnx_path, work_dir, name, decoder="topk")
        if tails.loop_selection(model):  # TensorFlow's padded NMS: read by ``detect.decoders.loops``
            log.info("{} has no trtkit detection head and selects its detections in a Loop (TensorFlow's "
                     "non_max_suppression_padded): read as --decoder nms (cut at the boxes and scores entering "
                     "it; docs/detection.md)".format(options.onnx))
            return adapt(options, onnx_path, work_dir, name, decoder=nms.Nms.name)
        if nms.inside(model):
            log.info("{} has no trtkit detection head and selects its detections with NonMaxSuppression: read "
                     "as --decoder nms (cut at its NMS's boxes and scores; docs/detection.md)".format(options.onnx))
            return adapt(options, onnx_path, work_dir, name, decoder=nms.Nms.name)
        raise InputError("{} has no trtkit detection head in its metadata: trtkit builds the detectors it "
                         "exported itself, whose head (anchors, classes, NMS parameters) it recorded, and "
                         "other graphs through a decoder of their raw outputs".format(options.onnx),
                         hint="pass --decoder {} or your own, --decoder file.py:function (docs/detection.md, foreign "
                              "detectors), or build from the checkpoint (--checkpoint FILE --task detection)".format(
                                  "|".join(raw_names())))
    return None, onnx_path


def graph_resize(head, overrides):
    """``overrides`` (the contract fields the user set) with the resize of a foreign detector that resizes its
    image inside (``onnx.inner_resize``, read into its decoder's ``inner_resize``) where the user set none:
    ``stretch`` with the filter that samples as the graph's Resize, so each image reaches the network as the
    export's own resize makes it; a user's other resize or filter is kept, and the log says the detections
    then differ from the export's."""
    inner = (((head or {}).get("decoder") or {}).get("params") or {}).get("inner_resize")
    if not inner:
        return overrides
    overrides = dict(overrides)
    for field, value in (("resize", "stretch"), ("resize_filter", inner.get("filter"))):
        if value is None:
            log.warn("the graph resizes with {} {} inside, which no trtkit resize filter reproduces: the "
                     "detections differ from the export's on images of other sizes".format(
                         inner["mode"], inner["coordinates"]))
        elif overrides.get(field, value) != value:
            log.warn("--{} {}: the graph resizes inside as trtkit's {} {} does ({} {}); the detections differ "
                     "from the export's on images of other sizes".format(field.replace("_", "-"), overrides[field],
                                                                         field.replace("_", " "), value,
                                                                         inner["mode"], inner["coordinates"]))
        else:
            overrides[field] = value
    return overrides


def detection_checkpoint(options, state, meta):
    """The deployable detector of a detection checkpoint (``models.detection``'s layouts), None for another
    layout; refused in one line when ``--task`` asks for another task than its layout's, or detection for a
    checkpoint that is no detector."""
    from trtkit.models.detection import infer_detection_layout
    layout = infer_detection_layout(state)
    asked = tasks.parse(options.task) if options.task else \
        tasks.of_model_name(options.model) if options.model else None
    if layout is None:
        if asked == tasks.DETECTION:
            raise ModelMismatch("{} is not a detection checkpoint (no RetinaNet, SSD300 or SSDlite layout)".format(
                options.checkpoint), hint="pass a torchvision-layout detector, or --onnx for other models")
        return None
    if asked is not None and asked != tasks.DETECTION:
        raise ModelMismatch("{} is a {} detection checkpoint".format(options.checkpoint, layout[0]),
                            hint="drop --task {} (or pass a {} checkpoint)".format(asked.name, asked.name))
    from trtkit.models.detection.checkpoint import load_detection_model
    from trtkit.models.detection.export import deployable
    return deployable(load_detection_model(options.model, options.checkpoint, state, meta, layout,
                                           num_classes=options.num_classes))
