"""Per real model: trtkit's FP32 / FP16 / INT8 (default) / auto beside OpenVINO NNCF's own INT8, in one run.

Accuracy and agreement with FP32 come from one comparison for every row (trtkit's ``Comparison`` with the
model's own decision rule, on the same held-out images); img/s from interleaved rounds (every runtime timed
once per round, the order rotating), batch 8, the given threads. NNCF quantizes the same FP32 graph on the
same calibration images, preprocessed by the same input contract. The goal the issue sets, per model: the
chosen artifact is within the accuracy budget, agrees with FP32 at least as well as NNCF's INT8, and is at
least as fast.
"""

import os
import tempfile

import numpy as np

from benchmarks.openvino_compare import nncf_int8, time_rounds


def measure_model(name, count, rounds, seconds, threads, batch, max_drop, work):
    """The rows of one model (a dict per runtime) and its verdict."""
    import trtkit
    from benchmarks.real_models import prepare
    from trtkit.backends import get_backend
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    from trtkit.backends.openvino import OpenVINORunner
    from trtkit.contract import InputContract
    from trtkit.data import select
    from trtkit.pipeline.verify import Comparison, run_batches
    onnx_file, images, contract_kw = prepare(name, count)
    plain = trtkit.build(onnx=onnx_file, data=images, precision="fp32,fp16,int8", backend="onnxruntime",
                         out=os.path.join(work, name, "plain"), bench_seconds=0, verify_images="all", **contract_kw)
    auto = trtkit.build(onnx=onnx_file, data=images, precision="auto", backend="auto", max_drop=max_drop,
                        out=os.path.join(work, name, "auto"), verify_images="all", **contract_kw)
    kind = plain.manifest.output_kind
    contract = InputContract.from_dict(plain.manifest["model"]["input"])
    heldout = select(images, contract, split="heldout").load(progress=False)
    calib = select(images, contract, split="train", limit=count, seed=0).load(progress=False)
    fp32_path = plain.artifact("fp32")["file"]
    chosen = auto.manifest["selection"]["chosen"]
    chosen_record = [a for a in auto.artifacts if a["name"] == chosen][0]
    nncf_path, nncf_seconds = nncf_int8(fp32_path, calib.images, os.path.join(work, name))
    ort = lambda path: (lambda: OnnxRuntimeRunner(path, providers=["CPUExecutionProvider"], threads=threads))  # noqa
    ov = lambda path: (lambda: OpenVINORunner(path, threads=threads))  # noqa: E731
    backend = get_backend(chosen_record["backend"])
    makers = [("onnxruntime fp32", ort(fp32_path)), ("onnxruntime fp16", ort(plain.artifact("fp16")["file"])),
              ("onnxruntime int8 (trtkit default)", ort(plain.artifact("int8")["file"])),
              ("openvino fp32", ov(fp32_path)), ("openvino int8 (trtkit default)", ov(plain.artifact("int8")["file"])),
              ("openvino int8 (NNCF)", ov(nncf_path)),
              ("trtkit auto: {} on {}".format(chosen[len(auto.manifest["model"]["name"]) + 1:],
                                              chosen_record["backend"]),
               lambda: backend.runner(chosen_record["file"], {"threads": threads}))]
    runners = {}
    for label, make in makers:
        runner = make()
        runner.activate()
        runners[label] = runner
    try:
        reference = run_batches(runners["onnxruntime fp32"], heldout.images, 32)
        rows = []
        for label, runner in runners.items():
            comparison = Comparison(kind)
            comparison.update(run_batches(runner, heldout.images, 32), reference, heldout.labels)
            rows.append(dict(comparison.result(), runtime=label))
        sample = np.ascontiguousarray(heldout.images[:batch])
        figures, shares = time_rounds(runners, sample, rounds, seconds)
    finally:
        for runner in runners.values():
            runner.deactivate()
    for row in rows:
        values = figures[row["runtime"]]
        row["img_per_s"] = round(float(np.median(values)), 1)
        row["img_per_s_per_round"] = [round(v, 1) for v in values]
    by = dict((r["runtime"], r) for r in rows)
    nncf = by["openvino int8 (NNCF)"]
    mine = [r for r in rows if r["runtime"].startswith("trtkit auto")][0]
    reference_accuracy = by["onnxruntime fp32"]["accuracy"]
    drop = (100.0 * (reference_accuracy - mine["accuracy"]) if reference_accuracy is not None
            and mine["accuracy"] is not None else 100.0 * (1 - mine["top1_agreement"]))
    verdict = {"chosen": chosen, "within_budget": drop <= max_drop + 1e-9, "drop_points": round(drop, 2),
               "agrees_at_least_as_nncf": mine["top1_agreement"] >= nncf["top1_agreement"] - 1e-9,
               "speed_vs_nncf": round(mine["img_per_s"] / nncf["img_per_s"], 3) if nncf["img_per_s"] else None,
               "nncf_quantize_seconds": round(nncf_seconds, 1), "others_cpu_share_per_round": shares}
    verdict["met"] = bool(verdict["within_budget"] and verdict["agrees_at_least_as_nncf"] and
                          verdict["speed_vs_nncf"] is not None and verdict["speed_vs_nncf"] >= 1.0)
    return rows, verdict


