"""trtkit calibrate / scripts/calibrate.py: INT8 ranges, TensorRT calibration cache and report only.

For users who build engines elsewhere (trtexec, TensorRT <= 10 with a
calibration cache) or who want to look at the ranges before building.
"""

import os

NAME = "calibrate"
HELP = "compute INT8 ranges from real images: calibration report, TensorRT cache (and Q/DQ ONNX on request)"
DESCRIPTION = """Calibrate a classifier for INT8 without building anything else.

Runs the FP32 ONNX over calibration images (train split, seeded), collects
histograms of every activation once, computes ranges by --calib-method and
writes OUT/NAME.calibration.json (ranges, method, images, data identity, time,
cache reuse) and OUT/NAME.calib.cache (TensorRT's calibration cache for the
implicit-INT8 path of TensorRT <= 10). A matching earlier calibration is reused."""
EPILOG = """examples:
  calibrate.py                                    the sample model, entropy, 512 digits images
  calibrate.py --onnx model.fp32.onnx --calib-data images/ --calib-method percentile
  calibrate.py --checkpoint my.pt --model resnet50 --calib-data images/ --write-qdq tensorrt"""


def add_arguments(parser):
    from trtkit.commands.build import add_calibration_arguments
    src = parser.add_argument_group("model")
    src.add_argument("--model", default=None, help="architecture for --checkpoint (default: the sample resnet18)")
    src.add_argument("--checkpoint", metavar="FILE", help="PyTorch checkpoint (default: the built-in sample model)")
    src.add_argument("--onnx", metavar="FILE", help="calibrate this FP32 ONNX classifier (its tensor names are "
                     "the ones written to the TensorRT cache)")
    src.add_argument("--input-size", type=int, metavar="PX", help="input height/width (default: the model's)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", default=os.path.join("build", "calibration"), metavar="DIR",
                     help="output folder (default: build/calibration)")
    out.add_argument("--write-qdq", default=None, choices=["tensorrt", "cpu"],
                     help="also write the INT8 Q/DQ ONNX in this encoding")
    add_calibration_arguments(parser, data_default="sample")


def _model_onnx(args, out_dir):
    """(FP32 ONNX path, InputContract, name) from --onnx, or the exported checkpoint/sample model."""
    from trtkit.errors import InputError
    from trtkit.models import InputContract
    if args.onnx:
        if args.checkpoint:
            raise InputError("give --onnx or --checkpoint, not both")
        from trtkit.onnx_tools import OnnxSummary, load_onnx
        summary = OnnxSummary(load_onnx(args.onnx))
        c, h, w = summary.image_shape
        size = args.input_size or (h if isinstance(h, int) else None)
        if size is None:
            raise InputError("the ONNX input has no fixed height/width", hint="pass --input-size")
        contract = InputContract(size=size, channels=c if isinstance(c, int) else 3)
        return args.onnx, contract, os.path.splitext(os.path.basename(args.onnx))[0].replace(".fp32", "")
    from trtkit.export import export_onnx
    from trtkit.models import check_model_name, load_model
    if args.checkpoint:
        if args.model:
            check_model_name(args.model)
        model = load_model(args.model, args.checkpoint, input_size=args.input_size)
    else:
        if args.model not in (None, "resnet18"):
            raise InputError("--model {} needs --checkpoint".format(args.model))
        from trtkit.sample import sample_model
        model = sample_model()[0]
    name = model.trtkit_name.replace("torchvision:", "")
    path = os.path.join(out_dir, name + ".fp32.onnx")
    export_onnx(model, path)
    return path, model.input_contract, name


def run(args):
    from trtkit.fileio import output_dir
    with output_dir(args.out) as out_dir:
        return _calibrate_into(args, out_dir)


def _calibrate_into(args, out_dir):
    from trtkit import log
    from trtkit.fileio import write_json
    from trtkit.precision.calibrate import calibrate, load_calibration_images, save_qdq
    from trtkit.precision.trt_cache import parse_version, write_cache
    onnx_path, contract, name = _model_onnx(args, out_dir)
    source = args.calib_data or "sample"
    images = load_calibration_images(source, contract, args.calib_images)
    result = calibrate(onnx_path, images, args.calib_method, args.calib_batch_size, args.calib_percentile,
                       use_cache=not args.no_calib_cache)
    cache_name = name + ".calib.cache"
    write_cache(os.path.join(out_dir, cache_name), result.amax(), args.calib_method,
                parse_version(args.trt_version) if args.trt_version else None)
    report = dict(result.report, source=str(source), split="train", trt_calibration_cache=cache_name)
    if args.write_qdq:
        qdq_name = "{}.int8-{}.onnx".format(name, args.write_qdq)
        save_qdq(onnx_path, result.ranges, args.write_qdq, os.path.join(out_dir, qdq_name))
        report.update(encoding=args.write_qdq, int8_onnx=qdq_name)
    report_path = os.path.join(out_dir, name + ".calibration.json")
    write_json(report_path, report)
    print("method {}, {} images ({}), {} tensors, cache {}, {:.1f}s".format(
        report["method"], report["images"], source, len(result.ranges),
        "reused" if result.reused else "computed (statistics {})".format(report["cache"]["statistics"]),
        report["seconds"]["total"]))
    log.info("report: {}".format(report_path))
    log.info("TensorRT calibration cache: {}".format(os.path.join(out_dir, cache_name)))
    return 0
