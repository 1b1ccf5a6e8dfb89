"""``trtkit.load(path)`` -> ``Classifier``: a built classification artifact in the user's application.

    import trtkit
    with trtkit.load("build/engines") as model:            # the fastest artifact that passed verification
        for name, top in zip(files, model.predict(files, top_k=3)):
            print(name, top)                              # [(7, "seven", 0.98), (1, "one", 0.01), ...]

The artifact runs through trtkit's own runner for its backend (ONNX Runtime,
TensorRT, TensorRT-RTX), the same one the build verified and timed, and its
inputs are preprocessed by the build's input contract (``locate``). Batches are
kept inside the runner's batch range (an engine's optimization profile), so
any number of images goes through; files are decoded a batch at a time.

A segmentation build loads as a ``Segmenter`` instead (``segmenter.py``); what
both share (runner, contract, batches, lifecycle) is ``model.LoadedModel``.

This module is imported by ``import trtkit``: it needs only numpy at import time.
"""

import numpy as np

from trtkit.app.model import LoadedModel, _check_k
from trtkit.tasks.classification import CLASSIFICATION


class Classifier(LoadedModel):
    """A loaded classification artifact with its input contract.

    ``predict(inputs, top_k=5)`` -> per input a list of ``(class_index, class_name, probability)``, best first;
    ``logits(inputs)`` -> float32 (N, classes); ``probabilities(inputs)`` -> float32 (N, classes).
    ``inputs``: file paths, PIL images, uint8 HxWxC arrays, a float32 NxCxHxW batch, or a list of them
    (``trtkit.app.inputs``). Attributes: ``contract`` (InputContract), ``class_names`` (None when the build has
    none), ``precision``, ``backend``, ``path``, ``name``, ``output_kind``, ``batch_size``, ``runner``.
    Use it as a context manager, or call ``close()``.
    """

    task = CLASSIFICATION.name

    @property
    def num_classes(self):
        """The number of classes (labels) from the artifact's output shape (2 for a one-column binary output; the
        class names' count when the shape is dynamic)."""
        columns = self.output_columns
        if columns is not None:
            return self.kind.classes(columns)
        return len(self.class_names) if self.class_names else None

    @property
    def output_columns(self):
        """The columns of the model's output (1 for a binary model, whose classes are 2); None when dynamic."""
        shape = self.output_shape
        return shape[-1] if shape else None

    def _no_output(self):
        return np.zeros((0, self.num_classes or 0), dtype=np.float32)

    # ------------------------------------------------------------ running
    def probabilities(self, inputs):
        """Probabilities (float32): of each class (N, classes) for single-label and binary models (a binary one as
        [negative, positive]), of each label for multi-label ones; never a softmax over one already applied."""
        return self.kind.probabilities(self.logits(inputs))

    def decide(self, inputs):
        """The model's own decisions: a class index per input (binary: 1 = positive), or a boolean per label
        (multi-label), by the output kind's rule."""
        return self.kind.decide(self.logits(inputs))

    def predict(self, inputs, top_k=5):
        """Per input a list of ``(class_index, class_name, probability)``, best first: the ``top_k`` classes, or
        for a multi-label model its positive labels (at most ``top_k``)."""
        return [top for _, top in self.iter_predict(inputs, top_k)]

    def iter_predict(self, inputs, top_k=5, workers=None, on_unreadable=None):
        """Yield ``(label, top)`` per input as its batch finishes: label is the file path (``<array>`` ...).
        ``on_unreadable(path, error)``: files that cannot be read go to it and are skipped (None: an error)."""
        top_k = _check_k(top_k)
        for labels, out, _ in self._run(inputs, workers, on_unreadable):
            for label, top in zip(labels, self.top(out, top_k)):
                yield label, top

    def top(self, outputs, top_k=5):
        """Per row of model outputs, ``(class_index, class_name, probability)`` tuples, best first: the ``top_k``
        classes, or the positive labels of a multi-label model (at most ``top_k``)."""
        kind = self.kind
        probabilities = kind.probabilities(outputs)
        k = min(_check_k(top_k), probabilities.shape[1] if probabilities.ndim == 2 else 0)
        order = np.argsort(-probabilities, axis=1, kind="stable") if probabilities.size else []
        if kind.threshold is not None and not kind.multilabel and probabilities.size:  # the decided class first
            decided = kind.decide(outputs)
            order = [[d] + [i for i in row if i != d] for d, row in zip(decided, order)]
        order = [row[:k] for row in order]
        positive = kind.decide(outputs) if kind.multilabel else None
        names = self.class_names
        results = []
        for row, (probs, indices) in enumerate(zip(probabilities, order)):
            if positive is not None:
                indices = [i for i in indices if positive[row, i]]
            results.append([(int(i), names[i] if names and i < len(names) else None, float(probs[i]))
                            for i in indices])
        return results
