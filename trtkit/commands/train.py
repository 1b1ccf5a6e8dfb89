"""trtkit train / scripts/train.py: train a ResNet in FP32 or mixed precision, or compare the modes."""

import os

NAME = "train"
HELP = "train a ResNet18/34/50 in fp32/tf32/amp/bf16/half and compare the modes' speed"
DESCRIPTION = """Train an image classifier the way trtkit will deploy it.

Writes OUT/checkpoint.pt (FP32 weights + metadata + resumable state; feed it to
'build_engine.py --checkpoint') and OUT/metrics.json (per-epoch time, images/s,
loss, accuracy, loss scale, skipped steps, peak memory, final_accuracy).

precision modes (--mode):
  fp32   the baseline
  amp    autocast: FP16 + dynamic loss scaling on CUDA; BF16 on CPUs with native BF16
  bf16   BF16 autocast (Ampere+ GPUs, CPUs with native BF16)
  half   manual recipe: FP16 model, BatchNorm in FP32, FP32 master weights, loss scaling"""
EPILOG = """examples:
  train.py --data sample --out runs/digits                    ResNet18 on digits, fp32, ~1 min on 2 cores
  train.py --data cifar-10-batches-py --mode amp --epochs 30 --flip --out runs/c10
  train.py --data sample --compare fp32,amp --out runs/cmp    table + compare.csv/json/png
  train.py --resume runs/c10/checkpoint.pt --out runs/c10     continue exactly where it stopped
  train.py --qat runs/digits/checkpoint.pt --steps 200 --out runs/qat   INT8 quantization-aware fine-tune
  build_engine.py --checkpoint runs/digits/checkpoint.pt      deploy the result"""


