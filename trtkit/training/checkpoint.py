"""Training checkpoints: deployable weights plus everything ``--resume`` needs.

One file, ``OUT/checkpoint.pt``, written atomically after every epoch:

* ``state_dict``: FP32 weights (the master copies in ``half`` mode), so
  ``build_engine.py --checkpoint`` reads it like any other checkpoint;
* ``trtkit``: metadata (arch, classes, stem, input contract, mode, accuracy);
* ``training``: optimizer and scaler state, epoch, global step, RNG states,
  the training config and the history so far.

Everything is tensors and plain containers, so it loads with
``torch.load(weights_only=True)``: numpy's RNG state is stored as an int64
tensor plus ints, never as a pickled numpy object.
"""

import numpy as np

from trtkit.deps import require
from trtkit.errors import InputError

FORMAT = 2  # 2: augmentation drawn once per epoch; SGD's default learning rate scaled with batches over 128


def numpy_rng_state(rng):
    kind, keys, pos, has_gauss, cached = rng.get_state()
    torch = require("torch", "training checkpoints")
    return {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def restore_numpy_rng(rng, state):
    keys = state["keys"].numpy().astype(np.uint32)
    rng.set_state((state["kind"], keys, int(state["pos"]), int(state["has_gauss"]), float(state["cached_gaussian"])))


def rng_states(rng, device):
    torch = require("torch", "training checkpoints")
    states = {"numpy": numpy_rng_state(rng), "torch": torch.get_rng_state()}
    if device.startswith("cuda"):
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def restore_rng(rng, states, device):
    torch = require("torch", "training checkpoints")
    restore_numpy_rng(rng, states["numpy"])
    torch.set_rng_state(states["torch"])
    if device.startswith("cuda") and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"])


def save_training_checkpoint(path, model, precision, meta, training):
    """Write FP32 weights + metadata + training state to ``path`` atomically."""
    from trtkit.models.classifiers import save_checkpoint
    training = dict(training)
    training["format"] = FORMAT
    return save_checkpoint(model, path, extra_meta=meta,
                           extra={"state_dict": precision.fp32_state_dict(model), "training": training})


def load_training_checkpoint(path):
    """(fp32 state_dict, metadata, training state) of a checkpoint written by ``trtkit train``."""
    from trtkit.models.classifiers import checkpoint_parts, load_checkpoint_payload
    payload = load_checkpoint_payload(path)  # validates, loads with weights_only
    state, meta = checkpoint_parts(payload, path)
    training = payload.get("training") if isinstance(payload, dict) else None
    if not isinstance(training, dict) or "epoch" not in training:
        raise InputError("{} has no training state, so it cannot be resumed".format(path),
                         hint="resume from OUT/checkpoint.pt written by 'trtkit train'; to fine-tune other "
                              "weights start a new run")
    if int(training.get("format", 0)) > FORMAT:
        raise InputError("{} was written by a newer trtkit (training format {})".format(path, training["format"]),
                         hint="upgrade trtkit")
    return state, meta, training
