"""What ``gpu_check`` runs: its steps, what each needs, and for this machine which run and why the others do not.

The plan is a pure function of an *environment* (a dict: the GPU, which
modules import, whether torch has CUDA, ONNX Runtime's providers, TensorRT-RTX's
targets), so tests give it any machine. ``probe_environment`` fills that dict
for the machine it runs on; without a GPU it only looks for modules
(``importlib.util.find_spec``) and imports nothing heavy, so ``--dry-run`` is
instant there. ``allot`` shares the time budget between the steps still to run.
"""

import difflib
import importlib
import importlib.util

from trtkit.deps import install_hint
from trtkit.errors import InputError

# modules whose presence decides a step (import name -> how the plan names it)
MODULES = ("torch", "onnx", "onnxruntime", "sklearn", "tensorrt", "tensorrt_rtx", "tensorrt_rtx_bindings", "torch2trt",
           "triton")
BUILD_NEEDS = ("gpu", "torch", "onnx", "onnxruntime")


class Step(object):
    """One isolated part of the check. ``needs``: requirement keys (see ``requirement_reason``);
    ``after``: helper steps it uses; ``seconds``: its share of a budget (about its time on an H100);
    ``floor``: the least time worth starting it with; ``helper``: runs only for steps that use it;
    ``helpers_with``: modules (``env["modules"]`` keys) of which one must be there for it to use its helpers
    (empty: it always does)."""

    def __init__(self, name, summary, needs=(), after=(), seconds=60, floor=20, helper=False, helpers_with=()):
        self.name = name
        self.helpers_with = tuple(helpers_with)
        self.summary = summary
        self.needs = tuple(needs)
        self.after = tuple(after)
        self.seconds = float(seconds)
        self.floor = float(floor)
        self.helper = helper


# The device step's time, from stated figures rather than a guess (see ``device_step``).
# A cold start of the NVIDIA driver, what a cold ``nvidia-smi`` pays when persistence mode is off: "a short
# (order of 1-3 second) startup cost per GPU due to ECC scrubbing" (NVIDIA, Driver Persistence, Overview:
# docs.nvidia.com/deploy/driver-persistence/overview.html). The device record pays it once, at its first
# driver call (``backends.tensorrt.gpu``: cuInit initializes every visible GPU); the upper figure per GPU:
COLD_START_SECONDS_PER_GPU = 3.0
COLD_START_GPUS = 8  # the most GPUs one node commonly shows (DGX/HGX: 8); fewer GPUs only finish sooner
# the rest of the step, warm: the child's Python start, ``import torch`` (its CUDA libraries) and ONNX
# Runtime for their versions, cuDNN's version (torch's own CUDA start), the CPU and Jetson records
DEVICE_WARM_SECONDS = 8.0


def device_step(per_gpu=COLD_START_SECONDS_PER_GPU, gpus=COLD_START_GPUS, warm=DEVICE_WARM_SECONDS):
    """The device step with its budget derived, not guessed: its ``floor`` (the least it is ever started
    with) covers a cold driver start on ``gpus`` GPUs at ``per_gpu`` seconds each plus its ``warm`` work,
    and its ``seconds`` (its weight in ``allot``'s shares) are twice that. ``allot`` never gives a step less
    than its floor, so the device record finishes even on a node whose GPUs all start cold (the old fixed
    share, 15 of the plan's weights, came to a few seconds: too tight for a cold driver)."""
    floor = per_gpu * gpus + warm
    return Step("device", "device record: GPUs, driver, CUDA, CPU and runtime versions", seconds=2.0 * floor,
                floor=floor)


