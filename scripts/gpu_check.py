#!/usr/bin/env python3
"""Run every GPU path of trtkit on this machine in one call and file the results (same as 'trtkit gpu-check').

    python scripts/gpu_check.py --dry-run     the plan: each step, and why it would be skipped
    python scripts/gpu_check.py               everything that can run here, in at most 8 minutes

Results go to benchmarks/results/<gpu-slug>/; --help lists every option.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.cli import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("trtkit.commands.gpu_check"))
