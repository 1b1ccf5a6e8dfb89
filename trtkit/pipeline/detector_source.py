"""Where a detector comes from, for ``pipeline.source``: a detection checkpoint (torchvision's layouts and
trtkit's sample) or an ONNX that trtkit exported from one (its head in the metadata). Apart from ``source`` so
that each task's recognition stays small and in one place.
"""

from trtkit import tasks
from trtkit.deps import require
from trtkit.errors import InputError, ModelMismatch


def onnx_detector(options, onnx_path):
    """An ONNX detector's head record, from the metadata trtkit's export writes (``onnx.load.
    detection_metadata``), or None for another model; refused in one line, before anything is built, for a
    detector ONNX without it (``--task detection`` on another exporter's graph)."""
    from trtkit.onnx.load import detection_metadata
    try:
        model = require("onnx").load(onnx_path, load_external_data=False)
    except Exception:  # a missing or broken file: prepare_onnx says what is wrong with it, in its own words
        return None
    head = detection_metadata(model)
    if head is None:
        if options.task and tasks.parse(options.task) == tasks.DETECTION:
            raise InputError("{} has no trtkit detection head in its metadata: trtkit builds the detectors it "
                             "exported itself, whose head (anchors, classes, NMS parameters) it recorded".format(
                                 options.onnx),
                             hint="build from the checkpoint (--checkpoint FILE --task detection); other "
                                  "frameworks' detector graphs are not read yet")
    return head

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
