"""What every loaded artifact shares, whatever its task: the runner, the input contract, batches, lifecycle.

``Classifier`` (``classifier.py``) and ``Segmenter`` (``segmenter.py``) differ
only in what they make of the model's output; opening the runner, checking the
artifact against its contract, preprocessing inputs a batch at a time within
the runner's batch range and closing are here, once.

This module is imported by ``import trtkit``: it needs only numpy at import time.
"""

import numpy as np

DEFAULT_BATCH = 32


class LoadedModel(object):
    """A loaded artifact with its input contract (``trtkit.load`` returns one of its kinds).

    ``logits(inputs)`` -> the model's raw output for ``inputs``: file paths, PIL images, uint8 HxWxC arrays, a
    float32 NxCxHxW batch, or a list of them (``trtkit.app.inputs``). Attributes: ``contract``
    (InputContract), ``class_names`` (None when the build has none), ``precision``, ``backend``, ``path``,
    ``name``, ``output_kind``, ``kind``, ``task``, ``batch_size``, ``runner``. Use it as a context manager, or
    call ``close()``.
    """

    task = None  # the name of the task the subclass answers (trtkit.tasks): "classification", "segmentation"...

    def __init__(self, runner, target, batch_size=None):
        self.runner = runner
        self.target = target
        self.contract = target.contract
        self.batch_size = runner.accepted_batch(int(batch_size or DEFAULT_BATCH))
        if self.batch_size < 1:
            from trtkit.errors import InputError
            raise InputError("the batch size must be at least 1, got {}".format(batch_size))
        self._check_task()
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
    def output_shape(self):
        """The model's output shape without the batch axis, None where a dimension is dynamic."""
        shape = list(self.runner.outputs()[0].shape or [])[1:]
        return [d if isinstance(d, int) and d > 0 else None for d in shape]

    def _check_task(self):
        from trtkit.errors import InputError
        if self.task is not None and self.target.task != self.task:
            raise InputError("{} is a {} model, not {}".format(self.path, self.target.task, self.task),
                             hint="open it with trtkit.load, which returns the right kind")

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
        """The model's raw output (float32, N first) for ``inputs``, in input order."""
        outputs = [out for _, out, _ in self._run(inputs)]
        return np.concatenate(outputs) if outputs else self._no_output()

    def _no_output(self):
        """The output of no input: float32 with 0 rows and the output's other dims (0 where dynamic)."""
        return np.zeros([0] + [d or 0 for d in self.output_shape], dtype=np.float32)

    def _run(self, inputs, workers=None, on_unreadable=None, run=None):
        """Yield (labels, outputs, sizes) per batch of at most ``batch_size`` inputs (a float batch is sliced, not
        copied); ``sizes``: each image's own (w, h), None for preprocessed inputs. ``run(batch)``: what a batch
        gives (default: the first output, within the artifact's batch range)."""
        from trtkit.backends.base import run_batches
        if run is None:
            def run(batch):
                return run_batches(self.runner, batch, self.batch_size)
        if isinstance(inputs, np.ndarray) and inputs.ndim == 4 and inputs.dtype.kind == "f":
            from trtkit.app.inputs import prepare
            from trtkit.contract import float_to_chw
            inputs = float_to_chw(inputs, self.contract)  # a batch in the model's own NHWC is taken as given
            if inputs.shape[0]:
                prepare(("<array>", "float", inputs[0]), self.contract)  # the shape check, with its message
            batch = inputs if inputs.dtype == np.float32 else inputs.astype(np.float32)
            for start in range(0, batch.shape[0], self.batch_size):
                chunk = batch[start:start + self.batch_size]
                count = chunk.shape[0]
                yield ["<array>"] * count, run(chunk), [None] * count
            return
        from trtkit.app.inputs import batches
        for labels, batch, sizes in batches(inputs, self.contract, self.batch_size, workers, on_unreadable):
            yield labels, run(batch), sizes

    # ------------------------------------------------------------ lifecycle
    def close(self):
        self.runner.deactivate()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __repr__(self):
        return "{}({}, {}, {}, input {})".format(type(self).__name__, self.name, self.backend, self.precision or "-",
                                                 "x".join(str(d) for d in self.contract.shape))


def _check_k(top_k):
    """``top_k`` as an int of at least 1; InputError otherwise."""
    from trtkit.errors import InputError
    try:
        value = int(top_k)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise InputError("top_k must be at least 1, got {!r}".format(top_k))
    return value

