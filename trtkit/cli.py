"""``trtkit`` command line: one subcommand per module in ``trtkit/commands``.

Each command module defines ``NAME``, ``HELP``, ``DESCRIPTION``,
``add_arguments(parser)`` and ``run(args)``; adding a command is one line in
``COMMANDS``. This module imports only the stdlib and numpy-free trtkit
modules, so ``trtkit --help`` works where only numpy is installed.

Errors a user can fix (TrtkitError) print one line and exit non-zero; the
traceback appears only with ``--verbose``.
"""

import argparse
import importlib
import sys
import traceback

from trtkit import log
from trtkit._version import __version__
from trtkit.errors import TrtkitError, first_line

COMMANDS = [
    "trtkit.commands.build",
    "trtkit.commands.calibrate",
    "trtkit.commands.export_triton",
    "trtkit.commands.predict",
    "trtkit.commands.serve",
    "trtkit.commands.train",
    "trtkit.commands.bench",
    "trtkit.commands.gpu_check",
]

EPILOG = """examples:
  trtkit build                                  sample ResNet18 -> FP32/FP16 ONNX Runtime, verified
  trtkit build --checkpoint my.pt --model resnet50 --data images/ --out build/
  trtkit build --onnx classifier.onnx --precision fp32,fp16
  trtkit build --precision fp32,fp16,int8 --calib-method entropy
  trtkit calibrate --onnx classifier.onnx --calib-data images/
  trtkit bench                                  FPS table of the last build vs PyTorch baselines
  trtkit predict build/engines photos/          classify images with the build's fastest passing artifact
  trtkit serve build/engines                    serve the build on a Triton Inference Server (PyTriton)

run 'trtkit COMMAND --help' for a command's options."""


def add_common(parser):
    parser.add_argument("--verbose", "-v", action="store_true", help="show debug messages and full tracebacks")
    parser.add_argument("--quiet", "-q", action="store_true", help="print only results and errors")


def make_parser(commands=None):
    parser = argparse.ArgumentParser(
        prog="trtkit", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Make trained image classifiers fast on NVIDIA hardware (TensorRT, ONNX Runtime) "
                    "without losing accuracy: export, FP16/INT8 variants, engines, verification, benchmarks.")
    parser.add_argument("--version", action="version", version="trtkit " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in commands or COMMANDS:
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                             formatter_class=argparse.RawDescriptionHelpFormatter,
                             epilog=getattr(module, "EPILOG", None))
        module.add_arguments(cmd)
        add_common(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv=None, commands=None):
    """Entry point of ``trtkit``; returns the process exit code."""
    parser = make_parser(commands)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 1
    return run_command(args._run, args)


INTERNAL_ERROR = 70  # EX_SOFTWARE of sysexits.h


def run_command(func, args):
    """Run a command function with trtkit's error policy (used by scripts/*.py too). The command's ``--quiet``
    and ``--verbose`` hold for it alone: an application (or a test) that calls ``main([..., "-q"])`` in its own
    process gets its messages back afterwards."""
    verbose = getattr(args, "verbose", False)
    before = log.settings()
    log.configure(quiet=getattr(args, "quiet", False), verbose=verbose)
    try:
        return _run(func, args, verbose)
    finally:
        log.configure(**before)


def _run(func, args, verbose):
    try:
        code = func(args)
        return 0 if code is None else int(code)
    except TrtkitError as exc:
        if verbose:
            traceback.print_exc()
        sys.stderr.write("error: {}\n".format(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:  # a bug in trtkit or a library under it: one line unless --verbose
        if verbose:
            traceback.print_exc()
        sys.stderr.write("error: internal error, {}: {} (a trtkit bug or one of a library it calls: rerun with "
                         "--verbose for the traceback and report it)\n".format(type(exc).__name__, first_line(exc)))
        return INTERNAL_ERROR


def script_main(module_name, argv=None):
    """Run one command module as a standalone script (``python scripts/build_engine.py``)."""
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=sys.argv[0].split("/")[-1],
                                     description=getattr(module, "DESCRIPTION", module.HELP),
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=getattr(module, "EPILOG", None))
    module.add_arguments(parser)
    add_common(parser)
    args = parser.parse_args(argv)
    return run_command(module.run, args)


if __name__ == "__main__":
    sys.exit(main())
