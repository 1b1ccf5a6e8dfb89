#!/usr/bin/env python3
"""Classify image files with a built artifact (same as 'trtkit predict').

--help lists every option; README.md shows the Python API (trtkit.load).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.cli import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("trtkit.commands.predict"))
