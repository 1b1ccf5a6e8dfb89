"""torchvision's own Python source, importable beside this CPU-only torch: the reference trtkit's detection
models are tested against.

torchvision's wheel is not installed (pip would pull a CUDA torch with it) and would not import anyway (its
compiled operators are built for another torch). Its detection models are plain Python over torch, though, so
the wheel is downloaded without dependencies (``python tests/torchvision_source.py download``, which CI's
``.ci/run`` does) and its ``torchvision/`` sources are imported with a shim:

- ``torchvision/__init__.py`` is not run (it loads the compiled ``_C`` library and registers its operators);
  the package is entered directly, with ``torchvision.extension`` stubbed (no operators, no assertion);
- ``torchvision.ops.boxes.nms`` is ``reference_nms`` below: plain PyTorch deciding as torchvision's CPU kernel
  (``csrc/ops/cpu/nms_kernel.cpp``) does, computed another way than ``trtkit.models.detection.nms`` (and
  itself checked against a brute-force loop in ``test_detection_nms.py``); torchvision's own ``batched_nms``
  (both of its strategies) runs over it.

Where the wheel is looked for: ``$TRTKIT_TORCHVISION_WHEEL`` (a wheel file or a folder holding one), else
``.cache/torchvision/`` in the repository (ignored by git); ``download`` fills that same folder. Missing, the
tests skip saying how to get it, except under CI (``$CI`` or ``$TRTKIT_REQUIRE_TORCHVISION_SOURCE`` set), where
they fail.
"""

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, ".cache", "torchvision")
VERSION = "0.28.0"  # the torchvision release built against torch 2.13, the torch CI installs
DOWNLOAD = "python tests/torchvision_source.py download"


def required():
    """True where a missing wheel must fail the tests (CI), not skip them."""
    return any(os.environ.get(name, "").lower() not in ("", "0", "false")
               for name in ("CI", "TRTKIT_REQUIRE_TORCHVISION_SOURCE"))


def find_wheel():
    """Path of the torchvision wheel to read, or None."""
    given = os.environ.get("TRTKIT_TORCHVISION_WHEEL")
    if given and os.path.isfile(given):
        return given
    folder = given or CACHE
    wheels = sorted(glob.glob(os.path.join(folder, "torchvision-{}-*.whl".format(VERSION))))
    return wheels[-1] if wheels else None


class DownloadError(Exception):
    """A download that left no wheel: the message says what failed and what to do."""


def download(folder=None):
    """``pip download --no-deps`` torchvision's wheel into ``folder`` (default: ``$TRTKIT_TORCHVISION_WHEEL``
    when it names a folder, else ``CACHE``); returns its path, or raises ``DownloadError``."""
    given = os.environ.get("TRTKIT_TORCHVISION_WHEEL")
    if folder is None:
        if given and not os.path.isdir(given):
            raise DownloadError("$TRTKIT_TORCHVISION_WHEEL={} is neither a wheel file nor a folder; point it at "
                                "torchvision-{}'s wheel or a folder to download it into".format(given, VERSION))
        folder = given or CACHE
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "torchvision=={}".format(VERSION), "-d", folder]
    if subprocess.call(command) != 0:
        raise DownloadError("pip could not download torchvision {} into {} (pip's message above); check the "
                            "network or pip's index, or put the wheel there yourself".format(VERSION, folder))
    wheels = sorted(glob.glob(os.path.join(folder, "torchvision-{}-*.whl".format(VERSION))))
    if not wheels:
        raise DownloadError("pip ran but no torchvision-{}-*.whl is in {}; download the wheel for this Python "
                            "and platform into it yourself".format(VERSION, folder))
    return wheels[-1]


def _sources(wheel):
    """The folder holding the wheel's ``torchvision/`` Python files, extracted once beside the wheel: into a
    temporary folder first, then renamed into place, so a reader never sees half of it; when another process
    got there first, its copy is kept and ours removed."""
    target = os.path.join(os.path.dirname(os.path.abspath(wheel)), "src-" + os.path.basename(wheel)[:-4])
    if not os.path.isdir(os.path.join(target, "torchvision")):
        partial = tempfile.mkdtemp(prefix=os.path.basename(target) + ".part", dir=os.path.dirname(target))
        try:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(partial, [n for n in archive.namelist()
                                             if n.startswith("torchvision/") and n.endswith(".py")])
            try:
                os.replace(partial, target)  # atomic; fails when the target exists and is not empty
            except OSError:
                if not os.path.isdir(os.path.join(target, "torchvision")):
                    raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


def reference_nms(boxes, scores, iou_threshold):
    """NMS as torchvision's CPU kernel defines it, computed another way than trtkit's: candidates ordered by
    ``scores.sort(0, descending=True)`` (the kernel's call); the kept set is the one set in which a candidate is
    kept exactly when no kept candidate before it overlaps it by more than the threshold (float IoU, compared in
    double as the kernel does). It is found as the fixed point of that rule, starting from "all kept": after k
    rounds the first k candidates are settled, and a round that changes nothing has reached it."""
    import torch
    order = scores.sort(0, descending=True)[1]
    x1, y1, x2, y2 = boxes[order].unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    w = (torch.minimum(x2[:, None], x2[None, :]) - torch.maximum(x1[:, None], x1[None, :])).clamp(min=0)
    h = (torch.minimum(y2[:, None], y2[None, :]) - torch.maximum(y1[:, None], y1[None, :])).clamp(min=0)
    inter = w * h
    over = ((inter / (areas[:, None] + areas[None, :] - inter)).double() > iou_threshold).triu(1)
    kept = torch.ones(len(order), dtype=torch.bool)
    while True:
        settled = ~(over & kept[:, None]).any(0)
        if torch.equal(settled, kept):
            return order[kept]
        kept = settled


@contextlib.contextmanager
def imported(wheel):
    """torchvision (its ``models.detection`` and ``ops`` imported) from ``wheel``'s source; every module it
    added to ``sys.modules`` is taken out again afterwards, so the rest of the session never sees it."""
    import torch
    before = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "torchvision"}
    folder = os.path.join(_sources(wheel), "torchvision")
    package = types.ModuleType("torchvision")
    package.__path__ = [folder]
    package.__file__ = os.path.join(folder, "__init__.py")
    package._is_tracing = lambda: torch._C._get_tracing_state() is not None
    extension = types.ModuleType("torchvision.extension")
    extension._has_ops = lambda: False
    extension._assert_has_ops = lambda: None
    package.extension = extension
    for name in list(before):
        del sys.modules[name]
    sys.modules.update({"torchvision": package, "torchvision.extension": extension})
    try:
        __import__("torchvision.models.detection")
        __import__("torchvision.ops.boxes")
        sys.modules["torchvision.ops.boxes"].nms = reference_nms
        yield package
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.modules.update(before)


@contextlib.contextmanager
def for_tests():
    """``imported`` for a test: a skip saying how to get the wheel where it is missing, a failure under CI
    (``required``)."""
    import pytest
    wheel = find_wheel()
    if wheel is None:
        message = "torchvision {}'s wheel is not in {} (get it with: {})".format(VERSION, CACHE, DOWNLOAD)
        if required():
            pytest.fail(message + "; CI must test against torchvision's source")
        pytest.skip(message)
    with imported(wheel) as package:
        yield package


if __name__ == "__main__":
    if sys.argv[1:] != ["download"]:
        sys.exit("usage: {}".format(DOWNLOAD))
    try:
        print(find_wheel() or download())
    except DownloadError as error:
        sys.exit("error: {}".format(error))
