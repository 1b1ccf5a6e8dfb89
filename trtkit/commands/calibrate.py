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
implicit-INT8 path of TensorRT <= 10). A matching earlier calibration is reused.

--report also diagnoses it: per quantized tensor (every activation the Q/DQ
graph quantizes, and each layer's weights) its SQNR in dB against FP32 (the
tensor quantized with the range written here, on a few tune images), the share
of its values the range clips, the range rule, a weight's channel spread, and
for the --report-layers activations and weights with the lowest SQNR the
agreement points lost when only that tensor is INT8 (ONNX Runtime, the model's
own decision rule). The worst rows are printed and every row goes to OUT/NAME.diagnosis.json."""
EPILOG = """examples:
  calibrate.py                                    the sample model, entropy, 512 digits images
  calibrate.py --onnx model.fp32.onnx --calib-data images/ --calib-method percentile
  calibrate.py --checkpoint my.pt --model resnet50 --calib-data images/ --write-qdq tensorrt
  calibrate.py --onnx model.fp32.onnx --calib-data images/ --report      which tensors hurt INT8, and why"""


def add_arguments(parser):
    from trtkit.precision.config import CalibrationConfig
    from trtkit.pipeline.source import ModelOptions
    ModelOptions.add_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--out", default=os.path.join("build", "calibration"), metavar="DIR",
                     help="output folder (default: build/calibration)")
    out.add_argument("--write-qdq", default=None, choices=["tensorrt", "cpu"],
                     help="also write the INT8 Q/DQ ONNX in this encoding")
    CalibrationConfig.add_arguments(parser, data_default="sample")
    from trtkit.precision.diagnose import DiagnosisOptions
    DiagnosisOptions.add_arguments(parser)


def run(args):
    from trtkit.fileio import output_dir
    from trtkit.precision.config import CalibrationConfig
    from trtkit.pipeline.source import ModelOptions
    from trtkit.precision.diagnose import DiagnosisOptions
    model_options = ModelOptions.from_args(args)
    config = CalibrationConfig.from_args(args)
    diagnosis = DiagnosisOptions.from_args(args)
    with output_dir(args.out) as out_dir:
        return calibrate_into(model_options, config, out_dir, write_qdq=args.write_qdq, diagnosis=diagnosis)


def calibrate_into(model_options, config, out_dir, write_qdq=None, diagnosis=None):
    """Calibrate the model of ``model_options`` by ``config``; writes report, TensorRT cache (and Q/DQ ONNX)
    through the build's own recipe (``pipeline.variants``), under this command's file names. ``diagnosis``
    (a ``precision.diagnose.DiagnosisOptions`` that is ``enabled``): also diagnose the ranges per tensor,
    print the worst rows and write ``NAME.diagnosis.json``."""
    from trtkit import log
    from trtkit.pipeline.source import resolve_model
    from trtkit.pipeline.variants import Int8Files, VariantMaker
    from trtkit import tasks
    source = resolve_model(model_options, out_dir)
    config = config.for_task(tasks.of(source.info.get("task")))  # a detector's own ranges (minmax), as a build's
    name = source.name
    onnx_path = source.onnx_path
    if onnx_path is None:
        from trtkit.onnx.export import export_onnx
        onnx_path = os.path.join(out_dir, name + ".fp32.onnx")
        export_onnx(source.torch_model, onnx_path, exporter=model_options.exporter, opset=model_options.opset,
                    contract=source.contract)
    maker = VariantMaker(onnx_path, name, source.contract, config, "sample", write_qdq, out_dir)
    files = Int8Files("{}.int8-{}.onnx".format(name, write_qdq) if write_qdq else None,
                      name + ".calib.cache", name + ".calibration.json")
    variant = maker.int8(files=files)
    result = variant.calibration.result
    report = result.report
    print("method {}, {} images ({}), {} tensors, cache {}, {:.1f}s".format(
        report["method"], report["images"], maker.data, len(result.ranges),
        "reused" if result.reused else "computed (statistics {})".format(report["cache"]["statistics"]),
        report["seconds"]["total"]))
    log.info("report: {}".format(os.path.join(out_dir, files.report)))
    log.info("TensorRT calibration cache: {}".format(variant.calibration.trt_cache))
    if diagnosis is not None and diagnosis.enabled:
        from trtkit.fileio import write_json
        from trtkit.precision.diagnose import diagnose_calibration, format_table
        if source.onnx_path is None:  # an exported module: the decision rule its graph shows, as a build reads it
            from trtkit.pipeline.source import read_exported_kind
            read_exported_kind(source.info, model_options, onnx_path)
        found = diagnose_calibration(maker, result.ranges, diagnosis, model_info=source.info)
        found.update(method=report["method"], calibration_report=files.report, options=diagnosis.to_dict())
        path = os.path.join(out_dir, name + ".diagnosis.json")
        write_json(path, found)
        print(format_table(found))
        log.info("diagnosis: {}".format(path))
    return 0
