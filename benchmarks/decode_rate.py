#!/usr/bin/env python3
"""Decode rate of trtkit.data: JPEGs streamed through ``select(...).batches()`` at 224 crop, by worker count.

    python benchmarks/decode_rate.py                    # 2000 JPEGs of 320x240, workers 1 and 2
    python benchmarks/decode_rate.py --count 10000 --workers 1,2,4 --save

Makes ``--count`` JPEGs (about 320x240, 10 class folders) in a temporary
folder, then streams them in a fresh process per run (so each peak resident
memory is its own), ``--repeat`` times per worker count, interleaved, and
prints the median and best images/s and the peak RSS. ``--save``
writes the table to benchmarks/results/<device>/decode_rate.txt. On a shared
machine the rates are noisy: say so when quoting them.
"""

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def make_jpegs(folder, count, classes=10, seed=0):
    """``count`` JPEGs of about 320x240 (smooth shapes plus noise, ~15-25 KB each) in class sub-folders."""
    import numpy as np
    from PIL import Image
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:240, 0:320].astype(np.float32)
    for i in range(count):
        cls = os.path.join(folder, "class{}".format(i % classes))
        if not os.path.isdir(cls):
            os.makedirs(cls)
        w, h = (320, 240) if i % 3 else (300, 240)
        cx, cy, r = rng.uniform(60, 260), rng.uniform(40, 200), rng.uniform(20, 90)
        base = np.stack([x * rng.uniform(0.2, 0.8), y * rng.uniform(0.3, 1.0), (x + y) * 0.3], axis=2)
        base[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
        pixels = np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)[:h, :w]
        Image.fromarray(pixels).save(os.path.join(cls, "{:06d}.jpg".format(i)), quality=90)


def measure(folder, workers, size, batch_size):
    """Stream ``folder`` once; print a JSON record (run in its own process)."""
    from trtkit.contract import InputContract
    from trtkit.data import select
    start = time.time()
    selection = select(folder, InputContract(size=size), workers=workers)
    listed = time.time()
    before = resource.getrusage(resource.RUSAGE_SELF)
    count = 0
    for images, _ in selection.batches(batch_size, progress=False):
        count += len(images)
    done = time.time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_kb = usage.ru_maxrss
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps({"workers": workers, "images": count, "list_s": round(listed - start, 3),
                      "decode_s": round(done - listed, 3), "rate": round(count / (done - listed), 1),
                      "peak_rss_mb": round(peak_kb / 1024.0, 1), "skipped": len(selection.skipped),
                      "cpu_ms": round(1000.0 * cpu / max(count, 1), 3)}))


def summarize(records):
    """Median and best rate, largest peak RSS of repeated runs of one setting."""
    rates = sorted(r["rate"] for r in records)
    return dict(records[0], rate=rates[len(rates) // 2], best=rates[-1],
                peak_rss_mb=max(r["peak_rss_mb"] for r in records),
                list_s=sorted(r["list_s"] for r in records)[len(records) // 2],
                cpu_ms=sorted(r["cpu_ms"] for r in records)[len(records) // 2])


def device_name():
    try:
        from trtkit.bench.device import device_record, device_slug
        return device_slug(device_record(import_torch=False))
    except Exception:
        return "cpu-{}-{}c".format(platform.machine(), os.cpu_count())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="runs per worker count, interleaved (median shown)")
    parser.add_argument("--folder", default=None, help="stream this folder instead of making JPEGs")
    parser.add_argument("--save", action="store_true", help="write results/<device>/decode_rate.txt")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        return measure(args.folder, int(args.workers), args.size, args.batch_size)
    temp = None
    folder = args.folder
    if folder is None:
        temp = folder = tempfile.mkdtemp(prefix="trtkit-decode-")
        start = time.time()
        make_jpegs(folder, args.count)
        print("made {} JPEGs in {:.1f}s ({})".format(args.count, time.time() - start, folder), file=sys.stderr)
    load_before = os.getloadavg()[0]
    try:
        runs = {}
        counts = [int(w) for w in args.workers.split(",")]
        for _ in range(args.repeat):  # interleaved, so a burst of load on a shared machine hits every setting
            for workers in counts:
                out = subprocess.check_output([sys.executable, os.path.abspath(__file__), "--measure", "--folder",
                                               folder, "--workers", str(workers), "--size", str(args.size),
                                               "--batch-size", str(args.batch_size)], universal_newlines=True)
                runs.setdefault(workers, []).append(json.loads(out.strip().splitlines()[-1]))
        rows = [summarize(runs[w]) for w in counts]
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)
    lines = ["decode rate: {} JPEGs (~320x240) -> {}x{} crop, batches of {}, select(...).batches(), {} cores, "
             "load average before {:.1f}, after {:.1f}".format(rows[0]["images"], args.size, args.size, args.batch_size,
                                                             os.cpu_count(), load_before, os.getloadavg()[0]), "",
        "| workers | images/s (median of {0}) | images/s (best) | CPU ms/image | listing s | peak RSS MB (max) | "
        "skipped |".format(args.repeat), "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| {workers} | {rate} | {best} | {cpu_ms} | {list_s} | {peak_rss_mb} | {skipped} |".format(**row))
    lines += ["", "CPU ms/image is user+system time per image over all threads: with N idle cores the rate can reach",
              "about N * 1000 / (CPU ms/image). A load average near the core count means other work shared the cores."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.save:
        from trtkit.fileio import write_text
        path = os.path.join(ROOT, "benchmarks", "results", device_name(), "decode_rate.txt")
        write_text(path, text)
        print("wrote " + path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
