"""A detector ONNX that trtkit did not export, made into one it did: its raw heads decoded in the graph.

``--task detection --decoder yolo|dfl|priors`` on an ``--onnx`` without trtkit's detection head: the graph
gets the family's decoder tail (``detect.decoders``) ending at ``decoded`` [N, A, 4 + C], and a
``DetectionHead`` (the family's post-processing, the user's overrides, the decoder's spec) in its metadata;
that adapted copy is written (atomically) into the build's work folder and the build goes on from it as
from an export of trtkit's own. So calibration keeps the tail in float (``qdq_place.float_tail``: it has no
weights), and NMS placement, verification, predict, serve and bench need nothing new.

Why the anchors and grids are fixed here: a foreign head's anchors are laid out for one input size, so the
graph's height and width must be fixed (static in the graph, or ``--input-size`` for a graph with dynamic
ones, which the copy then fixes); ``--image-sizes`` is refused.
"""

import os

from trtkit import log
from trtkit.detect import decoders, host_decoder
from trtkit.errors import InputError
from trtkit.keywords import Field, Options


def _fraction(name):
    def parse(value):
        value = float(value)
        if not 0.0 <= value <= 1.0:
            raise InputError("--{} must be in [0, 1], got {:g}".format(name.replace("_", "-"), value))
        return value
    return parse


class DecoderOptions(Options):
    """How a foreign detector's raw heads are decoded and its detections selected: ``decoder`` (a
    ``detect.decoders`` family: yolo, dfl, priors), ``params`` (``--decoder-param KEY=VALUE``, repeated; a
    dict in Python), and the head's post-processing over the family's defaults: ``score_threshold``,
    ``nms_iou``, ``max_detections``, ``class_agnostic``."""

    GROUP = ("foreign detectors", "an --onnx detector whose graph ends in raw heads (no trtkit head in its "
                                  "metadata): decoded in the graph by a decoder family (docs/detection.md)")
    FIELDS = (
        Field("decoder", metavar="FAMILY|module:function",
              help="the decoder of the graph's raw outputs: yolo (ultralytics [N, 4 + C, A] or [N, A, 5 + "
                   "C]), dfl (GFL/DFL distance distributions: PP-PicoDet, YOLOv8 raw heads), priors (offsets "
                   "against anchors: SSD, RetinaNet, BlazeFace), nms (a graph with NonMaxSuppression inside: cut "
                   "at its boxes and scores; the default for --task detection on such a graph), topk (a graph "
                   "keeping its best K (box, class) pairs by a TopK, no NMS: cut before it; the default there), or "
                   "your own Python function, module:function or file.py:function, called as decode(outputs, "
                   "(H, W)) -> (boxes [N, A, 4], scores [N, A, C]) on the host after the network"),
        Field("decoder_param", "params", action="append", metavar="KEY=VALUE",
              help="a decoder parameter, repeated (read from the graph where it can be: strides, reg_max, "
                   "layouts, activation), e.g. anchors=anchors.npy, variances=1,1,1,1, boxes=NAME"),
        Field("score_threshold", parse=_fraction("score_threshold"), type=float, metavar="S",
              help="the head's candidate score threshold (default: the family's, e.g. yolo 0.25, dfl and "
                   "priors 0.05)"),
        Field("nms_iou", parse=_fraction("nms_iou"), type=float, metavar="IOU",
              help="the head's NMS IoU threshold (default: the family's: yolo 0.45 with objectness, 0.7 "
                   "without; dfl 0.6; priors 0.5)"),
        Field("max_detections", type=int, metavar="N", help="detections kept per image (default: the family's)"),
        Field("class_agnostic", action="store_true", default=None,
              help="NMS across classes (default: the family's; priors of one class: across)"),
    )

    def __init__(self, decoder=None, params=None, score_threshold=None, nms_iou=None, max_detections=None,
                 class_agnostic=None):
        self.decoder = host_decoder.register(decoder) if host_decoder.is_reference(decoder) else \
            decoders.family(decoder).name if decoder is not None else None
        self.params = decoders.parse_params(params)
        if self.params and self.host:
            raise InputError("--decoder-param is for the built-in decoders; {} reads what it needs itself".format(
                self.decoder), hint="drop --decoder-param")
        self.score_threshold = score_threshold
        self.nms_iou = nms_iou
        self.max_detections = max_detections
        self.class_agnostic = class_agnostic
        if max_detections is not None and int(max_detections) < 1:
            raise InputError("--max-detections must be at least 1, got {}".format(max_detections))
        if self.decoder is None and self.given:
            raise InputError("--decoder-param and the head's thresholds need --decoder",
                             hint="pass --decoder " + "|".join(decoders.names()))

    @property
    def host(self):
        """Whether the decoder is the user's Python function (``detect.host_decoder``), run on the host."""
        return host_decoder.is_reference(self.decoder)

    @property
    def given(self):
        """Whether any of these options was set."""
        return bool(self.decoder or self.params) or any(
            v is not None for v in (self.score_threshold, self.nms_iou, self.max_detections, self.class_agnostic))

    def postprocessing(self, defaults):
        """The family's post-processing ``defaults`` (a dict) with the user's overrides."""
        values = dict(defaults)
        for key, value in (("score_thresh", self.score_threshold), ("nms_thresh", self.nms_iou),
                           ("detections_per_img", self.max_detections), ("class_agnostic", self.class_agnostic)):
            if value is not None:
                values[key] = value
        return values


