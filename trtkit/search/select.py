"""The choice: the fastest candidate whose held-out figures stay within the budget.

Figures are the final ones (the build's verification on the held-out split,
on the target backend) and speed is measured on that backend; the tune split
only shaped the candidates. INT8 is chosen only where it is faster: when a
quantized candidate within the budget is slower than FP32 or FP16 on this
backend (as happens on CPUs without fast INT8 kernels), the selection says so
and takes the faster float variant.

Three rules keep the choice honest. The budget is judged on what the held-out
sample shows: a candidate is within it when the upper end of its drop's 95% interval
(``trtkit.intervals``: Newcombe's paired interval for an accuracy drop, Wilson's
for agreement, the bootstrap over images for a segmentation map) is, unless the
user asks for the measured drop (``--budget-rule estimate``, written in the
selection). Measured before: a 0.5-point budget "kept" on 160 held-out images
lost 1.37 points on the 800 the user had; a drop within 0.3 points cannot be
shown with 300 images at all, and the search says so with the number of images
that would. FP32 is the reference's own precision and is judged on its
measured figures. A candidate that fails its verification gate
(``status`` "failing": agreement with FP32 under its precision's threshold) is
never chosen, however small its accuracy drop. And accuracy drops mean nothing
on a reference that is itself near chance (a model stretched to another input
size, data from another domain): quantization noise can "raise" such an
accuracy. Then the budget rests on agreement with FP32 instead, with a warning
(``budget_metric``).
"""

from trtkit import log, tasks
from trtkit.errors import InputError
from trtkit.intervals import CONFIDENCE
from trtkit.precision.types import is_quantized


BUDGET_RULES = ("bound", "estimate")


def drop_interval(record, metric):
    """(low, high): the 95% interval of the held-out drop in points (``verify["intervals"]``), or None."""
    intervals = (record.get("verify") or {}).get("intervals") or {}
    pair = intervals.get("accuracy_drop" if metric == "accuracy" else "agreement_drop")
    return None if not pair else (100.0 * pair[0], 100.0 * pair[1])


def images_to_show(record, metric, max_drop):
    """How many held-out images would show ``record``'s drop within ``max_drop`` points at the rates measured
    (None: no number would: its measured drop is at or over the budget)."""
    from trtkit import intervals
    verify = record.get("verify") or {}
    counts, images, budget = verify.get("counts") or {}, verify.get("images") or 0, max_drop / 100.0
    if metric == "accuracy" and "both_correct" in counts:
        neither = images - counts["both_correct"] - counts["reference_only"] - counts["variant_only"]
        return intervals.paired_upper_to_resolve(counts["both_correct"], counts["reference_only"],
                                                 counts["variant_only"], neither, budget)
    if metric != "accuracy" and "agree" in counts:
        return intervals.proportion_upper_to_resolve(images - counts["agree"], images, budget)
    drop, interval = drop_of(record, metric), drop_interval(record, metric)
    if drop is None or interval is None:
        return None
    return intervals.spread_to_resolve(drop / 100.0, interval[1] / 100.0, images, budget)


def drop_of(record, metric):
    """Held-out top-1 points lost against the FP32 reference (None when the artifact was not run)."""
    verify = record.get("verify") or {}
    if metric == "accuracy":
        if verify.get("accuracy") is None or verify.get("reference_accuracy") is None:
            return None
        return 100.0 * (verify["reference_accuracy"] - verify["accuracy"])
    if verify.get("top1_agreement") is None:
        return None
    from trtkit.pipeline.dense import dense_agreement  # a segmentation map: the lower of its two agreements
    return 100.0 * (1.0 - dense_agreement(verify["top1_agreement"], verify.get("miou_vs_reference")))


NEAR_CHANCE = 0.25  # a reference within a quarter of the way from chance to perfect is "near chance"


def budget_metric(labelled, reference_accuracy, num_classes, task=None):
    """(metric, warning or None): what ``--max-drop`` is measured in.

    ``accuracy`` on labelled data whose FP32 reference is clearly better than chance; ``agreement`` with
    FP32 otherwise: without labels, or when the reference accuracy is near chance (below
    chance + NEAR_CHANCE x (1 - chance)), where a drop in accuracy does not measure what was lost.
    """
    if not labelled or reference_accuracy is None:
        return "agreement", None
    chance = tasks.of(task).chance_accuracy(num_classes)
    if chance is not None and reference_accuracy < chance + NEAR_CHANCE * (1.0 - chance):
        return "agreement", ("the FP32 reference's accuracy {:.1%} is near chance ({:.1%} for {} classes): the "
                             "budget rests on agreement with FP32, not on accuracy; check --data and the input "
                             "contract".format(reference_accuracy, chance, num_classes))
    return "accuracy", None


