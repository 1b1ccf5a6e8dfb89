#!/usr/bin/env python3
"""Segmentation on this CPU as the reference benchmark measures it (issue 22, point 7).

FCN-ResNet50 and DeepLabV3-ResNet50 at 512x512 (``--size``), batch 1, 2 threads: PyTorch eager FP32, ONNX
Runtime FP32 and INT8 (trtkit's default calibration), OpenVINO FP32, OpenVINO NNCF's INT8 of the same FP32
ONNX (``nncf.quantize``, default preset, on trtkit's calibration images), and the artifact trtkit's
``--precision auto`` chose within the mIoU budget. All timed in one interleaved run (every runtime once per
round, order rotating; figures are medians over rounds, ratios paired within a round). Pixel agreement with
ONNX Runtime FP32 on held-out images is printed beside each row.

The weights are seeded random ones (no download is possible here, and torchvision's COCO weights are not in
any registry package): speed does not depend on them, but agreement on random weights is a weak check, so the
trained segmentation sample (LRASPP on MobileNetV3-Large, shapes, 96x96, real mIoU) is measured too
(``--models`` picks). Data: the shapes sample, stretched to the model's size.

Writes benchmarks/results/<device>/segmentation_cpu.{json,md}.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (cpu_description, describe_cpu, nncf_int8, paired_ratio, time_rounds,  # noqa: E402
                               versions, wait_quiet)

MODELS = ("sample", "fcn_resnet50", "deeplabv3_resnet50")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="default: " + ",".join(MODELS))
    parser.add_argument("--size", type=int, default=512, help="image size of FCN/DeepLabV3 (default: 512)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per runtime per round")
    parser.add_argument("--images", type=int, default=32, help="calibration and held-out images (each)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--no-save", action="store_true")
    return parser.parse_args(argv)


def source_for(name, size, work):
    """(build keywords, display name) for the sample or a seeded random torchvision-layout model."""
    if name == "sample":
        return {"task": "segmentation"}, "lraspp_mobilenet_v3_large (trained sample, 96x96)"
    import torch
    from trtkit.contract import InputContract
    from trtkit.models.classifiers import save_checkpoint
    from trtkit.models.segmentation import create_segmentation_model
    torch.manual_seed(0)
    model = create_segmentation_model(name, num_classes=21, contract=InputContract(size=size, resize="stretch"))
    path = save_checkpoint(model, os.path.join(work, name + ".pt"))
    return {"checkpoint": path, "task": "segmentation"}, "{} (random weights, {}x{})".format(name, size, size)


def measure(name, args, work):
    import numpy as np
    import trtkit
    from trtkit.backends import get_backend
    from trtkit.backends.torch import torch_runner
    from trtkit.data import load_images
    from trtkit.pipeline.verify import run_batches
    keywords, label = source_for(name, args.size, work)
    out = os.path.join(work, "build-" + name)
    start = time.time()
    # the search times its candidates at batch 1, as the reference benchmark measures segmentation (a batch of
    # 8 at 512x512 takes seconds per call on two cores, and every candidate is timed over several rounds)
    result = trtkit.build(precision="auto", backend="auto", data="shapes", out=out, verify_images=args.images,
                          calib_images=args.images, tune_images=args.images, calib_batch_size=8, batch_size=8,
                          throughput_batch=1, **keywords)
    build_seconds = time.time() - start
    manifest = result.manifest
    chosen = manifest["selection"]["chosen"]
    artifacts = dict((a["name"].split(".", 1)[1], a) for a in manifest["artifacts"])
    base = manifest["model"]["name"]
    fp32 = os.path.join(out, base + ".fp32.onnx")
    contract = trtkit.contract.InputContract.from_dict(manifest["model"]["input"])
    calib = load_images("shapes", contract, split="train", limit=args.images).images
    heldout = load_images("shapes", contract, split="heldout", limit=args.images).images
    nncf_path, nncf_seconds = nncf_int8(fp32, calib, os.path.join(work, name + ".nncf.xml"))
    options = {"threads": args.threads}
    rows = [("pytorch_fp32", "PyTorch eager FP32", lambda: torch_runner(manifest["model"]["checkpoint"],
                                                                         dict(options, mode="fp32", device="cpu")))]
    wanted = [("onnxruntime_fp32", "ONNX Runtime FP32", "fp32"),
              ("onnxruntime_int8", "ONNX Runtime INT8 (trtkit default)", "int8-entropy"),
              ("openvino_fp32", "OpenVINO FP32", "fp32-openvino")]
    for key, text, label_of in wanted:
        if label_of in artifacts:
            artifact = artifacts[label_of]
            rows.append((key, text, lambda a=artifact: get_backend(a["backend"]).runner(os.path.join(out, a["path"]),
                                                                                         options)))
    rows.append(("openvino_nncf_int8", "OpenVINO NNCF INT8", lambda: get_backend("openvino").runner(nncf_path,
                                                                                                   options)))
    picked = [a for a in manifest["artifacts"] if a["name"] == chosen][0]
    rows.append(("trtkit_auto", "trtkit auto: " + chosen.split(".", 1)[1],
                 lambda: get_backend(picked["backend"]).runner(os.path.join(out, picked["path"]), options)))
    runners = dict((key, make().activate()) for key, _, make in rows)
    reference = run_batches(runners["onnxruntime_fp32"], heldout, 4).argmax(1)
    agreement = dict((key, float(np.mean(run_batches(r, heldout, 4).argmax(1) == reference)))
                     for key, r in runners.items())
    waited = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
    figures, shares = time_rounds(runners, np.ascontiguousarray(heldout[:1]), args.rounds, args.seconds)
    for runner in runners.values():
        runner.deactivate()
    verify = picked.get("verify") or {}
    return {"model": label, "input": list(contract.shape), "chosen": chosen, "build_seconds": round(build_seconds, 1),
            "nncf_seconds": round(nncf_seconds, 1), "waited_for_quiet_seconds": waited,
            "chosen_miou": verify.get("miou"), "reference_miou": verify.get("reference_miou"),
            "chosen_pixel_agreement": verify.get("top1_agreement"), "others_cpu_share_per_round": shares,
            "rows": [{"key": key, "runtime": text, "img_per_s": round(float(np.median(figures[key])), 2),
                      "latency_ms": round(1000.0 / float(np.median(figures[key])), 1),
                      "pixel_agreement": round(agreement[key], 4),
                      "vs_nncf_int8": paired_ratio(figures[key], figures["openvino_nncf_int8"])}
                     for key, text, _ in rows]}


def markdown(record):
    lines = ["# Segmentation on this CPU beside OpenVINO NNCF's INT8", "",
             "- date: {}; command: `{}`".format(record["when"], record["command"]),
             "- CPU: {}".format(record["cpu"]), "- versions: {}".format(", ".join(
                 "{} {}".format(k, v) for k, v in sorted(record["versions"].items()))),
             "- batch 1, {} threads, {} interleaved rounds of {} s per runtime".format(
                 record["threads"], record["rounds"], record["seconds"]), ""]
    for model in record["models"]:
        lines += ["## {}".format(model["model"]), "",
                  "| runtime | latency (ms) | img/s | pixel agreement with ORT FP32 | vs NNCF INT8 |",
                  "|---|---:|---:|---:|---:|"]
        for row in model["rows"]:
            lines.append("| {} | {} | {} | {:.2%} | {}x |".format(row["runtime"], row["latency_ms"], row["img_per_s"],
                                                                row["pixel_agreement"], row["vs_nncf_int8"]))
        ratio = [r for r in model["rows"] if r["key"] == "trtkit_auto"][0]["vs_nncf_int8"]
        lines += ["", "trtkit chose {} (mIoU {} vs FP32 {}); {}x NNCF INT8's speed: goal (>= 1.0x) {}; others' CPU "
                  "share per round: {}; trtkit's auto build {} s, nncf.quantize {} s".format(
                      model["chosen"], _f(model["chosen_miou"]), _f(model["reference_miou"]), ratio,
                      "**met**" if ratio is not None and ratio >= 1.0 else "NOT met",
                      ", ".join("?" if s is None else "{:.0%}".format(s) for s in model["others_cpu_share_per_round"]),
                      model["build_seconds"], model["nncf_seconds"]), ""]
    return "\n".join(lines) + "\n"


def _f(value):
    return "-" if value is None else "{:.3f}".format(value)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from trtkit.bench.device import device_record
    from trtkit.fileio import write_json, write_text
    work = tempfile.mkdtemp(prefix="trtkit-seg-cpu-")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    record = {"benchmark": "segmentation_cpu", "command": " ".join(["python", "benchmarks/segmentation_cpu.py"] +
                                                                    list(argv if argv is not None else sys.argv[1:])),
              "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu": describe_cpu(cpu_description()),
              "versions": versions("trtkit", "torch", "onnxruntime", "openvino", "nncf"), "threads": args.threads,
              "rounds": args.rounds, "seconds": args.seconds, "models": []}
    for name in models:
        print("== {}".format(name), flush=True)
        record["models"].append(measure(name, args, work))
    text = markdown(record)
    print("\n" + text)
    if args.no_save:
        return 0
    folder = os.path.join(args.out, device_record()["slug"])
    if not os.path.isdir(folder):
        os.makedirs(folder)
    write_json(os.path.join(folder, "segmentation_cpu.json"), record)
    write_text(os.path.join(folder, "segmentation_cpu.md"), text)
    print("written: {}".format(os.path.join(folder, "segmentation_cpu.{json,md}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
