"""The verification gate: whether a verified variant may be called ``ok``.

Kept apart from the build loop (``run``) because it is the part with the
rules in it, which tests and the precision search read on their own: the
agreement of the variant's decisions with FP32's (per image, or per pixel for
a segmentation map, at least the precision's threshold: the user's
``--min-agreement`` or the task's default); for a task with those gates (a
segmentation map: ``tasks.segmentation``) also its mIoU against FP32's
decision maps (``Task.miou_gates``: pixel agreement alone misses a class on
few pixels) and, with masks, the mIoU a quantized variant may lose against the
masks (``Task.max_miou_drop``). A verification of nothing fails.

A gate is judged on the measured figures; one passed on them but not on
their 95% lower bound (``trtkit.intervals``) is ``ok`` with ``significant``
False and says "passes, not significant at N images": with 160 images that all
agree, a 98% gate is passed, but the 95% interval of the agreement reaches down to
97.66% (its two-sided interval: the lower end is a one-sided 97.5% bound).
FP32 is not marked so: it is the reference's own precision, its gate (99.9%)
checks that the runtime runs the graph as PyTorch does rather than what a
precision costs, and it would be "not significant" below 3,840 images that all
agree; its figures still carry their intervals.
"""

from trtkit import log, tasks


def threshold(options, task, precision):
    """The agreement a variant of ``precision`` needs: the user's, else the task's own default
    (``Task.min_agreement``: a segmentation map's pixel agreement), else the options' default."""
    own = tasks.of(task).min_agreement
    if precision not in options.min_agreement_given and precision in own:
        return own[precision]
    return options.min_agreement[precision]


def miou_threshold(options, task, precision):
    """The mIoU against FP32's decision maps a variant of ``precision`` needs: the user's ``--min-agreement``
    for it when given (it sets both figures), else the task's (``Task.miou_gates``); None for a task without
    that gate (a classifier) or a precision without it (FP32, the reference)."""
    gates = tasks.of(task).miou_gates
    if precision not in gates:
        return None
    if precision in options.min_agreement_given:
        return options.min_agreement[precision]
    return gates[precision]


def judge(record, needed, miou_needed=None):
    """Set ``status`` (ok/failing), ``status_detail``, ``min_agreement`` and, for a task with mIoU gates (a
    segmentation map), ``min_miou_vs_reference`` (``miou_needed``, default the task's ``miou_gates``) of a
    verified artifact record, and warn when it fails."""
    agreement = record["verify"]["top1_agreement"]
    record["min_agreement"] = needed
    gates = tasks.of(record["verify"].get("task")).miou_gates
    if gates:
        record["min_miou_vs_reference"] = miou_needed if miou_needed is not None else gates.get(record["precision"])
    short_of_miou = miou_vs_reference_short(record)
    if fine_tuned_judged_by_accuracy(record):
        _judge_by_accuracy(record, needed)
    elif agreement is None:
        record["status"] = "failing"
        record["status_detail"] = "verified on no image: nothing was compared"
    elif agreement < needed:
        record["status"] = "failing"
        record["status_detail"] = "{} agreement {:.2%} is below {:g}%".format(
            agreement_name(record["verify"]), agreement, round(100.0 * needed, 4))  # 99.5%, not "100%"
    elif short_of_miou:
        record["status"] = "failing"
        record["status_detail"] = short_of_miou
    elif tasks.of(record["verify"].get("task")).accuracy_short(record):
        record["status"] = "failing"
        record["status_detail"] = tasks.of(record["verify"].get("task")).accuracy_short(record)
    elif miou_drop(record) is not None:
        record["status"] = "failing"
        record["status_detail"] = "mIoU {:.2%} is more than 1 point below FP32's {:.2%}".format(
            record["verify"]["miou"], record["verify"]["reference_miou"])
    else:
        record["status"] = "ok"
        weak = None if record["precision"] == "fp32" else not_significant(record, needed)
        record["significant"] = None if record["precision"] == "fp32" else weak is None
        if weak:
            record["status_detail"] = weak
    if record["status"] == "failing":
        log.warn("{}: {}".format(record["name"], record["status_detail"]) +
                 advice(record["precision"], record.get("calibration"), record.get("int8_method")))


def fine_tuned_judged_by_accuracy(record):
    """True for a quantization-aware fine-tuned variant (``int8_method`` 'qat') verified with labels: a
    fine-tune moves decisions on purpose (a blind test's digit CNN, 52.6% accurate on the sample's digits,
    fine-tuned to 88.3% and agreed 57.7% with FP32: "failing", with advice about range methods it never used),
    so it is judged by what it was trained for, its accuracy against FP32's on the same images. Without labels
    the agreement gate stands."""
    verify = record.get("verify") or {}
    return record.get("int8_method") == "qat" and verify.get("accuracy") is not None and \
        verify.get("reference_accuracy") is not None


