#!/usr/bin/env python3
"""Object detection on this CPU: trtkit's ``--precision auto`` choice beside PyTorch, ONNX Runtime, OpenVINO
and OpenVINO NNCF's INT8, in one interleaved run at batch 1 and 8.

Model: the trained sample detector (``retinanet_sample``, 128x128, shape-boxes data; cached, trained on first
use), or ``--checkpoint``: a detector trained on shape-boxes (``trtkit train --task detection``). Rows, all timed with the same threads (default 2):

- PyTorch eager FP32: the model's ``decoded`` forward (``models.detection.export.deployable``);
- ONNX Runtime FP32 and OpenVINO FP32: the build's FP32 ONNX (network up to ``decoded``);
- OpenVINO NNCF INT8: ``nncf.quantize`` (default preset) of that FP32 ONNX with ``--calib-images`` images of
  shape-boxes' train split, and an ignored scope of the nodes after the last convolutions (the box decoding and
  the sigmoid: ``precision.qdq_place.float_tail``), as NNCF's documentation says to keep a detector's
  post-processing subgraph out of quantization (``nncf.IgnoredScope``; ``model_type`` has only TRANSFORMER);
- trtkit auto: ``trtkit.build(precision="auto", backend="auto")``'s chosen artifact on its backend, cut back
  to the network up to ``decoded`` (the appended ONNX NonMaxSuppression removed) so it selects as the others do;
- trtkit auto as deployed (when the chosen artifact has NMS in its graph): the artifact as built, its own
  ``det_*`` outputs read, no host selection.

NMS: every row but the last is timed as network + host selection (``trtkit.detect.select.select_decoded``,
numpy, the build's head): the same selection code for all, so the comparison of networks is fair; the time
the selection took is reported beside (``select ms``). The "as deployed" row selects in the graph instead.

Accuracy, per row, on ``--images`` held-out shape-boxes images (their own boxes): COCO mAP@[.5:.95] and mAP@.5
(``detect.metrics.CocoMap`` through ``pipeline.detections.DetectionComparison``, the build's verification
code) and the F1 agreement with ONNX Runtime FP32's detections (matched at IoU 0.5, scores >= 0.3).

Timing: every round times each (runtime, batch) once for ``--seconds`` (order rotating), a figure is the
median over rounds; the ratio to NNCF's INT8 is the median of per-round ratios. The others' CPU share per
round and the load average are recorded (a shared machine's neighbours show there).

Goal: trtkit's choice at least NNCF INT8's speed (at each batch) at no lower mAP@[.5:.95]; beside it, how sure
the mAP comparison is: the paired bootstrap interval over the held-out images of auto's mAP minus NNCF's
(``detect.map_interval``; a verdict is never changed by it). Below the verdict,
every candidate auto built (its own INT8 variants among them) with its held-out mAP, F1 and the build's img/s,
and auto's notes: why a variant was not taken, to set beside NNCF's row.

Writes benchmarks/results/<device>/detection_cpu.json and .txt.

    python benchmarks/detection_cpu.py [--rounds 4] [--seconds 1] [--images 400] [--threads 2]
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.common import (cpu_description, cpu_seconds, describe_cpu, nncf_int8, others_share,  # noqa: E402
                               paired_ratio, versions, wait_quiet)

DATA = "shape-boxes"
REFERENCE = "onnxruntime_fp32"
NNCF_KEY = "openvino_nncf_int8"
AUTO_KEY = "trtkit_auto"
NMS_NOTE = ("every row except 'as deployed' = network + host selection (trtkit.detect.select, numpy, same code "
            "for all); 'select ms' is the selection's share; 'as deployed' runs ONNX NonMaxSuppression in the graph")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="threads for every runtime (default: 2)")
    parser.add_argument("--batches", default="1,8", help="batch sizes timed (default: 1,8)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default: 4)")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per runtime and batch per round")
    parser.add_argument("--images", type=int, default=400, help="held-out images for mAP and F1 (default: 400)")
    parser.add_argument("--calib-images", type=int, default=300,
                        help="calibration images for trtkit's build and for NNCF (default: 300, NNCF's default)")
    parser.add_argument("--tune-images", type=int, default=128, help="trtkit's tune split (default: 128)")
    parser.add_argument("--map-replicates", type=int, default=200, metavar="R",
                        help="paired bootstrap replicates for the interval of auto's mAP - NNCF's (default: 200; "
                             "each is one COCO evaluation of both rows)")
    parser.add_argument("--max-drop", type=float, default=1.0, help="trtkit auto's mAP budget in points (1.0)")
    parser.add_argument("--checkpoint", metavar="PT", help="a detector trained on shape-boxes (e.g. `trtkit train "
                        "--task detection --model retinanet_resnet18_fpn --data shape-boxes --input-size 128`) "
                        "instead of the sample")
    parser.add_argument("--build", metavar="DIR", help="reuse this --precision auto build instead of building")
    parser.add_argument("--build-note", default=None, metavar="TEXT",
                        help="with --build: how that build was made (recorded in the results)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="before timing, wait up to S seconds until others use < 10%% of the CPU")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--name", default="detection_cpu", help="results file name (default: detection_cpu)")
    parser.add_argument("--no-save", action="store_true", help="print only")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- runners: network + selection
class Selecting(object):
    """A runner whose ``infer(batch)`` is the network and the host selection: a list of ``Detections``.
    ``network(batch)`` gives ``decoded`` [N, A, 4 + C]; the selection's seconds are summed apart."""

    def __init__(self, network, runner=None, head=None, contract=None):
        self.network, self.head, self.contract, self.runner = network, head, contract, runner
        self.selection = {}  # batch size -> [seconds, calls] of the host selection

    def infer(self, batch):
        from trtkit.detect.select import select_decoded
        decoded = self.network(batch)
        start = time.perf_counter()
        found = select_decoded(decoded, self.head, self.contract.height, self.contract.width)
        spent = self.selection.setdefault(len(batch), [0.0, 0])
        spent[0] += time.perf_counter() - start
        spent[1] += 1
        return found

    def reset(self):
        self.selection = {}

    def select_ms(self, size):
        """Mean milliseconds of the host selection per call at batch ``size`` (None: none ran)."""
        seconds, calls = self.selection.get(size, (0.0, 0))
        return round(1000.0 * seconds / calls, 2) if calls else None

    def deactivate(self):
        if self.runner is not None:
            self.runner.deactivate()


