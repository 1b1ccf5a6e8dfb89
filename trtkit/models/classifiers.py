"""ResNet18/34/50/101 with torchvision's exact architecture and state_dict layout.

torchvision does not import everywhere trtkit runs (a CPU-only torch here, old
JetPack wheels there), so trtkit defines the ResNets itself: same module names,
same parameter shapes, same forward pass. A torchvision checkpoint therefore
loads with ``strict=True`` and gives the same outputs. Each model carries its
input contract (size, mean, std) so every later step preprocesses alike.

``torchvision:<name>`` and ``timm:<name>`` select those libraries' constructors when they import.
"""

import difflib
import os

from trtkit.contract import IMAGENET_MEAN, IMAGENET_STD, InputContract
from trtkit.deps import require
from trtkit.errors import InputError, ModelMismatch, first_line

# name -> (block kind, blocks per stage)
ARCHITECTURES = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
}
STEMS = ("imagenet", "cifar")
LIBRARY_PREFIXES = ("torchvision:", "timm:")


def model_names():
    """Every name ``create_model`` accepts (torchvision ones only when it imports)."""
    return sorted(ARCHITECTURES)


def check_model_name(name):
    """Raise InputError with close suggestions for an unknown model name."""
    if name.startswith(LIBRARY_PREFIXES):
        if not name.split(":", 1)[1]:
            raise InputError("'{}' names no model".format(name), hint="e.g. timm:mobilenetv3_small_100")
        return
    if name not in ARCHITECTURES:
        close = difflib.get_close_matches(name.lower(), model_names(), n=3, cutoff=0.5)
        hint = "did you mean {}?".format(" or ".join(close)) if close else "choose one of {}".format(", ".join(model_names()))
        raise InputError("unknown model '{}'".format(name),
                         hint=hint + " (or torchvision:<name> / timm:<name> when that library is installed)")


def _build_classes():
    """Define the nn.Module classes on first use, so the module imports without torch."""
    torch = require("torch", "building a ResNet")
    nn = torch.nn

    def conv3x3(cin, cout, stride=1, dilation=1):
        return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=dilation, dilation=dilation, bias=False)

    def conv1x1(cin, cout, stride=1):
        return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, width, stride=1, downsample=None, dilation=1):
            super(BasicBlock, self).__init__()
            if dilation > 1:  # as torchvision: a dilated backbone is made of Bottlenecks
                raise NotImplementedError("dilation > 1 is not supported in BasicBlock")
            self.conv1 = conv3x3(cin, width, stride)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(width, width)
            self.bn2 = nn.BatchNorm2d(width)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class Bottleneck(nn.Module):
        # torchvision's "ResNet v1.5": the stride sits on the 3x3 convolution.
        expansion = 4

        def __init__(self, cin, width, stride=1, downsample=None, dilation=1):
            super(Bottleneck, self).__init__()
            self.conv1 = conv1x1(cin, width)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = conv3x3(width, width, stride, dilation)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = conv1x1(width, width * self.expansion)
            self.bn3 = nn.BatchNorm2d(width * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, block, layers, num_classes=1000, stem="imagenet", dilate=(False, False, False)):
            """``dilate``: for layer2..layer4, replace the stride by a dilation (torchvision's
            ``replace_stride_with_dilation``): the segmentation backbones' output stride 8."""
            super(ResNet, self).__init__()
            self.inplanes = 64
            self.dilation = 1
            if stem == "cifar":
                # Small images (32x32): a 3x3 stride-1 stem and no max-pool keep spatial detail.
                self.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
                self.maxpool = nn.Identity()
            else:
                self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
                self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.layer1 = self._make_layer(block, 64, layers[0])
            self.layer2 = self._make_layer(block, 128, layers[1], stride=2, dilate=dilate[0])
            self.layer3 = self._make_layer(block, 256, layers[2], stride=2, dilate=dilate[1])
            self.layer4 = self._make_layer(block, 512, layers[3], stride=2, dilate=dilate[2])
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * block.expansion, num_classes)
            for module in self.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(module, nn.BatchNorm2d):
                    nn.init.constant_(module.weight, 1)
                    nn.init.constant_(module.bias, 0)

        def _make_layer(self, block, width, blocks, stride=1, dilate=False):
            downsample = None
            previous_dilation = self.dilation
            if dilate:
                self.dilation *= stride
                stride = 1
            if stride != 1 or self.inplanes != width * block.expansion:
                downsample = nn.Sequential(conv1x1(self.inplanes, width * block.expansion, stride),
                                           nn.BatchNorm2d(width * block.expansion))
            layers = [block(self.inplanes, width, stride, downsample, previous_dilation)]
            self.inplanes = width * block.expansion
            for _ in range(1, blocks):
                layers.append(block(self.inplanes, width, dilation=self.dilation))
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return {"basic": BasicBlock, "bottleneck": Bottleneck, "resnet": ResNet}


_CLASSES = {}


def _classes():
    if not _CLASSES:
        _CLASSES.update(_build_classes())
    return _CLASSES


