"""``trtkit.load(path)`` -> ``Segmenter``: a built segmentation artifact in the user's application.

    import trtkit
    with trtkit.load("build/seg") as model:
        for name, mask in zip(files, model.predict(files)):   # uint8 (H, W) class indices, the photo's own size
            print(name, model.top(mask, 3))                   # [(15, "person", 0.62), (0, "background", 0.30), ...]
        trtkit.app.palette.overlay(photo, mask).save("overlay.png")

The model's score maps ([N, C, h, w], or one channel [N, 1, h, w]) are taken
back through the build's preprocessing geometry onto each original image
(``maps.to_original``: bilinear on the scores, then the output kind's decision
per pixel), so a mask lines up with the photo it was predicted for. Pixels a
centre crop cut off are ``maps.UNSEEN`` (255). A preprocessed float input has
no original: its mask is the model input's size.

This module needs only numpy at import time.
"""

import numpy as np

from trtkit.app import maps
from trtkit.app.model import LoadedModel, _check_k
from trtkit.errors import InputError
from trtkit.tasks.segmentation import SEGMENTATION


class Segmenter(LoadedModel):
    """A loaded segmentation artifact with its input contract.

    ``predict(inputs)`` -> per input a mask: a uint8 (H, W) array of class indices at the image's own size
    (int32 for 255 classes or more; unseen pixels ``maps.UNSEEN``); ``iter_predict`` yields them with their
    labels as batches finish; ``logits(inputs)`` -> the raw float32 (N, C, h, w) score maps;
    ``fractions(mask)`` and ``top(mask, k)`` -> the share of each class in a mask. Inputs and attributes as
    ``LoadedModel``'s, with ``num_classes``.
    """

    task = SEGMENTATION.name

    def _check_task(self):
        super(Segmenter, self)._check_task()
        if self.kind.multilabel:
            raise InputError("{}: a segmentation output is one class per pixel, not {}".format(
                self.path, self.kind.name), hint="rebuild with --output-kind logits, probabilities, binary-logit or "
                                                 "binary-probability")
        shape = self.output_shape
        if len(shape) != 3:
            raise InputError("{} outputs {} per image; a segmentation model outputs C x H x W score maps".format(
                self.path, "x".join(str(d) for d in shape) or "a scalar"), hint="load a segmentation build")
        if shape[0] is not None:
            self.kind.check_columns(shape[0], "the output's class channel")

    @property
    def num_classes(self):
        """The classes a pixel can be (2 for a one-channel binary map); the class names' count when dynamic."""
        channels = self.output_shape[0]
        if channels is not None:
            return self.kind.classes(channels)
        return len(self.class_names) if self.class_names else None

    def predict(self, inputs):
        """Per input its mask of class indices at the image's own size (see the class doc)."""
        return [mask for _, mask in self.iter_predict(inputs)]

    def iter_predict(self, inputs, workers=None, on_unreadable=None):
        """Yield ``(label, mask)`` per input as its batch finishes: label is the file path (``<array>`` ...).
        ``on_unreadable(path, error)``: files that cannot be read go to it and are skipped (None: an error)."""
        for labels, scores, sizes in self._run(inputs, workers, on_unreadable):
            for label, mask in zip(labels, self.masks(scores, sizes)):
                yield label, mask

    def masks(self, scores, sizes=None):
        """Score maps (N, C, h, w) -> masks, each at its image's ``sizes`` entry (w, h) (None: the input's size)."""
        scores = np.asarray(scores)
        if scores.ndim != 4:
            raise InputError("score maps are (N, C, H, W), got shape {}".format(scores.shape))
        sizes = sizes if sizes is not None else [None] * len(scores)
        return [maps.to_original(row, self.kind, self.contract, size) for row, size in zip(scores, sizes)]

    def fractions(self, mask):
        """The share of each class among the mask's seen pixels: float64 (classes,), summing to 1."""
        return maps.class_fractions(mask, self.num_classes)

    def top(self, mask, top_k=5):
        """``(class_index, class_name, fraction)`` of the ``top_k`` classes covering most of the mask, largest
        first (classes absent from it left out)."""
        return maps.top_classes(self.fractions(mask), _check_k(top_k), self.class_names)