class GraphSelecting(Selecting):
    """The artifact as deployed: ONNX NonMaxSuppression in the graph, its ``det_*`` outputs read as they are."""

    def infer(self, batch):
        return graph_detections(self.runner.infer_all(batch))


def graph_detections(outputs):
    """One ``Detections`` per image of an artifact with ``detect.onnx_nms``'s outputs (padding rows cut)."""
    from trtkit.detect.records import Detections
    boxes, scores = outputs["det_boxes"], outputs["det_scores"]
    labels, counts = outputs["det_labels"], outputs["det_count"]
    return [Detections(boxes[i, :int(n)], scores[i, :int(n)], labels[i, :int(n)]) for i, n in
            enumerate(counts.reshape(-1))]


def backend_network(backend, path, threads):
    """(decoded function, activated runner) of an artifact on a trtkit backend."""
    from trtkit.backends import get_backend
    runner = get_backend(backend).runner(path, {"threads": threads}).activate()
    return (lambda batch: runner.infer_all(batch)["decoded"]), runner


def torch_network(checkpoint, threads):
    """The PyTorch eager ``decoded`` forward of a detection checkpoint (FP32, CPU, ``threads``)."""
    import torch
    from trtkit.models.classifiers import read_checkpoint
    from trtkit.models.detection import infer_detection_layout, load_detection_model
    from trtkit.models.detection.export import deployable
    torch.set_num_threads(threads)
    state, meta = read_checkpoint(checkpoint)
    model = deployable(load_detection_model(None, checkpoint, state, meta, infer_detection_layout(state))).eval()

    def run(batch):
        with torch.inference_mode():
            return model(torch.from_numpy(batch)).numpy()
    return run


