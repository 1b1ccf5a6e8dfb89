"""Run under ``qemu-x86_64 -cpu MODEL`` by tests/test_cpu_emulated.py: what an emulated CPU makes of INT8.

``python emulated_int8.py RUNTIME IMAGES.npy VNNI.onnx AVX2.onnx``: prints one JSON line with the CPU trtkit
reads here (CPUID, as the INT8 kernels read it) and, with RUNTIME ``onnxruntime``, the top-1 class of every
image from each artifact on ONNX Runtime (through trtkit's runner, which warns when an artifact meets a CPU it
was not made for), or with ``openvino``, of the AVX2 artifact on OpenVINO (one runtime per run: the landing
tests run ONNX Runtime's, the extended tier OpenVINO's, a third of the emulated time). Kept small: everything here runs about a hundred times slower than natively, so
the VNNI artifact, which is only there to be warned about (the warning comes when its session starts), runs one
batch (``VNNI_IMAGES``), not every image: its classes are printed, not judged. ``seconds`` says where the
emulated time went.
"""

import json
import sys
import time

import numpy as np

VNNI_IMAGES = 16


def main(runtime, images_path, vnni_path, avx2_path):
    from trtkit.cpuinfo import this_cpu
    images = np.load(images_path)
    result = {"cpu": this_cpu().to_dict(), "seconds": {}}
    if runtime == "openvino":
        _openvino(result, images, avx2_path)
    else:
        _onnxruntime(result, images, vnni_path, avx2_path)
    print(json.dumps(result))


def _onnxruntime(result, images, vnni_path, avx2_path):
    from trtkit.backends import get_backend
    for name, path, count in (("onnxruntime_vnni", vnni_path, VNNI_IMAGES), ("onnxruntime_avx2", avx2_path, None)):
        start = time.time()
        runner = get_backend("onnxruntime").runner(path, {"threads": 2}).activate()
        chosen = images[:count]
        result[name] = np.concatenate([runner.infer(chosen[i:i + 16]) for i in range(0, len(chosen), 16)]
                                      ).argmax(1).tolist()
        sys.stderr.flush()
        result["seconds"][name] = round(time.time() - start, 1)


def _openvino(result, images, avx2_path):
    start = time.time()
    import openvino
    compiled = openvino.Core().compile_model(avx2_path, "CPU")
    result["openvino_avx2"] = np.concatenate([compiled(images[i:i + 1])[0] for i in range(len(images))]
                                             ).argmax(1).tolist()
    result["seconds"]["openvino_avx2"] = round(time.time() - start, 1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