def resnet(name, num_classes=1000, stem="imagenet", dilate=(False, False, False)):
    """The bare ResNet ``name`` of ``ARCHITECTURES`` (no contract): a classifier, or the backbone of a
    segmentation model (``models.segmentation``), whose ``dilate`` flags trade layer2..4's strides for
    dilations."""
    kind, layers = ARCHITECTURES[name]
    classes = _classes()
    return classes["resnet"](classes[kind], layers, num_classes=num_classes, stem=stem, dilate=tuple(dilate))


def create_model(name, num_classes=1000, stem="imagenet", input_size=None, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                 contract=None):
    """Build an untrained model by name; it carries ``.trtkit_name``, ``.input_contract``, ``.stem``.

    ``contract`` (an InputContract, e.g. from checkpoint metadata) wins over ``mean``/``std``;
    ``input_size`` (N or (H, W)) overrides its size.
    """
    check_model_name(name)
    if stem not in STEMS:
        raise InputError("unknown stem '{}'".format(stem), hint="use one of {}".format(", ".join(STEMS)))
    if name.startswith("torchvision:"):
        model = _torchvision_model(name.split(":", 1)[1], num_classes)
    elif name.startswith("timm:"):
        model = _timm_model(name.split(":", 1)[1], num_classes)
    else:
        model = resnet(name, num_classes=num_classes, stem=stem)
    default_size = 32 if stem == "cifar" else 224
    model.trtkit_name = name
    model.stem = stem
    model.num_classes = num_classes
    if contract is None:
        contract = InputContract(size=input_size or default_size, mean=mean, std=std)
    elif input_size:
        contract = contract.with_overrides({"size": input_size})
    model.input_contract = contract
    return model


def _torchvision_model(arch, num_classes):
    try:
        import torchvision.models as tvm  # noqa: F401
    except Exception as exc:
        raise InputError("torchvision:{} needs torchvision, which does not import here ({})".format(arch, exc),
                         hint="use the built-in '{}' instead: same layout, same checkpoints".format(arch)
                         if arch in ARCHITECTURES else "install a torchvision that matches your torch")
    builder = getattr(tvm, arch, None)
    if builder is None:
        raise InputError("torchvision has no model '{}'".format(arch))
    return builder(num_classes=num_classes)


def _timm_model(arch, num_classes):
    try:
        import timm
    except Exception as exc:
        raise InputError("timm:{} needs timm, which does not import here ({})".format(arch, exc),
                         hint="pip install timm (its weights are not downloaded: pass --checkpoint)")
    if arch not in timm.list_models():
        close = difflib.get_close_matches(arch, timm.list_models(), n=3, cutoff=0.6)
        raise InputError("timm has no model '{}'".format(arch),
                         hint="did you mean {}?".format(" or ".join(close)) if close else "see timm.list_models()")
    return timm.create_model(arch, pretrained=False, num_classes=num_classes)


# ---------------------------------------------------------------- checkpoints

def _unwrap_state_dict(obj, path):
    """Find the state_dict inside the wrappers people save: {"state_dict"}, {"model"}, DataParallel."""
    for key in ("state_dict", "model_state_dict", "model", "net"):
        if isinstance(obj, dict) and key in obj and isinstance(obj[key], dict):
            obj = obj[key]
            break
    if hasattr(obj, "state_dict") and not isinstance(obj, dict):
        obj = obj.state_dict()
    if not isinstance(obj, dict) or not obj:
        raise ModelMismatch("{} holds no state_dict".format(path),
                            hint="save it with torch.save(model.state_dict(), path)")
    tensors = {}
    for key, value in obj.items():
        if not hasattr(value, "shape"):
            continue
        if key.startswith("module."):
            key = key[len("module."):]
        tensors[key] = value
    if not tensors:
        raise ModelMismatch("{} holds no tensors".format(path), hint="is it a training log rather than a checkpoint?")
    return tensors


def load_checkpoint_payload(path):
    """``torch.load`` a checkpoint file safely (``weights_only`` where torch has it), on the CPU.

    Returns whatever was saved; one clear InputError for a missing, corrupt or unsafe file.
    """
    torch = require("torch", "loading a checkpoint")
    if not os.path.isfile(path):
        raise InputError("checkpoint not found: {}".format(path), hint="check the path")
    kwargs = {"map_location": "cpu"}
    try:
        import inspect
        if "weights_only" in inspect.signature(torch.load).parameters:
            kwargs["weights_only"] = True
    except (ValueError, TypeError):
        pass
    try:
        return torch.load(path, **kwargs)
    except Exception as exc:
        raise InputError("cannot read checkpoint {}: {}".format(path, first_line(exc, 200)),
                         hint="the file is corrupt, truncated or not a PyTorch checkpoint")


def checkpoint_parts(payload, path):
    """(state_dict, trtkit metadata dict) of a loaded checkpoint payload."""
    meta = payload.get("trtkit", {}) if isinstance(payload, dict) and isinstance(payload.get("trtkit"), dict) else {}
    return _unwrap_state_dict(payload, path), meta


def read_checkpoint(path):
    """Load a checkpoint file safely; returns (state_dict, metadata dict)."""
    return checkpoint_parts(load_checkpoint_payload(path), path)


