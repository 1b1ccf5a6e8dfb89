"""One corpus model's INT8 accuracy, no timing: trtkit FP32 against the package, trtkit's plain INT8 and NNCF's
INT8 against FP32 on the same calibration images, the gate, and what ``--precision auto`` kept float.

Run by ``benchmarks/real_models.py --int8-agreement`` in a child process per model
(``python -m benchmarks.real_models.int8_agreement NAME SETTINGS_JSON RESULT_JSON``).
Why no timing: these are the accuracy figures issue 35's INT8 work is judged
by, made on a shared machine; speed is ``--speed``'s job.

- FP32 vs package: trtkit's FP32 artifact, fed by trtkit's input contract, against
  the package's own preprocessing and decision rule on the source ONNX
  (``corpus_data.package_decisions``), per image (classifier) or per pixel.
- INT8 rows: trtkit's ``Comparison`` of the task (the model's decision rule)
  against ONNX Runtime FP32 on the held-out images; NNCF quantizes the same
  FP32 graph (``nncf.quantize``, default preset: its fast bias correction) on
  the calibration images trtkit's INT8 used (the train split, the count its
  manifest records), decoded by the same input contract.
- the gate and the layers kept float come from trtkit's manifests.
"""

import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import nncf_int8  # noqa: E402
from benchmarks.real_models.speed import DEFAULT_CALIB_IMAGES, Reiterable, artifact_of, open_runner  # noqa: E402


class Settings(object):
    """How one model is measured (the parent passes it to the child as JSON)."""

    FIELDS = ("count", "threads", "batch", "seed", "auto", "max_drop", "int8_options")

    def __init__(self, count=200, threads=1, batch=8, seed=0, auto=False, max_drop=None, int8_options=None):
        self.count, self.threads, self.batch, self.seed = int(count), int(threads), int(batch), int(seed)
        self.auto, self.max_drop = bool(auto), max_drop
        # trtkit.build keywords of the INT8 method measured (e.g. {"int8_equalize": "cle"}); also given to auto
        self.int8_options = dict(int8_options or {})

    def to_dict(self):
        return dict((field, getattr(self, field)) for field in self.FIELDS)

    @classmethod
    def from_dict(cls, values):
        return cls(**dict((k, v) for k, v in values.items() if k in cls.FIELDS))


def _decisions(comparison, outputs):
    """The decision of each image (classifier) or each pixel (segmenter) of ``outputs``, by ``comparison``'s
    output kind."""
    kind = comparison.kind
    return kind.decide_maps(outputs) if hasattr(comparison, "decide") else kind.decide(outputs)


def _figures(result):
    """The agreement figures of one Comparison result (a classifier's or a segmenter's)."""
    keep = ("top1_agreement", "pixel_agreement", "miou_vs_reference", "images", "max_abs_diff")
    result = dict(result)
    return dict((k, result[k]) for k in keep if k in result)


def _float_layers(artifact):
    """What an artifact keeps float: its weighted layers kept float (``float_layers``: count of all, names) and
    the depthwise rule's record (``float_depthwise``), as its manifest says."""
    found = {}
    for key in ("float_layers", "float_depthwise"):
        value = artifact.get(key)
        if value:
            found[key] = dict(value.items()) if hasattr(value, "items") else value
    return found


def _verify(artifact):
    """The artifact's verification record as a plain dict (the figures, not the per-class lists)."""
    record = artifact.get("verify") or {}
    return dict((k, v) for k, v in record.items() if k not in ("counts",))


