"""One real detector on this CPU: trtkit's ``--precision auto --backend auto`` choice beside ONNX Runtime FP32,
OpenVINO FP32 and OpenVINO NNCF's INT8, in one interleaved run, each row's detections scored against the
package's own (``det_reference``).

The machinery is ``benchmarks/detection_cpu.py``'s, for trtkit's own detector, reused as it is: every row is
the network up to ``decoded`` (``network_only``: the appended ONNX NMS removed) plus the same host selection
(``Selecting``: ``trtkit.detect.select``, the build's head), so the comparison is of networks; NNCF quantizes
the build's FP32 ONNX (network + trtkit's decoder tail) with the tail in its ignored scope (``tail_scope``:
the ops after the last convolutions, as NNCF's detector examples keep post-processing float), on the same
calibration images trtkit's INT8 used (``load_calibration_images``: the train split, seeded);
``time_rounds`` times every (row, batch) once per round, the order rotating. Detections go back to the image
through trtkit's own geometry (``placement`` / ``boxes_to_original``) and are matched against the package's
by ``real_detectors.agreement`` (F1 at IoU 0.5, same class).
"""

import os
import time

import numpy as np

REFERENCE, OV_FP32, NNCF, AUTO = "onnxruntime_fp32", "openvino_fp32", "openvino_nncf_int8", "trtkit_auto"


def auto_build(name, onnx_file, data, out, calib_images, tune_images=16):
    """(manifest, folder, seconds) of trtkit's ``--precision auto --backend auto`` build of ``name`` (kept);
    ``tune_images`` bounds the layer-sensitivity pass (53 layers of RetinaFace on 80 images: 9 min here)."""
    import json
    from benchmarks.real_detectors import build_keywords
    import trtkit
    if not os.path.exists(os.path.join(out, "manifest.json")):
        start = time.time()
        trtkit.build(precision="auto", backend="auto", out=out, calib_images=calib_images, batch_size=8,
                     tune_images=tune_images,
                     throughput_batch=8, **build_keywords(name, onnx_file, data))
        seconds = round(time.time() - start, 1)
    else:
        seconds = None
    with open(os.path.join(out, "manifest.json")) as handle:
        return json.load(handle), out, seconds


def measure(name, onnx_file, data, paths, reference, work, threads=2, rounds=6, seconds=1.0, batches=(1, 8),
            calib_images=64):
    """{"rows": [...], ...}: per row F1/mean IoU/score shift vs the package, img/s per batch (median of rounds),
    the ratio to NNCF's INT8 (median of per-round ratios)."""
    from benchmarks.common import nncf_int8, paired_ratio
    from benchmarks.detection_cpu import Selecting, backend_network, network_only, tail_scope, time_rounds
    from benchmarks.real_detectors import _without_background, agreement
    from trtkit.contract import InputContract
    from trtkit.data.boxes.geometry import boxes_to_original, clip_boxes
    from trtkit.data.decode import read_image
    from trtkit.data.preprocess import placement
    from trtkit.detect.params import DetectionHead
    from trtkit.pipeline.manifest import artifact_path
    from trtkit.precision.calibrate import load_calibration_images
    from PIL import Image
    manifest, folder, build_seconds = auto_build(name, onnx_file, data, os.path.join(work, "auto"), calib_images)
    model = manifest["model"]
    contract = InputContract.from_dict(model["input"])
    head = DetectionHead.from_dict(model["detection"])
    background = model["detection"].get("background")
    fp32 = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".fp32.onnx")][0]
    chosen = [a for a in manifest["artifacts"] if a["name"] == manifest["selection"]["chosen"]][0]
    calib = load_calibration_images(data, contract, calib_images)
    scope = tail_scope(fp32)
    nncf_path, nncf_seconds = nncf_int8(fp32, calib.images, os.path.join(work, "nncf-int8.xml"), ignored_scope=scope)
    rows = ((REFERENCE, "ONNX Runtime FP32", "onnxruntime", fp32),
            (OV_FP32, "OpenVINO FP32", "openvino", fp32),
            (NNCF, "OpenVINO NNCF INT8 (tail ignored)", "openvino", nncf_path),
            (AUTO, "trtkit auto: {} on {}".format(chosen["name"].split(".", 1)[1], chosen["backend"]),
             chosen["backend"], network_only(artifact_path(folder, chosen), os.path.join(work, "chosen.onnx"))))
    runners = dict((key, Selecting(*backend_network(backend, path, threads), head=head, contract=contract))
                   for key, _, backend, path in rows)
    images = np.stack([read_image(p, contract) for p in paths]).astype(np.float32)
    sizes = []
    for p in paths:
        with Image.open(p) as image:
            sizes.append(image.size)
    scores = {}
    for key, runner in runners.items():
        found = []
        for start in range(0, len(images), 8):
            for det, (w, h) in zip(runner.infer(images[start:start + 8]), sizes[start:start + 8]):
                det = det.above(head.postprocessing.score_thresh)
                boxes = clip_boxes(boxes_to_original(det.boxes, (w, h), placement((w, h), contract)), w, h)
                found.append((np.asarray(boxes, float), np.asarray(det.scores, float),
                              _without_background(np.asarray(det.labels, np.int64), background)))
        scores[key] = agreement(found, reference)
    batch_arrays = dict((s, np.ascontiguousarray(np.resize(images, (s,) + images.shape[1:]))) for s in batches)
    for runner in runners.values():
        runner.reset()
    load_before = [round(x, 2) for x in os.getloadavg()]
    figures, latency, shares = time_rounds(runners, batch_arrays, rounds, seconds)
    table = []
    for key, text, _, _ in rows:
        for size in batches:
            ips = figures[(key, size)]
            table.append(dict({"key": key, "runtime": text, "batch": size,
                               "img_per_s": round(float(np.median(ips)), 2),
                               "img_per_s_min_max": [round(min(ips), 2), round(max(ips), 2)],
                               "select_ms": runners[key].select_ms(size),
                               "vs_nncf_int8": paired_ratio(ips, figures[(NNCF, size)])}, **scores[key]))
    for runner in runners.values():
        runner.deactivate()
    return {"model": name, "chosen": chosen["name"], "chosen_backend": chosen["backend"],
            "selection": manifest.get("selection"), "build_seconds": build_seconds,
            "nncf_seconds": round(nncf_seconds, 1), "nncf_ignored_ops": len(scope.names),
            "calib_images": int(calib.images.shape[0]), "images": len(paths), "threads": threads,
            "rounds": rounds, "load_average_before": load_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()], "others_cpu_share_per_round": shares,
            "rows": table}
