"""A detection checkpoint into its model: the layout read from the state_dict, loaded strictly."""

from trtkit.contract import InputContract


def load_detection_model(name, checkpoint, state, meta, layout, num_classes=None):
    """The detector of ``checkpoint`` (its ``state`` and trtkit ``meta`` already read; ``layout`` from
    ``registry.infer_detection_layout``), loaded strictly. ``name`` (``--model``) must agree with the layout and
    ``num_classes`` with the checkpoint's. trtkit's own checkpoints carry the input contract (class names
    included) and the options it was built with (``meta["detection_options"]``), which win over the guess."""
    from trtkit.models.classifiers import _load_strict, check_layout
    from trtkit.models.detection.registry import create_detection_model
    found, classes, options = layout
    check_layout(checkpoint, found, classes, name, num_classes)
    options = dict(options, **(meta.get("detection_options") or {}))
    contract = InputContract.from_dict(meta["input"]) if meta.get("input") else None
    model = create_detection_model(found, num_classes=classes, contract=contract,
                                   postprocessing=meta.get("postprocessing"), **options)
    _load_strict(model, state, checkpoint, found)
    model.eval()
    model.trtkit_meta = meta
    return model