def network_only(path, dst):
    """A copy of ``path`` (ONNX) ending at ``decoded``: the appended NMS removed (``path`` itself when it has no
    other output)."""
    import onnx
    model = onnx.load(path)
    if [o.name for o in model.graph.output] == ["decoded"]:
        return path
    from onnx.utils import Extractor
    inputs = [i.name for i in model.graph.input if i.name not in set(t.name for t in model.graph.initializer)]
    onnx.save(Extractor(model).extract_model(inputs, ["decoded"]), dst)
    return dst


def tail_scope(fp32_onnx):
    """A function of NNCF's OpenVINO model -> ``nncf.IgnoredScope`` of the ops whose outputs are all in the
    ONNX graph's float tail (after the last Conv/Gemm/MatMul: box decoding, sigmoid, concat), matched by their
    output tensor names (OpenVINO keeps the ONNX names there), so the tail stays float."""
    import onnx
    from trtkit.precision.qdq_place import float_tail

    class _Graph(object):
        graph = onnx.load(fp32_onnx).graph
    tail = float_tail(_Graph)
    skip = ("Parameter", "Result", "Constant")

    def scope(model):
        import nncf
        names = []
        for op in model.get_ordered_ops():
            if op.get_type_name() in skip or op.get_output_size() == 0:
                continue
            tensors = [set(op.output(i).get_names()) for i in range(op.get_output_size())]
            if all(t and t & tail for t in tensors):
                names.append(op.get_friendly_name())
        scope.names = names
        return nncf.IgnoredScope(names=names)
    scope.names = []
    return scope


# ---------------------------------------------------------------- accuracy
def detect_all(runner, images, batch_size=8):
    """Each image's ``Detections`` from ``runner.infer`` over ``images`` in batches."""
    found = []
    for start in range(0, len(images), batch_size):
        found.extend(runner.infer(images[start:start + batch_size]))
    return found


def accuracy(found, reference, records, head, contract, labels):
    """({map, map50, reference_map, f1, ...}, the row's ``CocoMap``) of ``found`` against the records' boxes and
    ``reference``'s detections (FP32), by the build's own ``DetectionComparison``; the map is kept for the paired
    interval of two rows' difference."""
    from trtkit.pipeline.detections import DetectionComparison
    comparison = DetectionComparison(head, contract, labels)
    comparison.update_detections(found, reference, records)
    result = comparison.result()
    return {key: _round(result.get(key)) for key in ("map", "map50", "reference_map", "reference_map50",
                                                      "f1_agreement", "agreement_mean_iou",
                                                      "agreement_mean_score_shift")}, comparison.variant_map


# ---------------------------------------------------------------- timing
def time_rounds(runners, batches, rounds, seconds, warmup=0.3):
    """({(key, batch size): [img/s per round]}, {(key, bs): [ms per call per round]}, [others' share per round]):
    every round times each runner at each batch once, the order rotating (``common.time_rounds`` over several
    batch sizes in one run)."""
    from trtkit.bench.timing import measure_latency
    keys = [(key, size) for size in sorted(batches) for key in runners]
    figures = dict((k, []) for k in keys)
    latency = dict((k, []) for k in keys)
    shares = []
    for index in range(rounds):
        order = keys[index % len(keys):] + keys[:index % len(keys)]
        before, start = cpu_seconds(), time.time()
        for key, size in order:
            runner, batch = runners[key], batches[size]
            stats = measure_latency(lambda: runner.infer(batch), warmup_seconds=warmup, min_seconds=seconds,
                                    min_iterations=3)
            figures[(key, size)].append(size / stats.median)
            latency[(key, size)].append(1000.0 * stats.median)
        shares.append(others_share(before, cpu_seconds(), time.time() - start))
        print("round {}/{} (others used {} of the CPU): {}".format(
            index + 1, rounds, "?" if shares[-1] is None else "{:.0%}".format(shares[-1]),
            "  ".join("{}@{} {:.0f}".format(k, s, figures[(k, s)][-1]) for k, s in keys)), flush=True)
    return figures, latency, shares


