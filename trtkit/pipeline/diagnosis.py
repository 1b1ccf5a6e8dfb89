"""The build's INT8 diagnosis (``trtkit build --report``): ``precision.diagnose`` for each calibration the build's
INT8 variants were made from, written beside them and summed up in their manifest records.

Why in the build and not only in ``trtkit calibrate --report``: the build is where a user sees INT8 fail its
gate, and the build has everything the diagnosis needs already made (the FP32 graph, the calibrated ranges in
the maker's cache, the task's decision rule), so asking for it there costs only the diagnosis itself. It runs
after verification, on tune images of the train split (seed 1), never on the held-out images that judge the
variants. One diagnosis per calibration method: a mixed variant of ``--precision auto`` has its plain INT8's
ranges, so it points to that one's file.
"""

from trtkit import log

WORST_IN_RECORD = 3  # tensors named in the manifest record; the file has every one


def file_name(name, method):
    return "{}.int8-{}.diagnosis.json".format(name, method)


def diagnose_int8_variants(state, artifacts, options):
    """Diagnose the ranges of every INT8 artifact in ``artifacts`` (manifest records) made by ``state.maker``
    (``options``: a ``precision.diagnose.DiagnosisOptions``; nothing happens unless ``enabled``); writes
    ``NAME.int8-METHOD.diagnosis.json`` into the staging folder and sets each record's ``diagnosis``: the file,
    what the whole INT8 graph, its activations alone and its weights alone lose, and the worst tensors."""
    if not options.enabled:
        return []
    from trtkit.fileio import write_json
    from trtkit.precision.diagnose import diagnose_calibration, format_table
    found = {}
    for record in artifacts:
        method = (record.get("calibration") or {}).get("method")
        if record.get("precision") != "int8" or not method:
            continue
        if method not in found:
            log.info("diagnosing the {} calibration of {} per quantized tensor (--report) ...".format(
                method, state.name))
            diagnosis = diagnose_calibration(state.maker, state.maker.calibrate(method).ranges, options,
                                             model_info=state.source.info)
            diagnosis.update(method=method, options=options.to_dict())
            name = file_name(state.name, method)
            write_json(state.folder.stage_path(name), diagnosis)
            print(format_table(diagnosis))
            found[method] = {"file": name, "drop": diagnosis["drop"], "images": diagnosis["images"],
                             "worst": [_short(row) for row in diagnosis["rows"][:WORST_IN_RECORD]]}
        record["diagnosis"] = found[method]
    if not found:
        log.warn("--report diagnoses INT8 variants, and this build made none: add int8 to --precision")
    return sorted(v["file"] for v in found.values())


def _short(row):
    return {"tensor": row["tensor"], "kind": row["kind"], "drop": row["drop"], "sqnr_db": row["sqnr_db"],
            "clipped": row["clipped"]}


def hint(manifest):
    """The line that tells a user whose INT8 variant failed its gate how to see why; None when no INT8 variant
    failed, or every failing one was diagnosed."""
    failing = [a for a in manifest["artifacts"] if a.get("precision") == "int8" and a.get("status") == "failing"]
    if not failing or all(a.get("diagnosis") for a in failing):
        return None
    return ("to see which quantized tensors cost {} its agreement with FP32 (SQNR, clipping and the points each one "
            "loses), build again with --report".format(failing[0]["name"]))
