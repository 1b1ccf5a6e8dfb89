"""TensorRTOptions: the choices a TensorRT engine build makes, validated when made.

The "TensorRT" argument group of ``trtkit build`` becomes one of these and is
handed to ``Backend.build`` (inside ``BuildInputs``); the builder, the
torch2trt path and the manifest read it, and nothing else carries TensorRT
options. Parsing and checking the batch profile and target GPUs happens here,
once, so a bad value fails before any model is exported.
"""

from trtkit.errors import InputError
from trtkit.keywords import Field, Options

VIAS = ("onnx", "torch2trt")
INT8_PATHS = ("qdq", "implicit")


class TensorRTOptions(Options):
    """``batch``: (min, opt, max) or None (the build's default profile); ``workspace_mib``: builder
    workspace (None: the TensorRT default); ``timing_cache``: file path (None: one per TensorRT and
    GPU in trtkit's cache); ``dla_core``: int or None; ``compute_capabilities``: list like
    ["8.6", "current"] or None (TensorRT-RTX targets); ``via``: onnx or torch2trt; ``int8_path``:
    qdq, implicit or None (implicit when ``calib_cache`` is given, else qdq); ``calib_cache``: a
    TensorRT calibration cache file for the implicit path (read when present, else written).
    """

    def __init__(self, batch=None, workspace_mib=None, timing_cache=None, dla_core=None, compute_capabilities=None,
                 via="onnx", int8_path=None, calib_cache=None):
        self.batch = parse_batch(batch) if batch is not None else None
        self.workspace_mib = float(workspace_mib) if workspace_mib is not None else None
        self.timing_cache = timing_cache
        self.dla_core = int(dla_core) if dla_core is not None else None
        self.compute_capabilities = (parse_compute_capabilities(compute_capabilities)
                                     if compute_capabilities is not None else None)
        self.via = via or "onnx"
        self.int8_path = int8_path
        self.calib_cache = calib_cache
        if self.workspace_mib is not None and self.workspace_mib <= 0:
            raise InputError("--workspace must be a positive number of MiB, got {:g}".format(self.workspace_mib))
        if self.dla_core is not None and self.dla_core < 0:
            raise InputError("--dla-core must be 0 or more, got {}".format(self.dla_core))
        if self.dla_core is not None and self.batch is not None and len(set(self.batch)) != 1:
            raise InputError("DLA engines need one fixed batch: --batch {} has MIN, OPT and MAX differing".format(
                ":".join(str(b) for b in self.batch)), hint="e.g. --batch 8 (min = opt = max)")
        if self.via not in VIAS:
            raise InputError("unknown --via {}".format(self.via), hint="use onnx or torch2trt")
        if self.int8_path is not None and self.int8_path not in INT8_PATHS:
            raise InputError("unknown --int8-path {}".format(self.int8_path), hint="use qdq or implicit")

    def resolved_int8_path(self):
        """qdq or implicit: implicit when asked for, or when a calibration cache file is given."""
        return self.int8_path or ("implicit" if self.calib_cache else "qdq")

    def profile(self, default):
        """The (min, opt, max) batch profile: ``--batch``, else ``default`` (fixed at OPT for DLA)."""
        if self.batch is not None:
            return self.batch
        low, opt, high = default
        if self.dla_core is not None:
            return (opt, opt, opt)
        return (low, opt, high)

    def to_dict(self):
        return {"batch": list(self.batch) if self.batch else None, "workspace_mib": self.workspace_mib,
                "timing_cache": self.timing_cache, "dla_core": self.dla_core,
                "compute_capabilities": self.compute_capabilities, "via": self.via,
                "int8_path": self.int8_path, "calib_cache": self.calib_cache}

    GROUP = ("TensorRT", "options of --backend tensorrt / tensorrt-rtx")
    FIELDS = (
        Field("batch", metavar="MIN:OPT:MAX",
              help="dynamic-batch optimization profile, or one number for a fixed batch (default: "
                   "1:THROUGHPUT_BATCH:BATCH_SIZE; with --dla-core the fixed OPT)"),
        Field("workspace", "workspace_mib", type=float, metavar="MIB",
              help="builder workspace limit in MiB (default: TensorRT's)"),
        Field("timing_cache", metavar="FILE",
              help="timing cache reused across builds (default: one per TensorRT version and GPU in trtkit's cache "
                   "folder; TensorRT-RTX has none)"),
        Field("dla_core", type=int, metavar="N",
              help="build for DLA core N with GPU fallback (Jetson Xavier/Orin; FP16/INT8 and a fixed batch only)"),
        Field("compute_capability", "compute_capabilities", metavar="LIST",
              help="TensorRT-RTX target GPUs, e.g. 8.6,8.9 or 'current' (default: TensorRT-RTX's set)"),
        Field("via", choices=list(VIAS),
              help="onnx (default) or torch2trt: convert the PyTorch model directly (needs torch2trt, built from "
                   "source: github.com/NVIDIA-AI-IOT/torch2trt)"),
        Field("int8_path", choices=list(INT8_PATHS),
              help="qdq (default): INT8 from the Q/DQ ONNX, every TensorRT; implicit: FP32 ONNX + calibrator, "
                   "TensorRT <= 10 only"),
        Field("calib_cache", metavar="FILE",
              help="TensorRT calibration cache for the implicit INT8 path (read if present, else written)"),
    )


def parse_batch(value):
    """"min:opt:max", one number (a fixed batch) or a 3-sequence -> (min, opt, max) integers."""
    if isinstance(value, (list, tuple)):
        pieces = list(value)
    else:
        pieces = str(value).split(":")
    try:
        values = [int(p) for p in pieces]
    except (TypeError, ValueError):
        values = []
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or not 1 <= values[0] <= values[1] <= values[2]:
        raise InputError("--batch {} is not MIN:OPT:MAX with 1 <= MIN <= OPT <= MAX".format(
            ":".join(str(p) for p in pieces)), hint="e.g. --batch 1:8:32")
    return tuple(values)


def parse_compute_capabilities(value):
    """"8.6,8.9", "SM86", "current" or a list of those -> ["8.6", "8.9"] / ["current"]."""
    text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
    items = [t.strip().lower().replace("sm", "") for t in text.split(",") if t.strip()]
    if not items:
        raise InputError("--compute-capability is empty", hint="e.g. 8.6,8.9 or current")
    for item in items:
        if item != "current" and not (item.replace(".", "").isdigit() and len(item.replace(".", "")) >= 2):
            raise InputError("--compute-capability {} is not a list like 8.6,8.9 or 'current'".format(text))
    return [i if i == "current" or "." in i else "{}.{}".format(i[:-1], i[-1]) for i in items]