STEPS = [
    device_step(),
    Step("sample-model", "the sample ResNet18 (digits, 64x64): loaded from trtkit's cache, else trained once",
         ("torch", "sklearn"), seconds=90, floor=30, helper=True),
    Step("torch-baselines", "PyTorch as a tuned program runs it (cudnn.benchmark, channels_last): FP32, AMP "
         "(autocast FP16), .half() (BatchNorm FP32); batch 1, 64, 256", ("gpu", "torch", "torch_cuda"),
         ("sample-model",), seconds=80, floor=30),
    Step("resnet18-224", "ImageNet ResNet18 at 224x224 (the reference benchmark's setting; random weights): PyTorch "
         "FP32, AMP, .half() and torch.compile; batch 1, 64, 256", ("gpu", "torch", "torch_cuda"), seconds=120,
         floor=60),  # H200: the 9 eager cells took 40 s, torch.compile's 3 about 45 s more
    Step("tensorrt-rtx", "TensorRT-RTX FP32/FP16/INT8 engines for this GPU: built, verified against PyTorch "
         "FP32 on held-out sample images, timed at batch 1, 64", BUILD_NEEDS + ("tensorrt_rtx",),
         ("sample-model",), seconds=120, floor=40),
    Step("tensorrt", "classic TensorRT FP32/FP16/INT8 engines: built, verified, timed at batch 1, 64",
         BUILD_NEEDS + ("tensorrt",), ("sample-model",), seconds=120, floor=40),
    Step("torch2trt", "torch2trt FP32/FP16/INT8 engines (classic TensorRT): built, verified, timed at batch 1, 64",
         BUILD_NEEDS + ("torch_cuda", "tensorrt", "torch2trt"), ("sample-model",), seconds=100, floor=40),
    Step("onnxruntime-cuda", "ONNX Runtime CUDA FP32/FP16: verified, timed at batch 1, 64",
         BUILD_NEEDS + ("ort_cuda",), ("sample-model",), seconds=60, floor=25),
    Step("training", "training speed strict fp32 vs tf32 vs amp vs half: ResNet18 on CIFAR-shaped 32x32 data, same seed",
         ("gpu", "torch", "torch_cuda"), seconds=130, floor=40),  # strict FP32 runs ~3x TF32's time
    Step("segmentation", "the reference's segmentation table: the LRASPP sample and FCN/DeepLabV3 on "
         "ResNet50/101 at 512x512, TensorRT (else TensorRT-RTX) FP32/FP16/INT8 beside PyTorch FP32, AMP, .half(), "
         "batch 1; image sizes 128-1024 for FCN-ResNet50", BUILD_NEEDS + ("torch_cuda",), ("sample-model",),
         seconds=420, floor=120, helpers_with=("tensorrt", "tensorrt_rtx")),  # the sample builds engines only
    Step("torch-compile", "torch.compile (FP32) against eager at batch 1, 64, 256; failing when its outputs "
         "disagree with eager (max |diff|, top-1)",
         ("gpu", "torch", "torch_cuda", "torch_compile"), ("sample-model",), seconds=120, floor=60),
    # last: it takes what the others leave (with every step running, 540 s leave it nothing and it is skipped with
    # its reason, the others keeping their shares); on a GPU without TensorRT the default budget fits its floor
    Step("detection", "object detection in PyTorch: SSD300-VGG16, SSDlite320-MobileNetV3, RetinaNet-ResNet18-FPN "
         "(random weights) to decoded boxes, FP32/AMP/.half() at batch 1 and 8; RetinaNet-R18 training at 512x512 "
         "strict fp32 vs tf32 vs amp vs bf16 (steps/s, memory)", ("gpu", "torch", "torch_cuda"), seconds=150,
         floor=60),
]
STEP_NAMES = tuple(step.name for step in STEPS)
MARGIN_SECONDS = 15.0  # kept back for writing the reports and the parent's own start


def get_step(name):
    for step in STEPS:
        if step.name == name:
            return step
    raise InputError("unknown step '{}'".format(name), hint=_suggest(name))


def _suggest(name):
    close = difflib.get_close_matches(name, STEP_NAMES, n=1)
    return ("did you mean {}? ".format(close[0]) if close else "") + "steps: " + ", ".join(STEP_NAMES)


def parse_skip(values):
    """--skip values (repeatable, comma lists) -> set of step names; InputError with a suggestion for a typo."""
    names = set()
    for value in values or ():
        for name in str(value).split(","):
            name = name.strip()
            if name:
                names.add(get_step(name).name)
    return names


# ---------------------------------------------------------------- the environment

def probe_environment(deep=None):
    """This machine as the plan sees it. ``deep`` (default: when there is a GPU) imports the runtimes
    to ask what find_spec cannot: torch's CUDA, ONNX Runtime's providers, TensorRT-RTX's targets."""
    from trtkit.backends.tensorrt import gpu as gpu_probe
    env = {"gpu": gpu_probe.probe(), "modules": {}, "import_errors": {}, "versions": {}, "torch_cuda": None,
           "torch_compile": None, "ort_providers": None, "rtx_targets": None}
    for name in MODULES:
        try:
            env["modules"][name] = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            env["modules"][name] = False
    if deep is None:
        deep = env["gpu"] is not None
    if deep:
        _probe_deep(env)
    return env


def _import(env, name):
    if not env["modules"].get(name):
        return None
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # broken installs raise more than ImportError (missing CUDA libraries)
        env["modules"][name] = False
        env["import_errors"][name] = "{}: {}".format(exc.__class__.__name__, str(exc).strip()[:300])
        return None
    env["versions"][name] = str(getattr(module, "__version__", "?"))
    return module


