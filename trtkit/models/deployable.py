"""Any checkpoint trtkit can load, as a model ready to run: what the PyTorch baselines of ``trtkit bench`` run,
whatever the build's task. Its own module because it reads every task's layouts (classifiers, segmentation,
detection), which the task modules must not import from each other.
"""

from trtkit.models.segmentation import deployable, infer_segmentation_layout, is_segmentation_name, \
    load_segmentation_model


def load_deployable(name, checkpoint, input_size=None):
    """The model of any trtkit-loadable checkpoint, ready to run: a detector (its decoded output,
    ``models.detection.export``), a segmentation model (its state_dict has that layout; returned through
    ``deployable``) or a classifier (``classifiers.load_model``). What the
    PyTorch baselines of ``trtkit bench`` run, whatever the build's task."""
    from trtkit.models.classifiers import load_model, read_checkpoint
    state, meta = read_checkpoint(checkpoint)
    from trtkit.models.detection import infer_detection_layout
    detection = infer_detection_layout(state)
    if detection:  # a detector: its decoded output, as its builds export it
        from trtkit.models.detection import load_detection_model
        from trtkit.models.detection.export import deployable as deployable_detector
        detector = load_detection_model(None, checkpoint, state, meta, detection)
        if input_size:
            detector.input_contract = detector.input_contract.with_overrides({"size": input_size})
        return deployable_detector(detector)
    layout = infer_segmentation_layout(state)
    if not layout:
        return load_model(name, checkpoint, input_size=input_size, parts=(state, meta))
    model = load_segmentation_model(name if is_segmentation_name(name or "") else None, checkpoint, state, meta,
                                    layout)
    if input_size:
        model.input_contract = model.input_contract.with_overrides({"size": input_size})
    return deployable(model)
