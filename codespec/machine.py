"""What this machine is: its processor's model and flags, and the kind of CPU they make it.

The kind decides which kernels are fast (``quant/kernels.py`` times them per machine) and which
dtype a CPU computes in natively (``models.py``); benchmark figures are labelled with it
(``docs/benchmarks.md`` has a table per kind). Read once from ``/proc/cpuinfo``; a machine
without one (macOS, a sandbox) gets the platform's word and no flags.
"""

from __future__ import annotations

import functools
import platform
import sys
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# the flags that change which kernels run: the fingerprint of a timed kernel choice keeps these
KERNEL_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c", "sve", "bf16")


@functools.cache
def _cpuinfo() -> str:
    try:
        return CPUINFO.read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        if line.startswith("model name") and ":" in line:
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The first processor's flags (x86 ``flags``, Arm ``Features``)."""
    for line in _cpuinfo().splitlines():
        if line.startswith(("flags", "Features")) and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def kernel_flags() -> list[str]:
    return sorted(f for f in cpu_flags() if f.startswith(KERNEL_FLAG_PREFIXES))


def cpu_kind() -> str:
    """Which kind of CPU the figures come from: it decides which kernels are fast."""
    flags = cpu_flags()
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return "AVX-512 with bf16"
    if "avx512f" in flags:
        return "AVX-512 (no bf16)"
    return "AVX2 (no AVX-512)" if "avx2" in flags else platform.machine()


def has_native_bf16() -> bool:
    """True when this processor computes bf16 natively (x86 avx512_bf16/amx, Arm bf16)."""
    if not _cpuinfo():
        return sys.platform == "darwin"  # Apple silicon has bf16 (M2 and later); best effort
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})
