"""Compare a built variant with the FP32 reference on held-out images.

The figures every artifact gets in the manifest: top-1 agreement with the
reference, accuracy against labels (when the data has labels the model's
classes can be matched to), the reference's own accuracy, and the largest
absolute difference of the outputs.

Decisions are the model's own (``trtkit.outputs.OutputKind``): the arg-max of
class scores, the sign of a single logit, a threshold per label. So a binary
model's one-column output is never judged by an arg-max (always 0: a trivially
perfect agreement), and a multi-label one agrees when every label does
(``label_agreement`` counts labels one by one). Values are compared as the
model gives them (logits or probabilities); nothing here applies a softmax.
A comparison of nothing (no images) has no agreement, and fails its gate.

Every figure comes with its 95% interval (``intervals``: Wilson's for the
agreement and the accuracies, Newcombe's paired interval for the accuracy
lost against FP32 on the same images) and the counts it came from
(``counts``), so a gate or a budget can ask what the sample shows rather than
what it happened to measure.
"""

import numpy as np

from trtkit.errors import VerificationFailed


def compare(logits, reference, labels=None, kind=None):
    """The verification record of ``logits`` against ``reference`` outputs (one ``Comparison`` of one batch):
    images, agreement of the decisions (``top1_agreement``), accuracy and the reference's (None without
    labels that fit the classes), max and mean |difference|."""
    comparison = Comparison(kind)
    comparison.update(logits, reference, labels)
    return comparison.result()


class Comparison(object):
    """``compare`` over a stream: fed batch by batch, it keeps counts and sums, never the logits.

    So verifying on every held-out image (50,000 for ImageNet) needs the memory
    of one batch, whatever the split's size; ``result()`` equals ``compare`` on
    the concatenated batches.
    """

    def __init__(self, kind=None):
        from trtkit.outputs import LOGITS, OutputKind
        self.kind = OutputKind.parse(kind) if kind is not None else LOGITS
        self.images = 0
        self.agree = 0
        self.label_agree = 0
        self.labels_seen = 0
        self.correct = 0
        self.reference_correct = 0
        self.reference_only = 0  # images FP32 got right and the variant wrong (the paired table's off-diagonal)
        self.variant_only = 0
        self.labelled = True
        self.max_diff = 0.0
        self.sum_diff = 0.0
        self.elements = 0

    def update(self, logits, reference, labels=None):
        logits = np.asarray(logits, dtype=np.float32)
        reference = np.asarray(reference, dtype=np.float32)
        if logits.shape != reference.shape:
            raise VerificationFailed(
                "the variant's output shape {} differs from the FP32 reference's {}".format(
                    logits.shape, reference.shape),
                hint="the artifact was not built from this model (another number of classes or output): rebuild it")
        if logits.ndim != 2:
            raise VerificationFailed("the output has shape {}; classifiers output (N, columns)".format(logits.shape))
        self.kind.check_columns(logits.shape[1], "the output")
        diff = np.abs(logits - reference)
        self.images += int(logits.shape[0])
        got, expected = self.kind.decide(logits), self.kind.decide(reference)
        if self.kind.multilabel:
            self.agree += int(np.sum(np.all(got == expected, axis=1)))
            self.label_agree += int(np.sum(got == expected))
            self.labels_seen += int(got.size)
            self.labelled = False  # folder labels are one class per image: no multi-label accuracy
        else:
            self.agree += int(np.sum(got == expected))
        classes = self.kind.classes(logits.shape[1])
        if labels is None or (len(labels) and labels.max() >= classes):
            self.labelled = False
        elif self.labelled:
            right, reference_right = got == labels, expected == labels
            self.correct += int(np.sum(right))
            self.reference_correct += int(np.sum(reference_right))
            self.reference_only += int(np.sum(reference_right & ~right))
            self.variant_only += int(np.sum(right & ~reference_right))
        if diff.size:
            self.max_diff = max(self.max_diff, float(diff.max()))
            self.sum_diff += float(diff.sum(dtype=np.float64))
            self.elements += int(diff.size)

    def result(self):
        labelled = self.labelled and self.images > 0
        record = {
            "images": self.images,
            "decision": self.kind.name,
            "top1_agreement": self.agree / float(self.images) if self.images else None,
            "accuracy": self.correct / float(self.images) if labelled else None,
            "reference_accuracy": self.reference_correct / float(self.images) if labelled else None,
            "max_abs_diff": self.max_diff,
            "mean_abs_diff": self.sum_diff / self.elements if self.elements else 0.0,
        }
        if self.kind.multilabel:
            record["label_agreement"] = self.label_agree / float(self.labels_seen) if self.labels_seen else None
        record.update(self._intervals(labelled))
        return record

    def _intervals(self, labelled):
        """{"counts", "intervals"}: what the figures were counted from, and their 95% intervals."""
        from trtkit.intervals import CONFIDENCE, paired_difference, rounded, wilson
        if not self.images:
            return {}
        counts = {"agree": self.agree}
        intervals = {"confidence": CONFIDENCE, "top1_agreement": rounded(wilson(self.agree, self.images))}
        intervals["agreement_drop"] = [round(1.0 - intervals["top1_agreement"][1], 6),
                                       round(1.0 - intervals["top1_agreement"][0], 6)]
        if labelled:
            both = self.correct - self.variant_only
            counts.update(correct=self.correct, reference_correct=self.reference_correct, both_correct=both,
                          reference_only=self.reference_only, variant_only=self.variant_only)
            neither = self.images - both - self.reference_only - self.variant_only
            intervals.update(accuracy=rounded(wilson(self.correct, self.images)),
                             reference_accuracy=rounded(wilson(self.reference_correct, self.images)),
                             accuracy_drop=rounded(paired_difference(both, self.reference_only, self.variant_only,
                                                                     neither)))
        intervals["method"] = "wilson" + ("; accuracy_drop: newcombe paired (FP32 minus the variant, same images)"
                                          if labelled else "")
        return {"counts": counts, "intervals": intervals}