# ---------------------------------------------------------------- the run
def auto_build(args, work):
    """(manifest, folder, build seconds) of trtkit's ``--precision auto`` build of the sample detector (or of
    ``--checkpoint``, verified on shape-boxes)."""
    import trtkit
    from trtkit.pipeline.manifest import open_build
    if args.build:
        build = open_build(args.build)
        return build.manifest, build.folder, None
    out = os.path.join(work, "build-auto")
    start = time.time()
    model = {"checkpoint": args.checkpoint, "data": DATA} if args.checkpoint else {}  # else the sample and its data
    result = trtkit.build(task="detection", precision="auto", backend="auto", out=out, verify_images=args.images,
                          calib_images=args.calib_images, tune_images=args.tune_images, max_drop=args.max_drop,
                          batch_size=8, throughput_batch=8, **model)
    return result.manifest, result.dir, round(time.time() - start, 1)


def measure(args, work):
    import numpy as np
    from trtkit.contract import InputContract
    from trtkit.data import select
    from trtkit.detect.params import DetectionHead
    from trtkit.pipeline.detections import data_labels
    from trtkit.pipeline.manifest import artifact_path
    from trtkit.precision.calibrate import load_calibration_images
    manifest, folder, build_seconds = auto_build(args, work)
    model = manifest["model"]
    contract = InputContract.from_dict(model["input"])
    head = DetectionHead.from_dict(model["detection"])
    fp32 = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".fp32.onnx")][0]
    chosen_name = manifest["selection"]["chosen"]
    chosen = [a for a in manifest["artifacts"] if a["name"] == chosen_name][0]
    chosen_path = artifact_path(folder, chosen)
    heldout_selection = select(DATA, contract, split="heldout", limit=args.images)
    held = heldout_selection.load(progress=False)
    labels = data_labels(head, model.get("class_names") or contract.class_names, heldout_selection)
    calib = load_calibration_images(DATA, contract, args.calib_images)
    scope = tail_scope(fp32)
    nncf_path, nncf_seconds = nncf_int8(fp32, calib.images, os.path.join(work, "detector.nncf-int8.xml"),
                                        ignored_scope=scope)
    t = args.threads
    rows = [("pytorch_fp32", "PyTorch eager FP32", lambda: Selecting(torch_network(model["checkpoint"], t),
                                                                     head=head, contract=contract))]
    for key, text, backend, path in (
            (REFERENCE, "ONNX Runtime FP32", "onnxruntime", fp32),
            ("openvino_fp32", "OpenVINO FP32", "openvino", fp32),
            (NNCF_KEY, "OpenVINO NNCF INT8 (tail ignored)", "openvino", nncf_path),
            (AUTO_KEY, "trtkit auto: {} on {}".format(chosen_name.split(".", 1)[1], chosen["backend"]),
             chosen["backend"], network_only(chosen_path, os.path.join(work, "chosen.network.onnx")))):
        rows.append((key, text, lambda b=backend, p=path: Selecting(*backend_network(b, p, t), head=head,
                                                                    contract=contract)))
    graph_nms = (chosen.get("nms") or {}).get("placement") == "graph" or chosen_path.endswith(".nms.onnx")
    runners = {}
    for key, _, make in rows:
        runners[key] = make()
    if graph_nms:
        from trtkit.backends import get_backend
        runner = get_backend(chosen["backend"]).runner(chosen_path, {"threads": t}).activate()
        rows.append((AUTO_KEY + "_graph_nms", "trtkit auto as deployed (NMS in the graph)", None))
        runners[AUTO_KEY + "_graph_nms"] = GraphSelecting(None, runner, head, contract)
    print("accuracy on {} held-out images ...".format(len(held.images)), flush=True)
    found = dict((key, detect_all(r, held.images)) for key, r in runners.items())
    scores, maps = {}, {}
    for key in runners:
        scores[key], maps[key] = accuracy(found[key], found[REFERENCE], held.labels, head, contract, labels)
    print("paired bootstrap of trtkit auto's mAP - NNCF INT8's ({} replicates) ...".format(args.map_replicates),
          flush=True)
    from trtkit.detect.map_interval import paired_map_difference
    difference = paired_map_difference(maps[AUTO_KEY], maps[NNCF_KEY], replicates=args.map_replicates)
    waited = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
    sizes = [int(b) for b in args.batches.split(",") if b.strip()]
    batches = dict((s, np.ascontiguousarray(np.resize(held.images, (s,) + held.images.shape[1:]))) for s in sizes)
    for r in runners.values():
        r.reset()
    load_before = [round(x, 2) for x in os.getloadavg()]
    figures, latency, shares = time_rounds(runners, batches, args.rounds, args.seconds)
    load_after = [round(x, 2) for x in os.getloadavg()]
    table = []
    for key, text, _ in rows:
        for size in sizes:
            ips = figures[(key, size)]
            table.append(dict({"key": key, "runtime": text, "batch": size,
                               "img_per_s": round(float(np.median(ips)), 1),
                               "img_per_s_min_max": [round(min(ips), 1), round(max(ips), 1)],
                               "latency_ms": round(float(np.median(latency[(key, size)])), 2),
                               "select_ms": runners[key].select_ms(size),
                               "vs_nncf_int8": paired_ratio(ips, figures[(NNCF_KEY, size)]),
                               "nms": "graph" if key.endswith("_graph_nms") else "host"}, **scores[key]))
    for r in runners.values():
        r.deactivate()
    return {"model": "{} ({}, {}x{})".format(model.get("name"), "trained on shape-boxes by trtkit train"
                                             if args.checkpoint else "trained sample", contract.height, contract.width),
            "input": list(contract.shape), "chosen": chosen_name, "chosen_backend": chosen["backend"],
            "chosen_verification": dict((k, (chosen.get("verify") or {}).get(k)) for k in (
                "map", "map50", "reference_map", "f1_agreement")),
            "build": os.path.abspath(folder) if args.build else None, "build_seconds": build_seconds,
            "build_note": args.build_note if args.build else "trtkit.build(task='detection', precision='auto', "
                          "backend='auto', calib_images={}, tune_images={}, max_drop={}, verify_images={})".format(
                              args.calib_images, args.tune_images, args.max_drop, args.images),
            "nncf_seconds": round(nncf_seconds, 1), "nncf_ignored_scope": scope.names,
            "calib_images": int(calib.images.shape[0]), "heldout_images": len(held.images),
            "waited_for_quiet_seconds": waited,
            "load_average_before": load_before, "load_average_after": load_after,
            "others_cpu_share_per_round": shares, "rows": table, "auto_candidates": auto_candidates(manifest),
            "auto_notes": (manifest.get("selection") or {}).get("notes") or [],
            "verdict": verdict(figures, scores, sizes, difference)}


