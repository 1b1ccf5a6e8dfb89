"""BuildOptions: every choice of a build, composed of each step's option object, validated when made.

``trtkit build``'s flags and ``trtkit.build()``'s keywords both become one of
these, through the same declaration of each option (``trtkit.keywords``:
``from_args`` is ``from_keywords`` on the parsed flags); the pipeline
(``trtkit.pipeline``) reads nothing else, and the manifest records it (``to_dict``).
"""

import os

from trtkit.backends import backend_names
from trtkit.backends.tensorrt.options import TensorRTOptions
from trtkit.errors import InputError
from trtkit.keywords import Field, Options, add_fields
from trtkit.precision.types import DEFAULT_MIN_AGREEMENT, REQUESTABLE as PRECISIONS, Precision
from trtkit.precision.config import CalibrationConfig
from trtkit.precision.diagnose import DiagnosisOptions
from trtkit.search.config import SearchConfig
from trtkit.pipeline.source import ModelOptions

DEFAULT_OUT = os.path.join("build", "engines")
DEFAULT_VERIFY_IMAGES = 1000


class BuildOptions(Options):
    """Every choice of a build: the build's own (below) and its parts', each an option object of its step.

    ``source``: a ModelOptions (which model; default: the sample), ``calibration``: a CalibrationConfig,
    ``tensorrt``: a TensorRTOptions, ``search``: a SearchConfig, ``diagnosis``: a DiagnosisOptions (``--report``:
    the INT8 variants' per-tensor diagnosis, ``pipeline.diagnosis``) (each: its defaults when None);
    ``precisions``: a list or comma string of precisions, or ``auto``; ``min_agreement``: {precision:
    fraction} or "fp16=0.995,int8=0.97", over the precisions' defaults. ``from_keywords`` makes one from
    ``trtkit build``'s flag names (``trtkit.build()`` does), ``from_args`` from the parsed flags.
    """

    def __init__(self, source=None, precisions=("fp32", "fp16"), backend="auto", out=DEFAULT_OUT, data="sample",
                 verify_images=DEFAULT_VERIFY_IMAGES, batch_size=32, tolerance=1e-3, strict=False,
                 throughput_seconds=1.0, throughput_batch=8, min_agreement=None, calibration=None, tensorrt=None,
                 search=None, diagnosis=None, qat_steps=None):
        self.source = source or ModelOptions()
        self.precisions = parse_precisions(precisions)
        self.backend = backend
        self.out = out
        self.data = data
        self.batch_size = int(batch_size)
        self.tolerance = float(tolerance)
        self.strict = bool(strict)
        self.throughput_seconds = float(throughput_seconds)
        self.throughput_batch = int(throughput_batch)
        self.min_agreement_given = parse_min_agreement(min_agreement)  # what the user set (the rest: defaults)
        self.min_agreement = dict(DEFAULT_MIN_AGREEMENT, **self.min_agreement_given)
        self.calibration = calibration or CalibrationConfig()
        self.tensorrt = tensorrt or TensorRTOptions()
        self.search = search or SearchConfig()
        self.diagnosis = diagnosis or DiagnosisOptions()
        self.auto = self.precisions == ["auto"]
        # INT8 by quantization-aware fine-tuning of the PyTorch model (precision.qat) instead of calibration alone
        self.qat_steps = None if qat_steps is None else int(qat_steps)
        if self.qat_steps is not None and self.qat_steps < 1:
            raise InputError("--qat-steps must be at least 1, got {}".format(qat_steps))
        if self.qat_steps is not None and (self.tensorrt.resolved_int8_path() == "implicit"
                                           or self.tensorrt.via == "torch2trt"):
            raise InputError("--qat-steps makes a Q/DQ INT8 graph, and {} builds INT8 from the FP32 model: the "
                             "fine-tuned weights would be lost".format(
                                 "--via torch2trt" if self.tensorrt.via == "torch2trt" else
                                 "the implicit INT8 path (--int8-path implicit or --calib-cache)"),
                             hint="drop --qat-steps, or build the Q/DQ graph (--int8-path qdq, --via onnx)")
        if self.qat_steps is not None and "int8" not in self.precisions:
            raise InputError("--qat-steps makes the int8 variant, and --precision {} has none".format(
                ",".join(self.precisions)), hint="add int8 to --precision (auto searches calibrated INT8 only)")
        if self.batch_size < 1 or self.throughput_batch < 1:
            raise InputError("batch sizes must be at least 1 (--batch-size {}, --throughput-batch {})".format(
                batch_size, throughput_batch))
        self.verify_images = parse_image_count(verify_images, "--verify-images")
        if self.tolerance <= 0:
            raise InputError("--tolerance must be positive, got {:g}".format(self.tolerance))

    @property
    def default_batch(self):
        """The (min, opt, max) batch profile an engine gets when ``--batch`` is not given."""
        largest = max(self.batch_size, self.throughput_batch)
        return (1, min(self.throughput_batch, largest), largest)

    def for_task(self, task):
        """A copy of these options with ``task``'s own INT8 ranges where ``--calib-method`` was not given
        (``CalibrationConfig.for_task``); the caller's object is left as it was (a script may build twice)."""
        import copy
        resolved = copy.copy(self)
        resolved.calibration = self.calibration.for_task(task)
        return resolved

    def to_dict(self, backend_name):
        """The manifest's ``options``: enough to repeat the build (``to_keywords``: every choice)."""
        record = {"precisions": self.precisions, "batch_size": self.batch_size,
                  "throughput_batch": self.throughput_batch, "verify_images": self.verify_images,
                  "tolerance": self.tolerance, "min_agreement": self.min_agreement}
        if "int8" in self.precisions or self.auto:
            record["calibration"] = self.calibration.to_dict()
            record["qat_steps"] = self.qat_steps
        if self.auto:
            record["search"] = self.search.to_dict()
        if self.diagnosis.enabled:
            record["diagnosis"] = self.diagnosis.to_dict()
        if backend_name.startswith("tensorrt"):
            record["tensorrt"] = self.tensorrt.to_dict()
        return record

    # ---------------------------------------------------------------- keywords and flags
    WHAT = "trtkit.build()"
    PARTS = (("source", ModelOptions), ("calibration", CalibrationConfig), ("tensorrt", TensorRTOptions),
             ("search", SearchConfig), ("diagnosis", DiagnosisOptions))
    BUILD = (
        Field("precision", "precisions", metavar="LIST",
              help="comma list of {}, or auto: the fastest variant within --max-drop (default: fp32,fp16)".format(
                  ",".join(PRECISIONS))),
        Field("backend", choices=["auto"] + backend_names(),
              help="runtime to build for (default: auto = TensorRT when usable, else ONNX Runtime)"),
        Field("out", metavar="DIR", help="output folder; it holds one build: files of an earlier build there are "
                                         "replaced (default: build/engines)"),
    )
    VERIFICATION = (
        Field("data", metavar="SOURCE", help="held-out images to verify on (default: sample)"),
        Field("verify_images", metavar="N|all",
              help="verify on N held-out images chosen seeded from the split, or 'all' of them (streamed: memory "
                   "does not grow with the split; default: {})".format(DEFAULT_VERIFY_IMAGES)),
        Field("batch_size", type=int, help="batch size for verification (default: 32)"),
        Field("tolerance", type=float,
              help="max |logit difference| allowed between ONNX and PyTorch FP32 (default: 1e-3)"),
        Field("strict", action="store_true",
              help="exit non-zero when a variant's top-1 agreement is below its threshold, or when ONNX Runtime "
                   "runs without the GPU provider it was asked for (a CUDA provider that cannot start)"),
        Field("bench_seconds", "throughput_seconds", type=float,
              help="seconds of throughput timing per variant (0 to skip; default: 1)"),
        Field("throughput_batch", type=int, metavar="N",
              help="batch size of that timing, and the OPT of an engine's default profile (default: 8)"),
        Field("min_agreement", metavar="P=F,...",
              help="decision agreement with FP32 below which a variant fails its gate, per precision, e.g. "
                   "fp16=0.995,int8=0.97 (segmentation: pixel agreement and mIoU against FP32's decision maps, both "
                   "at least the value given; defaults fp16=0.995, int8=0.98 for pixels and 0.99, 0.97 for the "
                   "mIoU, and with masks an mIoU within 1 point of FP32's; classification default: {})".format(",".join(
                       "{}={:g}".format(k, v) for k, v in sorted(DEFAULT_MIN_AGREEMENT.items())))),
    )
    QAT = (
        Field("qat_steps", type=int, metavar="N",
              help="make the INT8 variant by quantization-aware fine-tuning: N SGD steps of the PyTorch model with "
                   "INT8 fake quantization where the TensorRT Q/DQ graph quantizes, on the calibration source's "
                   "labelled train split (a PyTorch model only; default: post-training calibration)"),
    )
    FIELDS = BUILD + VERIFICATION + QAT

    @classmethod
    def add_arguments(cls, parser):
        """``trtkit build``'s flags, in the order of a build: model, build, TensorRT, verification, calibration,
        search."""
        ModelOptions.add_arguments(parser)
        add_fields(parser.add_argument_group("build"), cls.BUILD)
        TensorRTOptions.add_arguments(parser)
        add_fields(parser.add_argument_group("verification"), cls.VERIFICATION)
        CalibrationConfig.add_arguments(parser)
        add_fields(parser.add_argument_group("quantization-aware fine-tuning (INT8)"), cls.QAT)
        DiagnosisOptions.add_arguments(parser)
        SearchConfig.add_arguments(parser)


