"""What every benchmark table states: the CPU, the ISA it offers, and any limit put on torch's ISA."""

from __future__ import annotations

import os
from pathlib import Path

from biorank.models.encoder import cpu_flags


def cpu_isa() -> str:
    """E.g. "AMD EPYC, 2 CPUs, AVX2 + AVX-512 (VNNI, BF16), torch held to AVX2"."""
    name = next((line.partition(":")[2].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "unknown CPU")
    flags = cpu_flags()
    isa = "AVX2" if "avx2" in flags else "no AVX2"
    if "avx512f" in flags:
        extras = [label for flag, label in (("avx512_vnni", "VNNI"), ("avx512_bf16", "BF16")) if flag in flags]
        isa += " + AVX-512" + (f" ({', '.join(extras)})" if extras else "")
    if "amx_tile" in flags:
        isa += " + AMX"
    limits = [f"{var}={os.environ[var]}" for var in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if var in os.environ]
    held = f"; torch held by {' '.join(limits)}" if limits else ""
    return f"{name}, {len(os.sched_getaffinity(0))} CPUs, {isa}{held}"
