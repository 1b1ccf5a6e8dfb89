"""The choice: the fastest candidate whose held-out figures stay within the budget.

Figures are the final ones (the build's verification on the held-out split,
on the target backend) and speed is measured on that backend; the tune split
only shaped the candidates. INT8 is chosen only where it is faster: when a
quantized candidate within the budget is slower than FP32 or FP16 on this
backend (as happens on CPUs without fast INT8 kernels), the selection says so
and takes the faster float variant.
"""

from trtkit import log
from trtkit.errors import InputError


def drop_of(record, metric):
    """Held-out top-1 points lost against the FP32 reference (None when the artifact was not run)."""
    verify = record.get("verify") or {}
    if metric == "accuracy":
        if verify.get("accuracy") is None or verify.get("reference_accuracy") is None:
            return None
        return 100.0 * (verify["reference_accuracy"] - verify["accuracy"])
    if verify.get("top1_agreement") is None:
        return None
    return 100.0 * (1.0 - verify["top1_agreement"])


def choose(records, max_drop, metric):
    """The manifest's ``selection`` for built and verified ``records`` (each with ``throughput_ips``)."""
    rows = []
    for record in records:
        drop = drop_of(record, metric)
        verify = record.get("verify") or {}
        rows.append({"name": record["name"], "precision": record["precision"], "accuracy": verify.get("accuracy"),
                     "agreement": verify.get("top1_agreement"), "drop": None if drop is None else round(drop, 3),
                     "throughput_ips": record.get("throughput_ips"),
                     "within_budget": drop is not None and drop <= max_drop + 1e-9,
                     "kept_layers": record.get("kept_layers", [])})
    timed = [r for r in rows if r["within_budget"] and r["throughput_ips"]]
    if not timed:
        raise InputError("no variant could be both verified and timed here, so none can be chosen",
                         hint="build with a backend that runs on this machine, or pick --precision explicitly")
    chosen = max(timed, key=lambda r: r["throughput_ips"])
    notes = []
    floats = [r for r in rows if r["precision"] in ("fp32", "fp16") and r["throughput_ips"]]
    fastest_float = max(floats, key=lambda r: r["throughput_ips"]) if floats else None
    for row in rows:
        if row["precision"] in ("int8", "mixed") and row["within_budget"] and fastest_float and row["throughput_ips"] \
                and row["throughput_ips"] < fastest_float["throughput_ips"]:
            notes.append("{} keeps accuracy but runs at {:.1f} img/s, slower than {} ({:.1f} img/s) on this "
                         "backend".format(row["name"], row["throughput_ips"], fastest_float["name"],
                                          fastest_float["throughput_ips"]))
        elif row["precision"] in ("int8", "mixed") and not row["within_budget"] and row["drop"] is not None:
            notes.append("{} loses {:.2f} points, over the budget of {:g}".format(row["name"], row["drop"], max_drop))
    for note in notes:
        log.info("auto: " + note)
    log.info("auto: chose {} ({:.1f} img/s, {} drop {:.2f} points, budget {:g})".format(
        chosen["name"], chosen["throughput_ips"], metric, chosen["drop"], max_drop))
    return {"chosen": chosen["name"], "max_drop": max_drop, "metric": metric, "candidates": rows, "notes": notes}
