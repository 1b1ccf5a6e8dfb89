"""The device record stored with every benchmark result.

A figure without its device is useless: on a Jetson the power mode and
``jetson_clocks`` change results several-fold, and TensorRT/driver versions
change them again. ``device_record()`` gathers CPU, GPU, driver, CUDA and the
runtime versions (TensorRT-RTX with the wheel it came from, ``tensorrt-rtx-cu12`` or ``-cu13``, and the
version of the library actually imported); on a Jetson also the module (device tree), the L4T release
(``/etc/nv_tegra_release``), the power mode (``nvpmodel -q``) and whether the
clocks are locked (``jetson_clocks --show``, else cpufreq in sysfs).

GPUs, the driver and its CUDA version come from ``trtkit.backends.tensorrt.gpu``,
the module that also decides whether engines can run, so the record and the
runners never disagree about which GPU is here.

The parsers take text, so tests feed them recorded outputs
(tests/fixtures/jetson/); ``jetson_record(root, run)`` reads files under
``root`` and command outputs from ``run``, both replaceable for the same reason.
"""

import os
import platform
import re
import subprocess
import sys

from trtkit._version import __version__
from trtkit.bf16 import CPU_BF16_FLAGS
from trtkit.bench import affinity

# SoC (from /proc/device-tree/compatible) -> (family, GPU architecture, compute capability)
TEGRA_SOCS = {
    "tegra210": ("Jetson Nano / TX1", "Maxwell", "5.3"),
    "tegra186": ("Jetson TX2", "Pascal", "6.2"),
    "tegra194": ("Jetson Xavier", "Volta", "7.2"),
    "tegra234": ("Jetson Orin", "Ampere", "8.7"),
}


# ---------------------------------------------------------------- parsers (text in, dict out)