def _probe_deep(env):
    torch = _import(env, "torch")
    if torch is not None:
        env["torch_cuda"] = bool(torch.cuda.is_available())
        if env["torch_cuda"]:
            from trtkit.backends.torch import mode_support
            usable, reason = mode_support("compile", "cuda")
            env["torch_compile"] = usable
            env["torch_compile_reason"] = None if usable else reason
    ort = _import(env, "onnxruntime")
    if ort is not None:
        env["ort_providers"] = list(ort.get_available_providers())
    rtx = _import(env, "tensorrt_rtx") or _import(env, "tensorrt_rtx_bindings")
    if rtx is not None:
        from trtkit.backends.tensorrt import api
        env["rtx_targets"] = api.rtx_targets(rtx)
    for name in ("onnx", "sklearn", "tensorrt", "torch2trt"):
        _import(env, name)


# ---------------------------------------------------------------- the plan

def requirement_reason(key, env):
    """None when requirement ``key`` holds in ``env``, else the sentence saying what is missing."""
    if key == "gpu":
        return None if env.get("gpu") else "no NVIDIA GPU here (the CUDA driver shows none)"
    if key in MODULES:
        if env["modules"].get(key):
            return None
        error = env.get("import_errors", {}).get(key)
        if error:
            return "{} is installed but does not import ({})".format(key, error)
        if key == "tensorrt_rtx" and env["modules"].get("tensorrt_rtx_bindings"):
            return None  # trtkit loads the bindings module itself when the front package is missing
        return "{} is not installed ({})".format(key, install_hint(key))
    if key == "torch_cuda":
        if env.get("torch_cuda") is False:
            return "torch {} has no CUDA (a CPU-only build)".format(env.get("versions", {}).get("torch", ""))
        return None
    if key == "torch_compile":
        return env.get("torch_compile_reason") if env.get("torch_compile") is False else None
    if key == "ort_cuda":
        providers = env.get("ort_providers")
        if providers is not None and "CUDAExecutionProvider" not in providers:
            return "onnxruntime {} has no CUDAExecutionProvider (it has {}; pip install onnxruntime-gpu)".format(
                env.get("versions", {}).get("onnxruntime", ""), ", ".join(providers) or "none")
        return None
    raise KeyError(key)


def helpers_of(step, env):
    """The helper steps ``step`` uses on this machine: its ``after``, unless none of its ``helpers_with`` modules is
    there (the segmentation step uses the sample model only to build engines: without TensorRT or TensorRT-RTX
    it times PyTorch rows alone)."""
    if step.helpers_with and not any(env["modules"].get(name) for name in step.helpers_with):
        return ()
    return step.after


class Planned(object):
    """A step with its verdict: ``run`` and the ``reasons`` it will not (or ``note`` on how it will); ``after``:
    the helper steps it uses here (``helpers_of``)."""

    def __init__(self, step, reasons, note=None, after=None):
        self.step = step
        self.name = step.name
        self.reasons = list(reasons)
        self.note = note
        self.after = tuple(step.after if after is None else after)

    @property
    def run(self):
        return not self.reasons

    def why(self):
        return "; ".join(self.reasons) if self.reasons else (self.note or self.step.summary)

    def to_dict(self):
        return {"step": self.name, "summary": self.step.summary, "run": self.run, "reasons": self.reasons,
                "note": self.note}


def make_plan(env, skip=()):
    """[Planned] for every step in order: own requirements, --skip, helpers nothing uses, helpers that cannot run."""
    own = {}
    for step in STEPS:
        if step.name in skip:
            own[step.name] = ["left out with --skip"]
            continue
        reasons = []
        for key in step.needs:
            reason = requirement_reason(key, env)
            if reason and reason not in reasons:
                reasons.append(reason)
        if step.name == "tensorrt-rtx" and not env.get("gpu") and env["modules"].get("tensorrt_rtx"):
            reasons.append("TensorRT-RTX builds engines without a GPU (trtkit build --backend tensorrt-rtx), but "
                           "nothing here could run, verify or time them")
        own[step.name] = reasons
    plan = []
    for step in STEPS:
        reasons = list(own[step.name])
        for helper in helpers_of(step, env) if step.name not in skip else ():
            if own[helper]:
                reasons.append("needs the {} step, which cannot run: {}".format(helper, "; ".join(own[helper])))
        if step.helper and not reasons:
            users = [s.name for s in STEPS if step.name in helpers_of(s, env) and not own[s.name]]
            if not users:
                reasons.append("no step that uses it will run")
        plan.append(Planned(step, reasons, _note(step, env) if not reasons else None, helpers_of(step, env)))
    return plan


