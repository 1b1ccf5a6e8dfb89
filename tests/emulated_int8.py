"""Run under ``qemu-x86_64 -cpu MODEL`` by tests/test_cpu_emulated.py: what an emulated CPU makes of INT8.

``python emulated_int8.py IMAGES.npy VNNI.onnx AVX2.onnx``: prints one JSON line with the CPU trtkit reads
here (CPUID, as the INT8 kernels read it) and the top-1 class of every image from each artifact on ONNX
Runtime (through trtkit's runner, which warns when an artifact meets a CPU it was not made for) and, for the
AVX2 artifact, on OpenVINO. Kept small: everything here runs about a hundred times slower than natively.
"""

import json
import sys

import numpy as np


def main(images_path, vnni_path, avx2_path):
    from trtkit.backends import get_backend
    from trtkit.cpuinfo import this_cpu
    images = np.load(images_path)
    result = {"cpu": this_cpu().to_dict()}
    for name, path in (("onnxruntime_vnni", vnni_path), ("onnxruntime_avx2", avx2_path)):
        runner = get_backend("onnxruntime").runner(path, {"threads": 2}).activate()
        result[name] = np.concatenate([runner.infer(images[i:i + 16]) for i in range(0, len(images), 16)]
                                      ).argmax(1).tolist()
        sys.stderr.flush()
    import openvino
    compiled = openvino.Core().compile_model(avx2_path, "CPU")
    result["openvino_avx2"] = np.concatenate([compiled(images[i:i + 1])[0] for i in range(len(images))]
                                             ).argmax(1).tolist()
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:4])
