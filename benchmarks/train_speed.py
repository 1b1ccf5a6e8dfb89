#!/usr/bin/env python3
"""Training speed per precision mode: trtkit's training loop against plain PyTorch with the batch on the device.

    python benchmarks/train_speed.py                                   # a GPU: ResNet18+50 at 224, batch 128
    python benchmarks/train_speed.py --models resnet18 --input-size 64 --batch-size 64   # the CPU default

For each model and mode, in one run: the *anchor* (timed before and after trtkit, the mean of both; plain PyTorch: one batch already on the device, the same
model, optimizer, loss and memory format, cudnn.benchmark on, timed with CUDA events over ``--anchor-steps``
after a warm-up) and *trtkit* (``trtkit.training.fit`` on a synthetic uint8 training set of ``--steps`` batches
per epoch, the first epoch left out as warm-up; its input path, augmentation, loss check, schedule and its
optimizer, fused on a GPU where torch has it, included; the anchor keeps PyTorch's default). The goal on a GPU is trtkit >= 90% of the anchor in every mode. Peak memory is measured after the
warm-up in both (cudnn's algorithm search excluded); trtkit's includes its training set when that sits on the
GPU (said in the table). Then the input path alone: ms per batch for the path trtkit had before (float32
numpy gather, pageable copy, augmentation on the device) against today's.

Speed-ups are against strict FP32 (TF32 off), TF32 beside it. Results go to
benchmarks/results/<device>/train_speed-<models>-<size>-b<batch>.{json,md}. On a shared machine the figures
move 10-30% between runs: compare within one run.
"""

import argparse
import contextlib
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CLASSES = 10


def make_model(torch, name, size, device, channels_last):
    from trtkit.models.classifiers import create_model
    from trtkit.training.runner import zero_init_residuals
    torch.manual_seed(0)
    model = create_model(name, num_classes=CLASSES, stem="cifar" if size <= 32 else "imagenet", input_size=size)
    zero_init_residuals(model)
    return model


_SETS = {}


def synthetic_set(model, count, size, seed=0):
    """(Made once per count and size.) An ImageSet of ``count`` random uint8 pictures normalized as the loader would (so trtkit keeps them as
    uint8), with random labels."""
    import numpy as np
    from trtkit.data.stream import ImageSet
    from trtkit.training.inputs import pixel_affine
    key = (count, size, seed, tuple(model.input_contract.mean), tuple(model.input_contract.std))
    if key in _SETS:
        return _SETS[key]
    rng = np.random.RandomState(seed)
    scale, shift = pixel_affine(model.input_contract)
    images = np.empty((count, 3, size, size), np.float32)
    for start in range(0, count, 256):
        pixels = rng.randint(0, 256, size=(min(256, count - start), 3, size, size), dtype=np.uint8).astype(np.float32)
        images[start:start + 256] = pixels * scale.reshape(1, 3, 1, 1) + shift.reshape(1, 3, 1, 1)
    _SETS[key] = ImageSet(images, rng.randint(0, CLASSES, size=count).astype(np.int64), "synthetic")
    return _SETS[key]