def auto_candidates(manifest):
    """trtkit auto's candidates as its build verified and timed them (the manifest's artifacts and ``selection``):
    name, backend, precision, held-out mAP / mAP@.5 / F1 vs FP32, the build's img/s (its throughput batch),
    within budget, passes gate, chosen. Why: where the goal is missed, this says whether an INT8 variant was
    made, what it scored against NNCF's, and why auto did not take it (slower here, over the budget, failing)."""
    rows = dict((r["name"], r) for r in (manifest.get("selection") or {}).get("candidates") or [])
    chosen = (manifest.get("selection") or {}).get("chosen")
    out = []
    for artifact in manifest.get("artifacts") or []:
        verify, row = artifact.get("verify") or {}, rows.get(artifact["name"], {})
        out.append({"name": artifact["name"], "backend": artifact.get("backend"),
                    "precision": artifact.get("precision"), "map": _round(verify.get("map")),
                    "map50": _round(verify.get("map50")), "f1_agreement": _round(verify.get("f1_agreement")),
                    "img_per_s": _round(artifact.get("throughput_ips")), "status": artifact.get("status"),
                    "within_budget": row.get("within_budget"), "passes_gate": row.get("passes_gate"),
                    "images": row.get("images"), "chosen": artifact["name"] == chosen})
    return out


