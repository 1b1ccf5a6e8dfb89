"""``trtkit.load(path)`` -> ``Detector``: a built detection artifact in the user's application.

    import trtkit
    with trtkit.load("build/det") as model:
        for name, found in zip(files, model.predict(files)):     # each image's detections, in its own pixels
            for box, score, label, class_name in found:
                print(name, class_name, round(score, 2), box)     # x1 y1 x2 y2
        everything = model.predict(files, score_threshold=0.0)   # all the head keeps (e.g. for mAP)

The artifact's output is ``decoded`` ``[N, A, 4 + C]`` (``trtkit.detect.raw``); the detections are selected
from it on the host by the build's ``DetectionHead`` (the manifest's ``model.detection``: candidates, NMS, the
best per image), as verification selected them, then taken back through the build's preprocessing geometry
(``data.preprocess.placement``: resize, crop, padding, letterbox) onto each original image and clipped to it.
A box left with no area there (it lay in a letterbox's padding or a crop's cut-off part) is dropped: it shows
nothing of the image. A preprocessed float input has no original: its boxes stay in the model input's pixels.

Options (``DetectionOptions``, the same keywords as ``trtkit predict``'s flags): ``score_threshold`` (default
``DISPLAY_SCORE``), ``iou_threshold``, ``max_detections``, ``class_agnostic``; set for every call with
``configure(...)`` or for one call as ``predict``'s keywords.

This module needs only numpy at import time.
"""

import numpy as np

from trtkit.app.model import LoadedModel
from trtkit.detect.params import DISPLAY_SCORE  # what predict shows: what verification counted
from trtkit.detect.records import Detections
from trtkit.errors import InputError
from trtkit.keywords import Field, Options
from trtkit.tasks.detection import DETECTION


def _fraction(name):
    def parse(value):
        value = float(value)
        if not 0.0 <= value <= 1.0:
            raise InputError("{} (--{}) must be in [0, 1], got {}".format(name, name.replace("_", "-"), value),
                             hint="e.g. 0.5")
        return value
    return parse


def _count(value):
    if int(value) < 1:
        raise InputError("max_detections (--max-detections) must be at least 1, got {}".format(value),
                         hint="e.g. 100")
    return int(value)


class DetectionOptions(Options):
    """How a ``Detector`` selects and shows detections: ``score_threshold`` (the lowest score returned; 0: all
    the head keeps), and overrides of the build's head (None: the manifest's value): ``iou_threshold`` (NMS),
    ``max_detections`` (the best kept per image), ``class_agnostic`` (NMS across classes)."""

    GROUP = ("detection builds", "how detections are selected (default: the build's head, shown from score 0.3)")
    WHAT = "Detector options"
    FIELDS = (
        Field("score_threshold", parse=_fraction("score_threshold"), type=float, metavar="S",
              help="show detections scoring at least S (default: 0.3; 0 gives all the head keeps, as mAP needs)"),
        Field("iou_threshold", parse=_fraction("iou_threshold"), type=float, metavar="IOU",
              help="NMS drops the lower-scored of two boxes overlapping above IOU (default: the build's)"),
        Field("max_detections", parse=_count, type=int, metavar="N",
              help="the best N detections per image (default: the build's, e.g. 100)"),
        Field("class_agnostic", action="store_true", default=None,
              help="NMS across classes: one box per place, whatever its class (default: the build's, per class)"),
    )

    def __init__(self, score_threshold=DISPLAY_SCORE, iou_threshold=None, max_detections=None, class_agnostic=None):
        self.score_threshold = _fraction("score_threshold")(score_threshold)
        self.iou_threshold = None if iou_threshold is None else _fraction("iou_threshold")(iou_threshold)
        self.max_detections = None if max_detections is None else _count(max_detections)
        self.class_agnostic = None if class_agnostic is None else bool(class_agnostic)

    def updated(self, **keywords):
        """These options with ``keywords`` changed (None keeps a value)."""
        values = self.to_keywords()
        values.update((key, value) for key, value in keywords.items() if value is not None)
        return DetectionOptions.from_keywords(**values)

    def head(self, head):
        """The build's ``DetectionHead`` with these overrides."""
        return head.with_postprocessing(nms_thresh=self.iou_threshold, detections_per_img=self.max_detections,
                                        class_agnostic=self.class_agnostic)