def parse_device_tree_string(raw):
    """``/proc/device-tree/model``: a NUL-terminated string. ``compatible``: NUL-separated list."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    parts = [p.strip() for p in raw.split("\x00") if p.strip()]
    return parts


def parse_tegra_release(text):
    """``/etc/nv_tegra_release`` first line, e.g. ``# R32 (release), REVISION: 7.1, GCID: ..., BOARD: t210ref``.

    Returns {"l4t": "32.7.1", "major": 32, "revision": "7.1", "board", "gcid", "date"} or None.
    """
    match = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([0-9.]+)(.*)", text or "")
    if not match:
        return None
    major, revision, rest = int(match.group(1)), match.group(2), match.group(3)
    record = {"major": major, "revision": revision, "l4t": "{}.{}".format(major, revision)}
    for key in ("GCID", "BOARD", "EABI", "DATE"):
        found = re.search(r"{}:\s*([^,]+)".format(key), rest)
        if found:
            record[key.lower()] = found.group(1).strip()
    variant = re.search(r"KERNEL_VARIANT:\s*(\S+)", text)
    if variant:
        record["kernel_variant"] = variant.group(1)
    return record


def parse_nvpmodel(text):
    """``nvpmodel -q`` output: ``NV Power Mode: MAXN`` then the mode id on its own line.

    Warning lines (``NVPM WARN: ...``) and the fan line are ignored. Returns
    {"name": "MAXN", "id": 0} (id None when not printed) or None.
    """
    name = None
    mode_id = None
    for line in (text or "").splitlines():
        line = line.strip()
        match = re.match(r"NV Power Mode\s*:\s*(\S.*)$", line)
        if match:
            name = match.group(1).strip()
            continue
        if name is not None and mode_id is None and re.match(r"^\d+$", line):
            mode_id = int(line)
    if name is None:
        return None
    return {"name": name, "id": mode_id}


def _freqs(line):
    return dict((k, int(v)) for k, v in re.findall(r"(MinFreq|MaxFreq|CurrentFreq|FreqOverride|Online)=(\d+)", line))


def parse_jetson_clocks(text):
    """``sudo jetson_clocks --show``: are CPU and GPU clocks pinned at their maximum?

    jetson_clocks sets each online CPU's and the GPU's minimum frequency to the
    maximum (and overrides the EMC clock); without it the governors scale.
    Returns {"on", "cpus_online", "cpu_locked", "gpu_locked", "emc_override",
    "power_mode"} or None when the text is not that output.
    """
    cpus = []
    gpu = None
    emc = None
    power_mode = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if re.match(r"^cpu\d+:", stripped):
            cpus.append(_freqs(stripped))
        elif stripped.startswith("GPU "):
            gpu = _freqs(stripped)
        elif stripped.startswith("EMC "):
            emc = _freqs(stripped)
        elif stripped.startswith("NV Power Mode"):
            power_mode = stripped.split(":", 1)[1].strip()
    if not cpus and gpu is None:
        return None
    online = [c for c in cpus if c.get("Online", 1) == 1 and "MinFreq" in c]
    cpu_locked = bool(online) and all(c["MinFreq"] == c.get("MaxFreq") for c in online)
    gpu_locked = gpu is not None and gpu.get("MinFreq") is not None and gpu.get("MinFreq") == gpu.get("MaxFreq")
    return {"on": bool(cpu_locked and gpu_locked), "cpus_online": len(online), "cpu_locked": cpu_locked,
            "gpu_locked": gpu_locked, "emc_override": bool(emc and emc.get("FreqOverride") == 1),
            "power_mode": power_mode, "source": "jetson_clocks --show"}


def parse_cpuinfo(text):
    """CPU model name from /proc/cpuinfo (x86 ``model name``; Arm ``Hardware``/``CPU part`` fallback)."""
    model = None
    for key in ("model name", "Model", "Hardware", "Processor"):
        match = re.search(r"^{}\s*:\s*(.+)$".format(re.escape(key)), text or "", re.M)
        if match:
            model = match.group(1).strip()
            break
    flags = re.search(r"^(flags|Features)\s*:\s*(.+)$", text or "", re.M)
    return {"model": model, "flags": flags.group(2).split() if flags else []}


# ---------------------------------------------------------------- collection

def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def run_command(args, timeout=10):
    """stdout of ``args`` or None when the command is missing or fails (never raises)."""
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    except (OSError, ValueError):
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    return out if proc.returncode == 0 else None


def _sysfs_clocks(root):
    """Fallback without root: cpufreq min == max for every online CPU means the clocks are pinned."""
    base = os.path.join(root, "sys", "devices", "system", "cpu")
    if not os.path.isdir(base):
        return None
    cpus = []
    for name in sorted(os.listdir(base)):
        if not re.match(r"^cpu\d+$", name):
            continue
        lo = _read(os.path.join(base, name, "cpufreq", "scaling_min_freq"))
        hi = _read(os.path.join(base, name, "cpufreq", "cpuinfo_max_freq"))
        if lo and hi:
            cpus.append(int(lo.strip()) == int(hi.strip()))
    if not cpus:
        return None
    return {"on": all(cpus), "cpu_locked": all(cpus), "gpu_locked": None, "cpus_online": len(cpus),
            "source": "cpufreq sysfs (run 'sudo jetson_clocks --show' for the GPU)"}


def jetson_record(root="/", run=run_command):
    """The Jetson part of the device record, or None when this is not a Jetson."""
    model_raw = _read(os.path.join(root, "proc", "device-tree", "model"), binary=True)
    release_text = _read(os.path.join(root, "etc", "nv_tegra_release"))
    if model_raw is None and release_text is None:
        return None
    compatible = parse_device_tree_string(
        _read(os.path.join(root, "proc", "device-tree", "compatible"), binary=True) or b"")
    model = (parse_device_tree_string(model_raw) or [None])[0] if model_raw is not None else None
    if model is not None and "jetson" not in model.lower() and release_text is None \
            and not any("tegra" in c for c in compatible):
        return None  # another Arm board with a device tree
    record = {"module": model, "compatible": compatible, "l4t": parse_tegra_release(release_text)}
    soc = next((c.split(",")[-1] for c in compatible if c.split(",")[-1] in TEGRA_SOCS), None)
    if soc:
        family, arch, cc = TEGRA_SOCS[soc]
        record.update({"soc": soc, "family": family, "gpu_arch": arch, "compute_capability": cc})
    record["power_mode"] = parse_nvpmodel(run(["nvpmodel", "-q"]))
    clocks = parse_jetson_clocks(run(["jetson_clocks", "--show"]))
    record["jetson_clocks"] = clocks if clocks is not None else _sysfs_clocks(root)
    return record


def _dist_version(dist, module=None):
    """Installed version of a distribution without importing it (falls back to the module)."""
    try:
        from importlib import metadata  # novermin (Python 3.8+; guarded, 3.6 falls back below)
        return metadata.version(dist)
    except Exception:
        pass
    try:
        import pkg_resources
        return pkg_resources.get_distribution(dist).version
    except Exception:
        pass
    if module:
        try:
            return getattr(__import__(module), "__version__", None)
        except Exception:
            return None
    return None


def software_record(import_torch=True):
    """Versions of numpy, torch (+ its CUDA/cuDNN), ONNX Runtime (+ providers), TensorRT, TensorRT-RTX."""
    import numpy
    record = {"python": platform.python_version(), "trtkit": __version__, "numpy": numpy.__version__}
    record["onnxruntime"] = _dist_version("onnxruntime", "onnxruntime") or _dist_version("onnxruntime-gpu")
    if record["onnxruntime"]:
        try:
            import onnxruntime
            record["onnxruntime_providers"] = onnxruntime.get_available_providers()
        except Exception:
            pass
    record["tensorrt"] = _dist_version("tensorrt") or _dist_version("tensorrt-cu12") or _module_version("tensorrt")
    rtx = rtx_install(installed_distributions("tensorrt"), _rtx_module_version())
    record["tensorrt_rtx"] = rtx["version"] if rtx else None
    record["tensorrt_rtx_install"] = rtx
    record["torch"] = None
    if import_torch:
        try:
            import torch
            record["torch"] = torch.__version__
            record["torch_cuda"] = getattr(torch.version, "cuda", None)
            cudnn = getattr(torch.backends, "cudnn", None)
            record["cudnn"] = cudnn.version() if cudnn is not None and torch.cuda.is_available() else None
            record["torch_threads"] = torch.get_num_threads()
        except Exception:
            pass
    return record


def installed_distributions(containing=""):
    """{distribution name: version} of the installed distributions whose name contains ``containing``.

    importlib.metadata where it exists (Python 3.8+), else pkg_resources (Python 3.6/3.7, Jetson Nano).
    """
    found = {}
    try:
        from importlib import metadata  # novermin (Python 3.8+; guarded, 3.6 falls back below)
        for dist in metadata.distributions():
            name = dist.metadata["Name"]
            if name and containing in name.lower():
                found[name] = dist.version
        return found
    except ImportError:
        pass
    try:
        import pkg_resources
        for dist in pkg_resources.working_set:
            if containing in dist.project_name.lower():
                found[dist.project_name] = dist.version
    except Exception:
        pass
    return found


def _normal(name):
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503: tensorrt_rtx_cu12 == tensorrt-rtx-cu12


def rtx_install(distributions, module_version=None):
    """How TensorRT-RTX's Python bindings were installed, from ``installed_distributions()``: {"package" (e.g.
    "tensorrt-rtx-cu12"), "cuda" ("12", "13"; None for an unsuffixed package), "version" (the package's),
    "bindings", "libs" (the versions of its -bindings and -libs parts), "module" (``tensorrt_rtx.__version__``,
    the library actually imported), "others" (any further TensorRT-RTX packages: two CUDA flavours at once)}
    or None when none is installed. NVIDIA's wheels: ``tensorrt-rtx-cu12`` (or ``-cu13``) requires
    ``tensorrt-rtx-cuNN-bindings`` and ``tensorrt-rtx-cuNN-libs``.
    """
    parts = {}
    for name, version in distributions.items():
        match = re.match(r"^tensorrt-rtx(?:-cu(\d+))?(?:-(bindings|libs))?$", _normal(name))
        if match:
            parts.setdefault(match.group(1), {})[match.group(2) or "version"] = version
    if not parts:
        return None
    flavours = sorted(parts, key=lambda cuda: ("version" not in parts[cuda], -int(cuda or 0)))
    cuda = flavours[0]
    found = parts[cuda]
    return {"package": "tensorrt-rtx" + ("-cu" + cuda if cuda else ""), "cuda": cuda,
            "version": found.get("version") or found.get("bindings") or found.get("libs"),
            "bindings": found.get("bindings"), "libs": found.get("libs"), "module": module_version,
            "others": ["tensorrt-rtx" + ("-cu" + c if c else "") for c in flavours[1:]]}


def _rtx_module_version():
    """``tensorrt_rtx.__version__`` (else its bindings module's), None when neither imports."""
    for name in ("tensorrt_rtx", "tensorrt_rtx_bindings"):
        try:
            return str(getattr(__import__(name), "__version__"))
        except Exception:  # not installed, or its CUDA libraries are missing
            continue
    return None


def _module_version(name):
    # JetPack installs TensorRT as a Debian package: no pip metadata, only the module
    if name in sys.modules:
        return getattr(sys.modules[name], "__version__", None)
    return None


def cpu_record(root="/"):
    info = parse_cpuinfo(_read(os.path.join(root, "proc", "cpuinfo")) or "")
    usable = len(affinity.usable_cores())
    bf16 = bool(set(info["flags"]) & CPU_BF16_FLAGS)
    return {"model": info["model"] or platform.processor() or platform.machine(), "arch": platform.machine(),
            "logical_cores": os.cpu_count(), "usable_cores": usable, "bf16": bf16}


def gpu_record():
    """(GPUs with name, compute capability, memory, SMs and driver; the driver's CUDA version), via ``gpu``."""
    from trtkit.backends.tensorrt import gpu
    gpus = gpu.devices()
    if not gpus:
        return [], None
    versions = gpu.driver_versions()
    for entry in gpus:
        entry["driver"] = versions["driver"]
    return gpus, versions["cuda"]


def device_slug(record):
    """A folder name for benchmarks/results/: Jetson module + power mode, GPU name, or CPU model + cores."""
    jetson = record.get("jetson")
    if jetson:
        mode = (jetson.get("power_mode") or {}).get("name")
        text = "{} {}".format(jetson.get("module") or jetson.get("family") or "jetson", mode or "")
    elif record.get("gpus"):
        text = record["gpus"][0]["name"]
    else:
        cpu = record.get("cpu", {})
        text = "cpu {} {}c".format(cpu.get("model") or "unknown", cpu.get("usable_cores") or "")
    text = re.sub(r"\((r|tm)\)|\bnvidia\b|developer kit|\bprocessor\b|\bcpu @ [0-9.]+ghz", " ", text.lower())
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")
    return slug or "device"


def device_record(root="/", import_torch=True):
    """Everything about this machine that changes a benchmark figure (see the module docstring).

    ``import_torch=False`` leaves torch's versions out (importing torch takes seconds).
    """
    record = {"platform": platform.platform(), "cpu": cpu_record(root)}
    gpus, driver_cuda = gpu_record()
    record["gpus"] = gpus
    record["driver_cuda"] = driver_cuda
    record["jetson"] = jetson_record(root)
    record["software"] = software_record(import_torch)
    if record["jetson"] and not gpus:
        record["gpus"] = [{"name": record["jetson"].get("family"),
                           "compute_capability": record["jetson"].get("compute_capability")}]
    record["slug"] = device_slug(record)
    return record


def describe(record):
    """One line for report headers: CPU/GPU, Jetson mode and clocks, runtime versions."""
    parts = []
    jetson = record.get("jetson")
    if jetson:
        mode = jetson.get("power_mode") or {}
        clocks = jetson.get("jetson_clocks") or {}
        parts.append("{} (L4T {}, power mode {}, jetson_clocks {})".format(
            jetson.get("module"), (jetson.get("l4t") or {}).get("l4t", "?"), mode.get("name", "?"),
            {True: "on", False: "off"}.get(clocks.get("on"), "unknown")))
    for gpu in record.get("gpus") or []:
        parts.append("GPU {} (sm {}, driver {})".format(gpu.get("name"), gpu.get("compute_capability") or "?",
                                                     gpu.get("driver") or "?"))
    cpu = record.get("cpu", {})
    parts.append("CPU {} ({} of {} cores usable)".format(cpu.get("model"), cpu.get("usable_cores"),
                                                          cpu.get("logical_cores")))
    sw = record.get("software", {})
    versions = ["{} {}".format(k, sw[k]) for k in ("torch", "onnxruntime", "tensorrt", "tensorrt_rtx") if sw.get(k)]
    rtx = sw.get("tensorrt_rtx_install")
    if rtx and sw.get("tensorrt_rtx"):
        versions[-1] += " ({}, library {})".format(rtx["package"], rtx.get("module") or rtx.get("libs") or "?")
    if sw.get("torch_cuda"):
        versions.append("CUDA {}".format(sw["torch_cuda"]))
    return "; ".join(parts + [", ".join(versions)])
