"""The training loop shared by every precision mode.

One code path for fp32/amp/bf16/half: the mode decides the autocast context,
how the model is cast, which parameters the optimizer owns (FP32 masters for
``half``) and the loss scaler; the loop only calls them in order. Per epoch it
records time, images/s, loss, accuracy, loss scale, skipped steps and CUDA
peak memory, and saves a resumable checkpoint atomically. A non-finite loss
stops the run with the step and mode named; the last good checkpoint stays.
"""

import math
import os
import time

import numpy as np

from trtkit import log
from trtkit.deps import require
from trtkit.errors import TrtkitError

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.json"
LOSS_CHECK_EVERY_CUDA = 25  # steps between host syncs for the loss check on GPUs (exact step still named)


class TrainingDiverged(TrtkitError):
    """The loss became NaN/inf: training stopped, the last good checkpoint is kept."""

    exit_code = 6


class OutOfMemory(TrtkitError):
    """A batch did not fit in memory."""

    exit_code = 7


class TrainResult(object):
    def __init__(self, history, config, mode_detail, checkpoint=None, device="cpu", stopped_early=False):
        self.history = history
        self.config = config
        self.mode_detail = mode_detail
        self.checkpoint = checkpoint
        self.device = device
        self.stopped_early = stopped_early

    @property
    def final_accuracy(self):
        return self.history[-1].get("accuracy") if self.history else None


def seed_everything(seed):
    torch = require("torch", "training")
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_at(step, total, base, warmup):
    """Warm up (cosine, from base/25) over ``warmup`` of the run, then cosine-anneal to base/1e4."""
    warm = int(round(warmup * total))
    if step < warm:
        start = base / 25.0
        return start + (base - start) * (1 - math.cos(math.pi * step / float(warm))) / 2
    final = base * 1e-4
    t = (step - warm) / float(max(1, total - warm))
    return final + (base - final) * (1 + math.cos(math.pi * min(1.0, t))) / 2


