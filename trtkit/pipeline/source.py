"""Which model a command works on, resolved once for every command that takes one.

A model comes from a PyTorch checkpoint (with its architecture), the built-in
sample model, or an ONNX file trtkit may not have written. ``ModelOptions``
holds what the user said (flags or Python arguments); ``resolve_model`` turns
it into a ``ModelSource``: the name artifacts are called by, the PyTorch model
or the normalized FP32 ONNX, the input contract and the manifest's ``model``
record. ``trtkit build`` and ``trtkit calibrate`` both go through it, so the
two never disagree on what a flag means.
"""

import hashlib
import os
import re

from trtkit import log, tasks
from trtkit.contract import FIELDS as CONTRACT_FIELDS, UINT8_PIXELS, InputContract, parse_image_sizes, parse_size, \
    resolve
from trtkit.deps import require
from trtkit.errors import InputError, ModelMismatch, first_line
from trtkit.keywords import Field, Options, add_fields
from trtkit.outputs import NAMES as OUTPUT_KINDS, help_text as output_kinds_help
from trtkit.pipeline.foreign_detector import DecoderOptions

EXPORTERS = ("auto", "dynamo", "torchscript")


class ModelOptions(Options):
    """``model``: architecture name (or the name given to an ONNX model), or a ``torch.nn.Module`` (any
    classifier; ``input_size`` is then required, the class count comes from its output, ``checkpoint``
    optionally holds its weights); ``checkpoint``: PyTorch file
    (None: the built-in sample); ``onnx``: an ONNX classifier instead; ``num_classes``: expected class
    count (a model for another count is refused); ``input_size``: N or (H, W) override; ``input``: other
    InputContract fields to override ({"mean": ..., "resize": ...}, see ``contract.FIELDS``);
    ``exporter``: torch ONNX exporter (auto, dynamo, torchscript); ``opset``: the ONNX opset to export at (None:
    the highest the installed torch and the target TensorRT both read, see ``trtkit.onnx.opsets``); ``output_kind``: what the output holds
    (``trtkit.outputs``; None: detected from the model); ``task``: ``classification`` or ``segmentation``
    (None: detected from the model's output: [N, classes] or a [N, C, H, W] map); ``image_sizes``: (smallest,
    largest) image size the artifacts must run at (H and W dynamic; None: the input size only); ``threshold``:
    a one-column or multi-label output's decision threshold (positive when > it; None: 0.5 for probabilities,
    0 for logits), recorded in the manifest's output kind as ``KIND@THRESHOLD``; ``output``: the output of a
    several-output ONNX to build and judge (the others are dropped; None: the first is judged, all kept);
    ``foreign``: a ``DecoderOptions`` (a foreign detector's decoder and head thresholds; its keywords are these
    options' own)."""

    def __init__(self, model=None, checkpoint=None, onnx=None, num_classes=None, input_size=None, exporter="auto",
                 input=None, output_kind=None, task=None, image_sizes=None, opset=None, threshold=None, output=None,
                 foreign=None):
        if onnx and checkpoint:
            raise InputError("give --onnx or --checkpoint, not both")
        from trtkit.onnx.opsets import parse_opset
        self.opset = parse_opset(opset)
        if onnx and self.opset is not None:
            raise InputError("--opset sets the opset of an export; an --onnx file keeps its own",
                             hint="drop --opset, or export the model again at that opset")
        if output is not None and not onnx and (model is None or isinstance(model, str)):
            raise InputError("--output picks one output of an --onnx file or of a module's tuple or dict",
                             hint="a checkpoint's model returns one output")
        self.output = output
        self.module = None
        if model is not None and not isinstance(model, str):
            if not hasattr(model, "state_dict") or not callable(model):
                raise InputError("model must be a name or a torch.nn.Module, got {}".format(type(model).__name__))
            if onnx:
                raise InputError("give a module or an ONNX file, not both")
            if input_size is None and "size" not in (input or {}):
                raise InputError("a torch.nn.Module needs input_size (e.g. input_size=(224, 224))",
                                 hint="trtkit exports it with an example input of that size")
            self.module, model = model, None
        if exporter not in EXPORTERS:
            raise InputError("unknown exporter '{}'".format(exporter), hint="use one of " + ", ".join(EXPORTERS))
        if num_classes is not None and int(num_classes) < 1:
            raise InputError("--num-classes must be at least 1, got {}".format(num_classes))
        self.task = tasks.parse(task).name if task is not None else None  # an alias is kept as the task's name
        self.foreign = foreign or DecoderOptions()  # a foreign detector's decoder (pipeline.foreign_detector)
        if self.foreign.given and not onnx:
            raise InputError("--decoder decodes an --onnx detector's raw outputs", hint="pass --onnx FILE")
        if self.foreign.decoder and self.task is None:
            self.task = tasks.DETECTION.name
        named = tasks.of_model_name(model) if model and not onnx else None  # the task whose architecture it is
        if model and not onnx and named is None:
            from trtkit.models.classifiers import check_model_name
            check_model_name(model)
            if not checkpoint and model != tasks.DEFAULT.sample_name:
                raise InputError("--model {} needs --checkpoint (only the {} sample model is built in)".format(
                    model, tasks.DEFAULT.sample_name),
                    hint="pass --checkpoint FILE, or drop --model to use the sample model")
        if named is not None and not checkpoint and model != named.sample_name:
            raise InputError("--model {} needs --checkpoint ({} is {})".format(
                model, named.sample_title, named.sample_name),
                hint="pass --checkpoint FILE, or --task {} with no model".format(named.name))
        self.model = model
        self.checkpoint = checkpoint
        self.onnx = onnx
        self.num_classes = int(num_classes) if num_classes is not None else None
        self.input = InputContract.overrides(input)
        if input_size is not None:
            self.input["size"] = parse_size(input_size)
        self.exporter = exporter
        self.image_sizes = parse_image_sizes(image_sizes) if image_sizes is not None else None
        from trtkit.outputs import OutputKind
        self.output_kind = OutputKind.parse(output_kind).name if output_kind is not None else None
        self.threshold = None
        if threshold is not None:
            from trtkit.outputs import BINARY_PROBABILITY
            probe = OutputKind.parse(output_kind) if output_kind is not None else BINARY_PROBABILITY
            self.threshold = probe.with_threshold(threshold).threshold  # a number, and one the kind can take

    @property
    def input_size(self):
        """(H, W) asked for, or None."""
        return self.input.get("size")

    def input_overrides(self):
        """The InputContract fields the user set (see ``contract.resolve``)."""
        return dict(self.input)

    def to_keywords(self):
        """Options.to_keywords, with a module given as ``model`` kept as that module."""
        values = Options.to_keywords(self)
        if self.module is not None:
            values["model"] = self.module
        return values

    @classmethod
    def add_arguments(cls, parser):
        """The model group's flags, then the foreign detectors' (``DecoderOptions``)."""
        add_fields(parser.add_argument_group(*cls.GROUP), cls.FIELDS)
        DecoderOptions.add_arguments(parser)

    # the flags (and keywords) of the "model" group: the input contract's are the model's too
    GROUP = ("model",)
    PARTS = (("foreign", DecoderOptions),)
    FIELDS = (
        Field("model", help="architecture: resnet18, resnet34, resnet50 or torchvision:NAME (default: resnet18, or "
                            "what the checkpoint records); with --onnx, the name given to the model"),
        Field("checkpoint", metavar="FILE", help="PyTorch checkpoint (state_dict, {'state_dict':...}, "
              "{'model':...}, DataParallel); default: the built-in sample model"),
        Field("onnx", metavar="FILE", help="an ONNX classifier instead of a PyTorch model"),
        Field("num_classes", type=int, metavar="N",
              help="expected number of classes; a model for another count is refused"),
    ) + tuple(field.within("input") for field in CONTRACT_FIELDS) + (
        Field("exporter", choices=list(EXPORTERS),
              help="torch ONNX exporter (default: auto = the current one, else TorchScript)"),
        Field("opset", metavar="N",
              help="ONNX opset of the export (default: the highest the installed torch and the target TensorRT both "
                   "read, at most 17, or 18 with the dynamo exporter; TensorRT 8.2 on a Jetson Nano reads up to 13)"),
        Field("image_sizes", metavar="MIN,MAX",
              help="image sizes the artifacts must run at besides --input-size, e.g. 128,1024: the export gets "
                   "dynamic height and width, TensorRT engines a profile from MIN to MAX (optimized at the input "
                   "size), and 'trtkit bench --image-sizes' can sweep them (default: the input size only)"),
        Field("task", choices=list(tasks.names()),
              help="what the model does (default: read from its output: [N, classes] is classification, a "
                   "[N, C, H, W] map of class scores or a one-channel [N, 1, H, W] logit/probability map is "
                   "segmentation, verified per pixel: pixel agreement and mIoU)"),
        Field("output_kind", choices=list(OUTPUT_KINDS), metavar="KIND",
              help="what the model's output holds, and so its decision rule (default: read from the model: its "
                   "last Softmax/LogSoftmax/Sigmoid and column count; a PyTorch module: logits, or binary-logit "
                   "for one column; needed for multilabel-logits, and where the output's column count is not "
                   "fixed): " + output_kinds_help()),
        Field("output", metavar="NAME",
              help="of an ONNX with several outputs, the one to build and judge: the others are dropped from the "
                   "artifacts (default: every output kept, the first judged, with a warning naming them)"),
        Field("threshold", type=float, metavar="T",
              help="decision threshold of a one-channel (binary) or multi-label output: positive when the output "
                   "is > T, e.g. 0.3 for a text detector whose package thresholds its probability map at 0.3 "
                   "(default: 0.5 for probabilities, 0 for logits); verification, predict and serve use it, the "
                   "manifest records it in the output kind (binary-probability@0.3)"),
    )


