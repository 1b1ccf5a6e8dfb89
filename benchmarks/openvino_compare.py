#!/usr/bin/env python3
"""CPU runtimes side by side: ONNX Runtime and OpenVINO on trtkit's variants vs OpenVINO's own NNCF INT8.

Issue 16, acceptance 4: the engine trtkit chooses on this CPU should be at
least as fast as OpenVINO's INT8 of the same model. ResNet18 at 224x224,
batch 8, the same thread count for every runtime (default 2), all of them
timed in one run, interleaved: each round times every runtime once (in a
rotating order) for ``--seconds``, so a slow spell of a shared machine falls
on all of them alike. A figure is the median over rounds of the round's
img/s; the ratio to OpenVINO NNCF INT8 is the median of the per-round ratios
(paired within a round).

Rows: ONNX Runtime FP32; ONNX Runtime INT8 (trtkit's ``cpu`` Q/DQ encoding);
OpenVINO FP32 (computed in FP32) and the same file with OpenVINO's CPU default
(BF16 inference on CPUs with AVX512-BF16/AMX, for context); OpenVINO running
trtkit's INT8 Q/DQ ONNX in both encodings (``cpu``, ``tensorrt``); OpenVINO's
NNCF INT8 (``nncf.quantize`` with trtkit's calibration images as its dataset,
default preset); and with ``--build DIR``, the artifact that build's precision
search chose (``manifest["selection"]["chosen"]``) on its own backend. Every
OpenVINO row runs through trtkit's OpenVINO runner (LATENCY hint, the same
threads); NNCF's model is saved as OpenVINO IR and read by that runner too.

Without ``--build`` the weights are random (speed does not depend on them) and
the INT8 ranges come from a real calibration on the sample digits resized to
224. With ``--build`` every row starts from that build's FP32 ONNX, so the
chosen artifact is compared with the same model. Top-1 agreement with ONNX
Runtime FP32 on held-out images is printed for each row.

Writes benchmarks/results/<device>/openvino_compare.json and .txt.

    python benchmarks/openvino_compare.py [--threads 2] [--rounds 8] [--seconds 1] [--build DIR]
"""

import argparse
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.common import nncf_int8, openvino_artifact, paired_ratio, time_rounds, wait_quiet  # noqa: E402

NNCF_KEY = "openvino_int8_nncf"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="threads for every runtime (default: 2)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224, help="input size without --build (default: 224)")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (default: 8)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per runtime per round (default: 1)")
    parser.add_argument("--calib-images", type=int, default=64)
    parser.add_argument("--method", default="entropy", choices=["entropy", "percentile", "minmax"])
    parser.add_argument("--data", default="sample", help="calibration and agreement images (default: sample)")
    parser.add_argument("--build", metavar="DIR", help="a trtkit build whose manifest has selection.chosen")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="before timing, wait up to S seconds until other processes use < 10%% of the CPU")
    parser.add_argument("--no-save", action="store_true", help="print only")
    return parser.parse_args(argv)


def build_source(build_dir):
    """(FP32 ONNX path, InputContract, chosen artifact record or None, manifest) of a trtkit build."""
    from trtkit.contract import InputContract
    from trtkit.pipeline.manifest import artifact_path, open_build
    build = open_build(build_dir)
    manifest, folder = build.manifest, build.folder
    model = manifest.get("model", {})
    contract = InputContract.from_dict(model.get("input") or {"size": 224})
    fp32 = [a for a in manifest.get("artifacts", []) if a.get("precision") == "fp32" and a.get("onnx")]
    names = [a["onnx"] for a in fp32] + [n for n in os.listdir(folder) if n.endswith(".fp32.onnx")]
    if not names:
        raise SystemExit("{}: no FP32 ONNX in this build".format(build_dir))
    chosen_name = (manifest.get("selection") or {}).get("chosen")
    chosen = None
    if chosen_name:
        chosen = [a for a in manifest["artifacts"] if a.get("name") == chosen_name]
        if not chosen:
            raise SystemExit("{}: selection.chosen '{}' is not an artifact of the build".format(build_dir, chosen_name))
        chosen = dict(chosen[0], full_path=artifact_path(folder, chosen[0]))
    else:
        print("note: {} has no selection.chosen (no --precision auto build): no trtkit-auto row".format(build_dir))
    return os.path.join(folder, names[0]), contract, chosen, manifest