def table(name, rows, verdict):
    lines = ["### {}".format(name), "", "| runtime | accuracy | agreement with FP32 | img/s (median) |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lines.append("| {} | {} | {:.1%} | {:.1f} |".format(
            r["runtime"], "-" if r["accuracy"] is None else "{:.1%}".format(r["accuracy"]), r["top1_agreement"],
            r["img_per_s"]))
    lines.append("")
    lines.append("chosen {}: drop {:.2f} points ({}), agreement {} NNCF's, {:.2f}x NNCF's speed: goal {}".format(
        verdict["chosen"], verdict["drop_points"], "within budget" if verdict["within_budget"] else "OVER budget",
        ">=" if verdict["agrees_at_least_as_nncf"] else "<", verdict["speed_vs_nncf"] or 0.0,
        "met" if verdict["met"] else "NOT met"))
    return "\n".join(lines)


def run(names, count, rounds, seconds, threads, batch, max_drop, out_dir):
    """Measure every model of ``names``; write ``real_models.{json,md}`` into ``out_dir``; returns the record."""
    import json
    import platform
    import time
    import nncf
    import onnxruntime
    import openvino
    import trtkit
    from trtkit.bench.device import device_record
    from trtkit.cpuinfo import this_cpu
    from trtkit.fileio import write_bytes, write_json
    device = device_record()
    work = tempfile.mkdtemp(prefix="trtkit-real-speed-")
    record = {"when": time.strftime("%Y-%m-%d %H:%M"), "device": device["slug"],
              "cpu": (device.get("cpu") or {}).get("model") if isinstance(device.get("cpu"), dict)
              else (device.get("cpu") or platform.processor()), "cpu_isa": this_cpu().to_dict(),
              "versions": {"trtkit": trtkit.__version__, "onnxruntime": onnxruntime.__version__,
                           "openvino": openvino.__version__, "nncf": nncf.__version__},
              "batch": batch, "threads": threads, "rounds": rounds, "seconds_per_round": seconds,
              "max_drop": max_drop, "images": count, "models": {}}
    texts = []
    for name in names:
        try:
            rows, verdict = measure_model(name, count, rounds, seconds, threads, batch, max_drop, work)
        except Exception as exc:  # one model failing must not stop the others
            print("{}: failed: {}".format(name, str(exc).splitlines()[0][:300]), flush=True)
            record["models"][name] = {"error": str(exc)[:500]}
            continue
        record["models"][name] = {"rows": rows, "verdict": verdict}
        text = table(name, rows, verdict)
        texts.append(text)
        print(text + "\n", flush=True)
    header = ("trtkit on real third-party classifiers vs OpenVINO NNCF INT8: batch {}, {} threads, {} interleaved "
              "rounds of {} s; {} images per model; CPU {} ({}); {}").format(
        batch, threads, rounds, seconds, count, record["cpu"], this_cpu().describe(), record["when"])
    folder = os.path.join(out_dir, device["slug"])
    if not os.path.isdir(folder):
        os.makedirs(folder)
    write_json(os.path.join(folder, "real_models.json"), json.loads(json.dumps(record, default=str)))
    write_bytes(os.path.join(folder, "real_models.md"), (header + "\n\n" + "\n\n".join(texts) + "\n").encode("utf-8"))
    print("written: {}".format(os.path.join(folder, "real_models.{json,md}")))
    return record
