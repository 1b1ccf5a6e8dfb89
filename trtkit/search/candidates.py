"""The candidates of ``--precision auto``: FP32, FP16, INT8 per calibration method, and mixed INT8.

Each INT8 candidate is calibrated once (statistics are shared and cached, so a
second method only recomputes ranges) and scored on the tune split. The best
method's ranges rank the layers (``sensitivity``); when plain INT8 loses more
than the budget on the tune split, the mixed variant keeps the k most
sensitive layers in float, with k the smallest that meets the budget
(bisection: the drop falls as k grows). Final figures of every candidate come
later, from the build's verification on the held-out split.
"""

import os

from trtkit import log
from trtkit.deps import require
from trtkit.fileio import atomic_path, write_json
from trtkit.search.tune import evaluate, load_tune_set, score


class Candidate(object):
    """One variant to build: ``label`` (artifact name part: fp32, int8-entropy, mixed-k3), ``precision``
    (fp32, fp16, int8, mixed), its ONNX file, manifest fields, and its tune-split figures."""

    def __init__(self, label, precision, onnx_path, meta, tune=None, calibration=None):
        self.label = label
        self.precision = precision
        self.onnx_path = onnx_path
        self.meta = meta
        self.tune = tune or {}
        self.calibration = calibration


def make_candidates(fp32_onnx, name, contract, config, calibration_config, default_data, encoding, out_dir):
    """Write every candidate's ONNX into ``out_dir``; returns (candidates, search record for the manifest)."""
    onnx = require("onnx", "the precision search")
    from trtkit.precision.calibrate import Int8Calibration, calibrate, calibration_selection, save_qdq
    from trtkit.precision.fp16 import convert_fp16
    from trtkit.precision.qdq import write_qdq
    from trtkit.precision.trt_cache import write_cache
    from trtkit.search.sensitivity import layer_sensitivity
    source = calibration_config.data_or(default_data)
    tune = load_tune_set(source, contract, config.tune_images, fp32_onnx)
    reference = score(tune.reference, tune)
    candidates = [Candidate("fp32", "fp32", fp32_onnx, {}, dict(reference, drop=0.0))]
    fp16_path = os.path.join(out_dir, "{}.fp16.onnx".format(name))
    kept_ops = convert_fp16(fp32_onnx, fp16_path)
    candidates.append(_scored(Candidate("fp16", "fp16", fp16_path, {"kept_fp32_ops": kept_ops}), tune, reference))
    calib_set = calibration_selection(source, contract, calibration_config.images, calibration_config.seed)
    best = None
    for method in config.methods:
        result = calibrate(fp32_onnx, calib_set, method, calibration_config.batch, calibration_config.percentile,
                           use_cache=calibration_config.use_cache)
        label = "int8-" + method
        path = save_qdq(fp32_onnx, result.ranges, encoding, os.path.join(out_dir, "{}.{}.onnx".format(name, label)))
        cache = os.path.join(out_dir, "{}.{}.calib.cache".format(name, label))
        write_cache(cache, result.amax(), method, calibration_config.trt_version)
        report = os.path.join(out_dir, "{}.{}.calibration.json".format(name, label))
        write_json(report, dict(result.report, encoding=encoding, source=str(source), split="train"))
        meta = {"int8_encoding": encoding, "calibration": {
            "method": method, "images": result.report["images"], "data": str(source),
            "report": os.path.basename(report), "trt_calibration_cache": os.path.basename(cache),
            "cache_reused": result.reused}}
        candidate = _scored(Candidate(label, "int8", path, meta, calibration=Int8Calibration(result, calib_set, cache)),
                            tune, reference)
        candidates.append(candidate)
        if best is None or candidate.tune["drop"] < best[0].tune["drop"]:
            best = (candidate, result)
    fp32_model = onnx.load(fp32_onnx)
    table = layer_sensitivity(fp32_model, best[1].ranges, encoding, tune, reference,
                              use_cache=calibration_config.use_cache)
    record = {"metric": tune.metric, "tune_images": len(tune.images), "tune_identity": tune.identity,
              "best_method": best[1].method, "layers": len(table), "sensitivity": table}
    if best[0].tune["drop"] > config.max_drop and table:
        mixed = _mixed(fp32_model, best, table, encoding, tune, reference, config.max_drop, name, out_dir,
                       write_qdq)
        if mixed is not None:
            candidates.append(mixed)
        else:
            log.warn("no mixed INT8 variant meets --max-drop {:g} on the tune split, even with every layer in "
                     "float".format(config.max_drop))
    return candidates, record


def _scored(candidate, tune, reference):
    candidate.tune = evaluate(candidate.onnx_path, tune, reference)
    return candidate


def _mixed(fp32_model, best, table, encoding, tune, reference, max_drop, name, out_dir, write_qdq):
    """The mixed candidate with the fewest float layers that meets ``max_drop`` on the tune split, or None."""
    onnx = require("onnx", "the precision search")
    ranked = [row["layer"] for row in table]
    trials = {}

    def trial(k):
        if k not in trials:
            graph = write_qdq(fp32_model, best[1].ranges, encoding, keep_float=set(ranked[:k]))
            trials[k] = (graph, evaluate(graph, tune, reference))
            log.info("mixed INT8 with the {} most sensitive layer(s) in float: tune drop {:.2f} points".format(
                k, trials[k][1]["drop"]))
        return trials[k]

    low, high = 1, len(ranked)
    if trial(high)[1]["drop"] > max_drop:
        return None
    while low < high:  # the smallest k whose drop meets the budget
        middle = (low + high) // 2
        if trial(middle)[1]["drop"] <= max_drop:
            high = middle
        else:
            low = middle + 1
    graph, figures = trial(low)
    label = "mixed-k{}".format(low)
    path = os.path.join(out_dir, "{}.{}.onnx".format(name, label))
    with atomic_path(path) as tmp:
        onnx.save(graph, tmp)
    meta = dict(best[0].meta, kept_layers=ranked[:low], mixed_from=best[0].label)
    return Candidate(label, "mixed", path, meta, figures, calibration=best[0].calibration)
