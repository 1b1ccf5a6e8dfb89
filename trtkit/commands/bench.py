"""trtkit bench / scripts/benchmark.py: FPS tables, CSV, JSON and a chart for a build or given models."""

import os

from trtkit.commands import int_list

NAME = "bench"
HELP = "benchmark a build (or a checkpoint/artifacts): FPS, latency percentiles, speed-up over PyTorch"
DESCRIPTION = """Measure every variant of a build and the PyTorch baselines users compare with.

With no arguments: benchmarks the last build in build/engines (what
build_engine.py writes): each artifact with its backend, plus PyTorch FP32
eager, channels_last and autocast from the build's checkpoint, at batch 1 and 8.
Writes bench.md (the table), bench.csv and bench.json (every raw figure, the
device record) and bench.png into OUT (default: BUILD/bench)."""
EPILOG = """examples:
  benchmark.py                                      the last build in build/engines
  benchmark.py --manifest build/rn50 --batch-sizes 1,16,64 --out results/
  benchmark.py --sweep --max-batch 256              batch 1,2,4,... until out of memory (batch.csv: FPS per batch)
  trtkit bench --manifest build/seg --image-sizes 128,256,512,1024   latency per image size (imsize.csv)
  benchmark.py --checkpoint rn18.pt --model resnet18 --input-size 224 --torch-modes fp32,half
  benchmark.py --artifact onnxruntime:fp16:model.fp16.onnx --input-size 224 --no-torch"""


def _name_list(text):
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _flag_input(args):
    """The input contract for --checkpoint/--artifact runs: --input-size, else the checkpoint's own record."""
    if args.input_size:
        return {"size": args.input_size}
    from trtkit.models.classifiers import read_checkpoint
    _, meta = read_checkpoint(args.checkpoint)
    return meta.get("input") or {"size": 224}


def add_arguments(parser):
    src = parser.add_argument_group("what to benchmark")
    src.add_argument("build", nargs="?", default=None, metavar="BUILD",
                     help="build folder or manifest.json, as predict and serve take it (same as --manifest)")
    src.add_argument("--manifest", default=None, metavar="PATH",
                     help="build folder or manifest.json (default: build/engines, the last build_engine.py build)")
    src.add_argument("--checkpoint", metavar="FILE", help="benchmark this PyTorch checkpoint instead of a build")
    src.add_argument("--model", default=None, help="architecture of --checkpoint (default: what it records)")
    src.add_argument("--input-size", type=int, metavar="PX", help="input size for --checkpoint")
    src.add_argument("--artifact", action="append", default=[], metavar="BACKEND:PRECISION:PATH",
                     help="an artifact to benchmark (repeatable), e.g. tensorrt:fp16:rn18.fp16.engine")
    src.add_argument("--backends", metavar="LIST", help="only these backends (e.g. onnxruntime,torch)")
    src.add_argument("--precisions", metavar="LIST", help="only these precisions (e.g. fp16,int8)")
    src.add_argument("--torch-modes", default="auto", metavar="LIST",
                     help="PyTorch baselines: fp32,half,autocast,channels_last,compile (default auto: those "
                          "that suit the device, compile excepted; 'none' to skip)")
    src.add_argument("--no-torch", action="store_true", help="no PyTorch baselines (no speed-up column)")
    how = parser.add_argument_group("how")
    how.add_argument("--batch-sizes", default="1,8", metavar="LIST", help="batch sizes (default: 1,8)")
    how.add_argument("--sweep", action="store_true",
                     help="batch sweep 1,2,4,... up to --max-batch, stopping at out-of-memory")
    how.add_argument("--max-batch", type=int, default=64, help="largest batch of --sweep (default: 64)")
    how.add_argument("--image-sizes", metavar="LIST",
                     help="image-size sweep at batch 1, e.g. 128,256,512,1024 (the reference benchmark's): writes "
                          "imsize.csv/.md/.json/.png (latency per size, one row per precision) instead of the "
                          "batch table; an artifact runs only at sizes its build allows (build with --image-sizes "
                          "MIN,MAX for dynamic H and W)")
    how.add_argument("--seconds", type=float, default=1.0,
                     help="minimum seconds per figure (latency and throughput each; default: 1)")
    how.add_argument("--warmup", type=float, default=0.3, help="warm-up seconds per batch size (default: 0.3)")
    how.add_argument("--min-iterations", type=int, default=10, help="minimum calls per figure (default: 10)")
    how.add_argument("--repeats", type=int, default=3,
                     help="measure each figure in N windows interleaved with the other variants and pool them, "
                          "so a slow spell of the machine does not land on one variant (default: 3; "
                          "--seconds is split between them). When the windows of a figure disagree by more "
                          "than --max-cv, up to N more are measured and a warning says the machine's speed "
                          "changed")
    how.add_argument("--extra-passes", type=int, default=None, metavar="N",
                     help="most windows added when they disagree (default: as many as --repeats; 0: none)")
    how.add_argument("--mode", default="latency,throughput", metavar="LIST",
                     help="latency (sync every call) and/or throughput (one sync per round); default: both")
    how.add_argument("--threads", type=int, default=None,
                     help="CPU threads for ONNX Runtime and PyTorch (default: the usable cores). Fewer than "
                          "the cores pins the process to that many cores and leaves the rest, CPU 0 first, to "
                          "the OS: steadier figures on a busy or shared machine")
    how.add_argument("--no-pin", action="store_true",
                     help="let the OS place the threads (default: pinned when --threads is below the core count)")
    how.add_argument("--max-cv", type=float, default=0.10,
                     help="warn when the coefficient of variation exceeds this (default: 0.10)")
    how.add_argument("--agree-images", type=int, default=64,
                     help="images to compute top-1 agreement of PyTorch modes with FP32 eager (default: 64)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", default=None, metavar="DIR", help="report folder (default: BUILD/bench)")
    out.add_argument("--title", default=None, help="title of the table and chart")
    out.add_argument("--no-png", action="store_true", help="skip the chart (no matplotlib needed)")


