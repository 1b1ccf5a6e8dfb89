"""Classification: one answer per image from [N, classes] scores (or a binary / multi-label output).

Verified per image against FP32 (``pipeline.verify.Comparison``: top-1 or
decision agreement, accuracy against class labels); ``trtkit.load`` gives a
``Classifier``; ``predict`` prints each image's top classes; ``serve`` answers
the top-k classes (a multi-label model: each label's probability and
decision). Its sample is the ResNet18 on the digits (``models.sample``).
"""

import numpy as np

from trtkit import log
from trtkit.tasks.base import Task

SAMPLE = "resnet18"  # the built-in sample's architecture (models.sample)


class Classification(Task):
    name = "classification"
    aliases = ("classify", "classifier", "cls")
    summary = "one class (or label set) per image from [N, classes] scores"
    output_text = "[N, classes] (classification)"
    accuracy_name = "accuracy"
    agreement_columns = (("top-1 agree", "top1_agreement"),)
    budget_labels = {"accuracy": "top-1 accuracy", "agreement": "top-1 agreement"}
    sample_name = SAMPLE
    sample_title = "the sample model"
    sample_data = "sample"
    predict_verb = "classifying"
    app = "trtkit.app.classifier:Classifier"
    comparison = "trtkit.pipeline.verify:Comparison"
    sample = "trtkit.models.sample:sample_model"
    predict = "trtkit.commands.predict:classify_files"

    def recognises(self, dims):
        """[N, classes], or [N, classes, 1, 1] (a pooled map, flattened on import)."""
        dims = list(dims or [])
        return len(dims) == 2 or (len(dims) == 4 and dims[2:] == [1, 1])

    def usable_labels(self, selection, num_classes, data):
        names = selection.class_names
        if selection.labels is None:
            return False
        if names is not None and num_classes is not None and len(names) != num_classes:
            log.info("data has {} classes, the model {}: accuracy is not reported, agreement is".format(
                len(names), num_classes))
            return False
        return True

    def agreement_name(self, kind):
        return "top-1" if kind.single_label else "decision"

    def serve_outputs(self, Tensor, model, k, logits_out):
        """Top-k of single-label and binary models, per-label decisions of multi-label ones (their positives
        vary in number: no fixed k)."""
        if model.kind.multilabel:
            labels = model.output_columns or -1
            return [logits_out, Tensor(name="probabilities", dtype=np.float32, shape=(labels,)),
                    Tensor(name="positive", dtype=np.bool_, shape=(labels,))]
        return [logits_out, Tensor(name="top_classes", dtype=np.int64, shape=(k,)),
                Tensor(name="top_probabilities", dtype=np.float32, shape=(k,)),
                Tensor(name="top_names", dtype=bytes, shape=(k,))]

    def serve_answer(self, model, logits, sizes, k):
        """A classifier's answer for one request's images (the sizes do not matter)."""
        if model.kind.multilabel:
            return {"logits": logits, "probabilities": model.kind.probabilities(logits),
                    "positive": model.kind.decide(logits)}
        tops = model.top(logits, k)
        return {"logits": logits,
                "top_classes": np.asarray([[c for c, _, _ in top] for top in tops], dtype=np.int64),
                "top_probabilities": np.asarray([[p for _, _, p in top] for top in tops], dtype=np.float32),
                "top_names": np.asarray([[(str(c) if n is None else n).encode("utf-8") for c, n, _ in top]
                                         for top in tops], dtype=object)}


CLASSIFICATION = Classification()
