"""trtkit build / scripts/build_engine.py: the whole pipeline in one command."""

import os

NAME = "build"
HELP = "export, make FP32/FP16/INT8 variants, build engines, verify and time them"
DESCRIPTION = """Turn a trained classifier into verified, timed engines.

With no arguments: trains (first run, under two minutes) or reuses a ResNet18 on
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
    from trtkit.pipeline import BuildOptions
    BuildOptions.add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON instead of the table")


def run(args):
    import json
    from trtkit import log
    from trtkit.pipeline import BuildOptions, build, format_table
    from trtkit.pipeline.run import gate_summary
    options = BuildOptions.from_args(args)
    manifest = build(options)
    out_dir = os.path.abspath(options.out)
    if args.json:
        print(json.dumps(manifest.to_json(), indent=2))
    else:
        print(format_table(manifest))
    log.info("manifest: {}".format(os.path.join(out_dir, "manifest.json")))
    summary = gate_summary(manifest)
    if summary:
        log.warn(summary + " (--strict makes this an error)")
        from trtkit.pipeline.diagnosis import hint
        if hint(manifest):
            log.info(hint(manifest))
    return 0
