"""``trtkit train --qat CHECKPOINT``: fine-tune a trained classifier with INT8 fake quantization and measure it.

The fine-tune itself is ``precision.qat.run_qat``; this module finds the model and data, and measures what a
user deciding between post-training INT8 and QAT needs, all on the held-out split with ONNX Runtime: FP32
accuracy, post-training INT8 (trtkit's calibration and ``tensorrt`` writer on the same calibration images)
accuracy and agreement with FP32, and the same two for the QAT INT8 graph.
"""

import os

import numpy as np

from trtkit import log
from trtkit.errors import InputError

QAT_ONNX = "model.int8-qat.onnx"
QAT_CHECKPOINT = "checkpoint.pt"
QAT_REPORT = "qat.json"
CALIBRATION_IMAGES = 256


def load_classifier(path):
    """The trtkit classifier checkpoint at ``path``; an ONNX (or other framework's) file gets one line."""
    if not os.path.isfile(path):
        raise InputError("checkpoint not found: {}".format(path))
    if path.lower().endswith((".onnx", ".engine", ".plan", ".trt", ".pb", ".tflite", ".xml")):
        raise InputError("QAT needs the model's PyTorch source: {} is not a PyTorch checkpoint".format(path),
                         hint="pass the PyTorch checkpoint (trtkit train writes one), or use post-training INT8 "
                              "(trtkit build --precision int8)")
    from trtkit.models.classifiers import load_model
    return load_model(None, path)


def train_qat(checkpoint, out_dir, data=None, steps=None, batch_size=None, lr=None, limit=None, seed=0,
              calibration_images=CALIBRATION_IMAGES, measure=True):
    """Fine-tune ``checkpoint`` into ``out_dir`` (``QAT_ONNX``, ``QAT_CHECKPOINT``, ``QAT_REPORT``); returns
    the report."""
    from trtkit.fileio import write_json
    from trtkit.precision import qat
    from trtkit.training.sources import load_splits
    model = load_classifier(checkpoint)
    contract = model.input_contract
    train, heldout, _ = load_splits(data or "sample", contract, limit=limit)
    steps = qat.DEFAULT_STEPS if steps is None else int(steps)
    if steps < 1:
        raise InputError("--steps must be at least 1 for --qat, got {}".format(steps))
    rng = np.random.RandomState(seed)
    calibration = train.images[np.sort(rng.choice(len(train), min(calibration_images, len(train)), replace=False))]
    if not os.path.isdir(out_dir):
        os.makedirs(out_dir)
    onnx_path = os.path.join(out_dir, QAT_ONNX)
    report = qat.run_qat(model, contract, train, calibration, heldout, steps, onnx_path,
                         batch_size=batch_size or qat.DEFAULT_BATCH, lr=lr or qat.DEFAULT_LR, seed=seed,
                         checkpoint=os.path.join(out_dir, QAT_CHECKPOINT))
    report["source_checkpoint"] = os.path.abspath(checkpoint)
    report["data"] = str(data or "sample")
    if measure:
        report["heldout"] = measure_against_ptq(model, contract, calibration, heldout, onnx_path, out_dir)
    write_json(os.path.join(out_dir, QAT_REPORT), report)
    return report


def measure_against_ptq(model, contract, calibration, heldout, qat_onnx, out_dir):
    """{"fp32", "ptq_int8", "qat_int8"}: held-out accuracy (and agreement with FP32) on ONNX Runtime; the FP32
    and post-training graphs are written to ``out_dir`` beside the QAT one."""
    from trtkit.data import ImageSet
    from trtkit.onnx.export import export_onnx
    from trtkit.precision.calibrate import calibrate, save_qdq
    fp32 = os.path.join(out_dir, "model.fp32.onnx")
    export_onnx(model, fp32, exporter="torchscript", contract=contract)
    result = calibrate(fp32, ImageSet(calibration, None, "qat-calibration-{}".format(len(calibration))),
                       use_cache=False)
    ptq = save_qdq(fp32, result.ranges, "tensorrt", os.path.join(out_dir, "model.int8-ptq.onnx"))
    logits = dict((name, _ort_logits(path, heldout.images)) for name, path in
                  (("fp32", fp32), ("ptq_int8", ptq), ("qat_int8", qat_onnx)))
    table = {}
    for name, out in logits.items():
        row = {"top1_agreement_with_fp32": float(np.mean(out.argmax(1) == logits["fp32"].argmax(1))),
               "images": int(len(out))}
        if heldout.labels is not None:
            row["accuracy"] = float(np.mean(out.argmax(1) == heldout.labels))
        table[name] = row
    for name in ("fp32", "ptq_int8", "qat_int8"):
        row = table[name]
        log.info("{:9s} held-out accuracy {}, top-1 agreement with FP32 {:.2%} ({} images, ONNX Runtime)".format(
            name, "{:.2%}".format(row["accuracy"]) if "accuracy" in row else "-", row["top1_agreement_with_fp32"],
            row["images"]))
    return table


def _ort_logits(path, images, batch_size=64):
    from trtkit.backends.onnxruntime import OnnxRuntimeRunner
    with OnnxRuntimeRunner(path, providers=["CPUExecutionProvider"]) as runner:
        return np.concatenate([runner.infer(images[s:s + batch_size]) for s in range(0, len(images), batch_size)])


def format_report(report):
    """The lines ``trtkit train --qat`` prints."""
    lines = ["QAT: {} steps, {} quantized tensors at trtkit's TensorRT placement (checked), {:.0f}s".format(
        report["steps"], report["quantized_tensors"], report["seconds"])]
    for name, figures in sorted(report["runtimes"].items()):
        lines.append("  {:12s} vs PyTorch fake-quant: top-1 agreement {:.2%}, largest logit difference {:.3g}".format(
            name, figures["top1_agreement"], figures["max_abs_diff"]))
    for name, row in sorted(report.get("heldout", {}).items()):
        lines.append("  {:9s} held-out accuracy {}, agreement with FP32 {:.2%}".format(
            name, "{:.2%}".format(row["accuracy"]) if "accuracy" in row else "-", row["top1_agreement_with_fp32"]))
    return "\n".join(lines)
