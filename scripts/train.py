#!/usr/bin/env python3
"""Train a ResNet classifier in FP32 or mixed precision (same as 'trtkit train').

--help lists every option.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.cli import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("trtkit.commands.train"))
