"""One real model measured: trtkit's FP32 / FP16 / INT8 (default) / auto beside OpenVINO NNCF's own INT8.

Run by ``benchmarks/real_models.py --speed`` in a child process per model
(``python -m benchmarks.real_models.speed NAME SETTINGS_JSON RESULT_JSON``), so
a model's memory is given back when it ends and a crash (a segfault in a
converter, the OOM killer) fails that model alone.

Everything goes through trtkit's public surface: ``trtkit.build`` makes the
variants (``fp32,fp16,int8`` on ONNX Runtime, and ``--precision auto --backend
auto`` for the chosen one), the manifest JSON says which file is which, what the
output holds and the input contract; the backend registry opens each file with
the same thread count. OpenVINO reads trtkit's ONNX variants directly, so the
same FP32/FP16/INT8 files are timed on both runtimes. NNCF quantizes the same
FP32 graph (``nncf.quantize``, default preset) on the same calibration images
as trtkit's INT8 (the train split, the count the manifest records), decoded by
the same input contract. Every row is scored by trtkit's own ``Comparison``
(the model's decision rule) against ONNX Runtime FP32 on the same held-out
images, streamed a batch at a time; img/s come from one interleaved run
(``benchmarks.common.time_rounds``).
"""

import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import nncf_int8, openvino_artifact, paired_ratio, time_rounds, wait_quiet  # noqa: E402

# (key, backend, precision, made by): every model's rows, in table order; "auto" is filled from the selection
ROWS = (("onnxruntime fp32", "onnxruntime", "fp32", "trtkit"),
        ("onnxruntime fp16", "onnxruntime", "fp16", "trtkit"),
        ("onnxruntime int8", "onnxruntime", "int8", "trtkit"),
        ("openvino fp32", "openvino", "fp32", "trtkit"),
        ("openvino fp16", "openvino", "fp16", "trtkit"),
        ("openvino int8", "openvino", "int8", "trtkit"),
        ("trtkit auto", None, None, "trtkit"),
        ("openvino nncf int8", "openvino", "int8", "nncf"))
REFERENCE = "onnxruntime fp32"
NNCF = "openvino nncf int8"
AUTO = "trtkit auto"
# OpenVINO's own artifacts, best first: when NNCF's INT8 loses more than the budget the goal is set against the
# fastest of these that keeps it
OPENVINO_OWN = (NNCF, "openvino fp32")
DEFAULT_CALIB_IMAGES = 512  # trtkit's default, used when a manifest does not record the count


class Settings(object):
    """How one model is measured (the parent passes it to the child as JSON)."""

    FIELDS = ("count", "rounds", "seconds", "threads", "batch", "max_drop", "verify_batch", "seed", "wait_quiet")

    def __init__(self, count=200, rounds=8, seconds=1.0, threads=2, batch=8, max_drop=None, verify_batch=32, seed=0,
                 wait_quiet=0.0):
        self.count, self.rounds, self.seconds, self.threads = int(count), int(rounds), float(seconds), int(threads)
        self.batch, self.max_drop, self.verify_batch, self.seed = int(batch), max_drop, int(verify_batch), int(seed)
        self.wait_quiet = float(wait_quiet or 0.0)  # seconds to wait at most for a quiet machine before timing

    def to_dict(self):
        return dict((field, getattr(self, field)) for field in self.FIELDS)

    @classmethod
    def from_dict(cls, values):
        return cls(**dict((k, v) for k, v in values.items() if k in cls.FIELDS))


def open_runner(backend, path, threads):
    """An activated runner of ``path`` on trtkit's ``backend`` with ``threads`` threads."""
    from trtkit.backends import get_backend
    runner = get_backend(backend).runner(path, {"threads": threads})
    runner.activate()
    return runner


class Reiterable(object):
    """The images of a Selection, one (1, C, H, W) array at a time, decoded again on every pass: NNCF's dataset
    (it iterates more than once) without holding the calibration set in memory."""

    def __init__(self, selection, batch):
        self.selection, self.batch = selection, batch

    def __len__(self):
        return len(self.selection)

    def __iter__(self):
        for images, _ in self.selection.batches(self.batch, progress=False):
            for index in range(images.shape[0]):
                yield images[index:index + 1]


