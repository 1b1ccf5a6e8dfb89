"""trtkit serve on a segmentation build: a real Triton Inference Server (PyTriton) answers with the masks
``trtkit.load(...).predict`` gives, as base64 palette PNGs at each image's own size, and class fractions.
Skipped only where PyTriton does not import."""

import base64
import io
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import CACHE, ROOT
from test_app_serve import free_ports, wait_ready
from test_segmentation_predict import NAMES, scene

pytest.importorskip("pytriton.triton")
pytest.importorskip("onnxruntime")
Image = pytest.importorskip("PIL.Image")


def encoded(pixels):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_served_masks_decode_to_predicts_masks(seg_build, tmp_path):
    import tritonclient.http as http
    from tritonclient.utils import InferenceServerException
    import trtkit
    http_port, grpc_port = free_ports(2)
    log = open(str(tmp_path / "serve.log"), "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "trtkit", "serve", seg_build, "--precision", "fp32", "--http-port", str(http_port),
         "--grpc-port", str(grpc_port), "--metrics-port", "0"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, TRTKIT_CACHE=CACHE, PYTHONPATH=ROOT), start_new_session=True)
    try:
        client = http.InferenceServerClient("127.0.0.1:{}".format(http_port))
        wait_ready(client, process)
        photos = [scene(90, 60, seed=1)[0], scene(37, 71, seed=2)[0]]
        request = http.InferInput("images", [2, 1], "BYTES")
        request.set_data_from_numpy(np.array([[encoded(p)] for p in photos], dtype=object))
        result = client.infer("coloursegmenter_fp32_images", [request])
        served = [np.asarray(Image.open(io.BytesIO(base64.b64decode(row[0])))) for row in result.as_numpy("mask")]
        with trtkit.load(seg_build, precision="fp32") as model:
            local = model.predict(photos)
            fractions = [model.fractions(m) for m in local]
            batch = np.random.RandomState(0).randn(3, 3, 32, 32).astype(np.float32)
            maps = model.logits(batch)
        for got, expected in zip(served, local):
            assert got.shape == expected.shape and np.array_equal(got, expected)
        np.testing.assert_allclose(result.as_numpy("fractions"), fractions, atol=1e-6)
        assert result.as_numpy("fractions").shape == (2, len(NAMES))

        raw = http.InferInput("input", [3, 3, 32, 32], "FP32")
        raw.set_data_from_numpy(batch)
        logits = client.infer("coloursegmenter_fp32", [raw]).as_numpy("logits")
        assert logits.shape == (3, 3, 32, 32) and np.abs(logits - maps).max() <= 1e-4

        not_an_image = http.InferInput("images", [1, 1], "BYTES")
        not_an_image.set_data_from_numpy(np.array([[b"\x89PNG but not really"]], dtype=object))
        with pytest.raises(InferenceServerException, match="does not decode"):
            client.infer("coloursegmenter_fp32_images", [not_an_image])
        assert client.is_server_ready()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        log.seek(0)
        assert "refused a request: the image does not decode" in log.read()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the session this test started (trtkit and its tritonserver)
            process.wait()
        log.close()
