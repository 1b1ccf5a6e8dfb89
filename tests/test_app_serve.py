"""trtkit serve: the sample build on a real Triton Inference Server (PyTriton's tritonserver), on loopback.

Acceptance (issue 15): 8 client threads x 25 requests with 0 errors, served
logits equal a local run of the same artifact (<= 1e-3), a wrong-shape request
is refused while the server stays ready, and SIGTERM ends it within 30 s.
Needs the test extra's nvidia-pytriton and tritonclient[all]; skipped only
where PyTriton does not import.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import CACHE, ROOT
from test_light_import import run_python

THREADS, REQUESTS = 8, 25


def free_ports(count):
    sockets = []
    for _ in range(count):
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        sockets.append(probe)
    ports = [s.getsockname()[1] for s in sockets]
    for probe in sockets:
        probe.close()
    return ports


def wait_ready(client, process, seconds=180):
    deadline = time.time() + seconds
    while time.time() < deadline:
        assert process.poll() is None, "trtkit serve exited with {}".format(process.returncode)
        try:
            if client.is_server_ready():
                return
        except Exception:  # connection refused while tritonserver starts
            pass
        time.sleep(0.5)
    raise AssertionError("trtkit serve was not ready within {} s".format(seconds))


@pytest.fixture(scope="module")
def server(sample_build, tmp_path_factory):
    """``trtkit serve`` on the sample build in a subprocess: (process, http port, grpc port, build folder)."""
    pytest.importorskip("pytriton.triton")
    import tritonclient.http as http
    out, _ = sample_build
    http_port, grpc_port, metrics_port = free_ports(3)
    log = open(str(tmp_path_factory.mktemp("serve") / "serve.log"), "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "trtkit", "serve", out, "--http-port", str(http_port), "--grpc-port", str(grpc_port),
         "--metrics-port", str(metrics_port), "--top-k", "3"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, TRTKIT_CACHE=CACHE, PYTHONPATH=ROOT), start_new_session=True)
    try:
        wait_ready(http.InferenceServerClient("127.0.0.1:{}".format(http_port)), process)
        yield process, http_port, grpc_port, out, log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the session this test started (trtkit and its tritonserver)
            process.wait()
        log.close()


def test_served_logits_equal_a_local_run_under_8_threads(server):
    import tritonclient.grpc as grpc
    import tritonclient.http as http
    import trtkit
    _, http_port, grpc_port, out, _ = server
    inputs = np.random.RandomState(0).randn(THREADS, REQUESTS, 4, 3, 64, 64).astype(np.float32)
    sizes = np.random.RandomState(1).randint(1, 5, (THREADS, REQUESTS))
    expected = {}
    for precision in ("fp32", "fp16"):
        with trtkit.load(out, precision=precision) as model:
            expected[precision] = model.logits(inputs.reshape(-1, 3, 64, 64)).reshape(THREADS, REQUESTS, 4, -1)
    errors, diffs = [], []

    def client_thread(index):
        protocol = http if index % 2 == 0 else grpc  # both endpoints
        precision = "fp32" if index % 4 < 2 else "fp16"
        client = protocol.InferenceServerClient("127.0.0.1:{}".format(http_port if protocol is http else grpc_port))
        for request in range(REQUESTS):
            batch = inputs[index, request, :sizes[index, request]]
            tensor = protocol.InferInput("input", list(batch.shape), "FP32")
            tensor.set_data_from_numpy(batch)
            try:
                logits = client.infer("resnet18_" + precision, [tensor]).as_numpy("logits")
                diffs.append(float(np.abs(logits - expected[precision][index, request, :len(batch)]).max()))
            except Exception as exc:
                errors.append(exc)

    threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(diffs) == THREADS * REQUESTS
    assert max(diffs) <= 1e-3


def test_images_model_and_bad_requests_leave_the_server_ready(server):
    import io
    from PIL import Image
    import tritonclient.http as http
    from tritonclient.utils import InferenceServerException
    from trtkit.data.arrays import digits
    import trtkit
    _, http_port, _, out, log = server
    client = http.InferenceServerClient("127.0.0.1:{}".format(http_port))
    images, labels = digits()
    encoded = []
    for index in (0, 1, 2):
        buffer = io.BytesIO()
        Image.fromarray(images[index], "L").save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    request = http.InferInput("images", [3, 1], "BYTES")
    request.set_data_from_numpy(np.array([[e] for e in encoded], dtype=object))
    result = client.infer("resnet18_fp16_images", [request])
    with trtkit.load(out, precision="fp16") as model:
        local = model.predict([images[i] for i in (0, 1, 2)], top_k=3)
        local_logits = model.logits([images[i] for i in (0, 1, 2)])
    assert result.as_numpy("top_classes").tolist() == [[c for c, _, _ in top] for top in local]
    assert [[n.decode() for n in row] for row in result.as_numpy("top_names")] == [[n for _, n, _ in t] for t in local]
    np.testing.assert_allclose(result.as_numpy("top_probabilities"), [[p for _, _, p in t] for t in local], atol=1e-5)
    np.testing.assert_allclose(result.as_numpy("logits"), local_logits, atol=1e-3)

    wrong_shape = http.InferInput("input", [2, 3, 32, 32], "FP32")
    wrong_shape.set_data_from_numpy(np.zeros((2, 3, 32, 32), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="unexpected shape"):
        client.infer("resnet18_fp32", [wrong_shape])
    wrong_dtype = http.InferInput("input", [1, 3, 64, 64], "FP64")
    wrong_dtype.set_data_from_numpy(np.zeros((1, 3, 64, 64), dtype=np.float64))
    with pytest.raises(InferenceServerException, match="FP64"):
        client.infer("resnet18_fp32", [wrong_dtype])
    not_an_image = http.InferInput("images", [1, 1], "BYTES")
    not_an_image.set_data_from_numpy(np.array([[b"\x89PNG but not really"]], dtype=object))
    with pytest.raises(InferenceServerException, match="does not decode") as refused:
        client.infer("resnet18_fp32_images", [not_an_image])
    # the client reads trtkit's line, not the server's tracebacks (measured before: 2.6 KB, four of them,
    # with the server's paths); PyTriton's own frame stays
    message = str(refused.value)
    assert "trtkit.BadRequest: the image does not decode" in message, message
    assert message.count("Traceback") <= 1 and "trtkit/" not in message and len(message) < 1000, message
    assert client.is_server_ready()
    assert client.is_model_ready("resnet18_fp32") and client.is_model_ready("resnet18_fp32_images")
    log.flush()
    log.seek(0)
    assert "refused a request: the image does not decode" in log.read()


def test_sigterm_stops_the_server_within_30_seconds(server):
    process, _, _, _, log = server
    start = time.time()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert time.time() - start < 30
    log.seek(0)
    assert log.read().rstrip().endswith("stopped")


def test_load_predict_and_serve_import_with_numpy_only():
    """trtkit.load is part of ``import trtkit``, and the new commands' modules import, with the heavy packages
    (and PyTriton) blocked."""
    result = run_python("""