# what a PyTorch model takes: NCHW float32 (a --layout nhwc flag contradicts it)
TORCH_INPUT = {"layout": "nchw", "input_dtype": "float32"}


class ModelSource(object):
    """A resolved model: ``name`` (artifacts are ``NAME.<precision>.*``), ``torch_model`` (None for ONNX
    sources), ``onnx_path`` (the normalized FP32 ONNX of an ONNX source; None until a PyTorch model is
    exported), ``contract``, ``num_classes``, ``notes`` (what normalizing changed) and ``info`` (the manifest's ``model`` record)."""

    def __init__(self, name, contract, info, torch_model=None, onnx_path=None, num_classes=None, notes=()):
        self.name = name
        self.contract = contract
        self.info = info
        self.torch_model = torch_model
        self.onnx_path = onnx_path
        self.num_classes = num_classes
        self.notes = list(notes)


def resolve_model(options, work_dir):
    """The ModelSource for ``options``; an ONNX source is normalized into ``work_dir/NAME.fp32.onnx``."""
    if options.onnx:
        source = _onnx_source(options, work_dir)
    elif options.module is not None:
        source = _module_source(options)
    else:
        source = _torch_source(options)
    if options.image_sizes:
        source.info["image_sizes"] = list(options.image_sizes)
    return source