def run(args):
    from trtkit import log
    from trtkit.errors import InputError
    from trtkit.bench.matrix import run_matrix
    from trtkit.bench.plan import BenchOptions, load_bench_images, plan_from_flags, plan_from_manifest
    from trtkit.bench.report import markdown_table, write_reports
    options = BenchOptions(batch_sizes=int_list(args.batch_sizes, "--batch-sizes"), sweep=args.sweep,
                           max_batch=args.max_batch,
                           seconds=args.seconds, warmup=args.warmup, modes=_name_list(args.mode),
                           threads=args.threads, max_cv=args.max_cv, agree_images=args.agree_images,
                           min_iterations=args.min_iterations, repeats=args.repeats, pin=not args.no_pin,
                           extra_passes=args.extra_passes)
    torch_modes = None if args.no_torch or args.torch_modes == "none" else (
        "auto" if args.torch_modes == "auto" else _name_list(args.torch_modes))
    if args.build and args.manifest and args.build != args.manifest:
        raise InputError("two builds given: {} and --manifest {}".format(args.build, args.manifest),
                         hint="give one")
    args.manifest = args.manifest or args.build
    manifest = build = None
    if args.checkpoint or args.artifact:
        if args.manifest:
            raise InputError("give --manifest or --checkpoint/--artifact, not both")
        if not args.input_size and not args.checkpoint:
            raise InputError("--artifact needs --input-size (the artifacts' image height/width)",
                             hint="e.g. --input-size 224")
        variants = plan_from_flags(options, args.checkpoint, args.model, args.input_size, args.artifact, torch_modes)
        out_dir = args.out or os.path.join("build", "bench")
    else:
        from trtkit.pipeline.manifest import open_build
        build = open_build(args.manifest or os.path.join("build", "engines"))
        manifest = build.manifest
        variants = plan_from_manifest(build, options, _name_list(args.backends), _name_list(args.precisions),
                                      torch_modes)
        out_dir = args.out or os.path.join(build.folder, "bench")
    if manifest is None:
        manifest = {"model": {"input": _flag_input(args)}}
    if args.image_sizes:
        return _image_size_sweep(args, variants, manifest, options, out_dir, build)
    images, source = load_bench_images(manifest, args.input_size, max(options.agree_images, 64))
    log.info("benchmarking {} variants x batch {} on {} images; {} CPU threads{}".format(
        len(variants), ",".join(str(b) for b in options.sizes()), source, options.threads,
        "" if options.pin else " (not pinned)"))
    result = run_matrix(variants, images, options, output_kind=(manifest.get("model") or {}).get("output_kind"))
    result["source"] = {"manifest": os.path.join(build.folder, "manifest.json") if build else None,
                        "images": source}
    from trtkit.bench.selection import selection_notes, time_host_selection
    if build is not None:  # a detector: its host selection, timed on its own (bench.selection)
        result["host_selection"] = time_host_selection(build.folder, manifest, images, options.sizes(),
                                                       min(options.seconds, 1.0))
    title = args.title or "{} benchmark".format(variants[0].model)
    paths = write_reports(result, out_dir, title=title, png=not args.no_png)
    from trtkit.bench.sweeps import write_batch_table
    paths["batch"], batch_table = write_batch_table(result, out_dir)
    table, notes = markdown_table(result)
    print(table)
    for note in notes + selection_notes(result.get("host_selection")):
        print(note)
    if len(options.sizes()) > 1:
        print("\n" + batch_table)
    log.info("reports: " + ", ".join(paths[k] for k in ("markdown", "csv", "json", "png", "batch") if k in paths))
    return 0


def _image_size_sweep(args, variants, manifest, options, out_dir, build=None):
    from trtkit import log
    from trtkit.bench.plan import load_bench_images
    from trtkit.bench.selection import selection_notes, time_host_selection
    from trtkit.bench.sweeps import check_sweep, image_size_sweep, latency_ms, pivot, pivot_markdown, write_imsize
    sizes = sorted(set(int_list(args.image_sizes, "--image-sizes")))
    check_sweep(variants, sizes, manifest)
    channels = ((manifest.get("model") or {}).get("input") or {}).get("channels") or 3
    log.info("image-size sweep of {} variants at {} (batch 1); {} CPU threads".format(
        len(variants), ",".join(str(s) for s in sizes), options.threads))
    detector = build is not None and (manifest.get("model") or {}).get("detection")
    images = load_bench_images(manifest, args.input_size, 8)[0] if detector else None  # its NMS needs real pixels
    sweep = image_size_sweep(variants, sizes, options, channels, images=images)
    if detector:  # the host selection after the decoded rows, per size (bench.selection)
        sweep["host_selection"] = [row for size in sizes for row in time_host_selection(
            build.folder, manifest, images, [1], min(options.seconds, 1.0), size=size)]
        sweep["notes"] = selection_notes(sweep["host_selection"])
    title = args.title or "{} latency per image size".format(variants[0].model)
    paths = write_imsize(sweep, out_dir, title=title, png=not args.no_png)
    print(pivot_markdown(pivot(sweep["results"], "image_size", latency_ms), sizes, "latency ms, batch 1"))
    for note in sweep.get("notes") or []:
        print(note)
    for row in sweep["results"]:
        if row.get("status") != "ok":
            print("- {} at {}: {}".format(row["variant"], row["image_size"], row.get("reason") or row.get("status")))
    log.info("reports: " + ", ".join(paths[k] for k in ("markdown", "csv", "json", "png") if k in paths))
    return 0