def add_arguments(parser):
    from trtkit.models.classifiers import model_names
    from trtkit.training.modes import MODES
    src = parser.add_argument_group("data and model")
    from trtkit import tasks
    src.add_argument("--task", default=None, choices=list(tasks.names()),
                     help="what to train (default: classification); detection trains a detector "
                          "(default model retinanet_sample, data shape-boxes: the sample's) on data with boxes, "
                          "RetinaNet's focal and L1 losses (SSD's with hard negatives for the SSDs), for --steps")
    src.add_argument("--data", default=None, metavar="SOURCE",
                     help="'sample' (digits), a CIFAR-10 python folder, or a folder of class sub-folders "
                          "(default: sample)")
    src.add_argument("--limit", type=int, default=None, metavar="N", help="use at most N images per split")
    src.add_argument("--model", default=None, help="{} (default: resnet18)".format(", ".join(model_names())))
    src.add_argument("--stem", default=None, choices=["imagenet", "cifar"],
                     help="ResNet stem (default: cifar at 32 px and below, else imagenet)")
    src.add_argument("--input-size", type=int, default=None, metavar="PX",
                     help="image size (default: 64 for sample, 32 for CIFAR-10, 224 for folders)")
    prec = parser.add_argument_group("precision")
    prec.add_argument("--mode", default=None, choices=list(MODES),
                      help="precision mode (default: fp32: on a GPU strictly IEEE FP32, TF32 off; tf32 for TF32 math)")
    prec.add_argument("--channels-last", action="store_true", default=None, help="NHWC memory format")
    prec.add_argument("--compare", default=None, metavar="MODES",
                      help="comma list (e.g. fp32,amp,half): train each on the same seed and compare")
    prec.add_argument("--device", default=None, help="auto, cpu or cuda (default: auto)")
    prec.add_argument("--init-scale", type=float, default=None, help="initial loss scale (default: 65536)")
    prec.add_argument("--data-placement", default=None, choices=["auto", "device", "host"],
                      help="where the training images live: on the GPU (device), or in host memory with each "
                           "batch copied ahead from pinned buffers (host); auto: on the GPU when they take at most "
                           "a quarter of its free memory (default: auto)")
    opt = parser.add_argument_group("optimization")
    opt.add_argument("--epochs", type=int, default=None, help="default: 6")
    opt.add_argument("--steps", type=int, default=None,
                     help="detection: training steps of --batch-size images (default: 400); --qat: fine-tuning steps (default: 200)")
    opt.add_argument("--batch-size", type=int, default=None, help="default: 64")
    opt.add_argument("--optimizer", default=None, choices=["sgd", "adamw"], help="default: sgd")
    opt.add_argument("--lr", type=float, default=None, help="peak learning rate (default: sgd 0.1 x batch size / 256 from batch 128 up, the linear "
                          "scaling rule, and 0.05 below; adamw 0.001)")
    opt.add_argument("--weight-decay", type=float, default=None, help="default: 5e-4")
    opt.add_argument("--warmup", type=float, default=None, help="warm-up fraction of the cosine schedule (0.25)")
    opt.add_argument("--clip-grad", type=float, default=None, metavar="NORM",
                     help="clip the gradient norm (after unscaling)")
    opt.add_argument("--flip", dest="flip", action="store_true", default=None,
                     help="random horizontal flips (default: on, except for 'sample' digits)")
    opt.add_argument("--no-flip", dest="flip", action="store_false")
    opt.add_argument("--seed", type=int, default=None, help="default: 0")
    opt.add_argument("--deterministic", action="store_true", default=None,
                     help="deterministic algorithms (bit-exact resume; slower on GPUs)")
    run = parser.add_argument_group("output")
    run.add_argument("--out", default=os.path.join("runs", "train"), metavar="DIR",
                     help="output folder (default: runs/train)")
    run.add_argument("--resume", nargs="?", const="", default=None, metavar="CHECKPOINT",
                     help="continue a run from its checkpoint (default: OUT/checkpoint.pt)")
    run.add_argument("--stop-after", type=int, default=None, metavar="EPOCHS",
                     help="stop after this many epochs of this call (resume later)")
    run.add_argument("--json", action="store_true", help="print metrics (or the comparison) as JSON")
    qat = parser.add_argument_group("quantization-aware fine-tuning")
    qat.add_argument("--qat", default=None, metavar="CHECKPOINT",
                     help="fine-tune this trained classifier checkpoint with INT8 fake quantization where trtkit's "
                          "TensorRT Q/DQ graph quantizes (BatchNorm folded) for --steps steps (default 200) on "
                          "--data's labelled train split; writes OUT/{} (the Q/DQ ONNX, checked against the "
                          "placement and run on ONNX Runtime and OpenVINO), OUT/checkpoint.pt and OUT/qat.json "
                          "(FP32, post-training INT8 and QAT INT8 held-out accuracy)".format("model.int8-qat.onnx"))


_SETTINGS = ("data", "limit", "model", "stem", "input_size", "mode", "channels_last", "device", "init_scale",
             "epochs", "batch_size", "optimizer", "lr", "weight_decay", "warmup", "clip_grad", "flip", "seed",
             "deterministic", "data_placement")


def config_from_args(args):
    from trtkit.training.config import TrainConfig
    values = dict((k, getattr(args, k)) for k in _SETTINGS if getattr(args, k, None) is not None)
    return TrainConfig(**values)


