"""trtkit build / scripts/build_engine.py: the whole pipeline in one command."""

import os

from trtkit.precision import PRECISIONS

NAME = "build"
HELP = "export, make FP32/FP16/INT8 variants, build engines, verify and time them"
DESCRIPTION = """Turn a trained classifier into verified, timed engines.

With no arguments: trains (first run, about a minute) or reuses a ResNet18 on
scikit-learn's digits, exports it to ONNX, makes FP32 and FP16 variants, runs
them with the best backend here, verifies each against FP32 PyTorch on
held-out images, and writes OUT/manifest.json."""
EPILOG = """examples:
  build_engine.py                                          the sample model, FP32 + FP16
  build_engine.py --checkpoint resnet50.pt --model resnet50 --data val_images/
  build_engine.py --onnx model.onnx --precision fp32,fp16 --out build/onnx
  build_engine.py --backend tensorrt-rtx --precision fp32,fp16,int8

data sources (--data): 'sample' (digits, no download), a folder of class
sub-folders of images, a CIFAR-10 python folder, or a .npy/.npz file."""


def add_arguments(parser):
    from trtkit.backends import backend_names
    src = parser.add_argument_group("model")
    src.add_argument("--model", default=None, help="architecture: resnet18, resnet34, resnet50 or torchvision:NAME "
                     "(default: resnet18, or what the checkpoint records)")
    src.add_argument("--checkpoint", metavar="FILE", help="PyTorch checkpoint (state_dict, {'state_dict':...}, "
                     "{'model':...}, DataParallel); default: the built-in sample model")
    src.add_argument("--onnx", metavar="FILE", help="build from this ONNX classifier instead of a PyTorch model")
    src.add_argument("--num-classes", type=int, metavar="N",
                     help="expected number of classes; a checkpoint for another count is refused")
    src.add_argument("--input-size", type=int, metavar="PX", help="input height/width (default: the model's)")
    src.add_argument("--exporter", default="auto", choices=["auto", "dynamo", "torchscript"],
                     help="torch ONNX exporter (default: auto = the current one, else TorchScript)")
    out = parser.add_argument_group("build")
    out.add_argument("--precision", default="fp32,fp16", metavar="LIST",
                     help="comma list of {} (default: fp32,fp16)".format(",".join(PRECISIONS)))
    out.add_argument("--backend", default="auto", choices=["auto"] + backend_names(),
                     help="runtime to build for (default: auto = TensorRT when usable, else ONNX Runtime)")
    out.add_argument("--out", default=os.path.join("build", "engines"), metavar="DIR",
                     help="output folder (default: build/engines)")
    _add_tensorrt_arguments(parser)
    ver = parser.add_argument_group("verification")
    ver.add_argument("--data", default="sample", metavar="SOURCE",
                     help="held-out images to verify on (default: sample)")
    ver.add_argument("--verify-images", type=int, default=None, metavar="N", help="use at most N images")
    ver.add_argument("--batch-size", type=int, default=32, help="batch size for verification (default: 32)")
    ver.add_argument("--tolerance", type=float, default=1e-3,
                     help="max |logit difference| allowed between ONNX and PyTorch FP32 (default: 1e-3)")
    ver.add_argument("--strict", action="store_true",
                     help="exit non-zero when a variant's top-1 agreement is below its threshold")
    ver.add_argument("--bench-seconds", type=float, default=1.0,
                     help="seconds of throughput timing per variant (0 to skip; default: 1)")
    ver.add_argument("--json", action="store_true", help="print the manifest as JSON instead of the table")


def _add_tensorrt_arguments(parser):
    trt = parser.add_argument_group("TensorRT", "options of --backend tensorrt / tensorrt-rtx")
    trt.add_argument("--batch", metavar="MIN:OPT:MAX", default=None,
                     help="dynamic-batch optimization profile (default: 1:THROUGHPUT_BATCH:BATCH_SIZE)")
    trt.add_argument("--workspace", type=float, metavar="MIB", default=None,
                     help="builder workspace limit in MiB (default: TensorRT's)")
    trt.add_argument("--timing-cache", metavar="FILE", default=None,
                     help="timing cache reused across builds (default: one per TensorRT version and GPU "
                          "in trtkit's cache folder; TensorRT-RTX has none)")
    trt.add_argument("--dla-core", type=int, metavar="N", default=None,
                     help="build for DLA core N with GPU fallback (Jetson Xavier/Orin)")
    trt.add_argument("--compute-capability", metavar="LIST", default=None,
                     help="TensorRT-RTX target GPUs, e.g. 8.6,8.9 or 'current' (default: TensorRT-RTX's set)")
    trt.add_argument("--via", default="onnx", choices=["onnx", "torch2trt"],
                     help="onnx (default) or torch2trt: convert the PyTorch model directly (needs torch2trt, "
                          "built from source: github.com/NVIDIA-AI-IOT/torch2trt)")
    trt.add_argument("--int8-path", default=None, choices=["qdq", "implicit"],
                     help="qdq (default): INT8 from the Q/DQ ONNX, every TensorRT; implicit: FP32 ONNX + "
                          "calibrator, TensorRT <= 10 only")
    trt.add_argument("--calib-cache", metavar="FILE", default=None,
                     help="TensorRT calibration cache for the implicit INT8 path (read if present, else written)")


def options_from_args(args):
    from trtkit.build import BuildOptions
    return BuildOptions(model=args.model, checkpoint=args.checkpoint, onnx=args.onnx, precisions=args.precision,
                        num_classes=args.num_classes,
                        backend=args.backend, input_size=args.input_size, out=args.out, data=args.data,
                        verify_images=args.verify_images, batch_size=args.batch_size, exporter=args.exporter,
                        tolerance=args.tolerance, strict=args.strict, throughput_seconds=args.bench_seconds,
                        extra=_extra_options(args))


def _extra_options(args):
    """Options added by later steps' argument groups (calibration, TensorRT), passed by name."""
    known = {"model", "checkpoint", "num_classes", "onnx", "input_size", "exporter", "precision", "backend", "out", "data",
             "verify_images", "batch_size", "tolerance", "strict", "bench_seconds", "json", "verbose", "quiet",
             "_run", "command"}
    return dict((k, v) for k, v in vars(args).items() if k not in known)


def run(args):
    import json
    from trtkit import log
    from trtkit.build import build, format_table
    manifest = build(options_from_args(args))
    out_dir = manifest.pop("_dir")
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(format_table(manifest))
    log.info("manifest: {}".format(os.path.join(out_dir, "manifest.json")))
    return 0
