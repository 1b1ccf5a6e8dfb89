"""Where BF16 runs natively: the one check for training modes and the PyTorch baselines.

BF16 pays off only where the hardware computes in it. Elsewhere it is emulated
in FP32 arithmetic plus conversions, slower than plain FP32, so trtkit refuses
or skips BF16 there and says why.

* CUDA: compute capability 8.0 or newer (Ampere, Jetson Orin, later).
  ``torch.cuda.is_bf16_supported()`` is not the test: it also accepts SM 7.x
  GPUs (Volta, Turing, Jetson Xavier) that only emulate BF16.
* CPU: the AVX512-BF16 or AMX-BF16 instructions (x86), or the BF16 extension
  (Arm, ``bf16`` in /proc/cpuinfo's Features). torch's oneDNN check is not the
  test either: it accepts AVX512-core CPUs, where oneDNN emulates BF16.
"""

from trtkit.deps import require

CUDA_BF16_MIN_CAPABILITY = (8, 0)
CPU_BF16_FLAGS = frozenset(("avx512_bf16", "amx_bf16", "bf16"))


def capability_has_bf16(capability):
    """True for a CUDA compute capability (major, minor) with native BF16 math: (8, 0) and newer."""
    return tuple(int(p) for p in capability) >= CUDA_BF16_MIN_CAPABILITY


def cpuinfo_has_bf16(text):
    """True when /proc/cpuinfo text lists a native BF16 instruction set in its first flags/Features line."""
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return bool(CPU_BF16_FLAGS & set(line.split(":", 1)[-1].split()))
    return False


def cpu_bf16_native():
    """True when this CPU executes BF16 natively (False where /proc/cpuinfo cannot be read)."""
    try:
        with open("/proc/cpuinfo") as handle:
            return cpuinfo_has_bf16(handle.read())
    except (IOError, OSError):
        return False


def cuda_bf16_native(device=None):
    """True when the CUDA GPU ``device`` (default: the current one) has native BF16 math."""
    torch = require("torch", "the BF16 check")
    try:
        return bool(torch.cuda.is_available()) and capability_has_bf16(torch.cuda.get_device_capability(device))
    except Exception:  # a broken driver reads as "no GPU" here; the caller says what is missing
        return False


def bf16_native(device):
    """True when ``device`` ('cpu', 'cuda', 'cuda:1') computes BF16 natively."""
    device = str(device)
    if device.startswith("cuda"):
        return cuda_bf16_native(device)
    return cpu_bf16_native()
