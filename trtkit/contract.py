"""What a model expects at its input: the one description every step preprocesses with.

Calibration, verification, benchmarking, Triton export and prediction must feed a
model exactly what it was trained on, so the contract travels with the model
(checkpoint metadata, the ONNX file's fixed dimensions, the manifest) instead of
being retyped per step. ``trtkit.data.preprocess`` is the one function that turns
pixels into a model input by it.

Where a contract comes from, in order: the checkpoint's trtkit metadata (or the
model's own), the ONNX file's fixed dimensions, then the flags. Flags are
*overrides* (``FIELDS``, ``InputContract.overrides``): they fill what the model leaves open and
must agree with what it fixes; ``resolve`` says which flag contradicts what.
"""

from trtkit.errors import InputError
from trtkit.keywords import Field

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_FRACTION = 0.875  # ImageNet evaluation: shorter side to size / 0.875, then the centre crop
RESIZE_MODES = ("crop", "pad", "height", "letterbox", "stretch")
# how pixels are interpolated when resizing: PIL's bilinear (antialiased when shrinking, as torchvision's PIL
# transforms), OpenCV's INTER_LINEAR (not antialiased: cv2.resize, as most TF/TFLite/OpenCV packages feed their
# models; measured: fer's emotion model gave another answer on 20% of shrunk faces under PIL's) or bilinear without
# half-pixel centres (asymmetric: MediaPipe's ImageToTensorCalculator; measured: its palm detector agreed with
# MediaPipe at F1 0.899 under opencv's sampling, 9 palms more than its 40, docs/blind-tests.md)
# tf: bilinear with half-pixel centres in float, no antialiasing and no rounding to 8 bits (tf.image.resize,
# ONNX Resize linear/half_pixel: what a TensorFlow detection export does inside, ``onnx.inner_resize``)
RESIZE_FILTERS = ("pil", "opencv", "asymmetric", "tf")
# a photo's EXIF orientation: the pixels as stored (PIL, torchvision's loaders; default) or turned upright as
# OpenCV's imread does (measured: face-mask-detector reads with cv2.imread; on phone photos stored sideways
# with an orientation tag trtkit answered like it on the upright copies only)
EXIF_ORIENTATIONS = ("ignore", "apply")
CHANNEL_ORDERS = ("rgb", "bgr")
PIXEL_SCALES = (1.0, 255.0)
LAYOUTS = ("nchw", "nhwc")
INPUT_DTYPES = ("float32", "uint8")


