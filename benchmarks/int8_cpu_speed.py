#!/usr/bin/env python3
"""INT8 on the CPU: ONNX Runtime with the ``cpu`` Q/DQ encoding vs PyTorch eager FP32.

Acceptance figure of the calibration module: ResNet18 at 224x224, batch 8, the
same number of threads for both, ONNX Runtime INT8 should reach >= 2x PyTorch's
throughput. The weights are random (speed does not depend on them); the INT8
ranges come from a real calibration on the sample digits resized to 224.
PyTorch is timed in both memory layouts (contiguous and channels-last) and the
better one is the baseline.
Prints both figures (and ONNX Runtime FP32 for context) and writes them to
benchmarks/results/<device>/int8_cpu_speed.json. Run it on a quiet machine.

    python benchmarks/int8_cpu_speed.py [--threads N] [--seconds S] [--batch B]
"""

import argparse
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def throughput(fn, batch, seconds):
    from trtkit.bench.timing import measure_latency
    stats = measure_latency(fn, warmup_seconds=min(2.0, seconds / 2), min_seconds=seconds, min_iterations=5)
    return batch / stats.median, stats.count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for both (default: all)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per runtime (default: 5)")
    parser.add_argument("--calib-images", type=int, default=64)
    parser.add_argument("--method", default="entropy", choices=["entropy", "percentile", "minmax"])
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)

    import numpy as np
    import onnxruntime as ort
    import torch
    from trtkit.onnx.export import export_onnx
    from trtkit.models.classifiers import create_model
    from trtkit.precision.calibrate import calibrate, load_calibration_images, save_qdq

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # random weights make tiny activations; don't let denormals slow PyTorch
    model = create_model("resnet18", num_classes=1000, input_size=args.size).eval()
    work = tempfile.mkdtemp(prefix="trtkit-int8-bench-")
    fp32 = os.path.join(work, "resnet18.fp32.onnx")
    export_onnx(model, fp32)
    images = load_calibration_images("sample", model.input_contract, args.calib_images)
    result = calibrate(fp32, images, args.method, batch_size=args.batch)
    int8 = save_qdq(fp32, result.ranges, "cpu", os.path.join(work, "resnet18.int8-cpu.onnx"))

    batch = np.ascontiguousarray(np.resize(images.images, (args.batch,) + images.images.shape[1:]))
    tensor = torch.from_numpy(batch)
    with torch.no_grad():
        torch_plain, torch_n = throughput(lambda: model(tensor), args.batch, args.seconds)
        # channels-last is PyTorch's faster CPU layout; compare against the better of the two
        model_cl = model.to(memory_format=torch.channels_last)
        tensor_cl = tensor.contiguous(memory_format=torch.channels_last)
        torch_cl, _ = throughput(lambda: model_cl(tensor_cl), args.batch, args.seconds)
    torch_ips = max(torch_plain, torch_cl)

    def session(path):
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    figures = {}
    for label, path in (("onnxruntime_int8_cpu", int8), ("onnxruntime_fp32", fp32)):
        sess = session(path)
        name = sess.get_inputs()[0].name
        figures[label] = throughput(lambda: sess.run(None, {name: batch}), args.batch, args.seconds)
    ratio = figures["onnxruntime_int8_cpu"][0] / torch_ips
    record = {
        "benchmark": "int8_cpu_speed", "model": "resnet18 (random weights)", "input": [3, args.size, args.size],
        "batch": args.batch, "threads": args.threads, "calibration": {"method": args.method,
                                                                       "images": args.calib_images},
        "pytorch_eager_fp32_ips": round(torch_ips, 2),
        "pytorch_eager_fp32_contiguous_ips": round(torch_plain, 2),
        "pytorch_eager_fp32_channels_last_ips": round(torch_cl, 2),
        "onnxruntime_int8_cpu_ips": round(figures["onnxruntime_int8_cpu"][0], 2),
        "onnxruntime_fp32_ips": round(figures["onnxruntime_fp32"][0], 2),
        "int8_vs_pytorch": round(ratio, 3), "target": 2.0, "meets_target": ratio >= 2.0,
        "iterations": {"pytorch": torch_n, "int8": figures["onnxruntime_int8_cpu"][1]},
        "host": platform.node(), "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "onnxruntime": ort.__version__,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print("PyTorch eager FP32      : {:8.1f} img/s (contiguous {:.1f}, channels-last {:.1f})".format(
        torch_ips, torch_plain, torch_cl))
    print("ONNX Runtime FP32       : {:8.1f} img/s".format(figures["onnxruntime_fp32"][0]))
    print("ONNX Runtime INT8 (cpu) : {:8.1f} img/s".format(figures["onnxruntime_int8_cpu"][0]))
    print("INT8 / PyTorch FP32     : {:8.2f}x (target >= 2.0x, {} threads, batch {}, {}x{})".format(
        ratio, args.threads, args.batch, args.size, args.size))
    if not os.path.isdir(args.out):
        os.makedirs(args.out)
    from trtkit.bench.device import device_record
    from trtkit.fileio import write_json
    folder = os.path.join(args.out, device_record()["slug"])  # the same folder as run_matrix.py
    if not os.path.isdir(folder):
        os.makedirs(folder)
    path = os.path.join(folder, "int8_cpu_speed.json")
    write_json(path, record)
    print("written: {}".format(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
