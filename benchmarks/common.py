"""What the CPU benchmarks share: interleaved timing, the neighbours' CPU share, NNCF's INT8, the machine record.

Used by ``openvino_compare.py`` (one ResNet18) and ``real_models.py --speed``
(the real third-party models). A shared machine's neighbours are the main
source of noise here, so timing is interleaved (every runtime once per round,
the order rotating: a slow spell falls on all of them alike) and the share of
the CPU other processes took in each round is recorded beside the figures.
"""

import os
import time

# /proc/cpuinfo flags that decide how fast INT8/BF16 run on x86 (and which INT8 weights a CPU wants)
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")


def cpu_seconds():
    """(busy CPU seconds of the whole machine, of this process), or None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    tick = float(os.sysconf("SC_CLK_TCK"))
    own = os.times()
    return (sum(fields[:8]) - idle) / tick, own.user + own.system


def others_share(before, after, wall):
    """The share of the machine's CPU time that other processes used between two ``cpu_seconds()``."""
    if before is None or after is None or wall <= 0:
        return None
    busy = (after[0] - before[0]) - (after[1] - before[1])
    return round(max(0.0, busy) / (wall * (os.cpu_count() or 1)), 3)


def wait_quiet(limit, share=0.1, window=5.0):
    """Wait (up to ``limit`` seconds) until other processes use less than ``share`` of the CPU for ``window`` s."""
    start = time.time()
    while time.time() - start < limit:
        before = cpu_seconds()
        time.sleep(window)
        used = others_share(before, cpu_seconds(), window)
        if used is None or used < share:
            break
        print("waiting for a quieter machine: others use {:.0%} of the CPU".format(used), flush=True)
    return round(time.time() - start, 1)


def time_rounds(runners, batch, rounds, seconds, warmup=0.3):
    """({key: [img/s per round]}, [others' CPU share per round]).

    Every round times each runner once, the order rotating between rounds; the
    share of the CPU that other processes took during the round is recorded
    (a shared machine's neighbours show up there, not silently in the figures).
    """
    from trtkit.bench.timing import measure_latency
    figures = dict((key, []) for key in runners)
    shares = []
    keys = list(runners)
    for index in range(rounds):
        order = keys[index % len(keys):] + keys[:index % len(keys)]
        before, start = cpu_seconds(), time.time()
        for key in order:
            runner = runners[key]
            stats = measure_latency(lambda: runner.infer(batch), warmup_seconds=warmup, min_seconds=seconds,
                                    min_iterations=3)
            figures[key].append(batch.shape[0] / stats.median)
        shares.append(others_share(before, cpu_seconds(), time.time() - start))
        print("round {}/{} (others used {} of the CPU): {}".format(
            index + 1, rounds, "?" if shares[-1] is None else "{:.0%}".format(shares[-1]),
            "  ".join("{} {:.0f}".format(k, figures[k][-1]) for k in keys)), flush=True)
    return figures, shares


def paired_ratio(values, base):
    """The median of per-round ratios ``values[i] / base[i]`` (paired within a round), or None."""
    import numpy as np
    ratios = [v / b for v, b in zip(values or [], base or []) if b]
    return round(float(np.median(ratios)), 3) if ratios else None


def nncf_int8(fp32, images, path, ignored_scope=None):
    """OpenVINO's own INT8 of the ONNX file ``fp32``: ``nncf.quantize`` (default preset) on ``images``, already
    preprocessed: an (N, C, H, W) float32 array, or a sized iterable of (1, C, H, W) arrays that can be iterated
    more than once (so a large set need not be in memory); every image is used. Saved as OpenVINO IR at ``path``
    (.xml). ``ignored_scope``: None, an ``nncf.IgnoredScope``, or a function of the OpenVINO model returning
    one (node names are the read model's). Returns (path, seconds nncf.quantize took)."""
    import nncf
    import openvino as ov
    model = ov.Core().read_model(fp32)
    if callable(ignored_scope):
        ignored_scope = ignored_scope(model)
    items = [images[i:i + 1] for i in range(images.shape[0])] if hasattr(images, "shape") else images
    start = time.time()
    options = {} if ignored_scope is None else {"ignored_scope": ignored_scope}
    quantized = nncf.quantize(model, nncf.Dataset(items), subset_size=len(items), **options)
    seconds = time.time() - start
    ov.save_model(quantized, path, compress_to_fp16=False)
    return path, seconds


def openvino_artifact(path, precision, work):
    """The file ``trtkit build --backend openvino`` makes of the ONNX variant ``path`` (an INT8 one is rewritten
    for OpenVINO: ``trtkit.precision.openvino_qdq``), written into ``work``. Running ONNX Runtime's INT8 file on
    OpenVINO instead timed, on a CPU without VNNI, convolutions OpenVINO ran in FP32 (uint8 weights)."""
    from trtkit.backends import get_backend
    out = os.path.join(work, os.path.basename(path).replace(".onnx", ".openvino.onnx"))
    get_backend("openvino").build(path, precision, out)
    return out


def cpu_description(path="/proc/cpuinfo"):
    """{"model": the CPU's model name, "flags": {flag: bool} for ``CPU_FLAGS``, "amx": any AMX}, from /proc/cpuinfo
    (model from ``platform`` and no flags where it is missing, e.g. not Linux)."""
    import platform
    model, flags = None, set()
    try:
        with open(path) as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    found = dict((flag, flag in flags) for flag in CPU_FLAGS)
    return {"model": model or platform.processor() or platform.machine(), "arch": platform.machine(),
            "logical_cores": os.cpu_count(), "flags": found, "amx": any(v for k, v in found.items() if "amx" in k)}


def describe_cpu(record):
    """One line: ``AMD EPYC, 2 cores, avx2 avx512f avx512_vnni``."""
    return "{}, {} cores, {}".format(record["model"], record["logical_cores"], " ".join(
        flag for flag, present in record["flags"].items() if present) or "none of " + "/".join(CPU_FLAGS))


def versions(*names):
    """{package: version} of the modules ``names`` (None for one that is not installed)."""
    import importlib
    found = {}
    for name in names:
        try:
            found[name] = getattr(importlib.import_module(name), "__version__", None)
        except ImportError:
            found[name] = None
    return found


def save_results(out, name, record, text):
    """Write ``record`` as ``NAME.json`` and ``text`` as ``NAME.md`` into ``out``/<this device's slug>; print
    where."""
    from trtkit.bench.device import device_record
    from trtkit.fileio import write_json, write_text
    folder = os.path.join(out, device_record()["slug"])
    if not os.path.isdir(folder):
        os.makedirs(folder)
    write_json(os.path.join(folder, name + ".json"), record)
    write_text(os.path.join(folder, name + ".md"), text)
    print("written: {}".format(os.path.join(folder, name + ".{json,md}")))
