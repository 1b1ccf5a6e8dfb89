"""TrainConfig: every setting that decides a training trajectory, saved in the checkpoint.

``--resume`` rebuilds the run from this record, so a resumed run takes the
same steps as an uninterrupted one whatever the command line says.
"""

from trtkit.errors import InputError

OPTIMIZERS = ("sgd", "adamw")
SGD_LR_PER_256 = 0.1  # SGD's peak learning rate per 256 images of batch (``TrainConfig.base_lr``)
SGD_RULE_FROM = 128  # the batch from which it scales; smaller batches keep this batch's rate

DEFAULTS = {
    "model": "resnet18", "stem": None, "input_size": None, "data": "sample", "limit": None,
    "mode": "fp32", "channels_last": False, "device": "auto",
    "epochs": 6, "batch_size": 64, "optimizer": "sgd", "lr": None, "momentum": 0.9, "weight_decay": 5e-4,
    "warmup": 0.25, "label_smoothing": 0.05, "clip_grad": None,
    "seed": 0, "flip": None, "pad": None, "deterministic": False, "data_placement": "auto",
    "init_scale": 2.0 ** 16, "growth_interval": 2000,
}


class TrainConfig(object):
    """Plain attributes with validation; ``to_dict``/``from_dict`` for checkpoints and metrics.json."""

    def __init__(self, **values):
        unknown = [k for k in values if k not in DEFAULTS]
        if unknown:
            raise TypeError("unknown training settings: {}".format(", ".join(unknown)))
        for key, default in DEFAULTS.items():
            setattr(self, key, values.get(key, default))
        self.validate()

    def validate(self):
        if self.optimizer not in OPTIMIZERS:
            raise InputError("unknown optimizer '{}'".format(self.optimizer), hint="use sgd or adamw")
        if int(self.epochs) < 1:
            raise InputError("--epochs must be at least 1")
        if int(self.batch_size) < 2:
            raise InputError("--batch-size must be at least 2 (BatchNorm needs two images per batch)")
        if not 0 <= float(self.warmup) < 1:
            raise InputError("--warmup is a fraction of the run, in [0, 1)")
        if self.lr is not None and not float(self.lr) > 0:
            raise InputError("--lr must be positive")
        if self.clip_grad is not None and not float(self.clip_grad) > 0:
            raise InputError("--clip-grad must be positive")
        from trtkit.training.inputs import check_placement
        check_placement(self.data_placement)
        self.epochs = int(self.epochs)
        self.batch_size = int(self.batch_size)

    @property
    def base_lr(self):
        """The peak learning rate: ``--lr``, else for SGD 0.1 per 256 images of batch from a batch of 128 up
        (Goyal et al. 2017, "Accurate, Large Minibatch SGD": the linear scaling rule, with the gradual warm-up
        ``warmup`` gives and the zero-initialised residual branches ``runner.zero_init_residuals`` sets, the
        recipe that trained ResNet-50 from batch 256 to 8k), and 0.05 below it: the rule's rate fell too low for
        short runs (measured, the digits, ResNet18, 6 epochs at batch 64: 90.3% held-out at the rule's 0.025,
        98.1% at 0.05). For AdamW 0.001. Was 0.05 at any batch: a quarter of the rule at 512."""
        if self.lr is not None:
            return float(self.lr)
        if self.optimizer != "sgd":
            return 1e-3
        return SGD_LR_PER_256 * max(self.batch_size, SGD_RULE_FROM) / 256.0

    @property
    def use_flip(self):
        """Horizontal flips default off for 'sample': a mirrored digit is another glyph."""
        if self.flip is not None:
            return bool(self.flip)
        return self.data not in (None, "sample")

    def to_dict(self):
        return dict((k, getattr(self, k)) for k in DEFAULTS)

    @classmethod
    def from_dict(cls, data):
        return cls(**dict((k, v) for k, v in data.items() if k in DEFAULTS))

    def replace(self, **values):
        merged = self.to_dict()
        merged.update(values)
        return TrainConfig(**merged)
