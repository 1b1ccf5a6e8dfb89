"""Which x86 instruction set an INT8 artifact is made for, and whether this CPU has it.

CPU INT8 kernels (ONNX Runtime, OpenVINO) multiply uint8 activations by int8
weights. With VNNI (AVX-512 VNNI, AVX-VNNI, AMX) the products are summed in
32 bits. Without it (AVX2, AVX-512 without VNNI) they go through
``vpmaddubsw``, which adds each pair of products into a *saturating 16-bit*
integer: 255 x 127 x 2 = 64770 does not fit in 32767, so large activations
meeting large weights are silently clipped and INT8 accuracy drops (OpenVINO
calls it the saturation issue). For a target without VNNI trtkit writes uint8
weights (zero point 128, ``weight_type``): ONNX Runtime then runs its U8U8
kernels, which widen both operands to 16 bits and sum pairs in 32 (vpmaddwd),
so nothing saturates and the weights keep all 8 bits. 7-bit weights (ONNX
Runtime's ``reduce_range``) also avoid the saturation, but measured on an
emulated Zen 3 they cost up to 39 points of agreement where uint8 weights cost
none (benchmarks/results/*/emulated_cpu.md and emulated_cpu.7bit-weights.md); ONNX Runtime's own documentation
names U8U8 as the saturation-free format.

``isa_from_flags`` is a pure function of a /proc/cpuinfo flags line, so the
three CPUs this project has met are tested by their recorded flags;
``this_cpu`` reads CPUID as the INT8 kernels do, so under ``qemu-x86_64 -cpu
EPYC-Milan`` it sees a CPU without VNNI (tests/test_cpu_emulated.py).
``TRTKIT_CPU_FLAGS`` replaces this machine's flags (to check an artifact made
for another CPU, or to make one for it).
"""

import os
import platform

VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
TARGETS = ("auto", "vnni", "avx2")


class CpuIsa(object):
    """What matters of a CPU for INT8: ``arch`` (x86_64, aarch64...), ``vnni``, ``avx512``, ``avx2``."""

    def __init__(self, arch, vnni, avx512=False, avx2=False):
        self.arch = arch
        self.vnni = bool(vnni)
        self.avx512 = bool(avx512)
        self.avx2 = bool(avx2)

    @property
    def x86(self):
        return self.arch in ("x86_64", "amd64", "i686", "i386")

    @property
    def target(self):
        """``vnni`` or ``avx2`` on x86 (the INT8 target an artifact for this CPU is made for); else the arch."""
        if not self.x86:
            return self.arch
        return "vnni" if self.vnni else "avx2"

    def describe(self):
        if not self.x86:
            return self.arch
        return "{} ({})".format(self.target, ", ".join(
            name for name, present in (("avx2", self.avx2), ("avx512", self.avx512), ("vnni", self.vnni)) if present)
            or "no avx2")

    def to_dict(self):
        return {"arch": self.arch, "vnni": self.vnni, "avx512": self.avx512, "avx2": self.avx2,
                "target": self.target}


def isa_from_flags(flags, arch="x86_64"):
    """The CpuIsa of a CPU whose /proc/cpuinfo ``flags`` line (or list of flags) is ``flags``."""
    present = set(flags.split() if isinstance(flags, str) else flags)
    arch = str(arch).lower()
    return CpuIsa(arch, vnni=any(f in present for f in VNNI_FLAGS), avx512="avx512f" in present,
                  avx2="avx2" in present)


def this_cpu():
    """The CpuIsa of this machine: ``TRTKIT_CPU_FLAGS`` if set, else what the CPUID instruction says (through
    NumPy), else /proc/cpuinfo."""
    arch = platform.machine().lower() or "unknown"
    flags = os.environ.get("TRTKIT_CPU_FLAGS")
    if flags is None:
        flags = _cpuid_flags(_proc_flags())
    return isa_from_flags(flags, arch)


def _proc_flags():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return line.split(":", 1)[1].split()
    except (IOError, OSError):
        pass  # not Linux: no flags read, so no VNNI assumed (the safe side: uint8 weights)
    return []


