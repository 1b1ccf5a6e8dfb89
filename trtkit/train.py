"""Kept for older imports: the training code lives in ``trtkit.training``."""

from trtkit.training import TrainConfig, evaluate, fit, seed_everything  # noqa: F401
