#!/usr/bin/env python3
"""Write a Triton model repository for a build (same as 'trtkit export-triton').

--help lists every option; docs/deploy.md shows the serving workflow.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.cli import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("trtkit.commands.export_triton"))
