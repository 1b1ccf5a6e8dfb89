#!/usr/bin/env python3
"""Segmentation on this CPU as the reference benchmark measures it (issue 22, point 7).

FCN-ResNet50 and DeepLabV3-ResNet50 at 512x512 (``--size``), batch 1, 2 threads: PyTorch eager FP32, ONNX
Runtime FP32 and INT8 (trtkit's default calibration), OpenVINO FP32, OpenVINO NNCF's INT8 of the same FP32
ONNX (``nncf.quantize``, default preset, on trtkit's calibration images), and the artifact trtkit's
``--precision auto`` chose within the mIoU budget. All timed in one interleaved run (every runtime once per
round, order rotating; figures are medians over rounds, ratios paired within a round). Pixel agreement with
ONNX Runtime FP32 on held-out images is printed beside each row.

torchvision's COCO weights are in no registry package and nothing can be downloaded here, so FCN and
DeepLabV3 are trained here from seeded random weights on the shapes sample (``--train-steps`` steps at 96x96,
cached under trtkit's cache folder) and run at 512x512: not COCO models, but models with a real mIoU and
confident decisions, where random weights gave near-tied scores and an mIoU of zero. ``--train-steps 0``
measures random weights as before. The trained segmentation sample (LRASPP on MobileNetV3-Large, 96x96) is
measured too (``--models`` picks). Data: the shapes sample (images and masks), stretched to the model's size.

The goal (issue 22 point 7, with issue 21 point 8's rule): trtkit's choice keeps the budget (pixel agreement
with FP32 >= 98% and mIoU within ``--max-drop`` points), and is at least as fast as NNCF's INT8 when that
keeps the same budget, else as the fastest of OpenVINO's own artifacts that does (OpenVINO FP32).

Writes benchmarks/results/<device>/segmentation_cpu.{json,md}.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (cpu_description, describe_cpu, nncf_int8, paired_ratio, save_results,  # noqa: E402
                               time_rounds, versions, wait_quiet)

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
    parser.add_argument("--train-steps", type=int, default=200, metavar="N",
                        help="steps FCN/DeepLabV3 are trained on the shapes sample (cached; 0: random weights)")
    parser.add_argument("--finetune-steps", type=int, default=0, metavar="N",
                        help="then N steps (batch 2) at --size on 160 shapes images stretched to it, as a user "
                             "trains at the size they deploy (cached; default 0)")
    parser.add_argument("--max-drop", type=float, default=1.0, help="mIoU budget in points (default: 1.0)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--name", default="segmentation_cpu", help="results file name (default: segmentation_cpu)")
    parser.add_argument("--no-save", action="store_true")
    return parser.parse_args(argv)


def source_for(name, size, work, train_steps=0, finetune_steps=0):
    """(build keywords, display name) for the sample or a torchvision-layout model trained here for
    ``train_steps`` steps on the shapes sample (seeded random weights when 0), then ``finetune_steps`` at
    ``size`` (``finetuned_model``), saved for ``size`` x ``size``."""
    if name == "sample":
        return {"task": "segmentation"}, "lraspp_mobilenet_v3_large (trained sample, 96x96)"
    import torch
    from trtkit.contract import InputContract
    from trtkit.models.classifiers import save_checkpoint
    from trtkit.models.segmentation import create_segmentation_model
    if train_steps > 0 and finetune_steps > 0:
        model, label = finetuned_model(name, train_steps, finetune_steps, size)
    elif train_steps > 0:
        model, label = trained_model(name, train_steps)
    else:
        torch.manual_seed(0)
        model, label = create_segmentation_model(name, num_classes=21), "random weights"
    model.input_contract = InputContract(size=size, resize="stretch",
                                         class_names=getattr(model, "class_names", None))
    path = save_checkpoint(model, os.path.join(work, name + ".pt"))
    return {"checkpoint": path, "task": "segmentation"}, "{} ({}, {}x{})".format(name, label, size, size)


def trained_model(name, steps):
    """(model, label): ``name`` trained ``steps`` steps on the shapes sample at its 96x96, as the segmentation
    sample is (``training.dense.fit_dense``), cached in trtkit's cache folder."""
    from trtkit.data import select
    from trtkit.data.shapes import SHAPES_SIZE, SHAPES_VERSION
    from trtkit.fileio import cache_dir
    from trtkit.models.classifiers import read_checkpoint, save_checkpoint
    from trtkit.models.sample import sample_segmentation_contract
    from trtkit.models.segmentation import create_segmentation_model, infer_segmentation_layout, \
        load_segmentation_model
    contract = sample_segmentation_contract()
    path = os.path.join(cache_dir("bench"), "{}-shapes{}-v{}.{}steps.pt".format(name, SHAPES_SIZE, SHAPES_VERSION,
                                                                               steps))
    if os.path.isfile(path):
        state, meta = read_checkpoint(path)
        model = load_segmentation_model(None, path, state, meta, infer_segmentation_layout(state))
        miou = meta.get("miou")
    else:
        import torch
        from trtkit.training import seed_everything
        from trtkit.training.dense import fit_dense
        seed_everything(0)
        torch.set_num_threads(2)
        model = create_segmentation_model(name, num_classes=len(contract.class_names), contract=contract)
        train = select("shapes", contract, split="train").load(progress=False)
        heldout = select("shapes", contract, split="heldout")
        record = fit_dense(model, train.images, train.labels.astype("uint8"), len(contract.class_names), steps,
                           heldout=lambda: heldout.batches(100, progress=False), batch_size=8, lr=0.003,
                           label="training " + name)
        save_checkpoint(model, path, extra_meta={"dataset": "shapes", "miou": record["miou"], "history": [record]})
        miou = record["miou"]
    model.class_names = list(contract.class_names)
    return model, "trained here {} steps on shapes at {}x{}, held-out mIoU {:.3f} there".format(
        steps, SHAPES_SIZE, SHAPES_SIZE, miou)


