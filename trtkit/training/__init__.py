"""Training the models trtkit deploys, in FP32 or mixed precision.

* ``config.py``   TrainConfig: every setting of a run (saved for --resume)
* ``modes.py``    precision modes fp32/amp/bf16/half (+ channels_last) and where each runs
* ``scaler.py``   dynamic loss scaling (torch's GradScaler, for amp on CUDA and the half recipe)
* ``loop.py``     ``fit``: the one training loop, per-epoch metrics, NaN/OOM handling
* ``checkpoint.py`` resumable checkpoints that ``build_engine.py --checkpoint`` reads directly
* ``sources.py``  training/held-out splits, CIFAR-10 layout checks
* ``runner.py``   one run from a TrainConfig into OUT/, and one per mode for ``--compare``
* ``report.py``   metrics.json and the ``--compare`` rows, table/CSV/JSON/PNG

Only the standard library and numpy are imported here; torch loads on use.
"""

from trtkit.training.config import TrainConfig  # noqa: F401
from trtkit.training.loop import evaluate, fit, seed_everything  # noqa: F401
from trtkit.training.modes import MODES  # noqa: F401
