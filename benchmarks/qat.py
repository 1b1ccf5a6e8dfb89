"""Quantization-aware fine-tuning against post-training INT8, on held-out images with ONNX Runtime.

Models: the sample ResNet18 (digits at 64x64), and a MobileNetV3-Large classifier (trtkit's ``features`` in
torchvision's layout plus torchvision's classifier head) trained here from scratch on the same digits for
``--fp32-steps`` steps, so it has a real accuracy (cached in OUT). For each: FP32 accuracy, post-training INT8
(trtkit's entropy calibration on 256 train images, ``tensorrt`` Q/DQ writer) accuracy and agreement with FP32,
QAT INT8 (``--steps`` fine-tuning steps from the same calibration) accuracy and agreement with FP32, and the
QAT graph on ONNX Runtime and OpenVINO against the PyTorch fake-quant model.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/qat.py --model mobilenet_v3_large --steps 200 --out runs/qat
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mobilenet_v3_large(num_classes):
    """trtkit's MobileNetV3-Large features + torchvision's classifier head (960 -> 1280 -> classes)."""
    import torch
    from trtkit.models.mobilenet import large_features

    class MobileNetV3(torch.nn.Module):
        def __init__(self):
            super(MobileNetV3, self).__init__()
            self.features = torch.nn.Sequential(*large_features())
            self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
            self.classifier = torch.nn.Sequential(torch.nn.Linear(960, 1280), torch.nn.Hardswish(),
                                                  torch.nn.Dropout(0.2), torch.nn.Linear(1280, num_classes))

        def forward(self, x):
            return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))

    return MobileNetV3()


def fp32_mobilenet(train, heldout, steps, out):
    import torch
    from trtkit.precision.qat import finetune
    path = os.path.join(out, "mobilenet_v3_large-digits-{}.pt".format(steps))
    model = mobilenet_v3_large(10)
    if os.path.isfile(path):
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval(), 0.0
    torch.manual_seed(0)
    start = time.time()
    finetune(model, train.images, train.labels, steps, batch_size=64, lr=0.05, label="MobileNetV3 FP32 training")
    torch.save(model.state_dict(), path)
    return model.eval(), time.time() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="sample", choices=["sample", "mobilenet_v3_large"])
    parser.add_argument("--steps", type=int, default=200, help="QAT fine-tuning steps")
    parser.add_argument("--fp32-steps", type=int, default=600, help="MobileNetV3's FP32 training steps")
    parser.add_argument("--lr", type=float, default=1e-3, help="QAT learning rate")
    parser.add_argument("--out", default=os.path.join("runs", "qat"))
    args = parser.parse_args(argv)
    from trtkit.data import load_images
    from trtkit.models.sample import sample_contract, sample_model
    from trtkit.precision.qat import run_qat
    from trtkit.training.qat_run import measure_against_ptq
    out = os.path.join(args.out, args.model)
    if not os.path.isdir(out):
        os.makedirs(out)
    contract = sample_contract()
    train = load_images("sample", contract, split="train")
    heldout = load_images("sample", contract, split="heldout")
    fp32_seconds = 0.0
    if args.model == "sample":
        model = sample_model()[0]
    else:
        model, fp32_seconds = fp32_mobilenet(train, heldout, args.fp32_steps, args.out)
    rng = np.random.RandomState(0)
    calibration = train.images[np.sort(rng.choice(len(train), 256, replace=False))]
    report = run_qat(model, contract, train, calibration, heldout, args.steps, os.path.join(out, "model.int8-qat.onnx"),
                     lr=args.lr)
    report["heldout"] = measure_against_ptq(model, contract, calibration, heldout,
                                            os.path.join(out, "model.int8-qat.onnx"), out)
    report["model"] = args.model
    report["fp32_training"] = {"steps": args.fp32_steps, "seconds": round(fp32_seconds, 1)} \
        if args.model != "sample" else "the cached sample"
    with open(os.path.join(out, "qat.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    print(json.dumps({"model": args.model, "heldout": report["heldout"], "runtimes": report["runtimes"],
                      "quantized_tensors": report["quantized_tensors"], "steps": args.steps,
                      "qat_seconds": report["seconds"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