def finetuned_model(name, steps, finetune_steps, size):
    """(model, label): ``trained_model(name, steps)`` trained on for ``finetune_steps`` steps of 2 images at
    ``size`` x ``size`` (160 shapes train images stretched to it, masks by nearest), cached.

    Trained at 96x96 only and run at 512x512, a model is unsure over whole regions (objects five times larger
    than it ever saw): measured on DeepLabV3, two of 8 held-out images had blobs of ~2000 pixels whose
    decision flipped under any INT8 noise, and the mIoU budget could not be met even with 49 of 61 layers in
    float. Users train at the size they deploy; this does so, briefly."""
    from trtkit.contract import InputContract
    from trtkit.data import select
    from trtkit.fileio import cache_dir
    from trtkit.models.classifiers import read_checkpoint, save_checkpoint
    from trtkit.models.segmentation import infer_segmentation_layout, load_segmentation_model
    base, label = trained_model(name, steps)
    path = os.path.join(cache_dir("bench"), "{}.{}steps.ft{}x{}.pt".format(name, steps, size, finetune_steps))
    if os.path.isfile(path):
        state, meta = read_checkpoint(path)
        model = load_segmentation_model(None, path, state, meta, infer_segmentation_layout(state))
    else:
        import torch
        from trtkit.training.dense import fit_dense
        torch.set_num_threads(2)
        contract = InputContract(size=size, resize="stretch", class_names=base.class_names)
        train = select("shapes", contract, split="train", limit=160).load(progress=False)
        heldout = select("shapes", contract, split="heldout", limit=32)
        record = fit_dense(base, train.images, train.labels.astype("uint8"), len(base.class_names), finetune_steps,
                           heldout=lambda: heldout.batches(4, progress=False), batch_size=2, lr=0.001,
                           label="fine-tuning {} at {}".format(name, size))
        base.input_contract = contract
        save_checkpoint(base, path, extra_meta={"miou": record["miou"]})
        model, meta = base, {"miou": record["miou"]}
    model.class_names = list(base.class_names)
    return model, "{}, then {} steps at {}x{}: held-out mIoU {:.3f} there".format(
        label.split(", held-out")[0], finetune_steps, size, size, meta.get("miou"))


def measure(name, args, work):
    import numpy as np
    import trtkit
    from trtkit.backends import get_backend
    from trtkit.backends.torch import torch_runner
    from trtkit.data import load_images
    from trtkit.backends.base import run_batches
    keywords, label = source_for(name, args.size, work, args.train_steps, args.finetune_steps)
    out = os.path.join(work, "build-" + name)
    start = time.time()
    # the search times its candidates at batch 1, as the reference benchmark measures segmentation (a batch of
    # 8 at 512x512 takes seconds per call on two cores, and every candidate is timed over several rounds)
    result = trtkit.build(precision="auto", backend="auto", data="shapes", out=out, verify_images=args.images,
                          max_drop=args.max_drop,
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
    held = load_images("shapes", contract, split="heldout", limit=args.images)
    heldout, masks = held.images, held.labels
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
    decisions = dict((key, run_batches(r, heldout, 4).argmax(1)) for key, r in runners.items())
    reference = decisions["onnxruntime_fp32"]
    agreement = dict((key, float(np.mean(d == reference))) for key, d in decisions.items())
    miou = dict((key, mean_iou(masks, d, len(contract.class_names or []) or 21)) for key, d in decisions.items())
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
                      "pixel_agreement": round(agreement[key], 4), "miou": _round(miou[key]),
                      "vs_nncf_int8": paired_ratio(figures[key], figures["openvino_nncf_int8"])}
                     for key, text, _ in rows],
            "verdict": verdict(agreement, miou, figures, args.max_drop)}


