"""CalibrationConfig: every choice an INT8 calibration makes, validated when made.

One object carries the calibration options from the command line (or a Python
caller) to ``precision.calibrate``; ``build`` and ``calibrate`` share its
argument group, and the build manifest records it, so a calibration can be
repeated from what the manifest says.
"""

from trtkit.errors import InputError
from trtkit.keywords import Field, Options, add_fields
from trtkit.precision.ranges import DEFAULT_METHOD, DEFAULT_PERCENTILE, METHODS, check_method

from trtkit.precision.adaround import IMAGES as _ADAROUND_IMAGES, ITERATIONS as _ADAROUND_STEPS

DEFAULT_CALIB_IMAGES = 512
DEFAULT_CALIB_BATCH = 32
_DATA_HELP = ("images to calibrate on: a folder, CIFAR-10 folder, .npy/.npz or 'sample'; only its train split is used "
              "(default: {})")


class CalibrationConfig(Options):
    """How INT8 ranges are computed.

    ``data`` is the image source (None: the caller's default, the build's
    ``--data``); ``images`` are drawn seeded (``seed``) from its *train* split;
    ``use_cache`` reuses matching statistics/ranges from trtkit's cache;
    ``trt_version`` (a tuple) is written in the TensorRT calibration cache header
    (None: the installed TensorRT's, else 8.5.2); ``cpu_isa`` is the x86 CPU the
    ``cpu`` INT8 encoding is made for (``auto``: this one; ``avx2``: uint8 weights
    for CPUs without VNNI; see ``trtkit.cpuinfo``).
    """

    def __init__(self, method=None, images=DEFAULT_CALIB_IMAGES, batch=None,
                 percentile=DEFAULT_PERCENTILE, seed=0, data=None, use_cache=True, trt_version=None,
                 cpu_isa="auto", float_depthwise=None, bias_correction=None, equalize=None, rounding=None):
        self.method_given = method is not None  # else the task's default (``for_task``), entropy for classifiers
        self.method = check_method(DEFAULT_METHOD if method is None else method)
        from trtkit.precision.depthwise import check_rule
        # which depthwise convs stay float with their inputs (precision.depthwise.RULES); None: the task's
        self.float_depthwise_given = float_depthwise is not None
        self.float_depthwise = check_rule(float_depthwise)
        from trtkit.precision.biascorr import DEFAULT_RULE, check_rule as check_correction
        # each INT8 layer's output mean restored against FP32 in its bias (precision.biascorr)
        self.bias_correction = check_correction(DEFAULT_RULE if bias_correction is None else bias_correction)
        from trtkit.precision import equalize as equalization
        # each conv's output channels rescaled into the next conv before calibration (precision.equalize)
        self.equalize = equalization.check_rule(equalization.DEFAULT_RULE if equalize is None else equalize)
        from trtkit.precision.adaround import check_rule as check_rounding
        # how weights are rounded to their INT8 levels: nearest, or learned on FP32 or INT8 inputs
        # (precision.adaround)
        self.rounding = check_rounding(rounding)
        self.images = int(images)
        # None: DEFAULT_CALIB_BATCH, or all the calibration images when they are fewer (``batch_for``)
        self.batch_given = batch is not None
        self.batch = int(DEFAULT_CALIB_BATCH if batch is None else batch)
        self.percentile = float(percentile)
        self.seed = int(seed)
        self.data = data
        self.use_cache = bool(use_cache)
        self.trt_version = _version(trt_version)
        from trtkit.cpuinfo import TARGETS
        self.cpu_isa = str(cpu_isa).lower()
        if self.cpu_isa not in TARGETS:
            raise InputError("unknown --cpu-isa '{}'".format(cpu_isa), hint="use " + ", ".join(TARGETS))
        if self.images < 1:
            raise InputError("--calib-images must be at least 1, got {}".format(images))
        if self.batch < 1:
            raise InputError("the calibration batch size must be at least 1, got {}".format(batch))
        if not 0.0 < self.percentile <= 100.0:
            raise InputError("percentile must be in (0, 100], got {}".format(percentile), hint="e.g. 99.99")
        if self.rounding != "nearest" and self.bias_correction != "off":
            # the correction measures INT8 against the graph it writes from, here the rounded one: the shift of
            # the channel means that rounding makes, which it exists to take back, would be invisible to it
            raise InputError("--int8-rounding {} and --int8-bias-correction {} cannot be combined yet: the "
                             "correction would be measured against the rounded weights, not FP32's".format(
                                 self.rounding, self.bias_correction),
                             hint="use one of them (learned rounding already fits each layer's outputs to FP32's)")

    def data_or(self, default):
        """The calibration image source, else ``default`` (the build's verification source)."""
        return self.data if self.data is not None else default

    def for_task(self, task):
        """This config with ``task``'s own range method (``Task.calibration_method``) when none was given, and
        its float layers (``Task.int8_float_depthwise``)."""
        wanted = getattr(task, "calibration_method", None)
        from trtkit.precision.depthwise import check_rule
        depthwise = self.float_depthwise if self.float_depthwise_given else check_rule(
            getattr(task, "int8_float_depthwise", "off"))
        if (self.method_given or not wanted or wanted == self.method) and depthwise == self.float_depthwise:
            return self
        import copy
        resolved = copy.copy(self)
        if not (self.method_given or not wanted):
            resolved.method = check_method(wanted)
        resolved.float_depthwise = depthwise
        return resolved

    def to_keywords(self):
        values = Options.to_keywords(self)
        if not self.method_given:  # a method left to the task stays so through a round trip
            values["calib_method"] = None
        if not self.float_depthwise_given:
            values["int8_float_depthwise"] = None
        if not self.batch_given:
            values["calib_batch_size"] = None
        return values

    def batch_for(self, count):
        """The statistics pass's batch for ``count`` calibration images: the one given, else the default or
        ``count`` when fewer (the ranges do not depend on it: a small data folder's 29 images are calibrated
        whole instead of failing the INT8 variant)."""
        return self.batch if self.batch_given or count < 1 else min(self.batch, count)

    def to_dict(self):
        return {"method": self.method, "images": self.images, "batch": self.batch,
                "percentile": self.percentile if self.method == "percentile" else None, "seed": self.seed,
                "data": None if self.data is None else str(self.data), "use_cache": self.use_cache,
                "trt_version": ".".join(str(p) for p in self.trt_version) if self.trt_version else None,
                "cpu_isa": self.cpu_isa, "float_depthwise": self.float_depthwise,
                "bias_correction": self.bias_correction, "equalize": self.equalize, "rounding": self.rounding}

    @classmethod
    def add_arguments(cls, parser, data_default="the --data source"):
        """The "calibration (INT8)" group, shared by 'trtkit build' and 'trtkit calibrate' (whose images
        default to another source: ``data_default``)."""
        add_fields(parser.add_argument_group(*cls.GROUP), cls.FIELDS,
                   {"calib_data": {"help": _DATA_HELP.format(data_default)}})

    GROUP = ("calibration (INT8)",)
    FIELDS = (
        Field("calib_data", "data", metavar="SOURCE", help=_DATA_HELP.format("the --data source")),
        Field("calib_images", "images", type=int, metavar="N",
              help="calibration images, drawn seeded from the train split (default: {})".format(DEFAULT_CALIB_IMAGES)),
        Field("calib_method", "method", choices=list(METHODS),
              help="range method per activation (default: entropy; minmax for detectors, whose objects live in "
                   "the activations' tails); entropy: TensorRT's EntropyCalibration2 KL cut where it "
                   "is sound, and the MSE-optimal range where the KL cut is degenerate (it clips over 1%% of the "
                   "values: tensors that never come near zero, e.g. hardsigmoid or offset outputs); the calibration "
                   "report and the manifest count which rule gave each range; mse: the range with the least INT8 "
                   "quantization error everywhere; percentile (--calib-percentile); minmax: never clips"),
        Field("calib_percentile", "percentile", type=float, metavar="P",
              help="percentile for --calib-method percentile (default: {:g})".format(DEFAULT_PERCENTILE)),
        Field("calib_batch_size", "batch", type=int, metavar="B",
              help="batch size of the statistics pass (default: {}, or all the calibration images when they are "
                   "fewer)".format(DEFAULT_CALIB_BATCH)),
        Field("no_calib_cache", "use_cache", negate=True, action="store_true",
              help="recompute the calibration ranges even when a cached calibration matches"),
        Field("trt_version", metavar="X.Y.Z",
              help="TensorRT version written in the calibration cache header (default: the installed tensorrt, "
                   "else 8.5.2)"),
        Field("cpu_isa", choices=["auto", "vnni", "avx2"],
              help="the x86 CPU a CPU INT8 artifact is for: vnni (AVX-512 VNNI / AVX-VNNI: int8 weights), avx2 "
                   "(no VNNI: uint8 weights, run by saturation-free U8U8 kernels, as u8 x s8 pairs saturate there), or auto: this machine's (default); "
                   "the manifest records it and runners warn on a CPU it does not fit"),
        Field("int8_float_depthwise", "float_depthwise", choices=["off", "measured", "all"],
              help="depthwise convs an INT8 graph keeps in float, with their input and the layers producing it: "
                   "measured (those whose output loses SQNR under 25 dB from their quantized input, measured on "
                   "a few calibration images; the detectors' default), all, or off (everything else's default); "
                   "the manifest records which and how many layers are float"),
        Field("int8_bias_correction", "bias_correction", choices=["off", "fast"],
              help="fast: each INT8 layer's bias takes back the shift of its output channels' mean against FP32, "
                   "layer after layer in graph order on the first calibration images (a channel only where the "
                   "shift is over 3 standard errors, a layer only where it helps on images it was not fitted on, "
                   "the whole only where the outputs agree better with FP32); off (default: {}); the manifest "
                   "records what was corrected".format("off")),
        Field("int8_equalize", "equalize", choices=["off", "cle"],
              help="cle: cross-layer equalization before calibration: each conv's output channels scaled into the "
                   "next conv (through ReLU, a zero Pad, or ReLU6 where its clip is inactive on the calibration "
                   "images; depthwise-pointwise pairs included) so a per-tensor activation range fits all its "
                   "channels; the FP32 function is unchanged; off (default); the manifest records the pairs and "
                   "channels scaled"),
        Field("int8_rounding", "rounding", choices=["nearest", "adaround", "adaround-q"],
              help="how INT8 weights are rounded to their per-channel levels: nearest (default), or adaround: "
                   "up or down per weight, learned layer by layer (AdaRound: {} Adam steps per layer) so that the "
                   "layer's output on the first {} calibration images' FP32 inputs changes least; kept per layer "
                   "only where it beats nearest on held-out images; the same scales, so every runtime reads the "
                   "learned integers; the manifest records the layers and weights changed; adaround-q: the same, "
                   "learned after calibration on the inputs each layer sees in the INT8 graph (activations "
                   "quantized with the calibrated ranges, earlier layers on their learned integers: "
                   "||W x - W~ x~||^2, one pass of the images per layer), so it also pays back upstream activation "
                   "error; an option: better than nearest on the corpus, but minutes of build time and PyTorch".format(
                       _ADAROUND_STEPS, _ADAROUND_IMAGES)),
    )


def _version(value):
    if value is None or isinstance(value, tuple):
        return value
    from trtkit.versions import parse_version
    return parse_version(value, what="TensorRT version")