def _onnx_source(options, work_dir):
    from trtkit.fileio import sha256_file
    from trtkit.pipeline.detector_source import graph_resize, onnx_detector
    from trtkit.onnx.load import prepare_onnx
    name = options.model or _onnx_stem(options.onnx)
    onnx_path = os.path.join(work_dir, "{}.fp32.onnx".format(name))
    if os.path.abspath(onnx_path) == os.path.abspath(options.onnx):  # never overwrite the user's file
        onnx_path = os.path.join(work_dir, "{}.normalized.fp32.onnx".format(name))
    overrides = options.input_overrides()
    # a trtkit detector (or a foreign one with --decoder, adapted to one): read as one from the start
    head, source_path = onnx_detector(options, options.onnx, work_dir, name)
    overrides = graph_resize(head, overrides)  # a graph that resizes inside: trtkit's resize is the graph's
    summary, notes = prepare_onnx(source_path, onnx_path, layout=overrides.get("layout"),
                                  task=tasks.DETECTION.name if head is not None else options.task,
                                  output=options.output)
    for note in notes:
        log.info("onnx: " + note)
    c, h, w = summary.image_shape
    if options.image_sizes and isinstance(h, int) and isinstance(w, int):
        raise InputError("--image-sizes needs an ONNX with dynamic height and width; {} is fixed at {}x{}".format(
            options.onnx, h, w), hint="export it with dynamic H and W axes, or drop --image-sizes")
    fixed = {"size": (h, w) if isinstance(h, int) and isinstance(w, int) else None,
             "channels": c if isinstance(c, int) else None,
             "layout": summary.source_layout, "input_dtype": summary.source_dtype}
    if summary.source_dtype == "uint8":
        fixed.update(UINT8_PIXELS)
    if fixed["size"] is None and "size" not in overrides and summary.contract is None:
        raise InputError("the ONNX input has no fixed height/width", hint="pass --input-size N or HxW")
    contract = resolve(summary.contract, overrides, fixed, what=os.path.basename(options.onnx))
    if head is not None:  # its decoded scores are the head's probabilities
        from trtkit.outputs import OutputKind
        kind, num_classes = OutputKind.parse("probabilities"), head["num_classes"]
    else:
        kind = _output_kind(options.output_kind or summary.output_kind, summary.num_classes,
                            "the ONNX output '{}' {}".format(summary.output_names[0], summary.output_shape),
                            options.threshold)
        _check_override(options.output_kind, summary.output_kind, "'{}'".format(summary.output_names[0]), notes)
        num_classes = kind.classes(summary.num_classes) if summary.num_classes else None
    if options.num_classes and num_classes and options.num_classes != num_classes:
        raise InputError("{} outputs {} classes, not {}".format(options.onnx, num_classes, options.num_classes))
    info = {"name": name, "source": "onnx", "onnx": os.path.abspath(options.onnx),
            "sha256": sha256_file(options.onnx), "num_classes": num_classes, "input": contract.to_dict(),
            "input_name": summary.input_name, "output_names": summary.output_names, "opset": summary.opset,
            "output_kind": kind.name, "task": summary.task, "notes": notes}
    if head is not None:
        info.update(task=tasks.DETECTION.name, detection=head)
    return ModelSource(name, contract, info, onnx_path=onnx_path, num_classes=num_classes, notes=notes)


