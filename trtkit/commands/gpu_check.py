"""trtkit gpu-check / scripts/gpu_check.py: run every GPU path of trtkit here, in one call, and file the results."""

NAME = "gpu-check"
HELP = ("run every GPU path (PyTorch, TensorRT-RTX, TensorRT, torch2trt, ONNX Runtime CUDA, AMP training) and "
        "file the results")
_DESCRIPTION = """Check every GPU path of trtkit on this machine in one call, within a time budget.

Steps, in order (each in its own process: a crash, an error or a hang in one is
recorded with its exact error text, and the next step runs):

{steps}

A step whose needs are missing (no GPU, a module that does not import, torch
without CUDA, ONNX Runtime without its CUDA provider) is skipped with the reason;
--dry-run prints that plan and runs nothing. Each step gets a share of the time
left (--budget-seconds), and is stopped when it outlives it.

Results go to OUT (default: benchmarks/results/<gpu-slug>/), rewritten after every step:
  device.json      the device record
  gpu_check.json   the plan and every step's full result (build manifests, every timing figure)
  gpu_check.md     the report: steps, speed-up over PyTorch FP32 eager, agreement per precision,
                   the TensorRT-RTX outcome, the training comparison
  gpu_check.log    every step's output

Exit code 0 when no step failed or timed out, 1 otherwise (the results are written either way)."""


def _steps_text():
    """Each step's name and summary, from the plan that runs them (one owner for what a step does)."""
    import textwrap
    from trtkit.gpucheck.plan import STEPS
    return "\n".join(textwrap.fill(step.summary, 100, initial_indent="  {:<18}".format(step.name),
                                    subsequent_indent=" " * 20) for step in STEPS)


DESCRIPTION = _DESCRIPTION.format(steps=_steps_text())
EPILOG = """examples:
  gpu_check.py --dry-run                          what would run here, and why the rest would not
  gpu_check.py                                    everything that can run, in at most 9 minutes
  gpu_check.py --skip torch-compile,training --budget-seconds 300
  gpu_check.py --train-data cifar-10-batches-py   time training on the real CIFAR-10
  gpu_check.py --out /tmp/check --work /tmp/check-work   keep the engines and training runs"""


def add_arguments(parser):
    from trtkit.gpucheck.plan import STEP_NAMES
    from trtkit.gpucheck.run import DEFAULT_BUDGET_SECONDS
    parser.add_argument("--dry-run", action="store_true",
                        help="print every step and whether it would run or why not; build, time and write nothing")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="results folder (default: benchmarks/results/<gpu-slug>, from the current folder)")
    parser.add_argument("--budget-seconds", type=float, default=DEFAULT_BUDGET_SECONDS, metavar="S",
                        help="time limit of the whole run; each step gets a share of what is left "
                             "(default: {:.0f})".format(DEFAULT_BUDGET_SECONDS))
    parser.add_argument("--skip", action="append", default=[], metavar="STEP",
                        help="leave a step out (repeatable, or a comma list): {}".format(", ".join(STEP_NAMES)))
    parser.add_argument("--train-data", default=None, metavar="DIR",
                        help="a CIFAR-10 python folder for the training step (default: synthetic CIFAR-shaped data)")
    parser.add_argument("--work", default=None, metavar="DIR",
                        help="keep the builds, engines and training runs here (default: a temporary folder, removed)")


def run(args):
    import sys
    from trtkit.gpucheck.run import CheckOptions, run_check
    given = sys.argv[sys.argv.index(NAME) + 1:] if NAME in sys.argv else sys.argv[1:]
    command = " ".join(["python scripts/gpu_check.py"] + given)
    options = CheckOptions(out=args.out, budget_seconds=args.budget_seconds, skip=args.skip,
                           train_data=args.train_data, work=args.work, dry_run=args.dry_run, command=command)
    return run_check(options)
