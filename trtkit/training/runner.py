"""Training runs from a TrainConfig: data, model, fit, checkpoint and metrics in OUT.

This is what ``trtkit train`` calls: ``run_training`` for one run (``--resume``
rebuilds it from the config stored in the checkpoint so it continues on exactly
the same path), ``compare_modes`` for one run per precision mode (``--compare``).
Runs sit on top of the loop and the reports: neither imports this module.
"""

import os

from trtkit import log
from trtkit.deps import require


def prepare_run(config):
    """(model, train set, held-out set, class names, device) for ``config``, seeded."""
    from trtkit.models.classifiers import InputContract, create_model, check_model_name
    from trtkit.training.loop import seed_everything
    from trtkit.training.modes import check_mode, pick_device
    from trtkit.training.sources import default_input_size, load_splits
    require("torch", "training")
    check_model_name(config.model)
    device = pick_device(config.device)
    check_mode(config.mode, device)  # before minutes of data loading
    size = int(config.input_size or default_input_size(config.data))
    stem = config.stem or ("cifar" if size <= 32 else "imagenet")
    train_set, heldout, names = load_splits(config.data, InputContract(size=size), limit=config.limit)
    seed_everything(config.seed)
    model = create_model(config.model, num_classes=len(names), stem=stem, input_size=size)
    zero_init_residuals(model)
    return model, train_set, heldout, names, device


def zero_init_residuals(model):
    """Start each residual block as the identity: the last BatchNorm's scale of every block's branch set to 0
    (Goyal et al. 2017, "Accurate, Large Minibatch SGD", 5.1; torchvision's ``zero_init_residual``), so a deep
    ResNet trained from scratch begins as a shallow one. Measured before: ResNet50 from scratch on the digits
    at 64x64, batch 128, reached a first-epoch loss of 8.6 (chance: 2.3) and 10.9% held-out accuracy. Returns
    the number of blocks changed (a ResNet's; 0 for other models, left as they are)."""
    import torch
    changed = 0
    for module in model.modules():
        if type(module).__name__ not in ("BasicBlock", "Bottleneck"):  # a ResNet's blocks (trtkit's, torchvision's)
            continue
        last = getattr(module, "bn3", None) if type(module).__name__ == "Bottleneck" else getattr(module, "bn2", None)
        if isinstance(last, torch.nn.BatchNorm2d):
            torch.nn.init.zeros_(last.weight)
            changed += 1
    return changed


FORMER_SGD_LR = 0.05  # the default peak learning rate of checkpoints of training format 1, at any batch


def older_run(config, written_format, path):
    """The config a checkpoint of an older training format continues with: its own default learning rate
    kept (format 1: 0.05 at any batch), and said once that its crops and flips from here on are drawn as this
    trtkit draws them (once per epoch), so the resumed run will not repeat the uninterrupted one exactly."""
    from trtkit.training.checkpoint import FORMAT
    if written_format >= FORMAT:
        return config
    log.warn("{} was written by an older trtkit (training format {}): it resumes with its learning rate, but "
             "its random crops and flips from here on differ from the run it would have continued".format(
                 path, written_format))
    if config.lr is None and config.optimizer == "sgd":
        return config.replace(lr=FORMER_SGD_LR)
    return config


def run_training(config, out_dir, resume_path=None, stop_after=None, callback=None, label=None):
    """Train per ``config`` into ``out_dir`` (or resume ``resume_path``); returns a TrainResult."""
    from trtkit.training.checkpoint import load_training_checkpoint
    from trtkit.training.config import TrainConfig
    from trtkit.training.loop import fit
    resume = None
    if resume_path:
        state, _, training = load_training_checkpoint(resume_path)
        saved = TrainConfig.from_dict(training["config"])
        if int(training["epoch"]) >= saved.epochs:
            log.info("{} already finished all {} epochs".format(resume_path, saved.epochs))
        config = older_run(saved, int(training.get("format", 1)), resume_path)
        resume = (state, training)
        log.info("resuming {} after epoch {}/{} ({} mode)".format(resume_path, training["epoch"], saved.epochs,
                                                                 saved.mode))
    model, train_set, heldout, names, device = prepare_run(config)
    if not os.path.isdir(out_dir):
        os.makedirs(out_dir)
    log.info("training {} ({} stem, {}x{}) on {}: {} train / {} held-out images, {} classes, mode {} on {}".format(
        config.model, model.stem, model.input_contract.height, model.input_contract.width, config.data, len(train_set),
        len(heldout), len(names), config.mode, device))
    return fit(model, train_set, heldout, config=config, out_dir=out_dir, resume=resume, callback=callback,
               label=label or "training {} [{}]".format(config.model, config.mode), stop_after=stop_after,
               class_names=names, device=device)


def compare_modes(modes, config, out_dir, stop_after=None):
    """Train ``config`` once per mode (same seed) into OUT/<mode>/; returns (rows, device)."""
    from trtkit.errors import DeviceUnavailable
    from trtkit.training.modes import pick_device
    from trtkit.training.report import add_speedups, summarize
    device = pick_device(config.device)
    rows = []
    for mode in modes:
        try:
            result = run_training(config.replace(mode=mode), os.path.join(out_dir, mode), stop_after=stop_after)
            rows.append(summarize(mode, result))
        except DeviceUnavailable as exc:
            log.warn("{}: skipped: {}".format(mode, exc.message))
            rows.append(summarize(mode, reason=exc.message))
    add_speedups(rows)
    return rows, device
