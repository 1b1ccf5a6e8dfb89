"""Quantization-aware fine-tuning (QAT) of a PyTorch classifier for trtkit's TensorRT INT8 graph.

Post-training INT8 (calibrate -> Q/DQ) keeps the FP32 weights and picks ranges; QAT trains the weights (and
the activation scales) through the INT8 rounding they will run with, so a model that loses accuracy to
post-training quantization can win it back with labelled data. The recipe:

1. ``prepare``: BatchNorm folded, fake quantization at the ``tensorrt`` Q/DQ placement (``qat_graph``,
   ``qat_place``), activation scales initialised from trtkit's calibration of the calibration images (the same
   histograms and range method as post-training INT8: ``stats.AbsHistogram``, ``ranges.compute_ranges``);
2. ``finetune``: SGD for a number of steps on the labelled train split, cross-entropy, cosine decay;
3. ``export_qat``: the fake-quant export, its placement checked against ``tensorrt_edges``, written by trtkit's
   own ``tensorrt`` writer (``qat_onnx``);
4. ``compare_runtimes``: the Q/DQ ONNX on ONNX Runtime (and OpenVINO when installed) against the PyTorch
   fake-quant model on the same images: top-1 agreement and the largest logit difference.

``run_qat`` strings them together for ``trtkit train --qat`` and the build's ``--qat-steps``.
"""

import os

import numpy as np

from trtkit import log
from trtkit.deps import available, require
from trtkit.outputs import OutputKind

DEFAULT_LR = 1e-3
DEFAULT_BATCH = 64
MAX_TRAIN_IMAGES = 2048  # a build's fine-tune draws at most this many training images (in memory: 2048 x one input)
DEFAULT_STEPS = 200


def prepare(model, calibration_images, method="entropy", batch_size=32):
    """(fake-quant GraphModule, folded (conv, batchnorm) pairs) of ``model``, scales calibrated on
    ``calibration_images`` (float32 NCHW, the model's preprocessing)."""
    from trtkit.precision.qat_graph import fold_batchnorm
    from trtkit.precision.qat_place import insert_fake_quant
    gm, pairs = fold_batchnorm(model)
    insert_fake_quant(gm)
    calibrate_scales(gm, calibration_images, method, batch_size)
    return gm, pairs


def calibrate_scales(gm, images, method="entropy", batch_size=32):
    """Set every activation scale of ``gm`` to trtkit's calibrated amax / 127 of the tensor it quantizes,
    observed with fake quantization off (the folded FP32 model: what post-training INT8 calibrates).
    Returns {module name: amax}."""
    torch = require("torch", "quantization-aware training")
    from trtkit.precision.qat_place import act_quants, set_mode
    from trtkit.precision.qdq import symmetric_scale
    from trtkit.precision.ranges import compute_ranges
    from trtkit.precision.stats import AbsHistogram
    quants = act_quants(gm)
    histograms = dict((name, AbsHistogram()) for name, _ in quants)
    hooks = [module.register_forward_hook(_observer(histograms[name])) for name, module in quants]
    set_mode(gm, enabled=False)
    try:
        gm.eval()
        with torch.no_grad():
            for start in range(0, len(images), batch_size):
                gm(torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size])))
    finally:
        for hook in hooks:
            hook.remove()
        set_mode(gm, enabled=True)
    amax = dict((name, float(value[0])) for name, value in compute_ranges(histograms, method).items())
    with torch.no_grad():
        for name, module in quants:
            module.scale.fill_(symmetric_scale(amax[name]))
    return amax


def _observer(histogram):
    def observe(module, inputs, output):
        histogram.update(inputs[0].detach().numpy())
    return observe


def label_loss(kind):
    """The fine-tune's loss for an output of ``kind`` (an ``OutputKind``): the negative log-likelihood of the
    labels under what the output holds. Logits: cross-entropy; a softmax: NLL of its log; log-probabilities:
    NLL; one column (binary): binary cross-entropy of its logit or probability. Why per kind: a blind test's
    binary EfficientNet (one logit) was refused as "labels up to class 1, 1 output", and cross-entropy over one
    column would have had nothing to learn. Multi-label outputs are refused (labels are sets, not classes)."""
    torch = require("torch", "quantization-aware training")
    functional = torch.nn.functional
    if kind.multilabel:
        from trtkit.errors import InputError
        raise InputError("QAT fine-tunes single-label classifiers; this output is {}".format(kind.name),
                         hint="build the INT8 variant without --qat-steps")
    if kind.binary:
        if kind.scale == "logits":
            return lambda outputs, labels: functional.binary_cross_entropy_with_logits(
                outputs[:, 0], labels.to(outputs.dtype))
        return lambda outputs, labels: functional.binary_cross_entropy(
            outputs[:, 0].clamp(1e-7, 1.0 - 1e-7), labels.to(outputs.dtype))
    if kind.scale == "logits":
        return functional.cross_entropy
    if kind.scale == "log-probabilities":
        return functional.nll_loss
    return lambda outputs, labels: functional.nll_loss(torch.log(outputs.clamp_min(1e-12)), labels)