def metric_label(metric, task=None):
    """How ``metric`` reads in logs and reports for a model of ``task`` (a name or a Task; None: classification):
    the task's ``metric_label`` (on a segmentation model "accuracy" is the mIoU against the masks and "agreement"
    the lower of pixel agreement and mIoU against FP32's decisions)."""
    return tasks.of(task).metric_label(metric)


# Candidates within this fraction of the fastest one's img/s are a tie: their interleaved medians differ by
# less than a shared machine's noise, so the one that agrees best with FP32 is chosen among them.
SPEED_TIE = 0.03


def keeps_tune_split(record, max_drop):
    """False for a quantized candidate whose tune-split figures (``record["tune"]``, from the search) miss the
    budget or its gate's agreement; True otherwise. The held-out check alone is one small sample: measured on a
    MobileNetV2 face-mask classifier, plain INT8 passed the 98% gate on 59 of 60 held-out images on OpenVINO
    (58 of 60 on ONNX Runtime, failing) and was chosen, while on the 240 tune images it agreed 91%."""
    tune = record.get("tune") or {}
    if not is_quantized(record["precision"]) or tune.get("drop") is None:
        return True
    checks = [(tune.get("agreement"), record.get("min_agreement")),
              (tune.get("miou_vs_reference"), record.get("min_miou_vs_reference"))]
    return tune["drop"] <= max_drop + 1e-9 and all(got is None or needed is None or got >= needed
                                                   for got, needed in checks)


def _tune_figures(record, label):
    tune = record.get("tune") or {}
    parts = ["{} drop {:.2f} points".format(label, tune["drop"])]
    for key, what in (("agreement", "agreement"), ("miou_vs_reference", "mIoU vs FP32")):
        if tune.get(key) is not None:
            parts.append("{} {:.2%}".format(what, tune[key]))
    return ", ".join(parts)


def _status_detail(record, row):
    detail = record.get("status_detail")
    return detail or ("agreement -" if row["agreement"] is None else "agreement {:.2%}".format(row["agreement"]))


def _row(record, max_drop, metric, rule):
    """A candidate's row of the selection; ``within_budget`` by ``rule`` (``bound``: the drop's 95% upper
    bound, ``estimate``: the measured drop; FP32, the reference's precision: always the measured drop)."""
    drop, interval = drop_of(record, metric), drop_interval(record, metric)
    verify = record.get("verify") or {}
    on_estimate = drop is not None and drop <= max_drop + 1e-9
    upper = None if interval is None else max(interval[1], drop if drop is not None else interval[1])
    judged_on_bound = rule == "bound" and record["precision"] != "fp32" and upper is not None
    within = on_estimate and (not judged_on_bound or upper <= max_drop + 1e-9)
    return {"name": record["name"], "precision": record["precision"], "accuracy": verify.get("accuracy"),
            "agreement": verify.get("top1_agreement"), "drop": None if drop is None else round(drop, 3),
            "drop_upper": None if upper is None else round(upper, 3), "images": verify.get("images"),
            "throughput_ips": record.get("throughput_ips"), "within_budget": within, "backend": record.get("backend"),
            "within_on_estimate": on_estimate}


def _on(row):
    """" on BACKEND" where the row says (a search over two runtimes compares across them), else nothing."""
    return " on {}".format(row["backend"]) if row.get("backend") else ""