def measure(name, settings, work):
    """The record of corpus model ``name``."""
    import numpy as np
    import trtkit
    from trtkit import tasks
    from trtkit.contract import InputContract
    from trtkit.data import select
    from trtkit.backends.base import run_batches
    from benchmarks.real_models import prepare
    from benchmarks.real_models.corpus_data import package_decisions
    started = time.time()
    onnx_file, images, contract = prepare(name, settings.count, seed=settings.seed)
    plain = trtkit.build(onnx=onnx_file, data=images, precision="fp32,int8", backend="onnxruntime",
                         out=os.path.join(work, "plain"), bench_seconds=0, verify_images="all",
                         **dict(contract, **settings.int8_options))
    built = time.time()
    model = plain.manifest["model"]
    kind = model.get("output_kind") or "logits"
    task = tasks.of(model.get("task") or "classification")
    input_contract = InputContract.from_dict(model["input"])
    fp32, int8 = artifact_of(plain, "fp32"), artifact_of(plain, "int8")
    calibration = int8.get("calibration") or {}
    calib = select(images, input_contract, split="train", limit=calibration.get("images") or DEFAULT_CALIB_IMAGES,
                   seed=0)
    nncf_file, nncf_seconds = nncf_int8(fp32["file"], Reiterable(calib, settings.batch),
                                        os.path.join(work, "nncf.int8.xml"))
    # trtkit's INT8 was scored by its own build on the same held-out images with the same Comparison (its
    # manifest's verify record): not run a second time (a 512x512 BiSeNet takes seconds per image here)
    files = {"fp32": ("onnxruntime", fp32["file"]), "nncf int8": ("openvino", nncf_file)}
    runners, comparisons = {}, {}
    heldout = select(images, input_contract, split="heldout")
    mine = []
    try:
        for key, (backend, path) in files.items():
            runners[key] = open_runner(backend, path, settings.threads)
            comparisons[key] = task.comparison_for(kind)
        for batch, labels in heldout.batches(settings.batch, progress=False):
            reference = run_batches(runners["fp32"], batch, settings.batch)
            mine.append(_decisions(comparisons["fp32"], reference))
            for key, runner in runners.items():
                comparisons[key].update(run_batches(runner, batch, settings.batch), reference, labels)
    finally:
        for runner in runners.values():
            runner.deactivate()
    mine = np.concatenate(mine)
    theirs = package_decisions(name, onnx_file, heldout.names, threads=settings.threads)
    same = (mine == theirs).reshape(len(mine), -1)
    rows = {"trtkit int8": _figures(dict((int8.get("verify") or {}).items())),
            "nncf int8": _figures(comparisons["nncf int8"].result())}
    record = {"task": task.name, "output_kind": kind, "heldout_images": len(mine),
              "calibration_images": len(calib),
              "fp32_vs_package": {"agreement": float(same.mean()), "images_identical": float(same.all(axis=1).mean()),
                                  "unit": "pixel" if same.shape[1] > 1 else "image"},
              "rows": rows, "int8": {"status": int8.get("status"), "equalize": int8.get("equalize"),
                                     "rounding": int8.get("rounding"), "status_detail": int8.get("status_detail"),
                                     "min_agreement": int8.get("min_agreement"), "verify": _verify(int8),
                                     "method": calibration.get("method"), "rules": calibration.get("rules"),
                                     "kept_float": _float_layers(int8)},
              "seconds": {"trtkit_build_fp32_int8": round(built - started, 1), "nncf_quantize": round(nncf_seconds, 1)}}
    if settings.auto:
        record["auto"] = _auto(onnx_file, images, contract, settings, work)
    record["seconds"]["total"] = round(time.time() - started, 1)
    return record


def _auto(onnx_file, images, contract, settings, work):
    """What ``--precision auto`` on ONNX Runtime chose, and what it kept float."""
    import trtkit
    extra = dict(settings.int8_options, **({} if settings.max_drop is None else {"max_drop": settings.max_drop}))
    started = time.time()
    auto = trtkit.build(onnx=onnx_file, data=images, precision="auto", backend="onnxruntime",
                        out=os.path.join(work, "auto"), bench_seconds=0, **dict(contract, **extra))
    selection = auto.manifest["selection"]
    chosen = [a for a in auto.artifacts if a["name"] == selection["chosen"]][0]
    return {"chosen": selection["chosen"], "precision": chosen.get("precision"), "status": chosen.get("status"),
            "kept_float": _float_layers(chosen), "verify": _verify(chosen), "seconds": round(time.time() - started, 1)}


# ------------------------------------------------------------------ the parent: one child per model, one table

PACKAGES = ("trtkit", "onnxruntime", "openvino", "nncf", "numpy", "onnx", "torch")


