"""What a model expects at its input: the one description every step preprocesses with.

Calibration, verification, benchmarking and Triton export must feed a model
exactly what it was trained on, so the contract travels with the model
(checkpoint metadata, the manifest) instead of being retyped per step. Values
the user asks for on the command line are *overrides*: they are applied to the
contract the model brings, and a step that finds them contradicting the model
(e.g. an ONNX file with other fixed dimensions) refuses them.
"""

from trtkit.errors import InputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class InputContract(object):
    """NCHW float32, ``channels`` x ``size`` x ``size``, normalized with ``mean``/``std``."""

    def __init__(self, size=224, mean=IMAGENET_MEAN, std=IMAGENET_STD, channels=3):
        self.size = int(size)
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.channels = int(channels)
        if self.size < 1:
            raise InputError("the input size must be at least 1 pixel, got {}".format(size))
        if self.channels not in (1, 3):
            raise InputError("trtkit handles 1- or 3-channel images, not {}".format(channels))
        if any(s <= 0 for s in self.std):
            raise InputError("the normalization std must be positive, got {}".format(list(self.std)))

    @property
    def shape(self):
        """Shape of one image (C, H, W)."""
        return (self.channels, self.size, self.size)

    def to_dict(self):
        return {"size": self.size, "mean": list(self.mean), "std": list(self.std), "channels": self.channels}

    @classmethod
    def from_dict(cls, data):
        return cls(size=data.get("size", 224), mean=data.get("mean", IMAGENET_MEAN),
                   std=data.get("std", IMAGENET_STD), channels=data.get("channels", 3))

    def with_overrides(self, overrides):
        """A copy with the fields in ``overrides`` (from ``overrides_from_args``) replaced."""
        values = self.to_dict()
        values.update(dict((k, v) for k, v in (overrides or {}).items() if v is not None))
        return InputContract.from_dict(values)

    def __eq__(self, other):
        return isinstance(other, InputContract) and self.to_dict() == other.to_dict()

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        return "InputContract(size={}, channels={}, mean={}, std={})".format(
            self.size, self.channels, self.mean, self.std)

    # ---------------------------------------------------------------- command line
    @staticmethod
    def add_arguments(group):
        """The input flags, shared by every command that takes a model (build, calibrate)."""
        group.add_argument("--input-size", type=_positive_int, metavar="PX",
                           help="input height/width (default: the model's)")

    @staticmethod
    def overrides_from_args(args):
        """{field: value} the user set on the command line (unset flags are absent)."""
        overrides = {}
        if args.input_size is not None:
            overrides["size"] = args.input_size
        return overrides


def _positive_int(text):
    import argparse
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a whole number, got '{}'".format(text))
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1, got {}".format(value))
    return value