def build_variants(name, settings, work):
    """(plain BuildResult: fp32,fp16,int8 on ONNX Runtime; auto BuildResult; data dir) of model ``name``."""
    import trtkit
    from benchmarks.real_models import prepare
    onnx_file, images, contract = prepare(name, settings.count, seed=settings.seed)
    plain = trtkit.build(onnx=onnx_file, data=images, precision="fp32,fp16,int8", backend="onnxruntime",
                         out=os.path.join(work, "plain"), bench_seconds=0, **contract)
    extra = {} if settings.max_drop is None else {"max_drop": settings.max_drop}
    auto = trtkit.build(onnx=onnx_file, data=images, precision="auto", backend="auto",
                        out=os.path.join(work, "auto"), **dict(contract, **extra))
    return plain, auto, images


def artifact_of(result, precision):
    """The manifest record (with ``file``) of ``precision`` in a BuildResult."""
    return [a for a in result.artifacts if a["precision"] == precision][0]


def row_specs(plain, auto):
    """{key: dict(backend, precision, made_by, artifact, file)} for every row but NNCF's."""
    chosen = auto.manifest["selection"]["chosen"]
    chosen_record = [a for a in auto.artifacts if a["name"] == chosen][0]
    specs = {}
    for key, backend, precision, made_by in ROWS:
        if key == NNCF:
            continue
        record = chosen_record if key == AUTO else artifact_of(plain, precision)
        specs[key] = {"backend": backend or record["backend"], "precision": precision or record["precision"],
                      "made_by": made_by, "artifact": record["name"], "file": record["file"]}
    return specs


def score(runners, heldout, kind, batch):
    """{key: trtkit's Comparison result} of every runner against ONNX Runtime FP32, a batch of held-out images at
    a time (only one batch is ever in memory)."""
    from trtkit.backends.base import run_batches
    from trtkit.pipeline.verify import Comparison
    comparisons = dict((key, Comparison(kind)) for key in runners)
    for images, labels in heldout.batches(batch, progress=False):
        reference = run_batches(runners[REFERENCE], images, batch)
        for key, runner in runners.items():
            comparisons[key].update(run_batches(runner, images, batch), reference, labels)
    return dict((key, comparison.result()) for key, comparison in comparisons.items())


def measure(name, settings, work):
    """The record of model ``name``: its rows (one per ``ROWS`` key) and the goal's verdict."""
    import numpy as np
    from trtkit.contract import InputContract
    from trtkit.data import select
    started = time.time()
    plain, auto, images = build_variants(name, settings, work)
    built = time.time()
    model = plain.manifest["model"]
    contract = InputContract.from_dict(model["input"])
    kind = model.get("output_kind") or "logits"
    specs = row_specs(plain, auto)
    calibration = artifact_of(plain, "int8").get("calibration") or {}
    calib = select(images, contract, split="train", limit=calibration.get("images") or DEFAULT_CALIB_IMAGES, seed=0)
    nncf_file, nncf_seconds = nncf_int8(specs[REFERENCE]["file"], Reiterable(calib, settings.verify_batch),
                                        os.path.join(work, "nncf.int8.xml"))
    for key, spec in specs.items():  # what an OpenVINO build of the variant makes, not ONNX Runtime's INT8 file
        if spec["backend"] == "openvino" and key != AUTO:  # auto's OpenVINO choice is that build's own file
            spec["file"] = openvino_artifact(spec["file"], spec["precision"], work)
    specs[NNCF] = {"backend": "openvino", "precision": "int8", "made_by": "nncf", "artifact": "nncf.quantize "
                   "(default preset)", "file": nncf_file}
    runners = {}
    try:
        for key, _, _, _ in ROWS:
            runners[key] = open_runner(specs[key]["backend"], specs[key]["file"], settings.threads)
        heldout = select(images, contract, split="heldout")
        scores = score(runners, heldout, kind, settings.verify_batch)
        sample = next(iter(heldout.batches(settings.batch, progress=False)))[0]
        if sample.shape[0] < settings.batch:
            sample = np.resize(sample, (settings.batch,) + sample.shape[1:])
        waited = wait_quiet(settings.wait_quiet) if settings.wait_quiet > 0 else 0.0
        figures, shares = time_rounds(runners, np.ascontiguousarray(sample), settings.rounds, settings.seconds)
    finally:
        for runner in runners.values():
            runner.deactivate()
    rows = []
    for key, _, _, _ in ROWS:
        values = figures[key]
        row = dict(specs[key], runtime=key, **scores[key])
        row.pop("file")
        row.update(img_per_s=round(float(np.median(values)), 1), img_per_s_per_round=[round(v, 1) for v in values],
                   vs_nncf_int8=paired_ratio(values, figures[NNCF]))
        rows.append(row)
    selection = auto.manifest["selection"]
    record = {"rows": rows, "output_kind": kind, "input": model["input"], "heldout_images": scores[REFERENCE]["images"],
              "calibration_images": len(calib), "int8_default": {k: calibration.get(k) for k in ("method", "rules")},
              "selection": {"chosen": selection["chosen"], "metric": selection["metric"],
                            "max_drop": selection["max_drop"]},
              "others_cpu_share_per_round": shares, "waited_for_quiet_seconds": waited,
              "seconds": {"trtkit_builds": round(built - started, 1), "nncf_quantize": round(nncf_seconds, 1),
                          "total": round(time.time() - started, 1)}}
    record["verdict"] = verdict(rows, figures, selection["metric"], selection["max_drop"])
    return record