def candidate_lines(candidates):
    """The candidates as a markdown table (``auto_candidates``' rows)."""
    lines = ["| auto candidate | backend | mAP@[.5:.95] | mAP@.5 | F1 vs FP32 | build's img/s | within budget, gate |",
             "|---|---|---:|---:|---:|---:|---|"]
    for c in candidates:
        lines.append("| {}{} | {} | {} | {} | {} | {} | {}, {} |".format(
            c["name"], " (chosen)" if c["chosen"] else "", c["backend"], _f(c["map"]), _f(c["map50"]),
            _f(c["f1_agreement"]), "-" if c["img_per_s"] is None else "{:.1f}".format(c["img_per_s"]),
            "yes" if c["within_budget"] else "no", "passes" if c["passes_gate"] else c["status"] or "fails"))
    return lines


def verdict(figures, scores, sizes, difference=None):
    """The goal per batch: trtkit auto's img/s >= NNCF INT8's (median of per-round ratios) and its mAP@[.5:.95]
    not lower than NNCF's (as measured: the paired interval of the difference is reported beside it, never
    used to call a lower mAP met)."""
    mine, theirs = scores[AUTO_KEY].get("map"), scores[NNCF_KEY].get("map")
    map_ok = mine is not None and theirs is not None and mine >= theirs
    result = {"map_auto": mine, "map_nncf": theirs, "map_not_lower": map_ok, "per_batch": {},
              "map_difference": difference}
    for size in sizes:
        ratio = paired_ratio(figures[(AUTO_KEY, size)], figures[(NNCF_KEY, size)])
        result["per_batch"][str(size)] = {"speed_vs_nncf": ratio, "met": bool(map_ok and ratio is not None
                                                                             and ratio >= 1.0)}
    result["met"] = all(v["met"] for v in result["per_batch"].values())
    return result


