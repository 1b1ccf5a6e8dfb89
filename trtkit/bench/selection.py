"""A detector's host selection (candidates, NMS, best per image), timed on its own for ``trtkit bench``.

Why apart from the runtimes' rows: where NMS runs differs per backend (``Backend.nms_placement``). ONNX
Runtime and OpenVINO artifacts select in the graph, so their rows include it; the PyTorch baselines and
TensorRT-RTX engines give the ``decoded`` tensor and the host selects after them (``detect.select``). This
figure says what that host step costs per batch (and, in an image-size sweep, per size: a larger input has
more anchors, and a RetinaNet's per-level candidates are split at the size it runs at), so the rows can be
compared knowing what each includes.
"""

import time

import numpy as np


def resized(images, size):
    """``images`` ``[N, C, H, W]`` at ``size`` x ``size``, nearest neighbour: the build's own (preprocessed)
    images at a sweep's size, so the selection sees the candidates a real image gives there (noise gives
    none a detector scores above its threshold)."""
    rows = (np.arange(size) * images.shape[2] // size).astype(np.int64)
    columns = (np.arange(size) * images.shape[3] // size).astype(np.int64)
    return np.ascontiguousarray(images[:, :, rows[:, None], columns[None, :]])


def time_host_selection(build_folder, manifest, images, batch_sizes, seconds=0.5, size=None):
    """[{"batch", "ms_per_batch", "ms_per_image", "detections_per_image", "calls"}] of ``detect.select`` on the
    FP32 artifact's ``decoded`` output for ``images``, per batch size; [] for a build that is no detector.
    The FP32 network runs once more here, on the largest batch's images only (selection's cost depends on
    the candidates per image, not on which images): a bench of hundreds of images pays one batch for it.
    ``size``: the images resized to ``size`` x ``size`` first (an image-size sweep; the build must allow the
    size, ``bench.sweeps.check_sweep``), the rows then say ``image_size``."""
    record = (manifest.get("model") or {}).get("detection")
    if not record or not len(images):
        return []
    from trtkit.app.loader import load
    from trtkit.contract import InputContract
    from trtkit.detect.params import DetectionHead
    from trtkit.detect.select import select_decoded
    from trtkit.backends.base import run_batches
    head = DetectionHead.from_dict(record)
    contract = InputContract.from_dict(manifest["model"]["input"])
    height, width = (contract.height, contract.width) if size is None else (size, size)
    chosen = images[:max(batch_sizes)] if size is None else resized(images[:max(batch_sizes)], size)
    with load(build_folder, precision="fp32") as detector:  # the runner itself: the app's input check is
        decoded = run_batches(detector.runner, chosen, detector.batch_size)  # of the build's size only
    rows = []
    for batch in batch_sizes:
        chunk = decoded[:batch]
        if len(chunk) < batch:  # fewer images than the batch: repeat them (selection does not care which)
            chunk = np.concatenate([chunk] * (batch // max(len(chunk), 1) + 1))[:batch]
        found = select_decoded(chunk, head, height, width)  # warm-up
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds or len(times) < 3:
            tick = time.perf_counter()
            select_decoded(chunk, head, height, width)
            times.append(time.perf_counter() - tick)
        median = float(np.median(times))
        rows.append({"batch": int(batch), "ms_per_batch": round(1000 * median, 3),
                     "ms_per_image": round(1000 * median / batch, 3),
                     "detections_per_image": round(sum(len(f) for f in found) / float(batch), 1),
                     "calls": len(times)})
        if size is not None:
            rows[-1]["image_size"] = int(size)
    return rows


def selection_notes(rows):
    """The lines ``trtkit bench`` prints under its table for a detector (a batch table's rows, or a sweep's,
    which say ``image_size``)."""
    if not rows:
        return []
    parts = ["{} {}: {:.2f} ms ({:.2f} ms/image)".format(
        "size" if "image_size" in r else "batch", r.get("image_size", r["batch"]), r["ms_per_batch"],
        r["ms_per_image"]) for r in rows]
    return ["- detection: ONNX Runtime and OpenVINO rows include their graph's NMS; PyTorch and TensorRT-RTX rows "
            "time the network to its decoded output, and the host selection after it (numpy) takes " +
            "; ".join(parts)]
