"""What turns a detector's ``decoded`` output into detections: ``PostProcessing`` and ``DetectionHead``.

Both are plain records with ``to_dict`` / ``from_dict``: a build writes its head into the manifest
(``model.detection``), and ``trtkit.load``, ``predict``, ``serve`` and verification read it back, so every
place that selects detections uses the same parameters.
"""

import math

from trtkit.errors import InputError

# the score from which a detection is shown (predict, the Detector's default) and counted by verification's
# agreement with FP32: what an application shows is what the build checked. A head's own threshold (0.05 for
# RetinaNet, 0.001 for SSDlite) keeps the low-scored boxes mAP needs, dozens per image a person reads as noise.
DISPLAY_SCORE = 0.3


class PostProcessing(object):
    """The selection parameters of one detector (torchvision's names).

    ``score_thresh``: candidates need a score above it; ``nms_thresh``: the IoU above which NMS drops the
    lower-scored box of a pair; ``detections_per_img``: the best kept per image; ``topk_candidates``: at most
    this many candidates per group before NMS; ``per_level``: the groups are feature maps, every (anchor, class)
    pair of a level competing (RetinaNet), else classes, over all anchors (SSD: class 0 the background, never a
    detection, when the head says so); ``class_agnostic``: NMS across classes (one box per place, whatever its
    class) rather than within each class (torchvision's); ``max_per_class``: at most this many of an image's
    detections of one class, kept best first after NMS (TensorFlow's ``combined_non_max_suppression``
    ``max_output_size_per_class`` below its ``max_total_size``, read from a graph NMS's
    ``max_output_boxes_per_class``), None for no cap but the total (torchvision's; a manifest without it).
    ``per_class`` is the cap that applies: the smaller of the two. Within each class only: class-agnostic NMS
    has one group, capped by the total."""

    def __init__(self, score_thresh, nms_thresh, detections_per_img, topk_candidates, per_level,
                 class_agnostic=False, max_per_class=None):
        self.score_thresh = float(score_thresh)
        self.nms_thresh = float(nms_thresh)
        self.detections_per_img = int(detections_per_img)
        self.topk_candidates = int(topk_candidates)
        self.per_level = bool(per_level)
        self.class_agnostic = bool(class_agnostic)
        self.max_per_class = None if max_per_class is None else int(max_per_class)
        if self.max_per_class is not None and self.max_per_class < 1:
            raise InputError("detections per class ({}) must be at least 1".format(max_per_class))
        if not 0.0 <= self.nms_thresh <= 1.0:
            raise InputError("NMS IoU threshold {} is not in [0, 1]".format(nms_thresh), hint="e.g. 0.5")
        if self.detections_per_img < 1 or self.topk_candidates < 1:
            raise InputError("detections per image ({}) and top-k candidates ({}) must be at least 1".format(
                detections_per_img, topk_candidates))

    @property
    def per_class(self):
        """The most detections of one class an image keeps: ``max_per_class`` where it is below the total."""
        if self.max_per_class is None or self.class_agnostic:
            return self.detections_per_img
        return min(self.max_per_class, self.detections_per_img)

    def with_overrides(self, **overrides):
        values = dict(self.to_dict())
        values.update((key, value) for key, value in overrides.items() if value is not None)
        return PostProcessing(**values)

    def to_dict(self):
        return {"score_thresh": self.score_thresh, "nms_thresh": self.nms_thresh,
                "detections_per_img": self.detections_per_img, "topk_candidates": self.topk_candidates,
                "per_level": self.per_level, "class_agnostic": self.class_agnostic,
                "max_per_class": self.max_per_class}

    @classmethod
    def from_dict(cls, values):
        return cls(**dict(values))

    def __eq__(self, other):
        return isinstance(other, PostProcessing) and other.to_dict() == self.to_dict()

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        return "PostProcessing({})".format(", ".join("{}={}".format(k, v) for k, v in sorted(self.to_dict().items())))


class DetectionHead(object):
    """What the host needs to select a detector's detections from its ``decoded`` output.

    ``num_classes``: C, the score columns; ``background``: the class index that is never a detection (0 for
    the SSDs, whose softmax includes it), or None (RetinaNet's sigmoids: every class is one);
    ``postprocessing``: a ``PostProcessing``; ``levels``: for per-level candidates, one ``(stride,
    anchors_per_location)`` per feature map, in the order of the anchors (``level_sizes`` computes each level's
    anchors for an input size from them); ``size_divisible``: the multiple the network pads its input to
    before the backbone (the levels' grids are of the padded size); ``decoder``: for a foreign detector, the
    ``detect.decoders.DecoderSpec`` record (a dict) of the tail that made its ``decoded`` output, else None;
    ``landmarks``: K, the points per detection (a face detector's eyes, nose, mouth) whose 2K columns follow the
    scores in ``decoded`` (``detect.raw``), 0 for none."""

    def __init__(self, num_classes, postprocessing, background=None, levels=None, size_divisible=1, decoder=None,
                 landmarks=0):
        self.num_classes = int(num_classes)
        self.postprocessing = postprocessing if isinstance(postprocessing, PostProcessing) else \
            PostProcessing.from_dict(postprocessing)
        self.background = None if background is None else int(background)
        self.levels = [(int(stride), int(count)) for stride, count in levels] if levels else None
        self.size_divisible = max(1, int(size_divisible))
        self.decoder = dict(decoder) if decoder else None
        self.landmarks = int(landmarks or 0)
        if self.postprocessing.per_level and not self.levels:
            raise InputError("per-level candidates (RetinaNet) need the feature maps' strides and anchors",
                             hint="give levels=[(stride, anchors per location), ...]")

    def level_sizes(self, height, width):
        """Anchors per feature map for a ``height`` x ``width`` input, or None when candidates are per class.

        Each level's grid is the padded input divided by its stride, rounded up (a stride-2 convolution with
        padding 1 gives ``ceil(n / 2)``, and repeated halvings of ``n`` round up to ``ceil(n / 2**k)``)."""
        if not self.postprocessing.per_level:
            return None
        step = self.size_divisible
        padded_h, padded_w = int(math.ceil(height / float(step))) * step, int(math.ceil(width / float(step))) * step
        return [count * int(math.ceil(padded_h / float(stride))) * int(math.ceil(padded_w / float(stride)))
                for stride, count in self.levels]

    def detection_classes(self):
        """The class indices that can be detections (all but the background)."""
        return [c for c in range(self.num_classes) if c != self.background]

    def to_dict(self):
        record = {"num_classes": self.num_classes, "background": self.background,
                  "postprocessing": self.postprocessing.to_dict(),
                  "levels": [list(level) for level in self.levels] if self.levels else None,
                  "size_divisible": self.size_divisible}
        if self.decoder:  # only a foreign detector's: trtkit's own heads' records stay as they were
            record["decoder"] = dict(self.decoder)
        if self.landmarks:
            record["landmarks"] = self.landmarks
        return record

    @classmethod
    def from_dict(cls, values):
        values = dict(values)
        return cls(values["num_classes"], values["postprocessing"], values.get("background"), values.get("levels"),
                   values.get("size_divisible", 1), values.get("decoder"), values.get("landmarks", 0))

    def with_postprocessing(self, **overrides):
        """The same head with some post-processing parameters changed (None keeps a value)."""
        return DetectionHead(self.num_classes, self.postprocessing.with_overrides(**overrides), self.background,
                             self.levels, self.size_divisible, self.decoder, self.landmarks)

    def __repr__(self):
        return "DetectionHead({})".format(self.to_dict())
