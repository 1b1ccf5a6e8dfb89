#!/usr/bin/env python3
"""Benchmark a build and the PyTorch baselines: FPS table, CSV, JSON, chart (same as 'trtkit bench').

Run with no arguments for the last build in build/engines; --help lists every option.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.cli import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("trtkit.commands.bench"))
