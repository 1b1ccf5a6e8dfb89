"""``trtkit.load(path)`` -> ``Classifier``: a built artifact in the user's application.

    import trtkit
    with trtkit.load("build/engines") as model:            # the fastest artifact that passed verification
        for name, top in zip(files, model.predict(files, top_k=3)):
            print(name, top)                              # [(7, "seven", 0.98), (1, "one", 0.01), ...]

The artifact runs through trtkit's own runner for its backend (ONNX Runtime,
TensorRT, TensorRT-RTX), the same one the build verified and timed, and its
inputs are preprocessed by the build's input contract (``locate``). Batches are
kept inside the runner's batch range (an engine's optimization profile), so
any number of images goes through; files are decoded a batch at a time.

This module is imported by ``import trtkit``: it needs only numpy at import time.
"""

import numpy as np

from trtkit.app.locate import locate

DEFAULT_BATCH = 32


class Classifier(object):
    """A loaded artifact with its input contract.

    ``predict(inputs, top_k=5)`` -> per input a list of ``(class_index, class_name, probability)``, best first;
    ``logits(inputs)`` -> float32 (N, classes); ``probabilities(inputs)`` -> float32 (N, classes).
    ``inputs``: file paths, PIL images, uint8 HxWxC arrays, a float32 NxCxHxW batch, or a list of them
    (``trtkit.app.inputs``). Attributes: ``contract`` (InputContract), ``class_names`` (None when the build has
    none), ``precision``, ``backend``, ``path``, ``name``, ``output_kind``, ``batch_size``, ``runner``.
    Use it as a context manager, or call ``close()``.
    """

    def __init__(self, runner, target, batch_size=None):
        self.runner = runner
        self.target = target
        self.contract = target.contract
        self.batch_size = runner.accepted_batch(int(batch_size or DEFAULT_BATCH))
        if self.batch_size < 1:
            from trtkit.errors import InputError
            raise InputError("the batch size must be at least 1, got {}".format(batch_size))
        self._check_input()

    @classmethod
    def open(cls, target, batch_size=None):
        """Activate the runner of a ``locate.Target`` and wrap it (errors from loading the artifact propagate)."""
        from trtkit.backends import get_backend
        runner = get_backend(target.backend).runner(target.path)
        runner.activate()
        try:
            return cls(runner, target, batch_size)
        except BaseException:
            runner.deactivate()
            raise

    # ------------------------------------------------------------ what it is
    @property
    def class_names(self):
        return self.contract.class_names

    @property
    def precision(self):
        return self.target.precision

    @property
    def backend(self):
        return self.target.backend

    @property
    def path(self):
        return self.target.path

    @property
    def name(self):
        return self.target.name

    @property
    def output_kind(self):
        """The manifest's name of what the output holds (``trtkit.outputs``)."""
        return self.target.output_kind

    @property
    def kind(self):
        """The ``trtkit.outputs.OutputKind`` whose decision rule ``predict`` and ``decide`` follow."""
        from trtkit.outputs import OutputKind
        return OutputKind.parse(self.target.output_kind)

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
        shape = self.runner.outputs()[0].shape
        last = shape[-1] if shape else None
        return last if isinstance(last, int) and last > 0 else None

    def _check_input(self):
        """The artifact's own input dims must be the contract's (a manifest from another build would not be)."""
        from trtkit.errors import InputError
        spec = self.runner.inputs()[0]
        dims = list(spec.shape[1:])
        expected = list(self.contract.shape)
        if len(dims) != 3 or any(isinstance(d, int) and d != e for d, e in zip(dims, expected)):
            raise InputError("{} takes input {} but its contract says {}".format(
                self.path, "x".join(str(d) for d in spec.shape), "Nx" + "x".join(str(d) for d in expected)),
                hint="the manifest does not belong to this artifact: rebuild, or load the artifact alone")

    # ------------------------------------------------------------ running
    def logits(self, inputs):
        """The model's raw output (float32 (N, classes)) for ``inputs``, in input order."""
        outputs = [out for _, out in self._run(inputs)]
        if not outputs:
            return np.zeros((0, self.num_classes or 0), dtype=np.float32)
        return np.concatenate(outputs)

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

    def iter_predict(self, inputs, top_k=5, workers=None):
        """Yield ``(label, top)`` per input as its batch finishes: label is the file path (``<array>`` ...)."""
        top_k = self._check_top_k(top_k)
        for labels, out in self._run(inputs, workers):
            for label, top in zip(labels, self.top(out, top_k)):
                yield label, top

    def top(self, outputs, top_k=5):
        """Per row of model outputs, ``(class_index, class_name, probability)`` tuples, best first: the ``top_k``
        classes, or the positive labels of a multi-label model (at most ``top_k``)."""
        kind = self.kind
        probabilities = kind.probabilities(outputs)
        k = min(self._check_top_k(top_k), probabilities.shape[1] if probabilities.ndim == 2 else 0)
        order = np.argsort(-probabilities, axis=1, kind="stable")[:, :k] if probabilities.size else []
        positive = kind.decide(outputs) if kind.multilabel else None
        names = self.class_names
        results = []
        for row, (probs, indices) in enumerate(zip(probabilities, order)):
            if positive is not None:
                indices = [i for i in indices if positive[row, i]]
            results.append([(int(i), names[i] if names and i < len(names) else None, float(probs[i]))
                            for i in indices])
        return results

    def _check_top_k(self, top_k):
        from trtkit.errors import InputError
        try:
            value = int(top_k)
        except (TypeError, ValueError):
            value = 0
        if value < 1:
            raise InputError("top_k must be at least 1, got {!r}".format(top_k))
        return value

    def _run(self, inputs, workers=None):
        """Yield (labels, outputs) per batch of at most ``batch_size`` inputs (a float batch is sliced, not copied)."""
        from trtkit.pipeline.verify import run_batches
        if isinstance(inputs, np.ndarray) and inputs.ndim == 4 and inputs.dtype.kind == "f":
            from trtkit.app.inputs import prepare
            if inputs.shape[0]:
                prepare(("<array>", "float", inputs[0]), self.contract)  # the shape check, with its message
            batch = inputs if inputs.dtype == np.float32 else inputs.astype(np.float32)
            for start in range(0, batch.shape[0], self.batch_size):
                chunk = batch[start:start + self.batch_size]
                yield ["<array>"] * chunk.shape[0], run_batches(self.runner, chunk, self.batch_size)
            return
        from trtkit.app.inputs import batches
        for labels, batch in batches(inputs, self.contract, self.batch_size, workers):
            yield labels, run_batches(self.runner, batch, self.batch_size)

    # ------------------------------------------------------------ lifecycle
    def close(self):
        self.runner.deactivate()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __repr__(self):
        return "Classifier({}, {}, {}, input {})".format(self.name, self.backend, self.precision or "-",
                                                         "x".join(str(d) for d in self.contract.shape))


def load(path, precision=None, backend=None, batch_size=None):
    """Load a built artifact for inference: ``path`` is a build folder, its manifest.json, or one artifact.

    From a build: ``precision``'s artifact, else the manifest's chosen one, else the fastest that passed
    verification. ``backend`` restricts the choice to that runtime (for a lone artifact: the one to run it with).
    ``batch_size``: the most images per run (kept inside the artifact's batch range; default 32).
    Returns a Classifier (its runner already loaded). InputError for a missing path, a folder without a manifest,
    a precision the build does not have.
    """
    return Classifier.open(locate(path, precision, backend), batch_size)
