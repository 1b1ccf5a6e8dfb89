"""Fetch every real third-party classifier in benchmarks/real_models, generate its data, print FP32 accuracy.

    python benchmarks/real_models.py                      # all models, 200 held-out images each
    python benchmarks/real_models.py --models ccexam_mnist --count 1000
    python benchmarks/real_models.py --trtkit             # also run `trtkit build` fp32,fp16,int8 on ONNX Runtime

The accuracy is that of the FP32 ONNX model in ONNX Runtime with each package's
own preprocessing (benchmarks/real_models/reference.py), i.e. a check that the
generated data is the kind of data the model was made for; chance is 1/classes.
With --trtkit the same data goes through trtkit's CLI, and its table (or its
error) is printed after the reference numbers: what trtkit does with contracts
it was not written around. Models are cached in $TRTKIT_REAL_MODELS
(default ~/.cache/trtkit/real_models); the Keras one needs keras 3 (see
docs/real-models.md).
"""

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from benchmarks.real_models import MODELS, FetchError, cli_args, fp32_accuracy, prepare  # noqa: E402


def run_trtkit(name, onnx_file, images, precision, out_root):
    """`trtkit build` on the model and data; returns (exit code, its output)."""
    command = [sys.executable, "-m", "trtkit.cli", "build", "--onnx", onnx_file, "--data", images,
               "--precision", precision, "--backend", "onnxruntime", "--bench-seconds", "0",
               "--out", os.path.join(out_root, "rm_" + name)] + cli_args(name, images)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                            env=env)
    return result.returncode, " ".join(command), result.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma list (default: all): " + ", ".join(MODELS))
    parser.add_argument("--count", type=int, default=200, help="held-out images per model (and as many train)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trtkit", action="store_true", help="also run trtkit build fp32,fp16,int8 (onnxruntime)")
    parser.add_argument("--precision", default="fp32,fp16,int8", help="for --trtkit")
    parser.add_argument("--out", default="/tmp", help="for --trtkit: builds go to OUT/rm_NAME")
    parser.add_argument("--speed", action="store_true",
                        help="per model: FP32/FP16/INT8-default/auto accuracy, agreement and img/s on ONNX Runtime "
                             "and OpenVINO beside OpenVINO NNCF's INT8, one interleaved run; results written to "
                             "benchmarks/results/<cpu>/real_models.{json,md}")
    parser.add_argument("--rounds", type=int, default=5, help="with --speed: interleaved rounds (default: 5)")
    parser.add_argument("--seconds", type=float, default=1.0, help="with --speed: seconds per runtime per round")
    parser.add_argument("--threads", type=int, default=2, help="with --speed: threads per runtime (default: 2)")
    parser.add_argument("--max-drop", type=float, default=1.0, help="with --speed: the auto budget (default: 1)")
    args = parser.parse_args(argv)
    if args.speed:
        from benchmarks.real_models.speed import run
        run(args.models.split(","), args.count, args.rounds, args.seconds, args.threads, 8, args.max_drop,
            os.path.join(ROOT, "benchmarks", "results"))
        return 0

    rows, failed = [], 0
    for name in args.models.split(","):
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
