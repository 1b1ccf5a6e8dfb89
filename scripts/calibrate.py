#!/usr/bin/env python3
"""INT8 calibration only: ranges, TensorRT calibration cache, report (same as 'trtkit calibrate').

Run with no arguments for the sample ResNet18; --help lists every option.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.cli import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("trtkit.commands.calibrate"))