def parse_image_count(value, flag):
    """N (at least 1), "all", or None -> int, "all" or None."""
    if value is None or value == "all":
        return value
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise InputError("{} must be a number of images (at least 1) or 'all', got {!r}".format(flag, value))
    return count


def parse_min_agreement(value):
    """{precision: threshold} from a dict or "fp16=0.995,int8=0.97"; InputError for an unknown precision or a
    threshold that is not positive (one above 1 fails every variant of its precision: a way to test a
    pipeline's --strict)."""
    if not value:
        return {}
    if isinstance(value, str):
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise InputError("--min-agreement takes PRECISION=FRACTION pairs, got '{}'".format(value),
                             hint="e.g. --min-agreement fp16=0.995,int8=0.97")
        value = dict((k.strip(), v) for k, v in pairs)
    result = {}
    for name, threshold in dict(value).items():
        name = Precision.parse(name).name
        try:
            threshold = float(threshold)
        except (TypeError, ValueError):
            threshold = -1.0
        if not threshold > 0.0:
            raise InputError("--min-agreement {}={} is not a positive fraction".format(name, threshold),
                             hint="e.g. int8=0.97 for 97% (above 1: every such variant fails its gate)")
        result[name] = threshold
    return result


def parse_precisions(value):
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [p.strip().lower() for p in items if p.strip()]
    if "auto" in items:
        if items != ["auto"]:
            raise InputError("--precision auto searches every precision itself; give it alone",
                             hint="--precision auto --max-drop 0.5, or a list like fp32,fp16,int8")
        return items
    for p in items:
        if not Precision.parse(p).requestable:
            raise InputError("precision '{}' comes from --precision auto only".format(p),
                             hint="use a comma list of " + ",".join(PRECISIONS))
    if not items:
        raise InputError("no precision given", hint="e.g. --precision fp32,fp16")
    return list(dict.fromkeys(items))