def run(names, settings, out_dir, file_name, command):
    """Measure every model of ``names`` in its own child process; write ``out_dir/<device>/FILE_NAME.{json,md}``;
    returns the record."""
    import tempfile
    from benchmarks.common import cpu_description, versions
    from trtkit.bench.device import device_record
    from trtkit.fileio import write_bytes, write_json
    record = {"benchmark": "int8_corpus_agreement", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "command": command, "device": device_record(import_torch=False)["slug"], "cpu": cpu_description(),
              "versions": versions(*PACKAGES), "settings": settings.to_dict(), "models": {}}
    from benchmarks.real_models.speed_run import run_child
    scratch = tempfile.mkdtemp(prefix="trtkit-int8-corpus-")
    for index, name in enumerate(names):
        print("== {} ({}/{}) ==".format(name, index + 1, len(names)), flush=True)
        record["models"][name] = run_child(name, settings, scratch, module="benchmarks.real_models.int8_agreement")
        print("\n".join(table([name], record)[2:]), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    folder = os.path.normpath(os.path.join(out_dir, record["device"]))
    if not os.path.isdir(folder):
        os.makedirs(folder)
    write_json(os.path.join(folder, file_name + ".json"), record)
    write_bytes(os.path.join(folder, file_name + ".md"), markdown(record).encode("utf-8"))
    print("written: {}".format(os.path.join(folder, file_name + ".{json,md}")))
    return record


def _agreement(row, task):
    if row is None:
        return "-"
    if task == "segmentation":
        return "{:.2%} px, mIoU {:.3f}".format(row.get("pixel_agreement", row.get("top1_agreement")),
                                              row.get("miou_vs_reference") or float("nan"))
    return "{:.2%}".format(row["top1_agreement"])


def _kept(found):
    layers = (found or {}).get("float_layers") or {}
    if not layers:
        return "-"
    names = layers.get("names") or []
    text = "{}/{} weighted".format(layers.get("float", 0), layers.get("weighted", "?"))
    return text + (" ({}{})".format(", ".join(names[:4]), ", ..." if len(names) > 4 else "") if names else "")


def table(names, record):
    lines = ["| model | task | held-out / calib. images | FP32 vs package | trtkit INT8 vs FP32 | NNCF INT8 vs FP32 | "
             "gate (trtkit INT8) | plain INT8 kept float | auto chose (kept float) |",
             "|---|---|---:|---:|---:|---:|---|---|---|"]
    for name in names:
        m = record["models"][name]
        if "error" in m:
            lines.append("| {} | failed: {} | | | | | | | |".format(name, m["error"].replace("|", "/")[:160]))
            continue
        package = m["fp32_vs_package"]
        auto = m.get("auto")
        lines.append("| {} | {} ({}) | {} / {} | {:.2%} per {} ({:.0%} of images identical) | {} | {} | {}: {} | {} | "
                     "{} |".format(
                         name, m["task"], m["output_kind"], m["heldout_images"], m["calibration_images"],
                         package["agreement"], package["unit"], package["images_identical"],
                         _agreement(m["rows"].get("trtkit int8"), m["task"]),
                         _agreement(m["rows"].get("nncf int8"), m["task"]),
                         m["int8"]["status"], (m["int8"].get("status_detail") or "").replace("|", "/"),
                         _kept(m["int8"]["kept_float"]),
                         "not run" if not auto else "{} ({})".format(auto["chosen"], _kept(auto["kept_float"]))))
    return lines


def markdown(record):
    from benchmarks.common import describe_cpu
    settings = record["settings"]
    lines = ["# INT8 on the MobileNet-family corpus: trtkit's plain INT8 and NNCF's beside FP32 (no timing)", "",
             "- command: `{}`; date: {}".format(record["command"], record["when"]),
             "- CPU: {}".format(describe_cpu(record["cpu"])),
             "- versions: " + ", ".join("{} {}".format(k, (v or "-").split("-")[0])
                                        for k, v in record["versions"].items()),
             "- {count} held-out + {count} calibration images per model (seed {seed}), {threads} thread(s) per "
             "runtime; agreement by the model's decision rule against ONNX Runtime FP32 (trtkit's own FP32 "
             "artifact); NNCF: `nncf.quantize` default preset (fast bias correction) on the calibration images "
             "trtkit's INT8 used, run on OpenVINO".format(**settings),
             "- FP32 vs package: trtkit's FP32 through its input contract against the package's own preprocessing "
             "and decision rule on the source ONNX (benchmarks/real_models/corpus_data.py)", ""]
    return "\n".join(lines + table(list(record["models"]), record)) + "\n"


def main(argv):
    """``NAME SETTINGS_JSON RESULT_JSON``: measure one model in this process (``speed.main``'s child)."""
    from benchmarks.real_models.speed import main as child
    return child(argv, Settings, measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
