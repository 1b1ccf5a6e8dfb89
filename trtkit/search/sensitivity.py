"""Per-layer INT8 sensitivity: quantize one layer at a time and measure what the tune split loses.

For each layer the Q/DQ writer would quantize, a graph with *only that layer*
in INT8 (same ranges, same encoding) is scored on the tune split; its drop
against FP32 is the layer's sensitivity. Layers are ranked by it (largest
first): the mixed variant keeps the top ones in float. The table is cached
under ``cache_dir("search")`` by graph, ranges, encoding and tune images, so a
second search of the same model reuses it.
"""

import hashlib
import json
import os
import time

from trtkit import log
from trtkit.fileio import cache_dir, read_json, write_json
from trtkit.search.tune import evaluate

SENSITIVITY_FORMAT = 2  # 2: a segmentation map's tune figures carry its mIoU against FP32
LONG_SEARCH_SECONDS = 300  # a sensitivity pass longer than this says how to shorten it


def _say_if_long(first_layer_seconds, layers, tune_images):
    """A hint, once, when the whole pass will take over ``LONG_SEARCH_SECONDS``: measured, an EfficientNet-B0 at
    224 on two cores took 12.4 s per layer (82 layers: 17 minutes) with the default 256 tune images."""
    total = first_layer_seconds * layers
    if total > LONG_SEARCH_SECONDS and tune_images > 32:
        fewer = max(32, tune_images // 4)
        log.warn("layer sensitivity: about {:.0f} min for {} layers on {} tune images; --tune-images {} would take "
                 "about {:.0f} min (a coarser ranking)".format(total / 60.0, layers, tune_images, fewer,
                                                               total * fewer / tune_images / 60.0))


def layer_sensitivity(maker, ranges, tune, reference_figures):
    """[{"layer", "op", "drop", "agreement", "accuracy"}] for every quantizable layer of ``maker``'s FP32 graph
    (a ``pipeline.variants.VariantMaker``: its encoding, its Q/DQ writer), most sensitive first."""
    from trtkit.precision.calibrate import graph_hash
    from trtkit.precision.qdq import quantizable_layers
    model, encoding, use_cache = maker.fp32_model(), maker.encoding, maker.config.use_cache
    depthwise = maker.float_depthwise(ranges)[0]
    layers = quantizable_layers(model, encoding, depthwise)
    key = hashlib.sha256(json.dumps([SENSITIVITY_FORMAT, graph_hash(model), encoding,
                                     depthwise if isinstance(depthwise, bool) else sorted(depthwise),
                                     maker.target, maker.config.bias_correction, tune.identity, tune.metric, tune.kind.name,
                                     sorted((k, round(v["amax"], 7)) for k, v in ranges.items())]).encode("utf-8"))
    path = os.path.join(cache_dir("search"), key.hexdigest()[:24] + ".sensitivity.json")
    if use_cache and os.path.isfile(path):
        try:
            table = read_json(path)["layers"]
            if sorted(row["layer"] for row in table) == sorted(name for name, _ in layers):
                log.info("layer sensitivity: reused ({} layers)".format(len(table)))
                return table
        except (ValueError, KeyError, TypeError):
            pass
    table = []
    everything = set(name for name, _ in layers)
    start = time.time()
    with log.Progress("layer sensitivity", total=len(layers), unit="layer") as bar:
        for name, op in layers:
            graph = maker.mixed_graph(ranges, everything - {name})
            table.append(dict(evaluate(graph, tune, reference_figures), layer=name, op=op))
            bar.update(1)
            if len(table) == 1:
                _say_if_long(time.time() - start, len(layers), len(tune.images))
    table.sort(key=lambda row: -row["drop"])
    if use_cache:
        write_json(path, {"format": SENSITIVITY_FORMAT, "layers": table})
    return table