def _judge_by_accuracy(record, needed):
    """A fine-tuned variant's gate: its accuracy may be below FP32's by at most what the agreement gate lets
    change (1 - ``needed``: 2 points for INT8); ``significant`` by the paired interval of the drop."""
    verify = record["verify"]
    allowed = 1.0 - needed
    drop = verify["reference_accuracy"] - verify["accuracy"]
    figures = "accuracy {:.2%} against FP32's {:.2%} (agreement {:.2%}; a fine-tuned variant is judged by " \
              "accuracy, at most {:g} points below FP32's)".format(
                  verify["accuracy"], verify["reference_accuracy"], verify["top1_agreement"] or 0.0,
                  round(100.0 * allowed, 4))
    record["max_accuracy_drop"] = allowed
    if drop > allowed + 1e-12:
        record["status"] = "failing"
        record["status_detail"] = figures
        return
    record["status"] = "ok"
    high = ((verify.get("intervals") or {}).get("accuracy_drop") or [None, None])[1]
    record["significant"] = high is None or high <= allowed
    record["status_detail"] = figures if record["significant"] else \
        "passes, not significant at {} images ({}; the drop's 95% interval reaches {:.2f} points)".format(
            verify["images"], figures, 100.0 * high)


def not_significant(record, needed):
    """"passes, not significant at N images (...)" for a passing record whose figures' 95% lower bounds are
    below its gates; None when they are not (or the record has no intervals)."""
    verify = record["verify"]
    intervals = verify.get("intervals") or {}
    short = []
    low = (intervals.get("top1_agreement") or [None])[0]
    if low is not None and low < needed:
        short.append("{} agreement {:.2%}, 95% interval from {:.2%}, gate {:g}%".format(
            agreement_name(verify), verify["top1_agreement"], low, round(100.0 * needed, 4)))
    miou_needed = record.get("min_miou_vs_reference")
    low = (intervals.get("miou_vs_reference") or [None])[0]
    if miou_needed is not None and low is not None and low < miou_needed:
        short.append("mIoU vs FP32 {:.2%}, 95% interval from {:.2%}, gate {:g}%".format(
            verify["miou_vs_reference"], low, round(100.0 * miou_needed, 4)))
    if not short:
        return None
    return "passes, not significant at {} images ({})".format(verify["images"], "; ".join(short))


def miou_drop(record):
    """The mIoU a quantized segmentation variant loses against FP32 on the masks, when over the task's limit
    (``Task.max_miou_drop``)."""
    from trtkit.precision.types import Precision
    verify = record["verify"]
    limit = tasks.of(verify.get("task")).max_miou_drop
    if limit is None or verify.get("miou") is None or verify.get("reference_miou") is None \
            or not Precision.parse(record["precision"]).quantized:
        return None
    drop = verify["reference_miou"] - verify["miou"]
    return drop if drop > limit + 1e-12 else None


def miou_vs_reference_short(record):
    """Why a segmentation variant's mIoU against FP32's decisions is below its gate
    (``record["min_miou_vs_reference"]``), or None."""
    verify, needed = record["verify"], record.get("min_miou_vs_reference")
    if not tasks.of(verify.get("task")).miou_gates or needed is None or verify.get("miou_vs_reference") is None \
            or verify["miou_vs_reference"] >= needed:
        return None
    return "mIoU against FP32's decisions {:.2%} is below {:g}% (pixel agreement {:.2%}: a class on few pixels " \
           "changed)".format(verify["miou_vs_reference"], 100.0 * needed, verify["pixel_agreement"])


def agreement_name(verification):
    """What the agreement counts (``Task.agreement_name``): pixels of a segmentation map, the top-1 class, or the
    model's decisions."""
    from trtkit.outputs import OutputKind
    kind = OutputKind.parse(verification.get("decision") or "logits")
    return tasks.of(verification.get("task")).agreement_name(kind)


def advice(precision, calibration=None, int8_method=None):
    """What to try when a variant of ``precision`` fails its gate; ``calibration`` (an artifact's record) names
    the range method it used, which the advice then leaves out (a blind test's percentile INT8 was told to try
    percentile)."""
    from trtkit.precision.types import Precision
    method = "qat" if int8_method == "qat" else (calibration or {}).get("method")
    return Precision.parse(precision).advice_for(method)