def read_exported_kind(info, options, onnx_path):
    """Set ``info["output_kind"]`` of a PyTorch model to what its exported graph shows (a Softmax, LogSoftmax or
    Sigmoid at its end, read as for an ONNX file), unless ``options.output_kind`` (``--output-kind``) said.
    Measured before: MTCNN's RNet (facenet-pytorch) ends in nn.Softmax, was taken for logits, and predict,
    serve and the Triton config applied a second softmax (a face at 99.84% shown at 73%)."""
    from trtkit.onnx.layout import output_kind
    from trtkit.outputs import OutputKind
    if info.get("detection"):  # a detector's decoded scores are its head's probabilities, whatever ends the graph
        return
    found = output_kind(require("onnx").load(onnx_path), info.get("task"))
    if options.output_kind is not None:
        _check_override(options.output_kind, found, "of the exported module", info.setdefault("notes", []))
        return
    if found is None or found == info["output_kind"].split("@")[0]:  # the kind, its threshold aside
        return
    kind = OutputKind.parse(found)
    if options.threshold is not None:
        kind = kind.with_threshold(options.threshold)
    info["output_kind"] = kind.name
    log.info("the exported graph's output holds {} (its last activation): verification, predict and serve use its "
             "decision rule (--output-kind overrides)".format(kind.name))


def _check_override(asked, detected, output, notes):
    """Warn when ``--output-kind`` contradicts an activation the graph ends in (a Softmax or Sigmoid read as
    ``probabilities``): measured, ``--output-kind logits`` on a Keras softmax made predict apply a second softmax
    (79.72% shown as 64.41%), with the log still saying the output held probabilities."""
    from trtkit.outputs import OutputKind
    if not asked or not detected:
        return
    asked_kind, found = OutputKind.parse(asked), OutputKind.parse(detected)
    if found.scale != "logits" and asked_kind.scale != found.scale:
        log.warn("--output-kind {} contradicts the graph: its output {} comes out of an activation that gives {}; "
                 "predict and serve would read it as {} (drop --output-kind unless the graph is wrong)".format(
                     asked, output, found.scale, asked_kind.scale))
    if asked_kind.base != found.base:
        notes.append("--output-kind {} replaces the {} read from the graph".format(asked, detected))


