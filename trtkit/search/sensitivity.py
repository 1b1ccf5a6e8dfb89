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

from trtkit import log
from trtkit.fileio import cache_dir, read_json, write_json
from trtkit.search.tune import evaluate

SENSITIVITY_FORMAT = 1


def layer_sensitivity(maker, ranges, tune, reference_figures):
    """[{"layer", "op", "drop", "agreement", "accuracy"}] for every quantizable layer of ``maker``'s FP32 graph
    (a ``pipeline.variants.VariantMaker``: its encoding, its Q/DQ writer), most sensitive first."""
    from trtkit.precision.calibrate import graph_hash
    from trtkit.precision.qdq import quantizable_layers
    model, encoding, use_cache = maker.fp32_model(), maker.encoding, maker.config.use_cache
    layers = quantizable_layers(model, encoding)
    key = hashlib.sha256(json.dumps([SENSITIVITY_FORMAT, graph_hash(model), encoding,
                                     maker.target, tune.identity, tune.metric, tune.kind.name,
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
    with log.Progress("layer sensitivity", total=len(layers), unit="layer") as bar:
        for name, op in layers:
            graph = maker.mixed_graph(ranges, everything - {name})
            table.append(dict(evaluate(graph, tune, reference_figures), layer=name, op=op))
            bar.update(1)
    table.sort(key=lambda row: -row["drop"])
    if use_cache:
        write_json(path, {"format": SENSITIVITY_FORMAT, "layers": table})
    return table