def random_resnet18(work, size):
    import torch
    from trtkit.onnx.export import export_onnx
    from trtkit.models.classifiers import create_model
    torch.manual_seed(0)
    model = create_model("resnet18", num_classes=1000, input_size=size).eval()
    path = os.path.join(work, "resnet18.fp32.onnx")
    export_onnx(model, path)
    return path, model.input_contract


def make_rows(args, fp32, calib, chosen, work):
    """[(key, label, runner factory)] of every runtime to time."""
    from trtkit.backends import get_backend
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    from trtkit.backends.openvino import OpenVINORunner
    from trtkit.precision.calibrate import calibrate, save_qdq
    result = calibrate(fp32, calib, args.method, batch_size=args.batch)
    int8 = {enc: save_qdq(fp32, result.ranges, enc, os.path.join(work, "resnet18.int8-{}.onnx".format(enc)))
            for enc in ("cpu", "tensorrt")}
    nncf_path, nncf_seconds = nncf_int8(fp32, calib.images, os.path.join(work, "resnet18.int8-nncf.xml"))
    t = args.threads
    ort = lambda path: (lambda: OnnxRuntimeRunner(path, providers=["CPUExecutionProvider"], threads=t))  # noqa: E731
    ov = lambda path, **kw: (lambda: OpenVINORunner(path, threads=t, **kw))  # noqa: E731
    rows = [
        ("onnxruntime_fp32", "ONNX Runtime FP32", ort(fp32)),
        ("onnxruntime_int8_cpu", "ONNX Runtime INT8 (trtkit cpu Q/DQ)", ort(int8["cpu"])),
        ("openvino_fp32", "OpenVINO FP32", ov(fp32)),
        ("openvino_fp32_bf16", "OpenVINO FP32 ONNX, BF16 inference (OpenVINO's CPU default)",
         ov(fp32, inference_precision="bf16")),
        ("openvino_int8_cpu", "OpenVINO INT8 (trtkit cpu Q/DQ)", ov(openvino_artifact(int8["cpu"], "int8", work))),
        ("openvino_int8_tensorrt", "OpenVINO INT8 (trtkit tensorrt Q/DQ)", ov(int8["tensorrt"])),
        (NNCF_KEY, "OpenVINO INT8 (NNCF, default preset)", ov(nncf_path)),
    ]
    if chosen is not None:
        backend = get_backend(chosen["backend"])
        label = "trtkit auto: {} ({} on {})".format(chosen["name"], chosen.get("precision"), chosen["backend"])
        rows.append(("trtkit_auto", label, lambda: backend.runner(chosen["full_path"], {"threads": t})))
    return rows, {"calibration_seconds": result.report.get("seconds", {}).get("total"),
                  "nncf_quantize_seconds": round(nncf_seconds, 1)}


def summarize(figures, labels, agreement):
    import numpy as np
    base = figures.get(NNCF_KEY)
    rows = []
    for key, values in figures.items():
        rows.append({"key": key, "label": labels[key], "ips": round(float(np.median(values)), 1),
                     "ips_min": round(float(min(values)), 1), "ips_max": round(float(max(values)), 1),
                     "per_round": [round(v, 1) for v in values],
                     "vs_openvino_nncf_int8": paired_ratio(values, base),
                     "agreement_vs_onnxruntime_fp32": agreement.get(key)})
    return rows


