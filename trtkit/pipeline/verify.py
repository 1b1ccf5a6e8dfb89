"""Compare a built variant with the FP32 reference on held-out images.

The figures every artifact gets in the manifest: top-1 agreement with the
reference, accuracy against labels (when the data has labels the model's
classes can be matched to), the reference's own accuracy, and the largest
absolute difference of the outputs.

Outputs are compared as the model gives them: logits, or probabilities when
the model ends in a Softmax (``OnnxSummary.output_kind``, noted in the
manifest's model notes). Nothing here applies a softmax: arg-max agreement is
the same either way, and the differences are then in probability units.
"""

import numpy as np

from trtkit.errors import VerificationFailed


def run_batches(runner, images, batch_size=32):
    """Run every image through ``runner`` in batches it accepts; returns the first output for all of them.

    Batches are ``batch_size`` images, kept inside the runner's ``batch_range()``
    (an engine's optimization profile, a model's fixed batch); a last chunk
    smaller than the range's minimum is padded and the padding's rows dropped.
    """
    batch_range = runner.batch_range()
    size, minimum = runner.accepted_batch(batch_size), batch_range[0] if batch_range else 1
    outputs = []
    for start in range(0, images.shape[0], size):
        chunk = images[start:start + size]
        real = chunk.shape[0]
        if real < minimum:
            pad = np.zeros((minimum - real,) + chunk.shape[1:], dtype=chunk.dtype)
            chunk = np.concatenate([chunk, pad])
        outputs.append(np.asarray(runner.infer(chunk), dtype=np.float32)[:real])
    return np.concatenate(outputs)


def compare(logits, reference, labels=None):
    """The verification record of ``logits`` against ``reference`` logits (one ``Comparison`` of one batch):
    images, top-1 agreement, accuracy and the reference's (None without labels that fit the classes),
    max and mean |difference|."""
    comparison = Comparison()
    comparison.update(logits, reference, labels)
    return comparison.result()


class Comparison(object):
    """``compare`` over a stream: fed batch by batch, it keeps counts and sums, never the logits.

    So verifying on every held-out image (50,000 for ImageNet) needs the memory
    of one batch, whatever the split's size; ``result()`` equals ``compare`` on
    the concatenated batches.
    """

    def __init__(self):
        self.images = 0
        self.agree = 0
        self.correct = 0
        self.reference_correct = 0
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
        diff = np.abs(logits - reference)
        self.images += int(logits.shape[0])
        self.agree += int(np.sum(logits.argmax(1) == reference.argmax(1)))
        if labels is None or logits.ndim != 2 or (len(labels) and labels.max() >= logits.shape[1]):
            self.labelled = False
        elif self.labelled:
            self.correct += int(np.sum(logits.argmax(1) == labels))
            self.reference_correct += int(np.sum(reference.argmax(1) == labels))
        if diff.size:
            self.max_diff = max(self.max_diff, float(diff.max()))
            self.sum_diff += float(diff.sum(dtype=np.float64))
            self.elements += int(diff.size)

    def result(self):
        labelled = self.labelled and self.images > 0
        return {
            "images": self.images,
            "top1_agreement": self.agree / float(self.images) if self.images else 0.0,
            "accuracy": self.correct / float(self.images) if labelled else None,
            "reference_accuracy": self.reference_correct / float(self.images) if labelled else None,
            "max_abs_diff": self.max_diff,
            "mean_abs_diff": self.sum_diff / self.elements if self.elements else 0.0,
        }