def input_hw(model, size):
    """(H, W) of the graph's image input: its static sizes, else the size it resizes to inside (``graph_size``)
    or ``size`` (``--input-size``), which the graph's input is then fixed to; one line otherwise. NHWC inputs
    (channels last: 1 or 3) are read as such."""
    return graph_size(model, size)[0]


def graph_size(model, size):
    """((H, W), the graph's inner resize or None) as ``input_hw``: a graph taking any size that resizes it
    inside to a fixed one (``onnx.inner_resize``, TensorFlow's detection exports) is built at that size, as
    ``--input-size`` would fix it; another ``--input-size`` would resize twice and is refused."""
    from trtkit.onnx import inner_resize
    from trtkit.onnx.layout import is_nhwc
    from trtkit.onnx.normalize import dims_of, graph_inputs
    inputs = graph_inputs(model)
    dims = dims_of(inputs[0]) if len(inputs) == 1 else []
    if len(dims) != 4:
        raise InputError("a detector's ONNX has one 4-D image input; this one has {}".format(
            ", ".join("'{}' {}".format(i.name, dims_of(i)) for i in inputs)))
    axes = (1, 2) if is_nhwc(model) else (2, 3)
    found = (dims[axes[0]], dims[axes[1]])
    if all(isinstance(d, int) for d in found):
        if size is not None and tuple(size) != found:
            raise InputError("--input-size {}x{}: the graph's input is fixed at {}x{}".format(
                size[0], size[1], found[0], found[1]), hint="drop --input-size")
        return found, None
    inner = inner_resize.read(model, axes == (1, 2))
    if inner is not None:
        if size is not None and tuple(size) != tuple(inner["size"]):
            raise InputError("--input-size {}x{}: the graph takes its image at any size and resizes it to {}x{} "
                             "inside ('{}'): the network would see the image resized twice".format(
                                 size[0], size[1], inner["size"][0], inner["size"][1], inner["node"]),
                             hint="drop --input-size: trtkit builds at {}x{} and maps the boxes back to each "
                                  "image".format(*inner["size"]))
        size = tuple(inner["size"])
        log.info("the graph takes its image at any size and resizes it to {}x{} inside ('{}', {} {}): built at "
                 "that size, trtkit resizes each image to it and maps the boxes back".format(
                     size[0], size[1], inner["node"], inner["mode"], inner["coordinates"]))
    if size is None:
        raise InputError("the ONNX input '{}' has dynamic height and width: a foreign detector's anchors are laid "
                         "out for one size".format(inputs[0].name), hint="pass --input-size HxW (its export size)")
    shape = inputs[0].type.tensor_type.shape
    for axis, value in zip(axes, size):
        shape.dim[axis].Clear()
        shape.dim[axis].dim_value = int(value)
    return tuple(int(v) for v in size), inner


def _with_output_shapes(model):
    """(``model`` with each output's shape as one run on a zero image gives it (the batch left dynamic), that
    run's {output: array}).

    Why a run rather than ONNX shape inference: exporters compute the reshapes of a head from the input's
    shape (Shape, Gather, Concat), which shape inference does not fold, and the head's layout is read from
    these shapes."""
    from trtkit.deps import require
    from trtkit.onnx.normalize import probe_image
    ort = require("onnxruntime", "reading a foreign detector's output shapes")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    found = session.run(None, dict([probe_image(model)]))
    values = dict((output.name, value) for output, value in zip(model.graph.output, found))
    for output, value in zip(model.graph.output, found):
        output.type.tensor_type.ClearField("shape")
        for axis, size in enumerate(value.shape):
            dim = output.type.tensor_type.shape.dim.add()
            if axis == 0:
                dim.dim_param = "N"
            else:
                dim.dim_value = int(size)
    return model, values


