"""BuildOptions: every choice of a build, composed of each step's option object, validated when made.

``trtkit build``'s flags and ``trtkit.build()``'s keywords both become one of
these (``add_arguments`` / ``from_args``); the pipeline (``trtkit.pipeline``)
reads nothing else, and the manifest records it (``to_dict``).
"""

import os

from trtkit.backends.tensorrt.options import TensorRTOptions
from trtkit.errors import InputError
from trtkit.precision.types import DEFAULT_MIN_AGREEMENT, REQUESTABLE as PRECISIONS, Precision
from trtkit.precision.config import CalibrationConfig
from trtkit.search.config import SearchConfig
from trtkit.pipeline.source import ModelOptions

DEFAULT_OUT = os.path.join("build", "engines")
DEFAULT_VERIFY_IMAGES = 1000


class BuildOptions(object):
    """Every choice of a build; ``from_args`` fills it from ``trtkit build``'s flags, Python callers directly.

    The model (``model``, ``checkpoint``, ``onnx``, ``num_classes``, ``input_size``,
    ``exporter``) becomes ``self.source`` (a ModelOptions, or pass ``source``); ``calibration`` is a
    CalibrationConfig and ``tensorrt`` a TensorRTOptions (defaults when None).
    """

    def __init__(self, model=None, checkpoint=None, onnx=None, precisions=("fp32", "fp16"), backend="auto",
                 num_classes=None, input_size=None, out=DEFAULT_OUT, data="sample", verify_images=DEFAULT_VERIFY_IMAGES,
                 batch_size=32, exporter="auto", tolerance=1e-3, strict=False, throughput_seconds=1.0,
                 throughput_batch=8, min_agreement=None, calibration=None, tensorrt=None, source=None, search=None):
        self.source = source or ModelOptions(model=model, checkpoint=checkpoint, onnx=onnx,
                                             num_classes=num_classes, input_size=input_size, exporter=exporter)
        self.precisions = parse_precisions(precisions)
        self.backend = backend
        self.out = out
        self.data = data
        self.batch_size = int(batch_size)
        self.tolerance = float(tolerance)
        self.strict = bool(strict)
        self.throughput_seconds = float(throughput_seconds)
        self.throughput_batch = int(throughput_batch)
        self.min_agreement = dict(DEFAULT_MIN_AGREEMENT, **parse_min_agreement(min_agreement))
        self.calibration = calibration or CalibrationConfig()
        self.tensorrt = tensorrt or TensorRTOptions()
        self.search = search or SearchConfig()
        self.auto = self.precisions == ["auto"]
        if self.batch_size < 1 or self.throughput_batch < 1:
            raise InputError("batch sizes must be at least 1 (--batch-size {})".format(batch_size))
        self.verify_images = parse_image_count(verify_images, "--verify-images")
        if self.tolerance <= 0:
            raise InputError("--tolerance must be positive, got {:g}".format(self.tolerance))

    @property
    def default_batch(self):
        """The (min, opt, max) batch profile an engine gets when ``--batch`` is not given."""
        largest = max(self.batch_size, self.throughput_batch)
        return (1, min(self.throughput_batch, largest), largest)

    def to_dict(self, backend_name):
        """The manifest's ``options``: enough to repeat the build."""
        record = {"precisions": self.precisions, "batch_size": self.batch_size,
                  "throughput_batch": self.throughput_batch, "verify_images": self.verify_images,
                  "tolerance": self.tolerance, "min_agreement": self.min_agreement}
        if "int8" in self.precisions or self.auto:
            record["calibration"] = self.calibration.to_dict()
        if self.auto:
            record["search"] = self.search.to_dict()
        if backend_name.startswith("tensorrt"):
            record["tensorrt"] = self.tensorrt.to_dict()
        return record

    # ---------------------------------------------------------------- command line
    @staticmethod
    def add_arguments(parser):
        from trtkit.backends import backend_names
        ModelOptions.add_arguments(parser)
        out = parser.add_argument_group("build")
        out.add_argument("--precision", default="fp32,fp16", metavar="LIST",
                         help="comma list of {}, or auto: the fastest variant within --max-drop (default: "
                              "fp32,fp16)".format(",".join(PRECISIONS)))
        out.add_argument("--backend", default="auto", choices=["auto"] + backend_names(),
                         help="runtime to build for (default: auto = TensorRT when usable, else ONNX Runtime)")
        out.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                         help="output folder; it holds one build: files of an earlier build there are replaced "
                              "(default: build/engines)")
        TensorRTOptions.add_arguments(parser)
        ver = parser.add_argument_group("verification")
        ver.add_argument("--data", default="sample", metavar="SOURCE",
                         help="held-out images to verify on (default: sample)")
        ver.add_argument("--verify-images", default=DEFAULT_VERIFY_IMAGES, metavar="N|all",
                         help="verify on N held-out images chosen seeded from the split, or 'all' of them "
                              "(streamed: memory does not grow with the split; default: {})".format(
                                  DEFAULT_VERIFY_IMAGES))
        ver.add_argument("--batch-size", type=int, default=32, help="batch size for verification (default: 32)")
        ver.add_argument("--tolerance", type=float, default=1e-3,
                         help="max |logit difference| allowed between ONNX and PyTorch FP32 (default: 1e-3)")
        ver.add_argument("--strict", action="store_true",
                         help="exit non-zero when a variant's top-1 agreement is below its threshold")
        ver.add_argument("--bench-seconds", type=float, default=1.0,
                         help="seconds of throughput timing per variant (0 to skip; default: 1)")
        ver.add_argument("--throughput-batch", type=int, default=8, metavar="N",
                         help="batch size of that timing, and the OPT of an engine's default profile (default: 8)")
        ver.add_argument("--min-agreement", default=None, metavar="P=F,...",
                         help="decision agreement with FP32 below which a variant fails its gate, per precision, "
                              "e.g. fp16=0.995,int8=0.97 (default: {})".format(",".join(
                                  "{}={:g}".format(k, v) for k, v in sorted(DEFAULT_MIN_AGREEMENT.items()))))
        CalibrationConfig.add_arguments(parser)
        SearchConfig.add_arguments(parser)

    # keyword (= flag) -> parameter, besides the keywords of the option objects it is made of (PARTS)
    KEYWORDS = {"precision": "precisions", "backend": "backend", "out": "out", "data": "data",
                "verify_images": "verify_images", "batch_size": "batch_size", "tolerance": "tolerance",
                "strict": "strict", "bench_seconds": "throughput_seconds", "throughput_batch": "throughput_batch",
                "min_agreement": "min_agreement"}
    PARTS = (("source", ModelOptions), ("calibration", CalibrationConfig), ("tensorrt", TensorRTOptions),
             ("search", SearchConfig))

    @classmethod
    def keywords(cls):
        """Every keyword ``from_keywords`` (and ``trtkit.build``) takes: the build's own and its parts'."""
        return sorted(set(cls.KEYWORDS).union(*(part.KEYWORDS for _, part in cls.PARTS)))

    @classmethod
    def from_keywords(cls, **values):
        """BuildOptions from keywords (the flags' names with _ for -); each goes to the option object that
        declares it; an unknown one is an InputError naming the closest."""
        from trtkit.keywords import parameters, split
        parts = split(values, cls, *(part for _, part in cls.PARTS))
        own = parameters(cls, parts[0])
        for (name, part), given in zip(cls.PARTS, parts[1:]):
            own[name] = part.from_keywords(**given)
        return cls(**own)

    @classmethod
    def from_args(cls, args):
        return cls.from_keywords(**dict((k, getattr(args, k)) for k in cls.keywords() if hasattr(args, k)))


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