def table(rows, record):
    lines = ["{}: ResNet18 {}x{}, batch {}, {} threads, {} interleaved rounds of {} s per runtime".format(
        record["model"], record["input"][1], record["input"][2], record["batch"], record["threads"],
        record["rounds"], record["seconds_per_round"]),
        "device: {} | OpenVINO {} | NNCF {} | ONNX Runtime {} | {}".format(
            record["device"], record["versions"]["openvino"].split("-")[0], record["versions"]["nncf"],
            record["versions"]["onnxruntime"], record["when"]),
        "other processes' share of the CPU per round: {}".format(", ".join(
            "?" if s is None else "{:.0%}".format(s) for s in record["others_cpu_share_per_round"])),
        "", "| runtime | img/s (median) | min..max over rounds | vs OpenVINO NNCF INT8 | top-1 agree vs ORT FP32 |",
        "|---|---:|---:|---:|---:|"]
    for r in rows:
        agreement = r["agreement_vs_onnxruntime_fp32"]
        agree = "{:.1%}".format(agreement) if agreement is not None else "-"
        ratio = "{:.2f}x".format(r["vs_openvino_nncf_int8"]) if r["vs_openvino_nncf_int8"] is not None else "-"
        lines.append("| {} | {:.1f} | {:.0f}..{:.0f} | {} | {} |".format(
            r["label"], r["ips"], r["ips_min"], r["ips_max"], ratio, agree))
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    import nncf
    import onnxruntime
    import openvino
    from trtkit.bench.device import device_record
    from trtkit.data import load_images
    from trtkit.fileio import write_json, write_bytes
    from trtkit.precision.calibrate import load_calibration_images
    from trtkit.backends.base import run_batches

    work = tempfile.mkdtemp(prefix="trtkit-ov-compare-")
    chosen = manifest = None
    if args.build:
        fp32, contract, chosen, manifest = build_source(args.build)
        model_name = (manifest.get("model") or {}).get("name") or "model"
    else:
        fp32, contract = random_resnet18(work, args.size)
        model_name = "resnet18 (random weights)"
    calib = load_calibration_images(args.data, contract, args.calib_images)
    heldout = load_images(args.data, contract, split="heldout", limit=64).images
    rows, setup = make_rows(args, fp32, calib, chosen, work)
    labels = dict((key, label) for key, label, _ in rows)
    runners = dict((key, make().activate()) for key, _, make in rows)
    reference = run_batches(runners["onnxruntime_fp32"], heldout, args.batch).argmax(1)
    agreement = dict((key, round(float(np.mean(run_batches(r, heldout, args.batch).argmax(1) == reference)), 4))
                     for key, r in runners.items())
    batch = np.ascontiguousarray(np.resize(calib.images, (args.batch,) + calib.images.shape[1:]))
    setup["waited_for_quiet_seconds"] = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
    load_before = [round(x, 2) for x in os.getloadavg()]
    figures, shares = time_rounds(runners, batch, args.rounds, args.seconds)
    load_after = [round(x, 2) for x in os.getloadavg()]
    device = device_record()
    record = {
        "benchmark": "openvino_compare", "model": model_name, "input": list(contract.shape), "batch": args.batch,
        "threads": args.threads, "rounds": args.rounds, "seconds_per_round": args.seconds,
        "calibration": {"method": args.method, "images": int(calib.images.shape[0]), "data": args.data},
        "build": os.path.abspath(args.build) if args.build else None,
        "chosen": chosen and {k: chosen.get(k) for k in ("name", "precision", "backend", "path")},
        "rows": summarize(figures, labels, agreement),
        "ran_on": dict((key, r.describe()) for key, r in runners.items()),
        "setup": setup, "load_average_before": load_before, "load_average_after": load_after,
        "others_cpu_share_per_round": shares,
        "device": device["slug"], "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
        "versions": {"openvino": openvino.__version__, "nncf": nncf.__version__,
                     "onnxruntime": onnxruntime.__version__},
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    for r in runners.values():
        r.deactivate()
    text = table(record["rows"], record)
    print("\n" + text)
    if args.no_save:
        return 0
    folder = os.path.join(args.out, device["slug"])
    if not os.path.isdir(folder):
        os.makedirs(folder)
    write_json(os.path.join(folder, "openvino_compare.json"), record)
    write_bytes(os.path.join(folder, "openvino_compare.txt"), (text + "\n").encode("utf-8"))
    print("written: {}".format(os.path.join(folder, "openvino_compare.{json,txt}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
