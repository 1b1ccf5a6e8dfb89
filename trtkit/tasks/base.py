"""``Task``: what one task (classification, segmentation, ...) makes of a model, its data and its answers.

A task's module (``tasks/classification.py``, ``tasks/segmentation.py``)
subclasses ``Task`` with its own values and registers one instance in
``trtkit.tasks``. Callers ask the task instead of comparing its name: how a
model's output is recognised and read (``recognises``, ``class_axis``), which
verification, gates and budget metric apply (``comparison``,
``min_agreement``, ``miou_gates``, ``metric_label``), which labels its data
carries (``usable_labels``, ``labels_of``), what ``trtkit.load`` returns
(``app_class``), what ``predict`` does and ``serve`` answers, its sample model.

The task modules stay light (``import trtkit`` needs only numpy): what lives
higher up (the app classes, the comparisons, the sample builders, predict's
loop) is named as ``"module:attribute"`` and imported when first asked for,
so nothing in this package imports the modules that use it.
"""

import importlib


def resolve(path):
    """The object a ``"package.module:attribute"`` path names, its module imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Task(object):
    """One task. Class attributes (each subclass sets its own):

    ``name``: the manifest's string and ``--task``'s value; ``aliases``: other names ``parse`` accepts;
    ``summary``: a line on what the model answers; ``dense``: decisions per pixel rather than per image;
    ``class_axis``: the output axis of the classes; ``multilabel``: whether independent sigmoids over that axis
    are labels of their own (False: overlapping masks, which trtkit does not read); ``flat``: the output is
    [N, classes] (an ONNX [N, C, 1, 1] one is flattened to it); ``output_text``: its output in an error
    message; ``labels``: what its data's labels are (``classes``, ``masks`` or ``boxes``); ``accuracy_name``: how
    the figure against the labels reads in the build table; ``agreement_columns``: the table's (header, verify
    field[, style]) columns of agreement with FP32 (``pipeline.table``: a fraction with its lower bound, or
    "signed", "percent"); ``budget_labels``: how ``--precision auto``'s budget metrics read;
    ``min_agreement``: the agreement gate per precision where it is the task's own (otherwise the options'
    ``--min-agreement`` defaults); ``miou_gates``: the mIoU against FP32's decisions a precision needs (empty: no
    such gate); ``max_miou_drop``: the mIoU a quantized variant may lose against the masks (None: no such
    gate); ``sample_name``, ``sample_title``: the built-in sample model; ``sample_data``: the data its builds
    verify on by default; ``predict_verb``: predict's progress; ``draws``: what ``predict --out`` writes
    (None: nothing); ``architectures``, ``app``, ``comparison``, ``sample``, ``predict``: ``module:attribute``
    paths of its model-name test, app class, streamed comparison, sample builder and predict loop.
    """

    name = None
    aliases = ()
    summary = ""
    dense = False
    class_axis = -1
    multilabel = True
    flat = True
    output_text = ""
    labels = "classes"
    accuracy_name = "accuracy"
    agreement_columns = ()
    budget_labels = {}
    min_agreement = {}
    miou_gates = {}
    max_miou_drop = None
    sample_name = None
    sample_title = "the sample model"
    sample_data = "sample"
    predict_verb = "predicting"
    draws = None
    architectures = None
    app = None
    comparison = None
    sample = None
    predict = None
    calibration_method = None  # INT8 ranges when --calib-method is not given (None: the calibration default)
    int8_float_depthwise = "off"  # depthwise convs INT8 keeps float with their inputs (precision.depthwise.RULES)

    # ------------------------------------------------------------ recognising a model
    def recognises(self, dims):
        """Whether an output of ``dims`` (batch axis included, None where dynamic) is this task's."""
        raise NotImplementedError

    def knows_model(self, name):
        """Whether ``--model NAME`` is one of this task's architectures (a task without a list knows none)."""
        return bool(self.architectures and name and resolve(self.architectures)(name))

    # ------------------------------------------------------------ what callers run
    def app_class(self):
        """The ``trtkit.app`` class ``trtkit.load`` returns for a build of this task."""
        return resolve(self.app)

    def comparison_for(self, output_kind, info=None, selection=None):
        """The streamed comparison with FP32 that verifies a variant (``output_kind``: the decision rule;
        ``info``: the manifest's model record and ``selection`` the held-out data, for a task that needs them)."""
        return resolve(self.comparison)(output_kind)

    def sample_model(self):
        """(model, checkpoint path) of the built-in sample, trained on first use and cached, ready to export."""
        model, path, _ = resolve(self.sample)()
        return model, path

    def predict_files(self, model, files, args, writer, bar, skipped):
        """``trtkit predict``'s loop over ``files`` with a loaded ``model`` of this task."""
        return resolve(self.predict)(model, files, args, writer, bar, skipped)

    # ------------------------------------------------------------ verification
    def labels_of(self, labels):
        """The labels a loaded image set's ``labels`` give this task (None when they are of no use to it)."""
        return labels

    def usable_labels(self, selection, num_classes, data):
        """Whether verification can score against the labels of ``selection`` (a ``data`` listing) for a model
        of ``num_classes`` classes; says why not where the user would expect it."""
        raise NotImplementedError

    def agreement_name(self, kind):
        """What the agreement counts, for an output of ``kind`` (a ``trtkit.outputs.OutputKind``)."""
        raise NotImplementedError

    def accuracy_short(self, record):
        """Why a verified variant's figure against the labels is too far below FP32's for this task's gate
        (a detector's mAP), or None (no such gate here; segmentation's mIoU gates are ``pipeline.gate``'s)."""
        return None

    def chance_accuracy(self, num_classes):
        """The figure against the labels that guessing among ``num_classes`` classes gets (None when unknown):
        below about it, a drop in accuracy measures nothing (``search.select.budget_metric``)."""
        return 1.0 / num_classes if num_classes and num_classes > 1 else None

    def metric_label(self, metric):
        """How ``--precision auto``'s budget ``metric`` ("accuracy", "agreement") reads in logs and reports."""
        return self.budget_labels.get(metric, metric)

    # ------------------------------------------------------------ serving
    def triton_note(self, io, label, info=None):
        """A line the Triton config's comment adds on the model's outputs (``io``: its ``deploy.triton_io``
        tensors), after checking they hold this task's answer (``label``: the model in the error; ``info``: the
        manifest's model record, for a task whose client needs more of it); "" when there is nothing to add."""
        return ""

    def serve_outputs(self, Tensor, model, k, logits_out):
        """The tensors the ``_images`` model of ``serve`` answers (``Tensor``: PyTriton's class)."""
        raise NotImplementedError

    def serve_answer(self, model, logits, sizes, k):
        """``serve``'s answer for one request's images: {tensor name: array}, as ``serve_outputs`` declares."""
        raise NotImplementedError

    def __eq__(self, other):
        return isinstance(other, Task) and other.name == self.name

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return "Task({})".format(self.name)
