#!/usr/bin/env python3
"""A build on a real-size image folder: peak memory stays bounded, whatever the folder holds.

Makes a folder of at least 10,000 JPEGs (10 classes, 320x240, smooth synthetic
scenes so files have realistic sizes), a 224x224 ResNet18 checkpoint, and runs

    trtkit build --checkpoint CK --data FOLDER --calib-data FOLDER --precision fp32,int8
                 --backend onnxruntime --verify-images all

under ``/usr/bin/time -v``: peak resident memory of the whole build, wall time,
and the rate at which held-out images were decoded and verified. Target: peak
RSS <= 1.5 GB. Writes benchmarks/results/<device>/data_scale.json and .txt.

    python benchmarks/data_scale.py [--images 10000] [--keep DIR]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TARGET_RSS_MB = 1536


def make_folder(root, count, classes=10, size=(320, 240), seed=0):
    """``count`` JPEGs in ``classes`` class folders: gradients, ellipses and noise, ~10-20 KB each."""
    import numpy as np
    from PIL import Image, ImageDraw
    rng = np.random.RandomState(seed)
    w, h = size
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    for index in range(count):
        label = index % classes
        folder = os.path.join(root, "class_{:02d}".format(label))
        if not os.path.isdir(folder):
            os.makedirs(folder)
        base = np.stack([(xs / w) * 255 * ((label + c) % 3 == 0) + (ys / h) * 255 * ((label + c) % 3 == 1)
                         + 60 * c for c in range(3)], axis=-1)
        noise = rng.normal(0, 12, size=(h, w, 3))
        image = Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(image)
        for _ in range(3):
            x0, y0 = rng.randint(0, w - 40), rng.randint(0, h - 40)
            draw.ellipse([x0, y0, x0 + rng.randint(20, 120), y0 + rng.randint(20, 120)],
                         fill=tuple(int(v) for v in rng.randint(0, 255, 3)))
        image.save(os.path.join(folder, "{:06d}.jpg".format(index)), quality=85)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10000, help="JPEGs to make (default: 10000)")
    parser.add_argument("--keep", metavar="DIR", help="make (or reuse) the folder and build here instead of a temp dir")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)

    from trtkit.bench.device import device_record, device_slug
    from trtkit.models.classifiers import create_model, save_checkpoint
    work = args.keep or tempfile.mkdtemp(prefix="trtkit-data-scale-")
    folder = os.path.join(work, "images")
    try:
        if not os.path.isdir(folder) or sum(len(f) for _, _, f in os.walk(folder)) < args.images:
            start = time.time()
            make_folder(folder, args.images)
            print("made {} JPEGs in {:.0f}s".format(args.images, time.time() - start))
        folder_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs) / 1e6
        checkpoint = os.path.join(work, "resnet18-224.pt")
        model = create_model("resnet18", num_classes=10, input_size=224)
        save_checkpoint(model, checkpoint)
        out = os.path.join(work, "build")
        command = ["/usr/bin/time", "-v", sys.executable, "-m", "trtkit", "build", "--checkpoint", checkpoint,
                   "--data", folder, "--calib-data", folder, "--precision", "fp32,int8", "--backend", "onnxruntime",
                   "--verify-images", "all", "--bench-seconds", "0", "--out", out]
        print("running: " + " ".join(command[2:]))
        start = time.time()
        proc = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, env=dict(os.environ, PYTHONPATH=ROOT))
        wall = time.time() - start
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr)
            return proc.returncode
        rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
        with open(os.path.join(out, "manifest.json")) as handle:
            manifest = json.load(handle)
        verify = manifest.get("verification") or {}
        calibration = manifest["artifacts"][-1].get("calibration") or {}
        record = {
            "images_in_folder": args.images, "folder_mb": round(folder_mb, 1),
            "heldout_images_verified": manifest["data"]["images"],
            "calibration_images": calibration.get("images"),
            "peak_rss_mb": round(rss_kb / 1024.0, 1), "target_rss_mb": TARGET_RSS_MB,
            "within_target": rss_kb / 1024.0 <= TARGET_RSS_MB,
            "wall_seconds": round(wall, 1), "build_seconds": manifest["build_seconds"],
            "verify_seconds": verify.get("seconds"), "verify_images_per_second": verify.get("images_per_second"),
            "artifacts": [{"name": a["name"], "status": a.get("status"),
                           "top1_agreement": (a.get("verify") or {}).get("top1_agreement")}
                          for a in manifest["artifacts"]],
            "command": " ".join(command[2:]).replace(work, "WORK"),
        }
        device = device_record()
        folder_out = os.path.join(args.out, device_slug(device))
        if not os.path.isdir(folder_out):
            os.makedirs(folder_out)
        with open(os.path.join(folder_out, "data_scale.json"), "w") as handle:
            json.dump(record, handle, indent=2)
        lines = ["data_scale: trtkit build on a folder of {} JPEGs ({:.0f} MB), 224x224 ResNet18, FP32 + INT8, "
                 "ONNX Runtime".format(args.images, folder_mb),
                 "  held-out images verified (all): {}".format(record["heldout_images_verified"]),
                 "  peak RSS: {:.0f} MB (target <= {} MB: {})".format(record["peak_rss_mb"], TARGET_RSS_MB,
                                                                      "met" if record["within_target"] else "MISSED"),
                 "  wall time: {:.0f} s (build {:.0f} s)".format(wall, manifest["build_seconds"])]
        if verify.get("images_per_second"):
            lines.append("  verification stream: {:.1f} images/s (decode + reference + every variant)".format(
                verify["images_per_second"]))
        text = "\n".join(lines)
        print(text)
        with open(os.path.join(folder_out, "data_scale.txt"), "w") as handle:
            handle.write(text + "\n")
        return 0 if record["within_target"] else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