class InputContract(object):
    """A model input: NCHW float32 of ``channels`` x ``height`` x ``width``.

    Pixels are read as ``channel_order`` (rgb or bgr; 1-channel models get
    grayscale), scaled to 0..``pixel_scale`` (1 or 255), normalized as
    ``(x - mean) / std`` (per channel, in the same scale; default ImageNet's for RGB, 0.5 for
    grayscale), and fitted to the
    size by ``resize``: ``crop`` (shorter side to size/0.875, centre crop, as
    torchvision's ImageNet evaluation), ``pad`` (keep the aspect ratio, fit
    inside, pad right/bottom with zeros after normalization), ``height``
    (the height to the input's, the width by the aspect ratio and squashed when
    wider, pad right: PaddleOCR's text lines), ``letterbox`` (keep the aspect ratio, fit inside, centred on
    grey 114: ultralytics' YOLO) or ``stretch`` (plain resize). ``class_names`` (optional) name the outputs.
    ``pad_value``: the pixel value (0-255, normalized as the image) the padded part holds instead, for models
    trained on a grey canvas (YOLOX and ddddocr paste the image top-left on 114: fed zeros, ddddocr's captchas
    lose 5% of its characters); None: zeros after normalization for pad/height, 114 for letterbox.

    ``layout`` and ``input_dtype`` record the model's *own* input (a Keras model's
    NHWC, a uint8 pixel input): trtkit's artifacts always take NCHW float32, the
    ONNX front end rewrites such graphs (``trtkit.onnx.layout``). A uint8 model
    normalizes its pixels itself, so its contract is pixel scale 255, mean 0, std 1.
    """

    def __init__(self, size=224, mean=None, std=None, channels=3, channel_order="rgb",
                 pixel_scale=1.0, resize="crop", class_names=None, layout="nchw", input_dtype="float32",
                 resize_filter="pil", exif_orientation="ignore", pad_value=None):
        self.height, self.width = parse_size(size)
        self.channels = int(channels)
        if self.channels not in (1, 3):
            raise InputError("trtkit handles 1- or 3-channel images, not {}".format(channels),
                             hint="use --channels 1 or 3")
        self.mean = _per_channel(_default_mean(self.channels) if mean is None else mean, self.channels, "mean")
        self.std = _per_channel(_default_std(self.channels) if std is None else std, self.channels, "std")
        if any(s == 0 for s in self.std):  # a negative std inverts: (x - m) / -s == ((1 - x) - (1 - m)) / s
            raise InputError("the normalization std must not be 0, got {}".format(list(self.std)))
        self.channel_order = str(channel_order).lower()
        if self.channel_order not in CHANNEL_ORDERS:
            raise InputError("unknown channel order '{}'".format(channel_order), hint="use rgb or bgr")
        self.pixel_scale = float(pixel_scale)
        if self.pixel_scale not in PIXEL_SCALES:
            raise InputError("--pixel-scale must be 1 (inputs in 0-1) or 255 (inputs in 0-255), got {:g}".format(
                self.pixel_scale))
        self.resize = str(resize).lower()
        if self.resize not in RESIZE_MODES:
            raise InputError("unknown resize mode '{}'".format(resize),
                         hint="use {} or {}".format(", ".join(RESIZE_MODES[:-1]), RESIZE_MODES[-1]))
        self.resize_filter = str(resize_filter).lower()
        if self.resize_filter not in RESIZE_FILTERS:
            raise InputError("unknown resize filter '{}'".format(resize_filter),
                             hint="use pil, opencv, asymmetric or tf")
        self.exif_orientation = str(exif_orientation).lower()
        if self.exif_orientation not in EXIF_ORIENTATIONS:
            raise InputError("unknown EXIF orientation handling '{}'".format(exif_orientation),
                             hint="use ignore or apply")
        self.pad_value = None if pad_value is None else float(pad_value)
        if self.pad_value is not None and not 0.0 <= self.pad_value <= 255.0:
            raise InputError("--pad-value is a pixel value 0-255, got {:g}".format(self.pad_value),
                             hint="114 for YOLOX's grey canvas; leave it out for zeros after normalization")
        self.class_names = list(class_names) if class_names is not None else None
        self.layout = str(layout).lower()
        if self.layout not in LAYOUTS:
            raise InputError("unknown layout '{}'".format(layout), hint="use nchw or nhwc")
        self.input_dtype = str(input_dtype).lower()
        if self.input_dtype not in INPUT_DTYPES:
            raise InputError("unknown input type '{}'".format(input_dtype), hint="float32 or uint8")
        if self.input_dtype == "uint8" and (self.pixel_scale != 255.0 or set(self.mean) != {0.0} or
                                            set(self.std) != {1.0}):
            raise InputError("a model with a uint8 input takes raw 0-255 pixels and normalizes them itself: "
                             "--pixel-scale 255 --mean 0 --std 1, not {:g}, {}, {}".format(
                                 self.pixel_scale, list(self.mean), list(self.std)),
                             hint="drop --pixel-scale, --mean and --std")

    @property
    def size(self):
        """(height, width)."""
        return (self.height, self.width)

    @property
    def square(self):
        return self.height == self.width

    @property
    def shape(self):
        """Shape of one image (C, H, W)."""
        return (self.channels, self.height, self.width)

    def to_dict(self):
        # "size": N for square inputs as manifests always had it, [H, W] otherwise; "height"/"width" always
        return {"size": self.height if self.square else [self.height, self.width],
                "height": self.height, "width": self.width,
                "channels": self.channels, "channel_order": self.channel_order, "mean": list(self.mean),
                "std": list(self.std), "pixel_scale": self.pixel_scale, "resize": self.resize,
                "class_names": self.class_names, "layout": self.layout, "input_dtype": self.input_dtype,
                "resize_filter": self.resize_filter, "exif_orientation": self.exif_orientation,
                "pad_value": self.pad_value}

    @classmethod
    def from_dict(cls, data):
        """From ``to_dict`` output, or an older record ({"size": N, "mean", "std", "channels"})."""
        size = data.get("size", 224)
        if "height" in data and "width" in data:
            size = (data["height"], data["width"])
        channels = data.get("channels", 3)
        return cls(size=size, mean=data.get("mean", _default_mean(channels)),
                   std=data.get("std", _default_std(channels)), channels=channels,
                   channel_order=data.get("channel_order", "rgb"), pixel_scale=data.get("pixel_scale", 1.0),
                   resize=data.get("resize", "crop"), class_names=data.get("class_names"),
                   layout=data.get("layout", "nchw"), input_dtype=data.get("input_dtype", "float32"),
                   resize_filter=data.get("resize_filter", "pil"),
                   exif_orientation=data.get("exif_orientation", "ignore"), pad_value=data.get("pad_value"))

    def preprocessing_key(self):
        """What changes the pixels a model gets (class names excluded; layout and input type too, as trtkit's
        artifacts take NCHW float32 whatever the model's own input was): keys caches of preprocessed data."""
        record = self.to_dict()
        for name in ("class_names", "layout", "input_dtype"):
            record.pop(name)
        for name, default in (("resize_filter", "pil"), ("exif_orientation", "ignore"), ("pad_value", None)):
            if record[name] == default:  # the keys made before the field existed stay valid
                record.pop(name)
        return repr(sorted(record.items()))

    def with_overrides(self, overrides):
        """A copy with the fields in ``overrides`` (``InputContract.overrides``) replaced."""
        values = self.to_dict()
        overrides = dict((k, v) for k, v in (overrides or {}).items() if v is not None)
        if "channels" in overrides and overrides["channels"] != self.channels:
            values["mean"], values["std"] = _default_mean(overrides["channels"]), _default_std(overrides["channels"])
        if overrides.get("input_dtype") == "uint8" and self.input_dtype != "uint8":
            values.update(UINT8_PIXELS)  # the graph normalizes itself: flags may still say so, not otherwise
        values.update(overrides)
        values.pop("height")
        values.pop("width")
        return InputContract.from_dict(values)

    def __eq__(self, other):
        return isinstance(other, InputContract) and self.to_dict() == other.to_dict()

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __repr__(self):
        return "InputContract({}x{}x{}, {}, scale {:g}, {}, mean={}, std={})".format(
            self.channels, self.height, self.width, self.channel_order, self.pixel_scale, self.resize,
            self.mean, self.std)

    @staticmethod
    def overrides(values):
        """``{field: value}`` (the fields of ``FIELDS``, e.g. ``{"size": "48x192", "mean": 0.5}``) checked and
        parsed as their flags are; None values are left out (not given)."""
        fields = dict((f.param, f) for f in FIELDS)
        result = {}
        for name, value in dict(values or {}).items():
            if name not in fields:
                raise InputError("the input contract has no field '{}'".format(name),
                                 hint="use " + ", ".join(sorted(fields)))
            if value is not None:
                result[name] = fields[name].parameter(value)
        return result


