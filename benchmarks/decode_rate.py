#!/usr/bin/env python3
"""Decode rate of trtkit.data: JPEGs streamed through ``select(...).batches()`` at 224 crop, by worker count.

    python benchmarks/decode_rate.py                    # 2000 JPEGs of 320x240, workers 1 and 2
    python benchmarks/decode_rate.py --count 10000 --workers 1,2,4 --save

Makes ``--count`` JPEGs (about 320x240, 10 class folders) in a temporary
folder, then streams them in a fresh process per worker count (so each peak
resident memory is its own) and prints images/s and peak RSS. ``--save``
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
    count = 0
    for images, _ in selection.batches(batch_size, progress=False):
        count += len(images)
    done = time.time()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"workers": workers, "images": count, "list_s": round(listed - start, 3),
                      "decode_s": round(done - listed, 3), "rate": round(count / (done - listed), 1),
                      "peak_rss_mb": round(peak_kb / 1024.0, 1), "skipped": len(selection.skipped)}))


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
    try:
        rows = []
        for workers in [int(w) for w in args.workers.split(",")]:
            out = subprocess.check_output([sys.executable, os.path.abspath(__file__), "--measure", "--folder", folder,
                                           "--workers", str(workers), "--size", str(args.size),
                                           "--batch-size", str(args.batch_size)], universal_newlines=True)
            rows.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)
    lines = ["decode rate: {} JPEGs (~320x240) -> {}x{} crop, batches of {}, {} on {} ({} cores)".format(
        rows[0]["images"], args.size, args.size, args.batch_size, "select(...).batches()", platform.processor() or
        platform.machine(), os.cpu_count()), "",
        "| workers | images/s | decode s | listing s | peak RSS MB | skipped |", "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| {workers} | {rate} | {decode_s} | {list_s} | {peak_rss_mb} | {skipped} |".format(**row))
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