class ImageDetections(Detections):
    """One image's detections, best first: ``boxes`` float32 [D, 4] (x1 y1 x2 y2), ``scores``, ``labels`` (the
    model's class indices), ``names`` (each one's class name) and ``size`` ((w, h) of the image the boxes are
    in; None: the model input's pixels, for a preprocessed input); ``landmarks`` [D, K, 2] (x, y in the same
    pixels) for a face detector whose build carries them, else None. Iterating gives ``(box, score, label,
    name)`` tuples; ``records()`` the same as dicts (with ``landmarks`` where there are some)."""

    def __init__(self, boxes, scores, labels, names, size=None, landmarks=None):
        super(ImageDetections, self).__init__(boxes, scores, labels, landmarks=landmarks)
        self.names = list(names)
        self.size = None if size is None else (int(size[0]), int(size[1]))

    def above(self, score):
        keep = self.scores >= score
        return ImageDetections(self.boxes[keep], self.scores[keep], self.labels[keep],
                               [n for n, k in zip(self.names, keep) if k], self.size,
                               None if self.landmarks is None else self.landmarks[keep])

    def __iter__(self):
        for box, score, label, name in zip(self.boxes, self.scores, self.labels, self.names):
            yield [float(v) for v in box], float(score), int(label), name

    def records(self, digits=2):
        """``[{"class", "name", "score", "box"}]``, boxes rounded to ``digits`` decimals (pixels)."""
        found = [{"class": label, "name": name, "score": round(score, 6), "box": [round(v, digits) for v in box]}
                 for box, score, label, name in self]
        if self.landmarks is not None:
            for record, points in zip(found, self.landmarks):
                record["landmarks"] = [[round(float(v), digits) for v in point] for point in points]
        return found

    def __repr__(self):
        return "ImageDetections({} boxes{})".format(len(self), ", {}x{}".format(*self.size) if self.size else
                                                    ", model input pixels")