UINT8_PIXELS = {"pixel_scale": 255.0, "mean": (0.0,), "std": (1.0,)}


def float_to_chw(array, contract):
    """Preprocessed float images ``array`` (one image, or a batch with N first) in trtkit's C x H x W, taking them
    in the model's *own* layout too: a Keras/TFLite model's user holds NHWC floats (``contract.layout``), and
    trtkit's internal NCHW rewrite of its graph must not leak into that user's data contract (measured before:
    a Keras classifier with input [N, 28, 28, 1] refused its own preprocessed 28x28x1 floats with "the model
    expects 1x28x28"). An array already C x H x W is returned as it is; any other shape too (the callers' shape
    checks say what is wrong with it)."""
    own = (contract.height, contract.width, contract.channels)
    if contract.layout != "nhwc" or contract.shape == own or tuple(array.shape[-3:]) != own:
        return array
    axes = list(range(array.ndim - 3)) + [array.ndim - 1, array.ndim - 3, array.ndim - 2]
    return array.transpose(axes)


def check_float_input(array, contract, what):
    """InputError unless float model inputs ``array`` can feed ``contract``'s model: for a model with a uint8
    input (``input_dtype``), they must be whole 0-255 pixel values, not normalized floats."""
    import numpy as np
    if contract.input_dtype != "uint8" or array.size == 0:
        return
    low, high = float(np.min(array)), float(np.max(array))
    if low < 0 or high > 255 or not np.all(np.equal(np.mod(array, 1), 0)):
        raise InputError("{} holds float values in [{:.3g}, {:.3g}], but the model takes uint8 pixels 0-255 and "
                         "normalizes them itself".format(what, low, high),
                         hint="pass the images (files, uint8 arrays), or float batches of whole 0-255 pixel values")


