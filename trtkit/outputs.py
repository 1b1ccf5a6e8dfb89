"""What a classifier's output holds, and the decision rule that turns it into an answer.

Real classifiers end in different ways: class logits, a softmax, a log-softmax,
a single logit or sigmoid probability (binary: positive when the logit > 0 /
the probability > 0.5), or independent sigmoids (multi-label). Every step that
judges or uses an output (verification, the precision search, ``predict``,
``serve``, the Triton export) asks the model's ``OutputKind`` instead of
assuming an arg-max: an arg-max over a one-column output is always 0, so an
"agreement" computed that way is trivially perfect and proves nothing.

``OutputKind.parse(name)`` is the one way from the manifest's
``model.output_kind`` string to a kind; ``trtkit.onnx.layout.output_kind``
detects it from a graph, ``--output-kind`` overrides the detection.

A one-column or multi-label kind may carry its own decision threshold
(``--threshold``): a text detector's package calls a pixel text when its
probability is > 0.3, not 0.5 (PaddleOCR's DB post-processing); so may a
two-class softmax or logits output, whose class 1 then needs a probability
above it (MTCNN calls a window a face when p(face) > 0.6). The threshold
is part of the kind's name, ``binary-probability@0.3``, so the manifest's one
``output_kind`` string gives every reader (verification, the precision
search, ``load``/``predict``, ``serve``, Triton) the same rule.
"""

import difflib
import math

import numpy as np

from trtkit.errors import InputError