def text_table(record):
    m = record["models"][0]
    lines = ["Detection on this CPU: {}, {} threads, batches {}, {} interleaved rounds of {} s per runtime "
             "and batch".format(m["model"], record["threads"], record["batches"], record["rounds"],
                                record["seconds"]),
             "command: {} | {}".format(record["command"], record["when"]),
             "CPU: {}".format(record["cpu"]),
             "versions: {}".format(", ".join("{} {}".format(k, v) for k, v in sorted(record["versions"].items()))),
             "load average before/after timing: {} / {} (uptime at start: {})".format(
                 m["load_average_before"], m["load_average_after"], record["uptime"]),
             "others' CPU share per round: {}".format(", ".join(
                 "?" if s is None else "{:.0%}".format(s) for s in m["others_cpu_share_per_round"])),
             "NMS: " + NMS_NOTE,
             "accuracy: {} held-out shape-boxes images; mAP by the COCO evaluator; F1 = agreement with ONNX "
             "Runtime FP32's detections (IoU 0.5, score >= 0.3)".format(m["heldout_images"]), "",
             "| runtime | batch | img/s (median) | min..max | latency ms/call | select ms/call | vs NNCF INT8 "
             "| mAP@[.5:.95] | mAP@.5 | F1 vs FP32 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in m["rows"]:
        sel = r["select_ms"]
        lines.append("| {} | {} | {:.1f} | {:.0f}..{:.0f} | {:.2f} | {} | {} | {} | {} | {} |".format(
            r["runtime"], r["batch"], r["img_per_s"], r["img_per_s_min_max"][0], r["img_per_s_min_max"][1],
            r["latency_ms"], "in graph" if sel is None else "{:.2f}".format(sel),
            "-" if r["vs_nncf_int8"] is None else "{:.2f}x".format(r["vs_nncf_int8"]), _f(r["map"]),
            _f(r["map50"]), _f(r["f1_agreement"])))
    v = m["verdict"]
    lines += ["", "trtkit chose {} ({}; its build's verification: mAP {} vs FP32 {}, F1 {}); auto build {}; "
              "nncf.quantize {} s ({} calibration images, {} tail ops ignored)".format(
                  m["chosen"], m["chosen_backend"], _f(m["chosen_verification"]["map"]),
                  _f(m["chosen_verification"]["reference_map"]), _f(m["chosen_verification"]["f1_agreement"]),
                  "{} s".format(m["build_seconds"]) if m["build_seconds"] is not None else "reused, made by: {}".format(
                      m["build_note"]),
                  m["nncf_seconds"], m["calib_images"], len(m["nncf_ignored_scope"])),
              "goal (trtkit auto >= NNCF INT8's img/s at no lower mAP@[.5:.95]): mAP {} vs {} ({}); {}: {}".format(
                  _f(v["map_auto"]), _f(v["map_nncf"]), "not lower" if v["map_not_lower"] else "LOWER",
                  ", ".join("batch {} {}x".format(b, x["speed_vs_nncf"]) for b, x in v["per_batch"].items()),
                  "**met**" if v["met"] else "NOT met")]
    if v.get("map_difference"):
        from trtkit.detect.map_interval import describe
        lines.append("how sure: mAP@[.5:.95] " + describe(v["map_difference"], "trtkit auto", "NNCF INT8"))
    if m.get("auto_candidates"):
        lines += ["", "trtkit auto's candidates, as its build verified ({} held-out images) and timed them:".format(
            m["auto_candidates"][0]["images"])] + candidate_lines(m["auto_candidates"])
        lines += ["auto: " + note for note in m.get("auto_notes") or []]
    return "\n".join(lines) + "\n"


def _round(value):
    return round(value, 4) if isinstance(value, float) else value


def _f(value):
    return "-" if value is None else "{:.3f}".format(value)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import subprocess
    from trtkit.bench.device import device_record
    from trtkit.fileio import write_json, write_text
    uptime = subprocess.run(["uptime"], stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="trtkit-det-cpu-")
    cpu = cpu_description()
    record = {"benchmark": "detection_cpu", "command": " ".join(["python", "benchmarks/detection_cpu.py"] + list(
        argv if argv is not None else sys.argv[1:])), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpu": describe_cpu(cpu), "cpu_record": cpu, "uptime": uptime, "nms": NMS_NOTE,
        "versions": versions("trtkit", "torch", "onnxruntime", "openvino", "nncf"), "threads": args.threads,
        "batches": args.batches, "rounds": args.rounds, "seconds": args.seconds, "max_drop": args.max_drop}
    record["models"] = [measure(args, work)]
    text = text_table(record)
    print("\n" + text)
    if args.no_save:
        return 0
    folder = os.path.join(args.out, device_record()["slug"])
    if not os.path.isdir(folder):
        os.makedirs(folder)
    write_json(os.path.join(folder, args.name + ".json"), record)
    write_text(os.path.join(folder, args.name + ".txt"), text)
    print("written: {}".format(os.path.join(folder, args.name + ".{json,txt}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
