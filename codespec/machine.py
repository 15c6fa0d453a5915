"""What this machine is: its processor's model and flags, and the kind of CPU they make it.

The kind decides which kernels are fast (``quant/kernels.py`` times them per machine) and which
dtype a CPU computes in natively (``models.py``); benchmark figures are labelled with it
(``docs/benchmarks.md`` has a table per kind). Read once from ``/proc/cpuinfo``; a machine
without one (macOS, a sandbox) gets the platform's word and no flags.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
PROC_STAT = Path("/proc/stat")
PROC_SELF_STAT = Path("/proc/self/stat")
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


def package_version(name: str) -> str | None:
    """An installed package's version, read from its metadata (the package is not imported:
    importing torch would map it into a daemon that never uses it)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_fingerprint() -> str:
    """Processor model, the flags that change kernels, the kernels' packages (torch,
    llama-cpp-python, ik-llama-cpp-python) and the cores: what a measured choice of kernels or
    backends holds for."""
    flags = " ".join(kernel_flags())
    names = ("torch", "llama_cpp_python", "ik_llama_cpp_python")
    packages = "|".join(str(package_version(name)) for name in names)
    text = f"{cpu_model()}|{flags}|{packages}|{usable_cores()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class CpuTicks:
    """Clock ticks since boot: all CPUs' total and busy time, and this process's own."""

    total: int
    busy: int
    mine: int


def cpu_ticks() -> CpuTicks | None:
    """Read ``/proc/stat`` and ``/proc/self/stat`` (None where there are none)."""
    try:
        fields = [int(x) for x in PROC_STAT.read_text().split("\n", 1)[0].split()[1:9]]
        own = PROC_SELF_STAT.read_text().rsplit(")", 1)[1].split()
        # fields 14 and 15 of /proc/<pid>/stat (utime, stime) are 12th and 13th after ")"
        mine = int(own[11]) + int(own[12])
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    except (OSError, ValueError, IndexError):
        return None
    return CpuTicks(total=sum(fields), busy=sum(fields) - idle, mine=mine)


class FreeCores:
    """How many cores other processes leave free, for choosing the threads of the next pass.

    Threads that wait for each other by spinning (ggml's barriers between graph nodes,
    OpenMP's workers) stall whenever one of them is descheduled: on a machine whose other
    core runs a build, a pass on two threads costs many times a pass on one, where it should
    cost about twice (``docs/benchmarks.md``, "A busy machine"). So each request runs one
    thread fewer for each core that other processes kept busy since the last look. Looks
    closer together than ``window_s`` return the last answer; the first look is always a
    measurement (it waits until ``first_look_s`` has passed since the start, if it must), so a
    request that comes at once on a busy machine does not take every core.
    """

    def __init__(
        self, cores: int | None = None, window_s: float = 0.5, first_look_s: float = 0.1
    ) -> None:
        self.cores = cores or usable_cores()
        self.window_s = window_s
        self.first_look_s = first_look_s
        self.system_cores = os.cpu_count() or self.cores
        self._last, self._at = cpu_ticks(), time.monotonic()
        self._free: int | None = None  # None until a look has measured something

    def free(self) -> int:
        since = time.monotonic() - self._at
        if self._free is not None and since < self.window_s:
            return self._free
        if self._free is None and since < self.first_look_s:
            time.sleep(self.first_look_s - since)  # too few clock ticks yet to tell anything
        now = cpu_ticks()
        last, self._last, self._at = self._last, now, time.monotonic()
        if now is None or last is None or now.total <= last.total:
            return self.cores if self._free is None else self._free
        others = (now.busy - last.busy) - (now.mine - last.mine)
        taken = max(0.0, others / (now.total - last.total)) * self.system_cores
        self._free = max(1, min(self.cores, self.cores - round(taken)))
        return self._free