def sync(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def anchor(torch, name, mode, size, batch, device, channels_last, warmup, steps, fused=False):
    """(images/s, peak MB after warm-up) of plain PyTorch training steps on one batch kept on the device;
    ``fused``: with PyTorch's fused SGD (as trtkit's loop uses on a GPU) instead of its default."""
    from trtkit.training.config import TrainConfig
    from trtkit.training.fp32math import fp32_math
    from trtkit.training.modes import Precision, copy_all  # copy_all: torch._foreach_copy_ where it casts
    cuda = str(device).startswith("cuda")
    precision = Precision(mode, device, channels_last=channels_last)  # only for which math fp32/tf32 mean
    config = TrainConfig()
    model = make_model(torch, name, size, device, channels_last).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    masters = None
    if mode == "half":  # FP16 weights, BatchNorm in FP32, FP32 master weights the optimizer owns
        model.half()
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.float()
        half = [p for p in model.parameters() if p.dtype == torch.float16]
        masters = [p.detach().float().requires_grad_() for p in half]
        params = masters + [p for p in model.parameters() if p.dtype == torch.float32]
    else:
        params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=config.momentum, weight_decay=config.weight_decay,
                                nesterov=True, **({"fused": True} if fused else {}))
    x = torch.randn(batch, 3, size, size, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    if mode == "half":
        x = x.half()
    y = torch.randint(0, CLASSES, (batch,), device=device)
    dtype = {"amp": torch.float16 if cuda else torch.bfloat16, "bf16": torch.bfloat16}.get(mode)
    scaling = mode == "half" or (mode == "amp" and cuda)
    scaler = torch.amp.GradScaler(device.split(":")[0], enabled=scaling)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=config.label_smoothing)

    def step():
        with (torch.autocast(device.split(":")[0], dtype=dtype) if dtype is not None else contextlib.nullcontext()):
            loss = loss_fn(model(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if masters is not None:
            copy_all(torch, masters_grads, [p.grad for p in half])
            for master, grad in zip(masters, masters_grads):
                master.grad = grad
        scaler.step(optimizer)
        scaler.update()
        if masters is not None:
            with torch.no_grad():
                copy_all(torch, half, masters)
            for p in half:
                p.grad = None

    masters_grads = [torch.empty_like(m) for m in masters] if masters is not None else None
    with fp32_math(torch, precision.fp32_math):
        if cuda:
            torch.backends.cudnn.benchmark = True
        for _ in range(warmup):
            step()
        sync(torch, device)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        began = time.time()
        for _ in range(steps):
            step()
        if cuda:
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000.0
        else:
            seconds = time.time() - began
    peak = torch.cuda.max_memory_allocated() / 2.0 ** 20 if cuda else None
    del model, optimizer, x
    return steps * batch / seconds, peak


def trtkit_loop(torch, name, mode, size, batch, device, channels_last, steps, epochs, placement="auto"):
    """(images/s over the epochs after the first, peak MB of those epochs, how the images were kept)."""
    from trtkit.training.config import TrainConfig
    from trtkit.training.loop import fit
    model = make_model(torch, name, size, device, channels_last)
    data = synthetic_set(model, steps * batch, size)
    config = TrainConfig(model=name, mode=mode, channels_last=channels_last, device=device, epochs=epochs,
                         batch_size=batch, flip=True, data_placement=placement)
    result = fit(model, data, None, config=config, device=device, label="trtkit {} [{}]".format(name, mode))
    timed = result.history[1:] or result.history
    images = sum(len(data) for _ in timed)
    seconds = sum(r["seconds"] for r in timed)
    peaks = [r["peak_memory_mb"] for r in timed if r.get("peak_memory_mb") is not None]
    from trtkit.training.inputs import encode
    kept = str(encode(data.images[:8], model.input_contract)[0].dtype)
    return images / seconds, (max(peaks) if peaks else None), kept


def input_path(torch, size, batch, device, channels_last, batches=20):
    """{path: ms per batch}: the path before (float32 numpy gather + copy + augment) and today's."""
    import numpy as np
    from trtkit.contract import InputContract
    from trtkit.training.inputs import BatchSource
    contract = InputContract(size=size)
    model = type("M", (), {"input_contract": contract})()
    data = synthetic_set(model, batch * batches, size)
    pad = max(2, size // 16)
    rng = np.random.RandomState(0)
    order = rng.permutation(len(data))
    figures = {}

    def before():
        for step in range(batches):
            index = order[step * batch:(step + 1) * batch]
            x = torch.from_numpy(data.images[index]).to(device, non_blocking=True)
            n, _, h, w = x.shape
            off = torch.from_numpy(rng.randint(0, 2 * pad + 1, size=(n, 2))).to(device)
            padded = torch.nn.functional.pad(x, (pad, pad, pad, pad), mode="reflect")
            ys = off[:, 0:1] + torch.arange(h, device=device)[None]
            xs = off[:, 1:2] + torch.arange(w, device=device)[None]
            x = padded[torch.arange(n, device=device)[:, None, None], :, ys[:, :, None], xs[:, None, :]]
            x = x.permute(0, 3, 1, 2)
            x.contiguous(memory_format=torch.channels_last) if channels_last else x.contiguous()

    def today(placement):
        source = BatchSource(data.images, data.labels, device, contract, placement=placement, pad=pad, flip=True,
                             channels_last=channels_last)
        return lambda: [x for x, _ in source.epoch(order, np.random.RandomState(1), batch)]

    paths = [("before: float32 numpy gather, pageable copy", before)]
    placements = ("device", "host") if str(device).startswith("cuda") else ("host",)
    paths += [("today: uint8 {}".format("on the GPU" if p == "device" else "pinned, copied ahead" if
                                         str(device).startswith("cuda") else "in memory"), today(p))
              for p in placements]
    outputs = []
    for label, run in paths:
        run()  # warm-up
        sync(torch, device)
        began = time.time()
        out = run()
        sync(torch, device)
        figures[label] = round((time.time() - began) / batches * 1000.0, 2)
        if out is not None:
            outputs.append(out)
    if len(outputs) == 2:  # the two placements must give the very same batches for the same draws
        figures["same batches on both paths"] = all(torch.equal(a, b) for a, b in zip(*outputs))
    return figures


def fmt(value, pattern="{:.0f}"):
    return "-" if value is None else pattern.format(value)


def table(rows):
    lines = ["| model | mode | math | anchor img/s | trtkit img/s | trtkit / anchor | speed-up vs strict FP32 | "
             "vs TF32 | anchor peak MB | trtkit peak MB |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            row["model"], row["mode"], row["math"], fmt(row["anchor_ips"]), fmt(row["trtkit_ips"]),
            fmt(row["ratio"], "{:.0%}"), fmt(row.get("speedup_vs_fp32"), "{:.2f}x"),
            fmt(row.get("speedup_vs_tf32"), "{:.2f}x"), fmt(row["anchor_peak_mb"]), fmt(row["trtkit_peak_mb"])))
    return "\n".join(lines)


def main(argv=None):
    import torch
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,resnet50" if cuda else "resnet18")
    parser.add_argument("--modes", default="fp32,tf32,amp,bf16,half" if cuda else "fp32,amp")
    parser.add_argument("--input-size", type=int, default=224 if cuda else 64)
    parser.add_argument("--batch-size", type=int, default=128 if cuda else 64)
    parser.add_argument("--steps", type=int, default=24 if cuda else 6, help="trtkit's batches per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="trtkit's epochs (the first is warm-up)")
    parser.add_argument("--anchor-steps", type=int, default=30 if cuda else 8)
    parser.add_argument("--host-rows", default="amp" if cuda else "",
                        help="modes timed again with the training set in host memory, copied ahead from pinned "
                             "buffers (the path for sets that do not fit on the GPU); default on a GPU: amp")
    parser.add_argument("--host-worker", default="thread", choices=["thread", "loop", "both"],
                        help="where the host rows' batches are made: a worker thread (trtkit's default), the loop's "
                             "own thread one step ahead, or both in one run")
    parser.add_argument("--anchor-optimizer", default="default", choices=["default", "fused"],
                        help="the anchor's SGD: PyTorch's default (the anchor the goal was set against; with loss "
                             "scaling it waits for the GPU at every step) or fused, as trtkit's loop on a GPU, "
                             "to compare the loops alone")
    parser.add_argument("--channels-last", action="store_true", default=None,
                        help="NHWC memory format (default: on a GPU)")
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    channels_last = cuda if args.channels_last is None else args.channels_last
    from trtkit.bench.device import describe, device_record
    from trtkit.fileio import write_text
    from trtkit.training.modes import mode_unavailable_reason
    record = device_record()
    size, batch = args.input_size, args.batch_size
    folder = os.path.join(args.results, record["slug"])
    stem = os.path.join(folder, "train_speed-{}-{}-b{}".format(args.models.replace(",", "_"), size, batch))
    header = ("# Training speed: trtkit's loop against plain PyTorch\n\n{}; torch {}\n\n`python benchmarks/"
              "train_speed.py {}`, {}x{}, batch {}, {}; trtkit: {} batches per epoch, {} epochs, the first left "
              "out; anchor: {} steps after 8 of warm-up, CUDA events on a GPU, SGD {}. Peak memory after the warm-up "
              "(cudnn's algorithm search excluded); trtkit's includes its training set where that is on the GPU."
              "\n\n".format(describe(record), torch.__version__, " ".join(argv if argv is not None else sys.argv[1:]),
                            size, size, batch, "channels_last" if channels_last else "NCHW", args.steps, args.epochs,
                            args.anchor_steps, args.anchor_optimizer))

    def save(rows, paths=None):
        """Write the results so far (after every row: a run stopped at its time limit keeps them)."""
        for row in rows:
            base = dict((r["mode"], r["trtkit_ips"]) for r in rows if r["model"] == row["model"])
            for key in ("fp32", "tf32"):
                if key in base:
                    row["speedup_vs_" + key] = round(row["trtkit_ips"] / base[key], 2)
        if not os.path.isdir(folder):
            os.makedirs(folder)
        text = header + table(rows) + "\n"
        if paths:
            lines = ["| input path | ms per batch of {} |".format(batch), "|---|---:|"]
            text += "\n" + "\n".join(lines + ["| {} | {} |".format(k, v) for k, v in paths.items()]) + "\n"
        write_text(stem + ".md", text)
        write_text(stem + ".json", json.dumps({"device": record, "torch": torch.__version__, "rows": rows,
                                               "input_path_ms": paths, "settings": vars(args),
                                               "channels_last": channels_last}, indent=2) + "\n")
        return text

    rows = []
    from trtkit.training import inputs
    keep_worker = inputs.HOST_WORKER
    workers = ["thread", "loop"] if args.host_worker == "both" else [args.host_worker]
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            reason = mode_unavailable_reason(mode, args.device)
            if reason:
                print("{} {}: skipped: {}".format(name, mode, reason), flush=True)
                continue
            from trtkit.training.modes import Precision
            math = Precision(mode, args.device).describe()
            fused = args.anchor_optimizer == "fused" and cuda
            before = anchor(torch, name, mode, size, batch, args.device, channels_last, 8, args.anchor_steps, fused)
            placements = ["auto"] + ([("host", w) for w in workers] if mode in args.host_rows.split(",") else [])
            timed = []
            for placement in placements:
                if placement != "auto":
                    placement, inputs.HOST_WORKER = placement[0], placement[1] == "thread"
                timed.append(trtkit_loop(torch, name, mode, size, batch, args.device, channels_last, args.steps,
                                         args.epochs, placement))
            inputs.HOST_WORKER = keep_worker
            placements = ["auto"] + (["host, " + w if len(workers) > 1 else "host" for w in workers]
                                     if mode in args.host_rows.split(",") else [])
            after = anchor(torch, name, mode, size, batch, args.device, channels_last, 8, args.anchor_steps, fused)
            a_ips, a_peak = (before[0] + after[0]) / 2.0, max(before[1], after[1]) if cuda else None
            for placement, (t_ips, t_peak, kept) in zip(placements, timed):
                label = mode if placement == "auto" else "{} ({})".format(mode, placement)
                rows.append({"model": name, "mode": label, "math": math, "anchor_ips": round(a_ips, 1),
                             "trtkit_ips": round(t_ips, 1), "ratio": round(t_ips / a_ips, 3),
                             "anchor_peak_mb": a_peak and round(a_peak), "trtkit_peak_mb": t_peak and round(t_peak),
                             "trtkit_images": kept, "placement": placement,
                             "anchor_runs_ips": [round(before[0], 1), round(after[0], 1)]})
                print("{} {:10s} anchor {:8.0f} img/s  trtkit {:8.0f} img/s  ({:.0%})  peak {} / {} MB".format(
                    name, label, a_ips, t_ips, t_ips / a_ips, fmt(a_peak), fmt(t_peak)), flush=True)
            save(rows)
            if cuda:
                torch.cuda.empty_cache()
    paths = input_path(torch, size, batch, args.device, channels_last)
    text = save(rows, paths)
    print(text)
    print("results: {}.{{md,json}}".format(stem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
