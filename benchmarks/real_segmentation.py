"""The real segmentation models of benchmarks/real_models (PP-OCRv4's text detector) through trtkit.

    python benchmarks/real_segmentation.py                    # 60 pages at 320x320, fed at 736x736 (the package's)
    python benchmarks/real_segmentation.py --count 100 --methods entropy,percentile,minmax --threshold 0.3

Prints, on the same generated pages (trtkit splits them 80/20: calibration and
verification): the FP32 model's text IoU and mIoU against the masks with the
package's own preprocessing and rule (``pred > 0.3``; also ``> 0.5``), then one
``trtkit build --precision fp32,fp16,int8 --backend onnxruntime`` per INT8
calibration method with the contract flags, and its pixel agreement and mIoU
per variant (the gate: INT8 agreement >= 98 %, at most 1 mIoU point lost).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from benchmarks.real_models import SEGMENTERS, prepare_dense  # noqa: E402
from benchmarks.real_models.dense import text_iou  # noqa: E402


def contract_flags(contract):
    return ["--task", contract["task"], "--input-size", contract["input_size"], "--channel-order",
            contract["channel_order"], "--mean", ",".join(str(v) for v in contract["mean"]),
            "--std", ",".join(str(v) for v in contract["std"]), "--resize", contract["resize"]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ppocr_v4_det", choices=sorted(SEGMENTERS))
    parser.add_argument("--count", type=int, default=60, help="pages (default 60: 48 calibrate, 12 verify)")
    parser.add_argument("--size", type=int, default=320, help="page side in pixels (default 320)")
    parser.add_argument("--methods", default="entropy,percentile,minmax")
    parser.add_argument("--threshold", type=float, default=None, help="trtkit --threshold (default: trtkit's)")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "trtkit-real-segmentation"))
    args = parser.parse_args(argv)
    onnx_file, data, contract = prepare_dense(args.model, args.count, size=(args.size, args.size))
    limit = int(contract["input_size"].split("x")[0])
    print("model {} ({}), data {}".format(args.model, onnx_file, data))
    for thresh in (0.3, 0.5):
        figures = text_iou(onnx_file, data, limit_side_len=limit, thresh=thresh)
        print("package preprocessing + rule pred > {}: text IoU {:.4f}, mIoU {:.4f} on {} pages (text {:.1%} of "
              "pixels, predicted {:.1%})".format(thresh, figures["text_iou"], figures["miou"], figures["images"],
                                                 figures["text_share"], figures["predicted_share"]))
    from trtkit.data.sources import split_positions
    names = sorted(os.listdir(os.path.join(data, "images")))
    heldout = [names[i] for i in split_positions(len(names), "heldout")]
    for thresh in (0.3, 0.5):
        figures = text_iou(onnx_file, data, limit_side_len=limit, thresh=thresh, files=heldout)
        print("  on trtkit's {} held-out pages, pred > {}: text IoU {:.4f}, mIoU {:.4f}".format(
            len(heldout), thresh, figures["text_iou"], figures["miou"]))
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for method in args.methods.split(","):
        out = os.path.join(args.out, method)
        command = [sys.executable, "-m", "trtkit", "build", "--onnx", onnx_file, "--data", data,
                   "--precision", "fp32,fp16,int8", "--backend", "onnxruntime", "--bench-seconds", "0",
                   "--verify-images", "all", "--calib-method", method, "--out", out] + contract_flags(contract)
        if args.threshold is not None:
            command += ["--threshold", str(args.threshold)]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                env=env)
        print("\n$ " + " ".join(command[2:]))
        if result.returncode != 0:
            print(result.stdout[-2000:])
            continue
        with open(os.path.join(out, "manifest.json")) as handle:
            manifest = json.load(handle)
        for artifact in manifest["artifacts"]:
            verify = artifact["verify"]
            print("  {:5s} {:9s} decision {} pixel agreement {:.4f}  mIoU {:.4f} (FP32 {:.4f})  text IoU {:.4f}  "
                  "max |diff| {:.3f}".format(artifact["precision"], artifact["status"], verify["decision"],
                                             verify["pixel_agreement"], verify["miou"], verify["reference_miou"],
                                             verify["class_iou"][1], verify["max_abs_diff"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