def _numpy_cpu_features():
    """NumPy's {feature: bool} read from CPUID at import, or None (NumPy < 1.20, or moved)."""
    try:
        import numpy
        core = getattr(numpy, "_core", None) or numpy.core
        return getattr(core._multiarray_umath, "__cpu_features__", None)
    except (ImportError, AttributeError):
        return None


# NumPy's CPUID feature names -> /proc/cpuinfo flag names
_NUMPY_FLAGS = (("AVX2", "avx2"), ("AVX512F", "avx512f"), ("AVX512VNNI", "avx512_vnni"))


def _cpuid_flags(proc_flags, features=None):
    """The ISA flags the INT8 kernels will see. ONNX Runtime, OpenVINO and oneDNN choose their kernels from the
    CPUID instruction (and the OS's saved-state mask), not from /proc/cpuinfo; the two differ where a CPU is
    emulated or masked (qemu ``-cpu``, a hypervisor's CPU model, an OS without AVX-512 state) and /proc/cpuinfo
    is absent off Linux. NumPy (>= 1.20) reads CPUID and the state mask the same way, so its answer is used
    where it has one. NumPy has no name for AVX-VNNI or AMX, so those come from /proc/cpuinfo, and only
    where CPUID confirms AVX2 under them."""
    if features is None:
        features = _numpy_cpu_features()
    if not features or "AVX2" not in features:
        return proc_flags
    flags = [name for key, name in _NUMPY_FLAGS if features.get(key)]
    if features.get("AVX2"):
        flags += [name for name in ("avx_vnni", "amx_int8") if name in proc_flags]
    return flags


def weight_type(target):
    """The weight type of a CPU INT8 target: ``int8`` with VNNI (U8S8 kernels, 32-bit sums), ``uint8`` without
    (U8U8 kernels: no 16-bit saturation, all 8 bits kept)."""
    return "int8" if target == "vnni" else "uint8"


def resolve_target(target):
    """``auto`` -> this CPU's target (``vnni`` or ``avx2``; ARM and others read as ``vnni``: no saturating
    16-bit pairs there); ``vnni``/``avx2`` as given."""
    if target not in TARGETS:
        from trtkit.errors import InputError
        raise InputError("unknown CPU INT8 target '{}'".format(target), hint="use " + ", ".join(TARGETS))
    if target != "auto":
        return target
    cpu = this_cpu()
    return cpu.target if cpu.x86 else "vnni"


def mismatch(made_for, cpu=None):
    """A one-line warning when an artifact made for ``made_for`` (vnni/avx2) runs on ``cpu`` (default: this
    machine) where it may be wrong or slow; None when they fit."""
    cpu = cpu or this_cpu()
    if not cpu.x86 or made_for not in ("vnni", "avx2"):
        return None
    if made_for == "vnni" and not cpu.vnni:
        return ("this INT8 artifact was made for CPUs with VNNI (int8 weights), and this CPU has none: "
                "products may saturate and accuracy drop; rebuild it here or with --cpu-isa avx2")
    if made_for == "avx2" and cpu.vnni:
        return ("this INT8 artifact was made for CPUs without VNNI (uint8 weights): right here, but slower than "
                "one made for this CPU; rebuild it here or with --cpu-isa vnni")
    return None


def check_artifact(recorded, name):
    """Warn (once per call, one line) when the INT8 artifact ``name``, whose graph records ``recorded`` (the
    JSON text or dict of ``precision.int8_target.INT8_TARGET_KEY``), runs on a CPU it was not made for. Returns the
    record (None for graphs without one: FP32/FP16, or made elsewhere)."""
    import json
    if not recorded:
        return None
    try:
        info = json.loads(recorded) if isinstance(recorded, str) else dict(recorded)
    except (ValueError, TypeError):
        return None
    warning = mismatch(info.get("target"))
    if warning:
        from trtkit import log
        log.warn("{}: {}".format(name, warning))
    return info