def resolve(base, overrides, fixed=None, what="the model"):
    """The contract: ``base`` (the model's own, or None) with ``overrides`` applied.

    ``fixed`` holds what the model file fixes and no flag may change
    ({"size": (h, w), "channels": c}, entries may be None). A flag that
    contradicts it is an InputError naming both.
    """
    overrides = dict(overrides or {})
    fixed = dict((k, v) for k, v in (fixed or {}).items() if v is not None)
    if "size" in overrides:
        overrides["size"] = parse_size(overrides["size"])
    channels = fixed.get("channels") or overrides.get("channels") or (base.channels if base else 3)
    for field, value in fixed.items():
        asked = overrides.get(field)
        if field in ("mean", "std") and asked is not None:  # 0 and 0,0,0 say the same
            asked, value = _per_channel(asked, channels, field), _per_channel(value, channels, field)
        if asked is not None and asked != value:
            raise InputError("{} {} does not match {}'s fixed {} {}".format(
                _flag(field), _show(asked, field), what, field.replace("_", " "), _show(value, field)),
                hint="drop {}: {} fixes it".format(_flag(field), what))
    values = dict(fixed, **overrides)
    if base is None:
        base = InputContract(size=values.get("size", 224), channels=values.get("channels", 3))
    return base.with_overrides(values)


def parse_image_sizes(value):
    """"128,1024", "128,256,512,1024" or a list of them -> (smallest, largest): the image sizes (height and
    width each) a build's artifacts must run at; InputError otherwise."""
    parts = value if isinstance(value, (list, tuple)) else str(value).replace(":", ",").split(",")
    try:
        numbers = [int(p) for p in parts if str(p).strip()]
    except (TypeError, ValueError):
        numbers = []
    if not numbers or min(numbers) < 1:
        raise InputError("image sizes {!r} are not a list of sizes".format(value),
                         hint="e.g. --image-sizes 128,1024 (the smallest and largest)")
    return min(numbers), max(numbers)


def parse_size(value):
    """224, "224", "48x192", (48, 192) or [48, 192] -> (height, width); InputError otherwise."""
    if isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = str(value).lower().replace("*", "x").split("x")
    try:
        numbers = [int(p) for p in parts]
    except (TypeError, ValueError):
        numbers = []
    if len(numbers) == 1:
        numbers = numbers * 2
    if len(numbers) != 2 or min(numbers) < 1:
        raise InputError("input size {!r} is not N or HxW".format(value), hint="e.g. --input-size 224 or 48x192")
    return numbers[0], numbers[1]


def read_class_names(path):
    """Class names from a file: a JSON list (or {index: name}), else one name per line."""
    import json
    import os
    if not os.path.isfile(path):
        raise InputError("class names file not found: {}".format(path))
    with open(path, "r") as handle:
        text = handle.read()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        try:
            data = [data[k] for k in sorted(data, key=int)]
        except ValueError:
            raise InputError("{}: a JSON object of class names must be keyed by class index".format(path))
    if isinstance(data, list):
        names = [str(n) for n in data]
    else:
        names = [line.strip() for line in text.splitlines() if line.strip()]
    if not names:
        raise InputError("{} holds no class names".format(path), hint="one name per line, or a JSON list")
    return names


def _per_channel(values, channels, what):
    if isinstance(values, (int, float)):
        values = [values]
    values = [float(v) for v in values]
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        raise InputError("--{} has {} values; the model has {} channel(s)".format(what, len(values), channels),
                         hint="give one value, or one per channel")
    return tuple(values)


def _default_mean(channels):
    return IMAGENET_MEAN if channels == 3 else (0.5,)


def _default_std(channels):
    return IMAGENET_STD if channels == 3 else (0.5,)


def _flag(field):
    return "--input-size" if field == "size" else "--" + field.replace("_", "-")


def _show(value, field="size"):
    if isinstance(value, tuple):
        return ("x" if field == "size" else ",").join("{:g}".format(v) if isinstance(v, float) else str(v)
                                                       for v in value)
    return "{:g}".format(value) if isinstance(value, float) else str(value)


def _size_arg(text):
    import argparse
    try:
        return parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message)