def decode_graph(model, decoder, given=None, size=None, landmarks=False):
    """(``model`` ending in ``decoded``, the family, its filled parameters, (H, W)): ``decoder``'s tail
    appended to a foreign detector's graph (in place), the raw outputs only it reads dropped. ``landmarks``:
    where the family reads some, their 2K columns after the scores (``detect.raw``)."""
    from onnx import TensorProto, helper
    from trtkit.detect.decoders.graph import append_decoder, outputs_of
    from trtkit.detect.raw import OUTPUT_NAME
    from trtkit.onnx.load import pick_output
    from trtkit.onnx.normalize import strip_initializer_inputs
    strip_initializer_inputs(model)
    size, inner = graph_size(model, size)
    family = decoders.family(decoder)
    given = decoders.parse_params(given)
    if hasattr(family, "cut"):  # a graph with its selection inside: cut where the family reads it
        given = family.cut(model, given)
    check_stride(given, size)  # before the family's anchor counts, which a too small input also breaks
    model, values = _with_output_shapes(model)
    params = family.infer(outputs_of(model, values), size, given)
    if inner is not None:  # the contract's resize is the graph's (``pipeline.detector_source.graph_resize``)
        params["inner_resize"] = inner
    check_stride(params, size)
    raw = [o.name for o in model.graph.output]
    append_decoder(model, family, params, size, landmarks)
    model.graph.output.extend([helper.make_tensor_value_info(r, TensorProto.FLOAT, None) for r in raw])
    pick_output(model, OUTPUT_NAME)  # the raw outputs only the decoder reads: nothing else is kept
    return model, family, params, size


def host_graph(model, reference, size=None):
    """(``model`` ending in ``raw_heads``, the host decoder's parameters, (H, W)): a foreign detector's raw
    outputs packed for the user's function (``detect.host_decoder``), which is called once here on a zero
    image's outputs, so a function that raises or answers the wrong shapes is refused before anything is built."""
    from trtkit.onnx.normalize import strip_initializer_inputs
    strip_initializer_inputs(model)
    size = input_hw(model, size)
    model, values = _with_output_shapes(model)
    return model, host_decoder.pack_graph(model, values, reference, size), size


def check_stride(params, size):
    """Refuse an input smaller than the largest stride of a family's levels (``strides``, given or read, or
    each level's):
    its coarsest feature map would have no cell of its own, and the anchors laid out for it mean nothing."""
    from trtkit.detect.decoders.base import ints
    found = ints(params["strides"], "strides") if params.get("strides") else []
    for level in params.get("levels") or []:
        found.extend(level.get("strides") or [])
    if found and max(found) > min(size):
        raise InputError("the input {}x{} is smaller than the model's stride {}".format(size[0], size[1], max(found)),
                         hint="pass --input-size of at least {0}x{0} (the size the detector was exported at)".format(
                             max(found)))


def adapt(options, onnx_path, work_dir, name, decoder=None):
    """(head record, path of the adapted copy) of a foreign detector ONNX decoded by ``decoder`` (by default
    ``options.foreign.decoder``)."""
    from trtkit.deps import require
    from trtkit.detect.params import DetectionHead, PostProcessing
    from trtkit.fileio import atomic_path
    from trtkit.onnx.load import load_onnx, set_detection_metadata
    onnx = require("onnx", "reading ONNX files")
    chosen = options.foreign
    if options.image_sizes:
        raise InputError("--image-sizes is not available for a foreign detector: its anchors are laid out for one "
                         "input size", hint="drop --image-sizes")
    if decoder is None and chosen.host:
        model, params, size = host_graph(load_onnx(onnx_path), chosen.decoder, options.input_size)
        family = host_decoder
        post = PostProcessing(per_level=False, **chosen.postprocessing(dict(host_decoder.POSTPROCESSING)))
        head = DetectionHead(params["num_classes"], post, decoder=decoders.DecoderSpec(host_decoder.FAMILY,
                                                                                        params).to_dict())
    else:
        model, family, params, size = decode_graph(load_onnx(onnx_path), decoder or chosen.decoder, chosen.params,
                                                   options.input_size, landmarks=True)
        values = chosen.postprocessing(family.postprocessing(params))
        post = PostProcessing(per_level=values.pop("per_level", False), **values)
        recorded = dict((k, v) for k, v in params.items() if not k.startswith("_"))  # "_": arrays, not JSON
        head = DetectionHead(params["num_classes"], post, background=family.background(params),
                             levels=params.get("level_anchors"), size_divisible=params.get("size_divisible", 1),
                             decoder=decoders.DecoderSpec(family.name, recorded).to_dict(),
                             landmarks=(params.get("landmarks") or {}).get("points", 0))
    set_detection_metadata(model, head)
    path = os.path.join(work_dir, "{}.decoded.onnx".format(name))
    with atomic_path(path) as tmp:
        onnx.save(model, tmp)
    log.info("{}: decoded by the {} decoder ({}), {} classes at {}x{}; post-processing {}".format(
        os.path.basename(onnx_path), getattr(family, "name", host_decoder.FAMILY),
        ", ".join("{}={}".format(k, v) for k, v in sorted(params.items())
                  if k not in ("levels", "outputs", "level_anchors") and not k.startswith("_")),
        params["num_classes"], size[0], size[1], post))
    return head.to_dict(), path