def _output_kind(name, columns, where, threshold=None):
    """The OutputKind of an output of ``columns`` columns (``name``: detected or asked; None: cannot be told),
    deciding at ``threshold`` when given (``--threshold``)."""
    from trtkit.outputs import OutputKind
    if name is None:
        raise InputError("{}: trtkit cannot tell what it holds (its column count is not fixed: class scores or "
                         "a binary score?)".format(where), hint="pass --output-kind, e.g. logits or binary-logit")
    kind = OutputKind.parse(name)
    if threshold is not None:
        kind = kind.with_threshold(threshold)
    kind.check_columns(columns, where)
    return kind


def _onnx_stem(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    return stem[:-len(".fp32")] if stem.endswith(".fp32") else stem


def _torch_source(options):
    from trtkit.fileio import sha256_file
    if options.checkpoint:
        model = _checkpoint_model(options)
        kind, path = "checkpoint", options.checkpoint
    else:  # the sample of the task --model's architecture is of, else of --task
        sample = (tasks.of_model_name(options.model) if options.model else None) or tasks.of(options.task)
        model, path = sample.sample_model()
        kind = "sample"
        if options.num_classes is not None and options.num_classes != model.num_classes:
            raise InputError("{} has {} classes, not {}".format(sample.sample_title, model.num_classes,
                                                                options.num_classes),
                             hint="pass --checkpoint for your own model")
    model.input_contract = contract = resolve(model.input_contract, options.input_overrides(), TORCH_INPUT,
                                              what=model.trtkit_name)
    task = getattr(model, "task", None) or tasks.DEFAULT.name
    head = getattr(model, "detection_head", None)  # a detector: its decoded scores are probabilities
    # a one-logit head is binary, as the module path reads it (measured: an EfficientNet-B0 checkpoint with a
    # one-logit head was refused on the command line and took 1 class with --output-kind binary-logit)
    output_kind = _output_kind(options.output_kind or ("probabilities" if head is not None else
                                                       "binary-logit" if model.num_classes == 1 else "logits"),
                               model.num_classes, model.trtkit_name, options.threshold)
    num_classes = output_kind.classes(model.num_classes)
    info = {"name": model.trtkit_name, "source": kind, "checkpoint": os.path.abspath(path),
            "sha256": sha256_file(path), "num_classes": num_classes, "stem": getattr(model, "stem", None),
            "input": contract.to_dict(), "task": task, "output_kind": output_kind.name}
    if head is not None:
        info["detection"] = head.to_dict()
        reason = model.fixed_size_reason() if options.image_sizes else None
        if reason:
            raise InputError("--image-sizes is not available for {}: {}".format(model.trtkit_name, reason),
                             hint="drop --image-sizes, or set --input-size to the size you run at")
    trained_on = (getattr(model, "trtkit_meta", None) or {}).get("dataset")
    if trained_on:  # what trtkit train (or the sample) learned from: its train part is never verified on
        info["trained_on"] = str(trained_on)
    return ModelSource(model.trtkit_name.replace("torchvision:", ""), contract, info, torch_model=model,
                       num_classes=num_classes)


def _checkpoint_model(options):
    """The model of ``options.checkpoint``: a segmentation model when its state_dict has that layout (or
    ``--task segmentation`` / a segmentation ``--model`` says so), else a classifier; a checkpoint of the other
    task than ``--task`` asks for is refused in one line."""
    from trtkit.models.classifiers import load_model, read_checkpoint
    from trtkit.models.segmentation import infer_segmentation_layout, load_segmentation_model
    from trtkit.pipeline.detector_source import detection_checkpoint
    state, meta = read_checkpoint(options.checkpoint)
    detector = detection_checkpoint(options, state, meta)
    if detector is not None:
        return detector
    layout = infer_segmentation_layout(state)
    found = tasks.SEGMENTATION if layout else tasks.CLASSIFICATION  # what the state_dict's layout is of
    asked = tasks.parse(options.task) if options.task else \
        tasks.of_model_name(options.model) if options.model else None
    if asked is not None and asked != found and layout:
        raise ModelMismatch("{} is a {} segmentation checkpoint, not a classifier".format(
            options.checkpoint, layout[0]), hint="drop --task {} (or pass a classifier checkpoint)".format(asked.name))
    if asked is not None and asked != found:  # asked for a segmentation model, the state_dict is no such layout
        raise ModelMismatch("{} is not a segmentation checkpoint (no backbone.* and classifier.* of an FCN or "
                            "DeepLabV3)".format(options.checkpoint),
                            hint="drop --task segmentation for a classifier, or pass --onnx for other models")
    if layout:
        return deployable_model(load_segmentation_model(options.model, options.checkpoint, state, meta, layout,
                                                        num_classes=options.num_classes))
    return load_model(options.model, options.checkpoint, num_classes=options.num_classes, parts=(state, meta))


def deployable_model(model):
    from trtkit.models.segmentation import deployable
    return deployable(model)


def _module_source(options):
    """Any ``torch.nn.Module`` a Python caller hands over: weights from ``checkpoint`` when given.

    The build works on a CPU copy in eval mode: the caller's module keeps its device, its training mode and
    its own weights (a checkpoint is loaded into the copy)."""
    import copy
    torch = require("torch", "building a PyTorch module")
    from trtkit.models.classifiers import checkpoint_parts, load_checkpoint_payload
    module = copy.deepcopy(options.module).cpu().eval()
    if options.checkpoint:
        state, _ = checkpoint_parts(load_checkpoint_payload(options.checkpoint), options.checkpoint)
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise ModelMismatch("{} does not fit {}: {}".format(
                options.checkpoint, type(module).__name__, first_line(exc)),
                hint="pass the checkpoint saved from this module's state_dict")
    contract = resolve(None, options.input_overrides(), TORCH_INPUT, what="the module")
    with torch.no_grad():
        try:
            out = module(torch.zeros((1,) + contract.shape))
        except Exception as exc:
            raise InputError("the module does not run on a {} input: {}".format(
                "x".join(str(d) for d in (1,) + contract.shape), first_line(exc, 200)),
                hint="check input_size and channels")
    name = getattr(module, "trtkit_name", None) or type(module).__name__
    given = "{}.{}".format(type(module).__module__, type(module).__name__)  # before any wrapping
    if isinstance(out, dict) and "out" in out and options.output is None:  # torchvision's segmentation models
        module = deployable_model(module)
        out = out["out"]
    elif isinstance(out, (tuple, list, dict)):
        from trtkit.models.pick import pick_output
        module, out = pick_output(module, out, options.output)
    from trtkit.onnx.layout import is_channels_last_of
    if hasattr(out, "shape") and is_channels_last_of(list(out.shape), contract.size):
        from trtkit.models.pick import channels_first
        log.info("the module's output {} is a channels-last map of the {}x{} input: trtkit reads it as {}".format(
            list(out.shape), contract.height, contract.width, [out.shape[0], out.shape[3], out.shape[1],
                                                                out.shape[2]]))
        module, out = channels_first(module), out.permute(0, 3, 1, 2)
    task = tasks.of_shape(list(out.shape)) if hasattr(out, "shape") else None
    if task is None or (task.flat and out.dim() != 2):  # a module's class scores are [N, classes]
        raise InputError("the module's output is {}; trtkit builds classifiers with [N, classes] outputs and "
                         "segmentation models with [N, C, H, W] maps".format(
                             tuple(out.shape) if hasattr(out, "shape") else type(out).__name__),
                         hint="return class scores or a map (a tensor, or a dict with 'out')")
    if options.task is not None and tasks.parse(options.task) != task:
        raise InputError("--task {} does not fit the module: its output {} is {}".format(
            options.task, tuple(out.shape), task.output_text), hint="drop --task: trtkit detects it")
    kind = _output_kind(options.output_kind or ("binary-logit" if out.shape[1] == 1 else "logits"),
                        int(out.shape[1]), "the module's output", options.threshold)
    num_classes = kind.classes(int(out.shape[1]))
    if options.num_classes is not None and options.num_classes != num_classes:
        raise InputError("the module outputs {} classes, not {}".format(num_classes, options.num_classes))
    name = re.sub(r"[^a-z0-9_-]+", "_", name.lower()).strip("_") or "model"
    digest = hashlib.sha256()
    for key, value in module.state_dict().items():
        digest.update(key.encode("utf-8"))
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    info = {"name": name, "source": "module", "class": given,
            "checkpoint": os.path.abspath(options.checkpoint) if options.checkpoint else None,
            "sha256": digest.hexdigest(), "num_classes": num_classes, "input": contract.to_dict(),
            "output_kind": kind.name, "task": task.name}
    return ModelSource(name, contract, info, torch_model=module, num_classes=num_classes)