def mean_iou(masks, decisions, classes):
    """Mean IoU of ``decisions`` against the ground-truth ``masks`` (ignore index skipped), or None."""
    import numpy as np
    from trtkit.pipeline.dense import IGNORE_INDEX, class_iou, confusion
    masks = np.asarray(masks)
    return class_iou(confusion(masks, decisions, classes, valid=masks != IGNORE_INDEX))[1]


def keeps_budget(key, agreement, miou, max_drop):
    """Pixel agreement with FP32 >= 98% (trtkit's INT8 gate) and mIoU within ``max_drop`` points of FP32's."""
    lost = 0.0 if miou[key] is None else 100.0 * (miou["onnxruntime_fp32"] - miou[key])
    return agreement[key] >= 0.98 and lost <= max_drop + 1e-9


def verdict(agreement, miou, figures, max_drop):
    """Issue 21 point 8's rule on segmentation: against NNCF's INT8 when it keeps the budget, else against the
    fastest of OpenVINO's own artifacts that does; per-round ratios kept, so a tie shows as one."""
    own = [key for key in ("openvino_nncf_int8", "openvino_fp32") if key in figures]
    keeps = [key for key in own if keeps_budget(key, agreement, miou, max_drop)]
    if "openvino_nncf_int8" in keeps:
        baseline = "openvino_nncf_int8"
    else:
        baseline = max(keeps, key=lambda k: float(sorted(figures[k])[len(figures[k]) // 2])) if keeps else None
    result = {"budget": "pixel agreement >= 98%, mIoU within {} points".format(max_drop), "baseline": baseline,
              "nncf_keeps_budget": "openvino_nncf_int8" in keeps,
              "chosen_keeps_budget": keeps_budget("trtkit_auto", agreement, miou, max_drop),
              "speed_vs_baseline": None, "speed_vs_baseline_per_round": None}
    if baseline is not None:
        result["speed_vs_baseline"] = paired_ratio(figures["trtkit_auto"], figures[baseline])
        result["speed_vs_baseline_per_round"] = [round(v / b, 3) for v, b in zip(figures["trtkit_auto"],
                                                                                  figures[baseline])]
    result["met"] = bool(result["chosen_keeps_budget"] and result["speed_vs_baseline"] is not None
                         and result["speed_vs_baseline"] >= 1.0)
    return result


def _round(value):
    return None if value is None else round(value, 4)


def markdown(record):
    lines = ["# Segmentation on this CPU beside OpenVINO NNCF's INT8", "",
             "- date: {}; command: `{}`".format(record["when"], record["command"]),
             "- CPU: {}".format(record["cpu"]), "- versions: {}".format(", ".join(
                 "{} {}".format(k, v) for k, v in sorted(record["versions"].items()))),
             "- batch 1, {} threads, {} interleaved rounds of {} s per runtime".format(
                 record["threads"], record["rounds"], record["seconds"]), ""]
    for model in record["models"]:
        lines += ["## {}".format(model["model"]), "",
                  "| runtime | latency (ms) | img/s | pixel agreement with ORT FP32 | mIoU (masks) | vs NNCF INT8 |",
                  "|---|---:|---:|---:|---:|---:|"]
        for row in model["rows"]:
            lines.append("| {} | {} | {} | {:.2%} | {} | {}x |".format(
                row["runtime"], row["latency_ms"], row["img_per_s"], row["pixel_agreement"], _f(row.get("miou")),
                row["vs_nncf_int8"]))
        lines += ["", "trtkit chose {} (its build's verification: mIoU {} vs FP32 {}); {}; others' CPU share per "
                  "round: {}; trtkit's auto build {} s, nncf.quantize {} s".format(
                      model["chosen"], _f(model["chosen_miou"]), _f(model["reference_miou"]),
                      verdict_line(model.get("verdict")),
                      ", ".join("?" if s is None else "{:.0%}".format(s) for s in model["others_cpu_share_per_round"]),
                      model["build_seconds"], model["nncf_seconds"]), ""]
    return "\n".join(lines) + "\n"


def verdict_line(v):
    if not v:
        return "no verdict recorded"
    if v["baseline"] is None:
        return "goal NOT met: neither NNCF's INT8 nor OpenVINO FP32 keeps the budget ({})".format(v["budget"])
    against = "NNCF's INT8" if v["baseline"] == "openvino_nncf_int8" else \
        "OpenVINO FP32 (NNCF's INT8 is over the budget: {})".format(v["budget"])
    per_round = v["speed_vs_baseline_per_round"] or [0.0]
    return "{} budget; {}x the speed of {} (median of per-round ratios, {}x..{}x): goal (>= 1.0x) {}".format(
        "within" if v["chosen_keeps_budget"] else "OVER", v["speed_vs_baseline"], against, min(per_round),
        max(per_round), "**met**" if v["met"] else "NOT met")


def _f(value):
    return "-" if value is None else "{:.3f}".format(value)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
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
    if not args.no_save:
        save_results(args.out, args.name, record, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