def evaluate(model, imageset, batch_size=256, precision=None, device=None):
    """Top-1 accuracy of ``model`` on a labelled ImageSet, computed the way ``precision`` runs it.

    Out of memory at ``batch_size`` (a big model on a small GPU), it retries with
    half the batch, down to 1, before giving up with OutOfMemory.
    """
    torch = require("torch", "training")
    device = device or (precision.device if precision else "cpu")
    was_training = model.training
    model.eval()
    try:
        while True:
            try:
                return _evaluate(torch, model, imageset, batch_size, precision, device)
            except RuntimeError as exc:
                if not _is_oom(exc):
                    raise
                if batch_size <= 1:
                    raise OutOfMemory("out of memory evaluating one image on {}".format(device),
                                      hint="use a smaller model or input size, or another device")
                if hasattr(torch, "cuda") and torch.cuda.is_available():
                    torch.cuda.empty_cache()
                log.warn("evaluation ran out of memory at batch size {}; retrying at {}".format(
                    batch_size, batch_size // 2))
                batch_size //= 2
    finally:
        model.train(was_training)


def _evaluate(torch, model, imageset, batch_size, precision, device):
    correct = 0
    with torch.no_grad():
        for images, labels in imageset.batches(batch_size):
            x = torch.from_numpy(np.ascontiguousarray(images)).to(device)
            if precision is not None:
                x = precision.inputs(x)
                with precision.autocast():
                    logits = model(x)
            else:
                logits = model(x)
            correct += int((logits.float().argmax(1).cpu().numpy() == labels).sum())
    return correct / float(max(1, len(imageset)))


def _set_determinism(torch, on, cuda):
    """Switch deterministic algorithms on (by ``training.determinism``'s plan for this torch and device);
    returns (the previous setting, the plan or None)."""
    previous = torch.are_deterministic_algorithms_enabled() if hasattr(torch, "are_deterministic_algorithms_enabled") \
        else False
    plan = None
    if on:
        from trtkit.training.determinism import determinism_plan, set_deterministic
        plan = determinism_plan(torch.__version__, cuda)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        set_deterministic(torch, plan.warn_only)
        log.info(plan.note)
    if cuda:
        torch.backends.cudnn.benchmark = not on
        torch.backends.cudnn.deterministic = bool(on)
    return previous, plan


def _make_optimizer(torch, config, params, cuda=False):
    """SGD (Nesterov momentum) or AdamW; on a GPU the fused implementation where this torch has it (2.3 and
    later for SGD): besides fewer launches, GradScaler hands a fused optimizer the inf check as a tensor,
    where an unfused one makes every loss-scaled step wait for the GPU (``found_inf.item()``). Measured on an
    H200, ResNet18 at 224, batch 128, AMP: trtkit's loop reached 77% of plain PyTorch's with the unfused one."""
    fused = {"fused": True} if cuda and takes_fused(torch.optim.AdamW if config.optimizer == "adamw"
                                                   else torch.optim.SGD) else {}
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.base_lr, weight_decay=config.weight_decay, **fused)
    return torch.optim.SGD(params, lr=config.base_lr, momentum=config.momentum, weight_decay=config.weight_decay,
                           nesterov=config.momentum > 0, **fused)


def this_devices_optimizer_state(optimizer, saved):
    """``saved`` (an optimizer state_dict) with each group's ``fused`` set as this run's optimizer has it:
    fused or not is this device's choice, not the saved run's, and torch places a loaded state's ``step`` by the
    saved groups' flag (a checkpoint written unfused, on a CPU or by an older trtkit, would put AdamW's step on
    the CPU for a fused CUDA kernel)."""
    fused = optimizer.defaults.get("fused")
    groups = [dict(group, fused=fused) if "fused" in optimizer.defaults else group for group in saved["param_groups"]]
    return dict(saved, param_groups=groups)


def takes_fused(optimizer_class):
    """Whether this torch's ``optimizer_class`` has a fused implementation (its ``fused`` argument)."""
    import inspect
    try:
        return "fused" in inspect.signature(optimizer_class.__init__).parameters
    except (TypeError, ValueError):
        return False


def _is_oom(exc):
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text or "cannot allocate memory" in text


def fit(model, train_set, heldout_set=None, config=None, out_dir=None, resume=None, callback=None,
        label="training", stop_after=None, class_names=None, device=None, **settings):
    """Train ``model`` on ``train_set`` with ``config`` (a TrainConfig, or keyword settings).

    ``resume``: a (state_dict, training state) pair from ``load_training_checkpoint``;
    the caller builds the same model, fit loads the weights before casting.
    ``stop_after``: stop after this many epochs in this call (as if interrupted).
    ``callback(epoch, step, model)``: called before each step's forward pass.
    Returns a TrainResult; writes OUT/checkpoint.pt and OUT/metrics.json when ``out_dir`` is given.
    """
    torch = require("torch", "training")
    from trtkit.log import Progress
    from trtkit.training.checkpoint import restore_rng
    from trtkit.training.config import TrainConfig
    from trtkit.training.modes import Precision, pick_device
    config = (config or TrainConfig()).replace(**settings) if settings else (config or TrainConfig())
    device = device or pick_device(config.device)
    precision = Precision(config.mode, device, channels_last=config.channels_last, init_scale=config.init_scale,
                          growth_interval=config.growth_interval)
    for note in precision.warnings():
        log.warn(note)
    previous_determinism, determinism = _set_determinism(torch, config.deterministic, precision.cuda)
    replaced_pooling = []
    if determinism is not None and determinism.replace_pooling:
        from trtkit.training.determinism import replace_global_pooling
        replaced_pooling = replace_global_pooling(model)
    rng = np.random.RandomState(config.seed)
    if resume is not None:
        state, training = resume
        model.load_state_dict(state, strict=True)
    params = precision.prepare(model)
    optimizer = _make_optimizer(torch, config, params, precision.cuda)
    scaler = precision.make_scaler()
    history, start_epoch = [], 0
    if resume is not None:
        optimizer.load_state_dict(this_devices_optimizer_state(optimizer, training["optimizer"]))
        scaler.load_state_dict(training["scaler"])
        restore_rng(rng, training["rng"], device)
        history = list(training.get("history", []))
        start_epoch = int(training["epoch"])
    size = train_set.images.shape[-1]
    pad = config.pad if config.pad is not None else max(2, size // 16)
    batch_size = config.batch_size
    from trtkit.training.inputs import BatchSource
    batches = BatchSource(train_set.images, train_set.labels, device, getattr(model, "input_contract", None),
                          placement=config.data_placement, pad=pad, flip=config.use_flip,
                          channels_last=config.channels_last)
    log.info("training images: {}".format(batches.describe()))
    log.debug("optimizer: {}{}".format(config.optimizer, " (fused)" if optimizer.defaults.get("fused") else ""))
    steps_per_epoch = int(np.ceil(len(train_set) / float(batch_size)))
    total_steps = config.epochs * steps_per_epoch
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=config.label_smoothing) if "label_smoothing" in \
        torch.nn.CrossEntropyLoss.__init__.__code__.co_varnames else torch.nn.CrossEntropyLoss()
    checkpoint_path = os.path.join(out_dir, CHECKPOINT_NAME) if out_dir else None
    check_every = LOSS_CHECK_EVERY_CUDA if precision.cuda else 1
    warned_divergence = False
    end_epoch = config.epochs if stop_after is None else min(config.epochs, start_epoch + int(stop_after))
    model.train()
    from trtkit.training.fp32math import fp32_math
    try:
        with fp32_math(torch, precision.fp32_math), \
                Progress(label, total=(end_epoch - start_epoch) * steps_per_epoch, unit="step") as bar:
            for epoch in range(start_epoch, end_epoch):
                order = rng.permutation(len(train_set))
                if precision.cuda:
                    torch.cuda.reset_peak_memory_stats()
                    torch.cuda.synchronize()
                start = time.time()
                total_loss, seen, correct, skipped_before = 0.0, 0, 0, scaler.skipped
                pending = []  # (step, loss tensor, count) not yet checked on the host
                for step, (images, y) in enumerate(batches.epoch(order, rng, batch_size)):
                    global_step = epoch * steps_per_epoch + step
                    lr = lr_at(global_step, total_steps, config.base_lr, config.warmup)
                    for group in optimizer.param_groups:
                        group["lr"] = lr
                    if callback is not None:
                        callback(epoch, step, model)
                    count = int(y.shape[0])
                    try:
                        x = precision.inputs(images)
                        optimizer.zero_grad(set_to_none=True)
                        with precision.autocast():
                            logits = model(x)
                        loss = loss_fn(logits.float(), y)
                        pending.append((step, loss.detach(), count))
                        if len(pending) >= check_every:
                            total_loss += _check_losses(torch, pending, epoch, steps_per_epoch, config.mode,
                                                        checkpoint_path, start_epoch, history)
                            pending = []
                        scaler.backward(loss)
                        precision.after_backward()
                        scaler.unscale(optimizer, params)
                        if config.clip_grad:
                            torch.nn.utils.clip_grad_norm_(params, float(config.clip_grad))
                        scaler.step(optimizer)
                        scaler.update()
                        precision.after_step()  # a skipped step left the masters as they were: a no-op copy
                    except RuntimeError as exc:
                        if _is_oom(exc):
                            raise OutOfMemory(
                                "out of memory at batch size {} ({} mode on {}, input {}x{})".format(
                                    batch_size, config.mode, device, size, size),
                                hint="try --batch-size {}".format(max(2, batch_size // 2)))
                        raise
                    correct += int((logits.detach().argmax(1) == y).sum()) if not precision.cuda else 0
                    seen += count
                    bar.update(1, postfix="epoch {}/{}".format(epoch + 1, config.epochs))
                if pending:
                    total_loss += _check_losses(torch, pending, epoch, steps_per_epoch, config.mode, checkpoint_path,
                                                start_epoch, history)
                if precision.cuda:
                    torch.cuda.synchronize()
                elapsed = time.time() - start
                record = {"epoch": epoch + 1, "loss": total_loss / max(seen, 1), "seconds": round(elapsed, 3),
                          "images_per_second": round(seen / elapsed, 1) if elapsed > 0 else None,
                          "lr": lr, "loss_scale": scaler.scale, "skipped_steps": scaler.skipped - skipped_before,
                          "peak_memory_mb": round(torch.cuda.max_memory_allocated() / 2.0 ** 20, 1)
                          if precision.cuda else None}
                if not precision.cuda:
                    record["train_accuracy"] = correct / float(max(seen, 1))
                if heldout_set is not None:
                    eval_start = time.time()
                    record["accuracy"] = evaluate(model, heldout_set, precision=precision)
                    record["eval_seconds"] = round(time.time() - eval_start, 3)
                    model.train()
                history.append(record)
                log.info(format_epoch(record, config.epochs))
                if not warned_divergence and diverging(record["loss"], train_set.labels, epoch, config):
                    warned_divergence = True
                    log.warn(divergence_advice(record["loss"], train_set.labels, config))
                if checkpoint_path:
                    _save(checkpoint_path, model, precision, config, optimizer, scaler, rng, device, epoch + 1,
                          history, class_names)
                    from trtkit.training.report import write_metrics
                    write_metrics(out_dir, config, history, precision.describe(), device, checkpoint_path,
                                  finished=epoch + 1 == config.epochs)
    finally:
        if config.deterministic and not previous_determinism:
            torch.use_deterministic_algorithms(False)
        if replaced_pooling:
            from trtkit.training.determinism import restore_pooling
            restore_pooling(replaced_pooling)
    model.eval()
    return TrainResult(history, config, precision.describe(), checkpoint_path, device,
                       stopped_early=end_epoch < config.epochs)


DIVERGING = 2.0  # an epoch's mean loss this many times chance's (ln classes) after warm-up: the run is diverging


def chance_loss(labels):
    """The cross-entropy of guessing uniformly among the classes the labels hold: ln(classes)."""
    classes = int(np.max(labels)) + 1 if labels is not None and len(labels) else 2
    return math.log(max(classes, 2))


def diverging(loss, labels, epoch, config):
    """Whether an epoch's mean ``loss`` is far above chance once the warm-up is over (``DIVERGING``)."""
    warm_epochs = config.warmup * config.epochs
    return epoch + 1 > warm_epochs and math.isfinite(loss) and loss > DIVERGING * chance_loss(labels)


def divergence_advice(loss, labels, config):
    """The one line said once about a diverging run, with what to change."""
    return ("the training loss {:.2f} is far above chance ({:.2f} for {} classes) after the warm-up: the run is "
            "diverging, not learning; try --lr {:g} (half of {:g}), --clip-grad 1.0 or a longer --warmup".format(
                loss, chance_loss(labels), int(np.max(labels)) + 1, config.base_lr / 2.0, config.base_lr))


def _check_losses(torch, pending, epoch, steps_per_epoch, mode, checkpoint_path, start_epoch, history):
    """Sum of loss*count over pending steps; raise TrainingDiverged naming the first non-finite step."""
    values = torch.stack([p[1] for p in pending]).float().cpu().numpy()
    bad = np.where(~np.isfinite(values))[0]
    if len(bad):
        step = pending[int(bad[0])][0]
        kept = "the last good checkpoint {} (epoch {}) is kept".format(checkpoint_path, history[-1]["epoch"]) \
            if checkpoint_path and history else "no checkpoint was written (no epoch finished)"
        raise TrainingDiverged(
            "the loss became {} at epoch {} step {} (global step {}) in {} mode; training stopped and {}".format(
                values[bad[0]], epoch + 1, step + 1, epoch * steps_per_epoch + step + 1, mode, kept),
            hint="lower --lr, add --clip-grad 1.0, or compare with --mode fp32; check the data for NaN pixels")
    return float(sum(v * p[2] for v, p in zip(values, pending)))


def _save(path, model, precision, config, optimizer, scaler, rng, device, epoch, history, class_names):
    from trtkit.training.checkpoint import rng_states, save_training_checkpoint
    accuracy = history[-1].get("accuracy")
    meta = {"dataset": str(config.data), "mode": config.mode, "precision": precision.describe(),
            "channels_last": bool(config.channels_last), "accuracy": accuracy, "epoch": epoch,
            "epochs": config.epochs, "classes": list(class_names) if class_names else None}
    training = {"epoch": epoch, "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "rng": rng_states(rng, device), "config": config.to_dict(), "history": history}
    save_training_checkpoint(path, model, precision, meta, training)


def format_epoch(record, epochs):
    parts = ["epoch {}/{}".format(record["epoch"], epochs), "loss {:.4f}".format(record["loss"])]
    if record.get("accuracy") is not None:
        parts.append("held-out acc {:.2%}".format(record["accuracy"]))
    parts.append("{:.1f}s".format(record["seconds"]))
    if record.get("images_per_second"):
        parts.append("{:.0f} img/s".format(record["images_per_second"]))
    if record.get("loss_scale") is not None:
        parts.append("scale {:g}".format(record["loss_scale"]))
        parts.append("skipped {}".format(record["skipped_steps"]))
    if record.get("peak_memory_mb") is not None:
        parts.append("peak {:.0f} MB".format(record["peak_memory_mb"]))
    return "  ".join(parts)