sys.modules['pytriton'] = None
import trtkit
assert callable(trtkit.load) and trtkit.Classifier.__name__ == 'Classifier'
import trtkit.commands.predict, trtkit.commands.serve, trtkit.app.serve, trtkit.app.triton_models, trtkit.app.inputs
from trtkit.cli import main
for name in ('predict', 'serve'):
    try:
        main([name, '--help'])
    except SystemExit as exc:
        assert exc.code == 0
heavy = [m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime', 'PIL', 'torch', 'tritonclient')]
assert not heavy, heavy
print('LIGHT OK')
""")
    assert result.returncode == 0 and "LIGHT OK" in result.stdout, result.stderr


def test_serve_without_its_extra_names_it(tmp_path):
    result = run_python("""
sys.modules['pytriton'] = None   # as if nvidia-pytriton were not installed
from trtkit.cli import main
sys.exit(main(['serve', %r]))
""" % str(tmp_path))
    assert result.returncode == 3, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "pip install 'trtkit[serve]'" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_serve_option_errors():
    from trtkit.app.serve import ServeOptions, check_ports
    from trtkit.errors import InputError
    with pytest.raises(InputError, match="must differ"):
        ServeOptions(http_port=9000, grpc_port=9000)
    with pytest.raises(InputError, match="--max-batch"):
        ServeOptions(max_batch=0)
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        with pytest.raises(InputError, match="port {} on 127.0.0.1 is in use".format(port)):
            check_ports(ServeOptions(http_port=port, grpc_port=free_ports(1)[0], metrics_port=0))
    finally:
        busy.close()