def choose(records, max_drop, metric, label=None, rule="bound"):
    """The manifest's ``selection`` for built and verified ``records`` (each with ``throughput_ips``); ``label``
    is how the metric reads (``metric_label``); ``rule``: what the budget is judged on (``BUDGET_RULES``)."""
    if rule not in BUDGET_RULES:
        raise InputError("unknown budget rule '{}'".format(rule), hint="use " + " or ".join(BUDGET_RULES))
    label = label or metric_label(metric)
    rows = []
    for record in records:
        row = _row(record, max_drop, metric, rule)
        rows.append(row)
        row.update(passes_gate=record.get("status") == "ok", keeps_tune_split=keeps_tune_split(record, max_drop),
                   kept_layers=record.get("kept_layers", []))
    timed = [r for r in rows if r["within_budget"] and r["passes_gate"] and r["keeps_tune_split"]
             and r["throughput_ips"]]
    if not timed:
        raise InputError("no variant could be verified and timed here within the budget and its gate, so none "
                         "can be chosen",
                         hint="build with a backend that runs on this machine, or pick --precision explicitly")
    fastest = max(timed, key=lambda r: r["throughput_ips"])
    ties = [r for r in timed if r["throughput_ips"] >= (1.0 - SPEED_TIE) * fastest["throughput_ips"]]
    chosen = max(ties, key=lambda r: (r["agreement"] or 0.0, r["throughput_ips"]))
    notes, by_name = [], dict((r["name"], r) for r in records)
    if chosen is not fastest:
        notes.append("{} ({:.1f} img/s) is as fast as {} ({:.1f} img/s) within {:.0%} and agrees better with FP32 "
                     "({:.2%} vs {:.2%})".format(chosen["name"], chosen["throughput_ips"], fastest["name"],
                                                 fastest["throughput_ips"], SPEED_TIE, chosen["agreement"] or 0.0,
                                                 fastest["agreement"] or 0.0))
    floats = [r for r in rows if not is_quantized(r["precision"]) and r["throughput_ips"]]
    fastest_float = max(floats, key=lambda r: r["throughput_ips"]) if floats else None
    unshown = []
    for row in rows:
        if is_quantized(row["precision"]) and row["within_budget"] and row["passes_gate"] and fastest_float \
                and row["throughput_ips"] and row["throughput_ips"] < fastest_float["throughput_ips"]:
            notes.append("{} keeps accuracy but runs at {:.1f} img/s{}, slower than {} ({:.1f} img/s{})".format(
                row["name"], row["throughput_ips"], _on(row), fastest_float["name"], fastest_float["throughput_ips"],
                _on(fastest_float)))
        elif is_quantized(row["precision"]) and not row["within_on_estimate"] and row["drop"] is not None:
            notes.append("{} loses {:.3f} points of {}, over the budget of {:g}".format(row["name"], row["drop"], label,
                                                                             max_drop))  # 1.005, not "1.00"
        elif row["within_on_estimate"] and not row["within_budget"] and row["passes_gate"]:
            unshown.append(row)
        elif row["within_budget"] and row["passes_gate"] and not row["keeps_tune_split"]:
            notes.append("{} passes on the held-out images but not on the larger tune split (scored with {}), so it "
                         "is not chosen (there: {})".format(
                             row["name"], (by_name[row["name"]].get("tune") or {}).get("scored_on") or "ONNX Runtime",
                             _tune_figures(by_name[row["name"]], label)))
        elif row["within_budget"] and not row["passes_gate"]:
            notes.append("{} is within the budget but fails its verification gate ({}), so it is not "
                         "chosen".format(row["name"], _status_detail(by_name[row["name"]], row)))
    unresolved = _unresolved(rows, by_name, max_drop, metric, label, chosen)
    unshown = [r for r in unshown if not unresolved or r["name"] != unresolved["name"]]
    if unshown:  # the one that mattered for the choice has its own line (unresolved); the others share one
        notes.append("{} keep{} the budget on the measured drop but not on the upper end of the 95% interval (up "
                     "to {:.2f} points at {} images)".format(", ".join(r["name"] for r in unshown),
                                                            "s" if len(unshown) == 1 else "",
                                                            max(r["drop_upper"] for r in unshown),
                                                            max(r["images"] or 0 for r in unshown)))
    if unresolved:
        notes.append(unresolved["note"])
    if rule == "estimate":
        notes.append("the budget was judged on the measured drops, not on the upper ends of their 95% intervals "
                     "(--budget-rule estimate)")
    for note in notes:
        log.info("auto: " + note)
    log.info("auto: chose {} ({:.1f} img/s, {} drop {:.2f} points{}, budget {:g})".format(
        chosen["name"], chosen["throughput_ips"], label, chosen["drop"],
        "" if chosen["drop_upper"] is None or chosen["precision"] == "fp32" else
        ", at most {:.2f} in its 95% interval".format(chosen["drop_upper"]), max_drop))
    selection = {"chosen": chosen["name"], "max_drop": max_drop, "metric": metric, "metric_label": label,
                 "budget_rule": rule, "confidence": CONFIDENCE, "candidates": rows, "notes": notes}
    if unresolved:
        selection["unresolved"] = dict((k, v) for k, v in unresolved.items() if k != "note")
    return selection


def _unresolved(rows, by_name, max_drop, metric, label, chosen):
    """The one line (and its figures) saying that the held-out split is too small to show a candidate within
    the budget: for the fastest passing candidate whose measured drop is within it and whose 95% upper bound
    is not, with the number of images that would show it; None when there is none faster than the chosen."""
    blocked = [r for r in rows if r["within_on_estimate"] and not r["within_budget"] and r["passes_gate"]
               and r["throughput_ips"] and r["throughput_ips"] > chosen["throughput_ips"]]
    if not blocked:
        return None
    row = max(blocked, key=lambda r: r["throughput_ips"])
    needed = images_to_show(by_name[row["name"]], metric, max_drop)
    note = ("{} held-out images cannot show that {} keeps the budget ({} drop {:.2f} points, up to {:.2f} in its "
            "95% interval, budget {:g}): {}; or --budget-rule estimate to judge on the measured drop".format(
                row["images"], row["name"], label, row["drop"], row["drop_upper"], max_drop,
                "about {} images would (--data, --verify-images)".format(needed) if needed else
                "no number of images would at the rates measured"))
    return {"name": row["name"], "images": row["images"], "images_needed": needed, "note": note}
