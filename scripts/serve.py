#!/usr/bin/env python3
"""Serve a build on a Triton Inference Server through PyTriton (same as 'trtkit serve').

--help lists every option; docs/deploy.md shows the served models and a client.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtkit.cli import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("trtkit.commands.serve"))