def _note(step, env):
    gpu = env.get("gpu") or {}
    if step.name == "tensorrt-rtx" and env.get("rtx_targets") is not None and gpu:
        if gpu["compute_capability"] not in env["rtx_targets"]:
            return ("TensorRT-RTX {} has no target for {} (SM {}; it has SM {}): the engines are built for its "
                    "default GPUs and the refusal to run them here is recorded".format(
                        env.get("versions", {}).get("tensorrt_rtx", ""), gpu["name"], gpu["compute_capability"],
                        ", ".join(env["rtx_targets"])))
        return "TensorRT-RTX builds for this GPU (SM {}), then verifies and times".format(gpu["compute_capability"])
    if step.name == "torch-compile":
        return "torch.compile compiles once per batch size (tens of seconds each), then times"
    return None


def format_plan(plan, device_line=None, budget=None, out=None):
    """The --dry-run text: one line per step, RUN or SKIP with the reason."""
    lines = ["gpu_check plan (dry run: nothing is built, timed or written)"]
    if device_line:
        lines.append("device: " + device_line)
    if budget is not None:
        needed = minimum_budget(plan)
        lines.append("time budget: {:.0f} s for the steps that run{}".format(
            budget, "" if needed is None else " (this plan needs at least {:.0f} s{})".format(
                needed, ": too little, it would be refused" if budget < needed else "")))
    if out:
        lines.append("results would go to: {}".format(out))
    width = max(len(p.name) for p in plan)
    lines.append("")
    for planned in plan:
        lines.append("  {}  {}  {}".format(planned.name.ljust(width), "RUN " if planned.run else "SKIP",
                                          planned.why()))
    runs = sum(1 for p in plan if p.run)
    lines += ["", "{} of {} steps would run.".format(runs, len(plan))]
    return "\n".join(lines)


# ---------------------------------------------------------------- the budget

def is_prerequisite(step):
    """Whether other steps need ``step`` to have run: the device record (every report starts from it) and the
    helpers (the sample model). They go first and are never skipped to keep time for the steps that need them
    (measured before: with 300 s, the device record and the sample model were skipped to keep 280 s for five
    steps that then could not run without the sample model)."""
    return step.name == "device" or step.helper


def minimum_budget(plan):
    """The smallest ``--budget-seconds`` with which the prerequisites that run and the cheapest step that
    uses them each get their floor (None when no step would run)."""
    running = [p.step for p in plan if p.run]
    if not running:
        return None
    prerequisites = [s for s in running if is_prerequisite(s)]
    others = [s.floor for s in running if not is_prerequisite(s)]
    return MARGIN_SECONDS + sum(s.floor for s in prerequisites) + (min(others) if others else 0.0)


def allot(step, remaining, later):
    """(seconds for ``step``, None) or (None, why not): its share of ``remaining`` among itself and the
    ``later`` steps, never below its floor and never into the margin or the floors of later prerequisites.
    It leaves the later steps' floors alone where it can; where it cannot, the plan's order decides (an earlier
    step runs rather than keep time for later ones that would not all fit either: measured before, the
    PyTorch baselines were skipped to keep 60 s for torch.compile, which then did not fit in what was left).
    A prerequisite may take up to twice its expected time (``seconds``: a cold start, an untrained sample)
    where that leaves the later prerequisites and the cheapest step that uses them their floors (as
    ``minimum_budget`` promises); what a step does not use goes to the steps after it."""
    usable = remaining - MARGIN_SECONDS
    prerequisites = sum(s.floor for s in later if is_prerequisite(s))
    if usable - prerequisites < step.floor:
        return None, ("time budget: {:.0f} s left, {:.0f} s of it kept for the later prerequisite(s); this one "
                      "needs at least {:.0f} s".format(max(remaining, 0.0), prerequisites, step.floor)
                      if prerequisites else "time budget: {:.0f} s left; this one needs at least {:.0f} s".format(
                          max(remaining, 0.0), step.floor))
    if is_prerequisite(step):  # everything after waits for it: it keeps the floors of the later prerequisites
        users = [s.floor for s in later if not is_prerequisite(s)]  # and of the cheapest step that uses them
        room = usable - prerequisites - (min(users) if users else 0.0)
        return min(max(room, step.floor), max(step.floor, 2.0 * step.seconds)), None
    room = usable - sum(s.floor for s in later)
    if room < step.floor:
        room = usable - prerequisites
    share = usable * step.seconds / (step.seconds + sum(s.seconds for s in later))
    return min(room, max(step.floor, share)), None