def run(args):
    import json
    from trtkit import log
    from trtkit.errors import InputError
    from trtkit.training.loop import CHECKPOINT_NAME
    if args.qat is not None:
        return _train_qat(args, json)
    if args.resume is not None:
        if args.compare:
            raise InputError("--resume continues one run; it cannot be combined with --compare")
        path = args.resume or os.path.join(args.out, CHECKPOINT_NAME)
        _warn_ignored(args, _SETTINGS, "--resume continues with the settings stored in the checkpoint")
        from trtkit.training.runner import run_training
        result = run_training(None, args.out, resume_path=path, stop_after=args.stop_after)
        return _finish_one(args, result, json)
    from trtkit import tasks
    task = tasks.of(args.task)
    if task == tasks.DETECTION:
        return _train_detector(args, json)
    if task != tasks.CLASSIFICATION:
        raise InputError("trtkit train trains classifiers and detectors, not {} models".format(task.name),
                         hint="the segmentation sample trains with trtkit.training.dense.fit_dense")
    config = config_from_args(args)
    if args.compare:
        from trtkit.training.modes import parse_modes
        from trtkit.training.report import format_table, write_comparison
        from trtkit.training.runner import compare_modes
        if args.mode:
            raise InputError("give --mode or --compare, not both")
        modes = parse_modes(args.compare)
        rows, device = compare_modes(modes, config, args.out, stop_after=args.stop_after)
        paths = write_comparison(args.out, rows, device, config)
        if args.json:
            print(json.dumps([dict((k, v) for k, v in r.items() if k != "history") for r in rows], indent=2))
        else:
            print(format_table(rows, device))
        log.info("comparison: {}".format(", ".join(paths[k] for k in sorted(paths))))
        return 0 if any(r["status"] == "ok" for r in rows) else 5
    from trtkit.training.runner import run_training
    result = run_training(config, args.out, stop_after=args.stop_after)
    return _finish_one(args, result, json)


def _warn_ignored(args, keys, why):
    """One warning naming the options of ``keys`` the user gave that this kind of run does not use, and ``why``."""
    from trtkit import log
    given = [k for k in keys if getattr(args, k, None) is not None]
    if given:
        log.warn("{}; ignoring --{}".format(why, ", --".join(k.replace("_", "-") for k in given)))


def _train_qat(args, json):
    """``--qat CHECKPOINT``: ``training.qat_run``; the table, or the report as JSON."""
    from trtkit.errors import InputError
    clashes = [flag for flag, value in (("--resume", args.resume), ("--compare", args.compare),
                                        ("--task", args.task)) if value is not None]
    if clashes:
        raise InputError("--qat fine-tunes one classifier checkpoint; it cannot be combined with {}".format(
            clashes[0]), hint="drop " + clashes[0])
    _warn_ignored(args, ("model", "stem", "input_size", "mode", "epochs", "optimizer", "weight_decay", "warmup",
                         "clip_grad", "flip"), "--qat keeps the checkpoint's model and trains in FP32 with SGD")
    from trtkit.training.qat_run import format_report, train_qat
    report = train_qat(args.qat, args.out, data=args.data, steps=args.steps, batch_size=args.batch_size,
                       lr=args.lr, limit=args.limit, seed=args.seed or 0)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _train_detector(args, json):
    """``--task detection``: ``training.detection_run`` in the modes asked for; the table, or JSON."""
    from trtkit.training.detection_run import format_rows, train_detector
    from trtkit.training.modes import parse_modes
    if args.resume is not None:
        from trtkit.errors import InputError
        raise InputError("--resume continues a classifier run; a detector trains in one call",
                         hint="drop --resume")
    _warn_ignored(args, ("stem", "epochs", "optimizer", "weight_decay", "warmup", "clip_grad", "flip"),
                  "a detector trains for --steps with AdamW, warm-up, cosine decay and flips (training.detection)")
    modes = parse_modes(args.compare or args.mode or "fp32")
    rows = train_detector(args.model, args.data, args.out, modes, args.steps, args.batch_size or 16,
                          args.lr or 3e-3, args.input_size, args.device or "cpu", args.limit, args.seed or 0)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(format_rows(rows))
    return 0 if any(row.get("status") == "ok" for row in rows) else 5


def _finish_one(args, result, json):
    from trtkit import log
    from trtkit.fileio import read_json
    metrics = read_json(os.path.join(args.out, "metrics.json")) if result.history else {}
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        acc = result.final_accuracy
        print("{}: {} epochs in {:.1f}s, final held-out accuracy {}".format(
            result.config.mode, len(result.history), sum(r["seconds"] for r in result.history),
            "{:.2%}".format(acc) if acc is not None else "-"))
    log.info("checkpoint: {}   (deploy: build_engine.py --checkpoint {})".format(result.checkpoint,
                                                                                result.checkpoint))
    if result.stopped_early:
        log.info("stopped after epoch {}; continue with --resume {}".format(len(result.history), result.checkpoint))
    return 0