def infer_num_classes(state_dict):
    """Classes of a classifier checkpoint: rows of ``fc.weight`` (ResNets), else of its last 2-D weight
    (``classifier.weight``, ``head.fc.weight``: torchvision's and timm's other heads)."""
    weight = state_dict.get("fc.weight")
    if weight is None:
        matrices = [v for k, v in state_dict.items() if k.endswith("weight") and len(v.shape) == 2]
        weight = matrices[-1] if matrices else None
    return int(weight.shape[0]) if weight is not None else None


def infer_stem(state_dict):
    weight = state_dict.get("conv1.weight")
    if weight is not None and tuple(weight.shape[-2:]) == (3, 3):
        return "cifar"
    return "imagenet"


def load_model(name, checkpoint, num_classes=None, input_size=None, parts=None):
    """Build ``name`` and load ``checkpoint`` into it strictly, with a clear message on mismatch.

    ``num_classes`` and the stem are taken from the checkpoint (``fc.weight``,
    ``conv1.weight``); an explicit ``num_classes`` that disagrees is an error.
    The input contract comes from trtkit metadata when present. ``parts``: the (state_dict, metadata) of
    ``checkpoint`` when the caller has already read them.
    """
    state, meta = parts if parts is not None else read_checkpoint(checkpoint)
    name = name or meta.get("arch") or "resnet18"
    found = infer_num_classes(state)
    if found is None:
        raise ModelMismatch("{} has no classifier weight (fc.weight or a last 2-D weight): it is not a classifier "
                            "checkpoint".format(checkpoint),
                            hint="pass --onnx for other architectures")
    if num_classes is not None and num_classes != found:
        raise ModelMismatch("{} is for {} classes, not {}".format(checkpoint, found, num_classes),
                            hint="drop --num-classes or pass the checkpoint trained for {} classes".format(num_classes))
    contract = InputContract.from_dict(meta["input"]) if meta.get("input") else None
    stem = meta.get("stem") or infer_stem(state)
    model = create_model(name, num_classes=found, stem=stem, input_size=input_size, contract=contract)
    _load_strict(model, state, checkpoint, name)
    model.eval()
    model.trtkit_meta = meta
    return model


def check_layout(checkpoint, found, classes, name=None, num_classes=None):
    """ModelMismatch unless ``name`` (``--model``, None: any) is the architecture ``found`` in ``checkpoint``'s
    state_dict and ``num_classes`` (None: any) its ``classes``: the check every task's checkpoint loader makes."""
    from trtkit.errors import ModelMismatch
    if name and name != found:
        raise ModelMismatch("{} is a {} checkpoint, not {}".format(checkpoint, found, name),
                            hint="pass --model {} (or drop --model)".format(found))
    if num_classes is not None and num_classes != classes:
        raise ModelMismatch("{} is for {} classes, not {}".format(checkpoint, classes, num_classes),
                            hint="drop --num-classes or pass the checkpoint trained for {} classes".format(num_classes))


def _load_strict(model, state, path, name):
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [k for k in expected if k in state and tuple(expected[k].shape) != tuple(state[k].shape)]
    if missing or unexpected or wrong:
        guess = guess_architecture(state)
        detail = []
        if missing:
            detail.append("{} missing keys (e.g. {})".format(len(missing), missing[0]))
        if unexpected:
            detail.append("{} unexpected keys (e.g. {})".format(len(unexpected), unexpected[0]))
        if wrong:
            k = wrong[0]
            detail.append("{} shape mismatches (e.g. {}: {} vs {})".format(
                len(wrong), k, tuple(state[k].shape), tuple(expected[k].shape)))
        hint = "it looks like a {} checkpoint: pass --model {}".format(guess, guess) if guess and guess != name \
            else "pass the --model the checkpoint was trained as"
        raise ModelMismatch("{} does not fit {}: {}".format(path, name, "; ".join(detail)), hint=hint)
    model.load_state_dict(state, strict=True)


def guess_architecture(state_dict):
    """Name the built-in architecture whose block layout matches a state_dict, if any."""
    for name, (kind, layers) in ARCHITECTURES.items():
        ok = True
        for stage, count in enumerate(layers, start=1):
            if "layer{}.{}.conv1.weight".format(stage, count - 1) not in state_dict or \
                    "layer{}.{}.conv1.weight".format(stage, count) in state_dict:
                ok = False
                break
        if ok and (kind == "bottleneck") == ("layer1.0.conv3.weight" in state_dict):
            return name
    return None


def save_checkpoint(model, path, extra_meta=None, extra=None):
    """Save a state_dict with trtkit metadata (arch, classes, stem, input contract), atomically."""
    torch = require("torch", "saving a checkpoint")
    from trtkit.fileio import atomic_path
    meta = {
        "arch": getattr(model, "trtkit_name", None),
        "num_classes": getattr(model, "num_classes", None),
        "stem": getattr(model, "stem", "imagenet"),
        "input": model.input_contract.to_dict() if hasattr(model, "input_contract") else None,
    }
    meta.update(extra_meta or {})
    payload = {"state_dict": model.state_dict(), "trtkit": meta}
    payload.update(extra or {})
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path
