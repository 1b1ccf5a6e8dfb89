#!/usr/bin/env python3
"""Training speed by precision mode: runs 'trtkit train --compare' and files the result per device.

    python benchmarks/train_speed.py                      # sample digits, fp32,amp (+half on CUDA)
    python benchmarks/train_speed.py --data cifar-10-batches-py --model resnet50 --epochs 3 --batch-size 256

Results go to benchmarks/results/<device>/train_speed-<data>-<model>-<size>.{json,csv,png,txt}; the
table is printed. The first epoch of each mode is left out of the time (warm-up). On a shared or
loaded machine the numbers are noisy: say so when quoting them.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def main(argv=None):
    import torch
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="sample")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--input-size", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--modes", default=None, help="default: fp32,amp,half on CUDA, fp32,amp on CPU")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    from trtkit.fileio import write_text
    from trtkit.training import TrainConfig
    from trtkit.training.modes import parse_modes
    from trtkit.training.report import format_table, write_comparison
    from trtkit.training.runner import compare_modes
    cuda = torch.cuda.is_available()
    modes = parse_modes(args.modes or ("fp32,amp,half" if cuda else "fp32,amp"))
    values = dict(data=args.data, model=args.model, epochs=args.epochs, channels_last=args.channels_last)
    for key in ("input_size", "batch_size", "limit"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    config = TrainConfig(**values)
    work = tempfile.mkdtemp(prefix="trtkit-train-speed-")
    try:
        rows, device = compare_modes(modes, config, work)
        from trtkit.bench.device import describe, device_record
        record = device_record()
        folder = os.path.join(args.results, record["slug"])  # the same folder as run_matrix.py
        data_tag = "sample" if args.data == "sample" else slug(os.path.basename(os.path.normpath(args.data)))
        stem = "train_speed-{}-{}-{}{}".format(data_tag, args.model, args.input_size or "default",
                                              "-nhwc" if args.channels_last else "")
        write_comparison(work, rows, device, config)
        if not os.path.isdir(folder):
            os.makedirs(folder)
        for ext in ("json", "csv", "png"):
            src = os.path.join(work, "compare.{}".format(ext) if ext != "png" else "compare_loss.png")
            if os.path.isfile(src):
                shutil.copyfile(src, os.path.join(folder, "{}.{}".format(stem, ext)))
        table = format_table(rows, "{} ({})".format(describe(record), device))
        write_text(os.path.join(folder, stem + ".txt"), table + "\n")
        print(table)
        print("results: {}".format(os.path.join(folder, stem + ".*")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