def finetune(gm, images, labels, steps, batch_size=DEFAULT_BATCH, lr=DEFAULT_LR, seed=0, label="QAT fine-tune",
             kind=None):
    """Fine-tune ``gm`` (changed in place) for ``steps`` SGD steps (momentum 0.9, cosine decay from ``lr``)
    on ``images``/``labels``, shuffled each pass, with ``label_loss(kind)`` (default: logits). Returns the mean
    loss of each tenth of the run.

    Why SGD at 1e-3 by default: the weights start trained (a fine-tune, not a training run), so the rate is a
    small fraction of the 0.05 the sample was trained with; each scale's LSQ gradient is already scaled to its
    tensor's size. Measured with it (the sample ResNet18, 100 steps of 64): the QAT INT8 graph's held-out
    accuracy on ONNX Runtime 99.72%, FP32's 99.44%. Other rates were not compared.
    """
    torch = require("torch", "quantization-aware training")
    if steps < 1:
        return []
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    optimizer = torch.optim.SGD([p for p in gm.parameters() if p.requires_grad], lr=lr, momentum=0.9)
    loss_fn = label_loss(kind or OutputKind.parse("logits"))
    gm.train()
    order, position, losses = rng.permutation(len(images)), 0, []
    try:
        with log.Progress(label, total=steps, unit="step") as bar:
            for step in range(steps):
                if position + batch_size > len(order):
                    order, position = rng.permutation(len(images)), 0
                index = order[position:position + batch_size]
                position += batch_size
                for group in optimizer.param_groups:
                    group["lr"] = lr * 0.5 * (1.0 + np.cos(np.pi * step / steps))
                x = torch.from_numpy(np.ascontiguousarray(images[index]))
                y = torch.from_numpy(np.asarray(labels[index], dtype=np.int64))
                loss = loss_fn(gm(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
                bar.update(1)
    finally:
        gm.eval()
    tenth = max(1, len(losses) // 10)
    return [round(float(np.mean(losses[s:s + tenth])), 4) for s in range(0, len(losses), tenth)]


def fake_quant_logits(gm, images, batch_size=64):
    """The PyTorch fake-quant model's logits (the forward the exporter traces): the runtimes' reference (any
    PyTorch module's, e.g. the FP32 one, put in eval mode)."""
    torch = require("torch")
    gm.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            out.append(gm(torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size]))).numpy())
    return np.concatenate(out)


def export_qat(gm, dst, contract, opset=None):
    """Write the deployed Q/DQ ONNX of ``gm`` to ``dst`` (``qat_onnx.write_qat_qdq``, placement checked) at
    ``opset`` (None: the TorchScript exporter's default, ``opsets.DEFAULT_OPSET``; 13 at least, per-channel
    Q/DQ); the fake-quant export sits beside it only while this runs. Returns the placement
    ({(tensor, range tensor): consumer ops})."""
    torch = require("torch", "exporting the QAT model")
    from trtkit.precision.qat_onnx import export_fake_quant, write_qat_qdq
    from trtkit.onnx.opsets import DEFAULT_OPSET
    opset = max(13, int(opset or DEFAULT_OPSET))
    raw = dst + ".fakequant.onnx"
    try:
        export_fake_quant(gm, raw, torch.zeros((2,) + tuple(contract.shape)), opset)
        _, _, placement = write_qat_qdq(raw, dst, contract)
    finally:
        if os.path.exists(raw):
            os.remove(raw)
    return placement


def compare_runtimes(gm, onnx_path, images, batch_size=32, kind=None):
    """{runtime: {"top1_agreement", "max_abs_diff", "images"}} of the Q/DQ ONNX on ONNX Runtime and OpenVINO
    (when installed) against the PyTorch fake-quant model on ``images``, decided by ``kind``'s rule (default:
    logits)."""
    reference = fake_quant_logits(gm, images)
    results = {}
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    runners = [("onnxruntime", lambda: OnnxRuntimeRunner(onnx_path, providers=["CPUExecutionProvider"]))]
    if available("openvino"):
        from trtkit.backends.openvino import OpenVINORunner
        runners.append(("openvino", lambda: OpenVINORunner(onnx_path)))
    from trtkit.backends.base import run_batches
    for name, make in runners:
        with make() as runner:
            got = run_batches(runner, images, batch_size)
        results[name] = agreement(got, reference, kind)
    return results