def _floats_arg(text):
    import argparse
    try:
        return tuple(float(v) for v in str(text).split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("expected numbers separated by commas, got '{}'".format(text))


def _floats(value):
    """0.5, [0.5], (0.5, 0.5, 0.5) and "0.5,0.5,0.5" -> a tuple of floats (per channel, or one for all)."""
    try:
        return tuple(float(v) for v in (value.split(",") if isinstance(value, str) else
                                        value if isinstance(value, (list, tuple)) else [value]) if str(v).strip())
    except (TypeError, ValueError):
        raise InputError("a mean or std takes numbers separated by commas, got {!r}".format(value))


def _class_names(value):
    """A list of names, or a file of them (``read_class_names``)."""
    return read_class_names(value) if isinstance(value, str) else [str(name) for name in value]


# The input flags every command taking a model has (build, calibrate), as overrides of the contract's fields:
# keyword (= the flag's name) and the field it sets, declared once (``trtkit.keywords``).
FIELDS = (
    Field("input_size", "size", parse=parse_size, type=_size_arg, metavar="N|HxW",
          help="input size, N (square) or HxW e.g. 48x192 (default: the model's)"),
    Field("channels", parse=int, type=int, choices=[1, 3],
          help="input channels (default: the model's, else 3)"),
    Field("channel_order", choices=list(CHANNEL_ORDERS),
          help="channel order the model was trained on (default: rgb; Caffe models: bgr)"),
    Field("mean", parse=_floats, type=_floats_arg, metavar="M[,M,M]",
          help="per-channel mean, in the --pixel-scale units (default: ImageNet's)"),
    Field("std", parse=_floats, type=_floats_arg, metavar="S[,S,S]",
          help="per-channel std, in the --pixel-scale units (default: ImageNet's); a negative std inverts the "
               "image: a model fed 1 - x normalized by M, S takes --mean 1-M --std -S"),
    Field("pixel_scale", parse=float, type=float, choices=list(PIXEL_SCALES),
          help="1: pixels in 0-1 before normalizing (default); 255: in 0-255"),
    Field("resize", choices=list(RESIZE_MODES),
          help="crop: shorter side to size/0.875 then centre crop (ImageNet; default); pad: keep the aspect ratio, "
               "fit inside and pad right/bottom; height: the height to the input's, width by the aspect ratio "
               "(squashed when wider), pad right (PaddleOCR text lines); letterbox: keep the aspect ratio, fit inside, "
               "centred on grey 114 (ultralytics' YOLO); stretch: plain resize"),
    Field("resize_filter", choices=list(RESIZE_FILTERS),
          help="pixel interpolation when resizing: pil (PIL's bilinear, antialiased when shrinking, as torchvision's "
               "PIL transforms; default), opencv (cv2.resize INTER_LINEAR, not antialiased: what TF/TFLite "
               "and OpenCV-based packages feed their models, and for one channel cv2.imread's grey), asymmetric "
               "(bilinear without half-pixel centres, not antialiased: MediaPipe's ImageToTensorCalculator, TF1's "
               "resize_bilinear; with letterbox, MediaPipe's keep_aspect_ratio centred unrounded; padding 0 for "
               "MediaPipe's BORDER_ZERO: --pad-value 0) or tf (bilinear with half-pixel centres in float, not "
               "antialiased nor rounded: tf.image.resize, ONNX Resize linear; the default of a TensorFlow "
               "detection export that resizes inside); match the model's own pipeline"),
    Field("pad_value", parse=float, type=float, metavar="V",
          help="the pixel value (0-255) padding holds for pad, height and letterbox, normalized as the image "
               "(default: zeros after normalization; letterbox 114): 114 for YOLOX-style models pasted on grey"),
    Field("exif_orientation", choices=list(EXIF_ORIENTATIONS),
          help="a photo's EXIF orientation tag: ignore (the pixels as stored, as PIL and torchvision's loaders; "
               "default) or apply (turned upright, as OpenCV's imread: match the model's own pipeline)"),
    Field("layout", choices=list(LAYOUTS),
          help="the ONNX model's input layout (default: read from the graph; NHWC inputs, as tf2onnx writes Keras "
               "models, are rewritten to take NCHW)"),
    Field("class_names", parse=_class_names, metavar="FILE",
          help="class names, one per line or a JSON list (default: from the data: folder names, CIFAR-10's meta "
               "file)"),
)