def drop_points(row, metric):
    """Top-1 points ``row`` loses against FP32 by the search's metric (accuracy when labelled, else agreement)."""
    if metric == "accuracy" and row.get("accuracy") is not None and row.get("reference_accuracy") is not None:
        return round(100.0 * (row["reference_accuracy"] - row["accuracy"]), 3)
    return round(100.0 * (1.0 - row["top1_agreement"]), 3)


def verdict(rows, figures, metric, budget):
    """The goal, per model: the chosen artifact keeps the budget, agrees with FP32 at least as well as NNCF's INT8
    and is at least as fast (median of per-round ratios); when NNCF's INT8 loses more than the budget, against
    the fastest of OpenVINO's own artifacts that keeps it (``baseline`` says which)."""
    by = dict((row["runtime"], row) for row in rows)
    for row in rows:
        row["drop_points"] = drop_points(row, metric)
    keeps = [key for key in OPENVINO_OWN if by[key]["drop_points"] <= budget + 1e-9]
    baseline = keeps[0] if NNCF in keeps else (max(keeps, key=lambda k: by[k]["img_per_s"]) if keeps else None)
    mine = by[AUTO]
    result = {"metric": metric, "budget_points": budget, "chosen": mine["artifact"],
              "chosen_drop_points": mine["drop_points"], "within_budget": mine["drop_points"] <= budget + 1e-9,
              "nncf_drop_points": by[NNCF]["drop_points"], "nncf_keeps_budget": NNCF in keeps, "baseline": baseline,
              "agreement_chosen": mine["top1_agreement"], "agreement_baseline": None, "agrees_at_least_as_well": None,
              "speed_vs_baseline": None, "speed_vs_baseline_per_round": None, "at_least_as_fast": None}
    if baseline is not None:
        result["agreement_baseline"] = by[baseline]["top1_agreement"]
        result["agrees_at_least_as_well"] = mine["top1_agreement"] >= by[baseline]["top1_agreement"] - 1e-9
        result["speed_vs_baseline"] = paired_ratio(figures[AUTO], figures[baseline])
        result["speed_vs_baseline_per_round"] = [round(v / b, 3) for v, b in zip(figures[AUTO], figures[baseline])]
        result["at_least_as_fast"] = result["speed_vs_baseline"] is not None and result["speed_vs_baseline"] >= 1.0
    result["met"] = bool(result["within_budget"] and result["agrees_at_least_as_well"] and result["at_least_as_fast"])
    return result


def main(argv, settings_class=None, measure_one=None):
    """``NAME SETTINGS_JSON RESULT_JSON``: measure one model, write its record (or {"error": ...}); exit 0/1.
    ``int8_agreement`` runs its own ``Settings`` and ``measure`` through the same child."""
    name, settings_json, result_path = argv
    settings = (settings_class or Settings).from_dict(json.loads(settings_json))
    work = os.path.join(os.path.dirname(os.path.abspath(result_path)), name + ".work")
    try:
        record, code = (measure_one or measure)(name, settings, work), 0
    except Exception as exc:  # the parent prints one line per failed model and goes on with the others
        text = str(exc).strip().splitlines()  # a TrtkitError's message already ends with its hint
        record, code = {"error": "{}: {}".format(type(exc).__name__, text[0] if text else "")}, 1
        from trtkit.errors import TrtkitError
        if not isinstance(exc, TrtkitError):  # a user-level error says enough in one line; anything else: where
            import traceback
            traceback.print_exc()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(result_path, "w") as handle:
        json.dump(record, handle, default=str)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