def agreement(got, reference, kind=None):
    """Agreement of the decisions (``kind``'s rule: an arg-max over one column would always agree) and the
    largest output difference."""
    kind = kind or OutputKind.parse("logits")
    return {"top1_agreement": float(np.mean(kind.decide(got) == kind.decide(reference))),
            "max_abs_diff": float(np.max(np.abs(got - reference))), "images": int(len(got))}


def run_qat(model, contract, train_set, calibration_images, heldout, steps, out_onnx, batch_size=DEFAULT_BATCH,
            lr=DEFAULT_LR, method="entropy", seed=0, checkpoint=None, opset=None, output_kind=None):
    """The whole recipe: returns the report (JSON-ready); writes ``out_onnx`` (and ``checkpoint``: the
    fine-tuned weights back in ``model``'s architecture, BatchNorm as identity, see ``qat_graph.unfold_into``).
    ``train_set`` (an ImageSet with labels) is what the fine-tune sees; ``heldout`` (an ImageSet, labels
    optional) is where the runtimes are compared and accuracy measured; ``opset``: ``export_qat``'s;
    ``output_kind``: what the model's output holds (its loss and decision rule; default logits)."""
    import time
    from trtkit.precision.qat_graph import unfold_into
    start = time.time()
    kind = OutputKind.parse(output_kind or "logits")
    label_loss(kind)  # a multi-label output, or one the kind cannot be, is refused before anything is calibrated
    kind.check_columns(fake_quant_logits(model, heldout.images[:1]).shape[1], where="the model's output")
    gm, pairs = prepare(model, calibration_images, method)
    before = fake_quant_logits(gm, heldout.images)
    _check_labels(train_set.labels, kind.classes(before.shape[1]))
    losses = finetune(gm, train_set.images, train_set.labels, steps, batch_size, lr, seed, kind=kind)
    placement = export_qat(gm, out_onnx, contract, opset)
    runtimes = compare_runtimes(gm, out_onnx, heldout.images, kind=kind)
    after = fake_quant_logits(gm, heldout.images)
    report = {"steps": int(steps), "batch_size": int(batch_size), "lr": float(lr), "calibration_method": method,
              "calibration_images": int(len(calibration_images)), "train_images": int(len(train_set)),
              "folded_batchnorms": len(pairs), "quantized_tensors": len(placement),
              "placement": "tensorrt (checked against qdq_place.tensorrt_edges)", "loss": losses,
              "runtimes": runtimes, "seconds": round(time.time() - start, 1), "onnx": os.path.basename(out_onnx)}
    if heldout.labels is not None:
        report["heldout_accuracy"] = {"fake_quant_before": _accuracy(before, heldout.labels, kind),
                                      "fake_quant_after": _accuracy(after, heldout.labels, kind)}
    if checkpoint is not None:
        import copy
        from trtkit.models.classifiers import save_checkpoint
        tuned = unfold_into(copy.deepcopy(model).cpu(), gm, pairs)
        save_checkpoint(tuned, checkpoint, extra_meta={"qat": dict((k, v) for k, v in report.items()
                                                                   if k != "loss")})
        report["checkpoint"] = os.path.basename(checkpoint)
    for name, figures in runtimes.items():
        log.info("QAT INT8 on {}: top-1 agreement with PyTorch fake-quant {:.2%}, largest logit difference "
                 "{:.3g} ({} images)".format(name, figures["top1_agreement"], figures["max_abs_diff"],
                                             figures["images"]))
    return report


def _check_labels(labels, classes):
    """InputError unless ``labels`` are class indices the model's ``classes`` outputs can score."""
    from trtkit.errors import InputError
    labels = None if labels is None else np.asarray(labels)
    if labels is None or labels.ndim != 1 or (labels < 0).any():
        raise InputError("QAT needs one class label per training image", hint="give a folder of class sub-folders")
    if int(labels.max()) >= classes:
        raise InputError("the training labels go up to class {} but the model has {} classes".format(
            int(labels.max()), classes), hint="fine-tune on the data the model was trained for")


def _accuracy(outputs, labels, kind=None):
    return float(np.mean((kind or OutputKind.parse("logits")).decide(outputs) == np.asarray(labels)))