class OutputKind(object):
    """One kind of classifier output.

    ``name``: the manifest string; ``multilabel``: independent labels (decisions are a boolean per label);
    ``binary``: one column, two classes (negative 0, positive 1); ``scale``: what the numbers are
    (``logits``, ``probabilities``, ``log-probabilities``).
    """

    def __init__(self, name, scale, binary=False, multilabel=False, summary="", threshold=None):
        self.base = name
        self.name = name if threshold is None else "{}@{!r}".format(name, float(threshold))
        self.scale = scale
        self.binary = binary
        self.multilabel = multilabel
        self.summary = summary
        self.threshold = None if threshold is None else float(threshold)

    @property
    def cutoff(self):
        """A binary or multi-label output is positive above this: the kind's threshold, else 0.5 for
        probabilities and 0 for logits."""
        if self.threshold is not None:
            return self.threshold
        return 0.5 if self.scale == "probabilities" else 0.0

    def with_threshold(self, value):
        """This kind deciding positive when the output is > ``value`` (named ``KIND@VALUE``); ``value`` None:
        the kind's default. InputError for an arg-max kind or a probability threshold outside (0, 1)."""
        if value is None:
            return KINDS[self.base]
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise InputError("decision threshold '{}' is not a number".format(value),
                             hint="e.g. --threshold 0.3 for a sigmoid output positive above 0.3")
        probability = self.scale == "probabilities" or self.single_label  # two classes: class 1's probability
        if math.isnan(value) or math.isinf(value) or (probability and not 0.0 < value < 1.0):
            raise InputError("decision threshold {} is not {}".format(
                value, "a probability between 0 and 1" if probability else "a finite logit"),
                hint="e.g. --threshold 0.3 for a sigmoid output positive above 0.3")
        if self.single_label:  # "class scores; the class is their arg-max" no longer holds
            summary = "two classes ({}): class 1 when its probability is > {!r}".format(self.base, value)
        else:
            summary = "{}: positive when > {!r}".format(self.summary.split(":")[0], value)
        return OutputKind(self.base, self.scale, self.binary, self.multilabel, summary, threshold=value)

    @property
    def single_label(self):
        """One class per image, chosen by arg-max (the classes are the output's columns)."""
        return not self.binary and not self.multilabel

    def check_columns(self, columns, where="the output"):
        """InputError unless an output of ``columns`` columns can hold this kind."""
        if columns is None:
            return
        if self.binary and columns != 1:
            raise InputError("{} has {} columns; {} is one column".format(where, columns, self.name),
                             hint="--output-kind logits, probabilities or multilabel-*")
        if self.single_label and columns < 2:
            raise InputError("{} has one column: an arg-max over it is always 0, so it cannot hold {}".format(
                where, self.name), hint="a one-column output is binary: --output-kind binary-logit or "
                                        "binary-probability")
        if self.single_label and self.threshold is not None and columns != 2:
            raise InputError("{} has {} columns: a decision threshold on {} is for two classes (class 1 when its "
                             "probability is above it)".format(where, columns, self.base),
                             hint="drop --threshold: the class is the arg-max")

    def decide(self, outputs):
        """The model's answer per row of ``outputs`` (N, columns): class indices (N,) int64 for single-label and
        binary kinds (binary: 1 = positive), a boolean (N, labels) array for multi-label ones."""
        outputs = np.asarray(outputs, dtype=np.float32)
        if self.single_label and self.threshold is not None:  # two classes: MTCNN's face when p(face) > 0.6
            return (self.probabilities(outputs)[:, 1] > self.threshold).astype(np.int64)
        if self.single_label:
            return outputs.argmax(1)
        positive = outputs > self.cutoff
        return positive[:, 0].astype(np.int64) if self.binary else positive

    def decide_maps(self, outputs):
        """The decision per pixel of score maps ``outputs`` (N, C, H, W): class indices (N, H, W) int64 (the
        arg-max over C; one channel: 1 where positive), the rule of ``decide`` applied to every pixel."""
        outputs = np.asarray(outputs, dtype=np.float32)
        n, c, h, w = outputs.shape
        if self.single_label and self.threshold is None:
            return outputs.argmax(1)
        return self.decide(np.moveaxis(outputs, 1, -1).reshape(-1, c)).reshape(n, h, w)

    def probabilities(self, outputs):
        """Per row, the probability of each class (single-label, binary as [negative, positive]) or of each
        label (multi-label), float32; never a softmax over what already is one."""
        outputs = np.asarray(outputs, dtype=np.float64)
        if outputs.size == 0:
            return outputs.astype(np.float32)
        if self.scale == "logits":
            if self.single_label:
                shifted = np.exp(outputs - outputs.max(axis=1, keepdims=True))
                probs = shifted / shifted.sum(axis=1, keepdims=True)
            else:
                probs = 1.0 / (1.0 + np.exp(-outputs))
        elif self.scale == "log-probabilities":
            probs = np.exp(outputs)
        else:
            probs = outputs
        if self.binary:
            probs = np.concatenate([1.0 - probs[:, :1], probs[:, :1]], axis=1)
        return probs.astype(np.float32)

    def classes(self, columns):
        """How many classes (or labels) an output of ``columns`` columns has: 2 for a binary one."""
        return 2 if self.binary else columns

    def __eq__(self, other):
        return isinstance(other, OutputKind) and other.name == self.name

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return "OutputKind({})".format(self.name)

    @staticmethod
    def parse(name):
        """The OutputKind called ``name`` (an OutputKind passes through); InputError with the nearest names."""
        if isinstance(name, OutputKind):
            return name
        text = str(name).strip().lower()
        base, _, threshold = text.partition("@")
        kind = KINDS.get(base)
        if kind is not None and threshold:
            return kind.with_threshold(threshold)
        if kind is None or "@" in text:
            close = difflib.get_close_matches(str(name), sorted(KINDS), n=2, cutoff=0.5)
            raise InputError("unknown output kind '{}'".format(name), hint="did you mean {}?".format(
                " or ".join(close)) if close else "use one of " + ", ".join(KINDS))
        return kind


LOGITS = OutputKind("logits", "logits", summary="class scores; the class is their arg-max")
PROBABILITIES = OutputKind("probabilities", "probabilities", summary="a softmax: class probabilities")
LOG_PROBABILITIES = OutputKind("log-probabilities", "log-probabilities", summary="a log-softmax")
BINARY_LOGIT = OutputKind("binary-logit", "logits", binary=True, summary="one logit: positive when > 0")
BINARY_PROBABILITY = OutputKind("binary-probability", "probabilities", binary=True,
                                summary="one sigmoid: positive when > 0.5")
MULTILABEL_LOGITS = OutputKind("multilabel-logits", "logits", multilabel=True,
                               summary="independent labels: each positive when its logit > 0")
MULTILABEL_PROBABILITIES = OutputKind("multilabel-probabilities", "probabilities", multilabel=True,
                                      summary="independent sigmoids: each label positive when > 0.5")
KINDS = dict((k.name, k) for k in (LOGITS, PROBABILITIES, LOG_PROBABILITIES, BINARY_LOGIT, BINARY_PROBABILITY,
                                   MULTILABEL_LOGITS, MULTILABEL_PROBABILITIES))
NAMES = tuple(KINDS)


def help_text():
    """The ``--output-kind`` help: every kind and its rule."""
    return "; ".join("{}: {}".format(k.name, k.summary) for k in KINDS.values())