class Detector(LoadedModel):
    """A loaded detection artifact with its input contract and detection head (see the module doc).

    ``predict(inputs, **options)`` -> per input an ``ImageDetections`` in the image's own pixels;
    ``iter_predict`` yields ``(label, detections)`` as batches finish; ``decoded(inputs)`` -> the raw float32
    [N, A, 4 + C]; ``detections(decoded, sizes)`` selects from a raw batch; ``names`` -> the class names
    (``contract.class_names``, else the indices as text); ``head`` -> the ``DetectionHead`` in use;
    ``configure(**options)`` changes the defaults. Inputs and attributes as ``LoadedModel``'s, with
    ``num_classes`` and ``options`` (``DetectionOptions``).
    """

    task = DETECTION.name

    def __init__(self, runner, target, batch_size=None):
        self.build_head = _head_of(target)
        self.options = DetectionOptions()
        super(Detector, self).__init__(runner, target, batch_size)

    def _check_task(self):
        super(Detector, self)._check_task()
        from trtkit.detect import host_decoder
        from trtkit.detect.raw import BOX_COLUMNS, classes_of
        shape = self.output_shape
        if host_decoder.is_host(self.build_head):  # the packed raw heads the user's function decodes
            expected = host_decoder.packed_size(self.build_head.decoder["params"])
            if shape not in ([expected], [None]):
                raise InputError("{} outputs {} per image; its decoder reads {} raw values".format(
                    self.path, "x".join(str(d) for d in shape), expected), hint="rebuild it with this trtkit")
            return
        if len(shape) != 2:
            raise InputError("{} outputs {} per image; a detector outputs [anchors, 4 + classes]".format(
                self.path, "x".join(str(d) for d in shape) or "a scalar"), hint="rebuild it with this trtkit")
        columns = classes_of([None] + shape)
        columns = None if columns is None else columns - 2 * self.build_head.landmarks
        if columns is not None and columns != self.build_head.num_classes:
            raise InputError("{} has {} score columns after the box, its manifest's head {} classes".format(
                self.path, shape[1] - BOX_COLUMNS, self.build_head.num_classes),
                hint="the manifest does not belong to this artifact: rebuild it")

    # ------------------------------------------------------------ what it is
    @property
    def num_classes(self):
        """C, the classes the head scores (the background included for an SSD)."""
        return self.build_head.num_classes

    @property
    def names(self):
        """The name of each class index: the build's class names, else the index as text."""
        names = self.class_names
        if names and len(names) == self.num_classes:
            return [str(n) for n in names]
        return [str(i) for i in range(self.num_classes)]

    @property
    def head(self):
        """The ``DetectionHead`` detections are selected by: the build's, with ``options``' overrides."""
        return self.options.head(self.build_head)

    def configure(self, **options):
        """Change the default options (``DetectionOptions``' keywords) of every later call; returns self."""
        self.options = self.options.updated(**options)
        return self

    # ------------------------------------------------------------ running
    def decoded(self, inputs):
        """The raw output ``[N, A, 4 + C]`` (float32): boxes in the model input's pixels, class probabilities
        (for a build decoded by the user's Python function, that function's answer)."""
        from trtkit.detect.host_decoder import decoded
        return decoded(self.logits(inputs), self.build_head, (self.contract.height, self.contract.width))

    def use_decoder(self, function):
        """Decode with ``function`` (a build whose decoder is the user's Python function, which could not be
        imported by the name it was built with: a lambda, a closure); returns self."""
        from trtkit.detect import host_decoder
        if not host_decoder.is_host(self.build_head):
            raise InputError("{} is decoded in its graph; decoder= is for a build made with --decoder "
                             "module:function".format(self.path), hint="drop decoder=")
        host_decoder.provide(self.build_head.decoder["params"]["function"], function)
        return self

    def predict(self, inputs, **options):
        """Per input its ``ImageDetections`` (see the class doc); ``options``: ``DetectionOptions``' keywords
        for this call."""
        return [found for _, found in self.iter_predict(inputs, **options)]

    def iter_predict(self, inputs, workers=None, on_unreadable=None, **options):
        """Yield ``(label, detections)`` per input as its batch finishes: label is the file path (``<array>``
        ...). ``on_unreadable(path, error)``: files that cannot be read go to it and are skipped (None: an
        error)."""
        chosen = self.options.updated(**options)
        if self._graph_selects(chosen):  # the artifact's own NMS, with the build's parameters
            from trtkit.detect.onnx_nms import graph_detections
            for labels, outputs, sizes in self._run(inputs, workers, on_unreadable, run=self.runner.infer_all):
                for label, found, size in zip(labels, graph_detections(outputs), sizes):
                    yield label, self._in_image(found.above(chosen.score_threshold), size)
            return
        for labels, decoded, sizes in self._run(inputs, workers, on_unreadable):
            for label, found in zip(labels, self._select(decoded, sizes, chosen)):
                yield label, found

    def _graph_selects(self, options):
        """Whether the artifact selects its detections itself (NMS in the graph: ``detect.onnx_nms``'s outputs)
        with the parameters asked for: the build's, no override; and it takes any batch (no range to pad to)."""
        from trtkit.detect.onnx_nms import selects_in_graph
        return selects_in_graph(spec.name for spec in self.runner.outputs()) and \
            self.runner.batch_range() is None and \
            options.head(self.build_head).postprocessing == self.build_head.postprocessing

    def detections(self, decoded, sizes=None, **options):
        """A raw batch ``[N, A, 4 + C]`` -> per row its ``ImageDetections``, in the image of ``sizes``' entry
        ((w, h); None: the model input's pixels)."""
        return self._select(decoded, sizes, self.options.updated(**options))

    def _select(self, decoded, sizes, options):
        from trtkit.detect.select import select_decoded
        decoded = np.asarray(decoded, dtype=np.float32)
        found = select_decoded(decoded, options.head(self.build_head), self.contract.height, self.contract.width)
        sizes = sizes if sizes is not None else [None] * len(found)
        if len(sizes) != len(found):
            raise InputError("{} sizes for {} images".format(len(sizes), len(found)))
        return [self._in_image(row.above(options.score_threshold), size) for row, size in zip(found, sizes)]

    def _in_image(self, found, size):
        """``found`` (model input pixels) in the pixels of an image of ``size``, clipped to it; boxes with no area
        left dropped. ``size`` None: left in the model input's pixels (clipped to the input)."""
        from trtkit.data.boxes.geometry import boxes_to_original, clip_boxes
        if size is None:
            width, height = self.contract.width, self.contract.height
        else:
            from trtkit.data.preprocess import placement
            width, height = int(size[0]), int(size[1])
            placed = placement((width, height), self.contract)
            found = found.mapped(lambda boxes: boxes_to_original(boxes, (width, height), placed))
        boxes = clip_boxes(found.boxes, width, height)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        names = self.names
        points = None if found.landmarks is None else found.landmarks[keep]
        return ImageDetections(boxes[keep], found.scores[keep], found.labels[keep],
                               [names[i] for i in found.labels[keep]], size, points)


def _head_of(target):
    """The build's ``DetectionHead`` (manifest ``model.detection``); InputError where there is none."""
    from trtkit.detect.params import DetectionHead
    record = ((target.manifest.get("model") or {}).get("detection") if target.manifest is not None else None)
    if not record:
        raise InputError("{}: a detector's post-processing (its head) is recorded in its build's manifest, and "
                         "there is none".format(target.path), hint="load the build folder (trtkit build --out DIR), "
                                                                    "not the artifact alone")
    return DetectionHead.from_dict(record)
