"""``real_models.py --speed``: every model in its own child process, one record, ``real_models.{json,md}``.

The record says where and with what the figures were made: the CPU's model
and the flags that decide INT8/BF16 speed, the runtimes' versions, the date,
the command, and per model the share of the CPU other processes took in each
timing round (a shared machine's neighbours show up there). A model that
fails (a converter missing, a build refused, a crash) gets one line and an
``error`` entry; the others go on.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.common import cpu_description, describe_cpu, versions
from benchmarks.real_models.speed import NNCF, ROWS, Settings

PACKAGES = ("trtkit", "onnxruntime", "openvino", "nncf", "numpy", "onnx", "torch")


def run_child(name, settings, scratch, module="benchmarks.real_models.speed"):
    """Measure ``name`` in a child process running ``module`` (its ``main``: ``NAME SETTINGS_JSON RESULT_JSON``);
    returns its record ({"error": ...} when it failed)."""
    result = os.path.join(scratch, name + ".json")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    code = subprocess.call([sys.executable, "-m", module, name,
                            json.dumps(settings.to_dict()), result], cwd=root, env=env)
    record = None
    if os.path.isfile(result):
        with open(result) as handle:
            record = json.load(handle)
        os.remove(result)
    if record is None:
        reason = "killed by signal {}".format(-code) if code < 0 else "exit {}".format(code)
        record = {"error": "the child process ended without a result ({}{})".format(
            reason, ": out of memory?" if code == -9 else "")}
    return record


def header(record):
    cpu = record["cpu"]
    lines = ["# trtkit on real third-party classifiers beside OpenVINO NNCF's INT8", "",
             "- date: {}; command: `{}`".format(record["when"], record["command"]),
             "- CPU: {} (trtkit INT8 target: {})".format(describe_cpu(cpu), record.get("trtkit_cpu_target") or "?"),
             "- versions: " + ", ".join("{} {}".format(k, (v or "-").split("-")[0]) for k, v in
                                        record["versions"].items()),
             "- batch {batch}, {threads} threads per runtime, {rounds} interleaved rounds of {seconds} s (every "
             "runtime once per round, order rotating); {count} held-out + {count} train images per model".format(
                 **record["settings"]),
             "- accuracy/agreement: trtkit's `Comparison` (the model's decision rule) against ONNX Runtime FP32 on "
             "the held-out images; drop = top-1 points lost by the search's metric; NNCF: `nncf.quantize` default "
             "preset on the calibration images trtkit's INT8 used"]
    return lines


def summary(record):
    lines = ["| model | trtkit auto chose | drop (points) | budget | NNCF INT8 drop | compared with | agreement "
             "chosen / that | speed vs that | goal |", "|---|---|---:|---:|---:|---|---:|---:|---|"]
    for name, model in record["models"].items():
        if "error" in model:
            lines.append("| {} | failed: {} | | | | | | | - |".format(name, model["error"].replace("|", "/")[:160]))
            continue
        v = model["verdict"]
        agree = "-" if v["agreement_baseline"] is None else "{:.1%} / {:.1%}".format(v["agreement_chosen"],
                                                                                    v["agreement_baseline"])
        lines.append("| {} | {} | {:.2f} | {:g} | {:.2f} | {} | {} | {} | {} |".format(
            name, v["chosen"], v["chosen_drop_points"], v["budget_points"], v["nncf_drop_points"],
            v["baseline"] or "nothing of OpenVINO's keeps the budget", agree,
            "-" if v["speed_vs_baseline"] is None else "{:.2f}x".format(v["speed_vs_baseline"]),
            "**met**" if v["met"] else "not met"))
    return lines


def model_table(name, model):
    if "error" in model:
        return ["### {}".format(name), "", "failed: " + model["error"]]
    lines = ["### {} ({}, input {}x{}, {} held-out images, {} calibration)".format(
        name, model["output_kind"], model["input"].get("height"), model["input"].get("width"),
        model["heldout_images"], model["calibration_images"]), "",
        "| runtime | artifact | accuracy | agreement with FP32 | drop (points) | img/s (median) | min..max | "
        "vs NNCF INT8 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in model["rows"]:
        lines.append("| {} | {} | {} | {:.1%} | {:.2f} | {:.1f} | {:.0f}..{:.0f} | {} |".format(
            r["runtime"], r["artifact"], "-" if r["accuracy"] is None else "{:.1%}".format(r["accuracy"]),
            r["top1_agreement"], r["drop_points"], r["img_per_s"], min(r["img_per_s_per_round"]),
            max(r["img_per_s_per_round"]), "-" if r["vs_nncf_int8"] is None else "{:.2f}x".format(r["vs_nncf_int8"])))
    v = model["verdict"]
    lines += ["", "others' CPU share per round: {}{}; trtkit builds {} s, nncf.quantize {} s".format(
        ", ".join("?" if s is None else "{:.0%}".format(s) for s in model["others_cpu_share_per_round"]),
        " (timed after {} s of waiting until others used < 10%)".format(model["waited_for_quiet_seconds"])
        if model.get("waited_for_quiet_seconds") else "", model["seconds"]["trtkit_builds"],
        model["seconds"]["nncf_quantize"]), "", verdict_line(v)]
    return lines


def verdict_line(v):
    if v["baseline"] is None:
        return "goal not met: neither NNCF's INT8 nor OpenVINO FP32 keeps the budget (nothing to compare with)"
    against = "NNCF's INT8" if v["baseline"] == NNCF else "{} (NNCF's INT8 loses {:.2f} points, over the budget)".format(
        v["baseline"], v["nncf_drop_points"])
    per_round = v.get("speed_vs_baseline_per_round") or [0.0]
    return ("chosen {}: drop {:.2f} points ({}), agreement {:.1%} vs {:.1%}, {:.2f}x the speed of {} (median of "
            "per-round ratios, {:.2f}x..{:.2f}x): goal {}").format(
        v["chosen"], v["chosen_drop_points"], "within budget" if v["within_budget"] else "OVER budget",
        v["agreement_chosen"], v["agreement_baseline"], v["speed_vs_baseline"] or 0.0, against, min(per_round),
        max(per_round), "**met**" if v["met"] else "NOT met")


def markdown(record):
    lines = header(record) + ["", "## Summary", ""] + summary(record)
    for name, model in record["models"].items():
        lines += [""] + model_table(name, model)
    return "\n".join(lines) + "\n"


def run(names, settings, out_dir, command):
    """Measure every model of ``names`` (each in a child process); write ``out_dir/<device>/real_models.{json,md}``
    (``<device>`` as every benchmark names its folder, e.g. ``cpu-amd-epyc-2c``); returns the record."""
    from trtkit.bench.device import device_record
    from trtkit.fileio import write_bytes, write_json
    record = {"benchmark": "real_models_speed", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command,
              "device": device_record(import_torch=False)["slug"], "cpu": cpu_description(),
              "trtkit_cpu_target": _cpu_target(), "versions": versions(*PACKAGES), "settings": settings.to_dict(),
              "rows": [key for key, _, _, _ in ROWS], "models": {}}
    scratch = tempfile.mkdtemp(prefix="trtkit-real-speed-")
    for index, name in enumerate(names):
        print("== {} ({}/{}) ==".format(name, index + 1, len(names)), flush=True)
        model = run_child(name, settings, scratch)
        record["models"][name] = model
        text = "\n".join(model_table(name, model))
        print(("{}: failed: {}".format(name, model["error"]) if "error" in model else text) + "\n", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    folder = os.path.normpath(os.path.join(out_dir, record["device"]))
    if not os.path.isdir(folder):
        os.makedirs(folder)
    write_json(os.path.join(folder, "real_models.json"), record)
    write_bytes(os.path.join(folder, "real_models.md"), markdown(record).encode("utf-8"))
    print("\n".join(summary(record)))
    print("written: {}".format(os.path.join(folder, "real_models.{json,md}")))
    return record


def _cpu_target():
    """trtkit's INT8 target for this CPU (``trtkit.cpuinfo``), or None where this trtkit has no such notion."""
    try:
        from trtkit.cpuinfo import this_cpu
        return this_cpu().to_dict().get("target")
    except Exception:  # another trtkit's cpuinfo: the record goes on without it
        return None


__all__ = ["run", "Settings", "markdown"]
