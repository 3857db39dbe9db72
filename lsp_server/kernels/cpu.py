"""What this CPU is and can run, read once from /proc/cpuinfo: its model name for every
figure we report, and its ISA flags for picking kernels (no torch, no probing by running
instructions the CPU may lack)."""

from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

# The flags that decide which kernels can run, in the order we name them.
KERNEL_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "amx_bf16", "asimd", "asimddp")


def parse_flags(cpuinfo: str) -> frozenset[str]:
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags)


@lru_cache(maxsize=1)
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def flags() -> frozenset[str]:
    return parse_flags(_cpuinfo())


def _field(*names: str) -> str:
    """The value of the first cpuinfo line keyed by one of `names`; '' where none is."""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in names:
            return value.strip()
    return ""


def model_name() -> str:
    return _field("model name", "Model name", "Hardware") or platform.processor() or platform.machine()


def generation() -> str:
    """'family 25 model 17' on x86 (AMD Zen 4 there), '' where cpuinfo has no such fields.
    Cloud CPUs are often named only 'AMD EPYC', which Zen 3, 4 and 5 all share."""
    family, model = _field("cpu family"), _field("model")
    return f"family {family} model {model}" if family and model else ""


def describe() -> str:
    """'AMD EPYC, family 25 model 17 (x86_64: avx2 fma f16c)': the CPU, its generation where
    cpuinfo has it, and the kernel-relevant flags it has."""
    have = [f for f in KERNEL_FLAGS if f in flags()]
    name = ", ".join(part for part in (model_name(), generation()) if part)
    return f"{name} ({platform.machine()}: {' '.join(have) or 'no SIMD flags we use'})"
