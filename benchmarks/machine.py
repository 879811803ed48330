"""What every benchmark record states about the machine: the CPU, the ISA it offers (speed figures depend on
it more than on anything else), cores, memory, and any limit put on torch's ISA."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from biorank.models.placement import cpu_flags

# The instruction sets biorank's speed turns on: AVX2 (everything), AVX-512 with VNNI (int8) and BF16 (bf16
# in torch and OpenVINO), AMX (bf16 and int8 tiles).
ISA_FLAGS = {"avx2": "avx2", "avx512f": "avx512", "avx512_vnni": "avx512_vnni", "avx512_bf16": "avx512_bf16",
             "amx_tile": "amx"}


def cpu_model() -> str:
    """lscpu's model name (``/proc/cpuinfo``'s where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        lines = out.splitlines()
    except (OSError, subprocess.CalledProcessError):
        lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    return next((line.partition(":")[2].strip() for line in lines
                 if line.lower().startswith(("model name", "model name:"))), "unknown CPU")


def isa_summary(flags: set[str]) -> str:
    """E.g. "AVX2 + AVX-512 (VNNI, BF16) + AMX": the one line a reader compares machines by."""
    isa = "AVX2" if "avx2" in flags else "no AVX2"
    if "avx512f" in flags:
        extras = [label for flag, label in (("avx512_vnni", "VNNI"), ("avx512_bf16", "BF16")) if flag in flags]
        isa += " + AVX-512" + (f" ({', '.join(extras)})" if extras else "")
    if "amx_tile" in flags:
        isa += " + AMX"
    return isa


def torch_limits() -> str:
    """The environment's hold on torch's ISA, if any (``ATEN_CPU_CAPABILITY=avx2`` measures AVX2 code on AVX-512)."""
    return " ".join(f"{var}={os.environ[var]}" for var in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
                    if var in os.environ)


def memory_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines() if Path("/proc/meminfo").exists() else []:
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024**2, 1)
    return float("nan")


def machine() -> dict:
    """The machine as a record keeps it: ``{"cpu", "isa", "flags", "cores", "memory_gb"[, "torch_held"]}``."""
    flags = cpu_flags()
    found = {name: flag in flags for flag, name in ISA_FLAGS.items()}
    described = {"cpu": cpu_model(), "isa": isa_summary(flags), "flags": found,
                 "cores": len(os.sched_getaffinity(0)), "memory_gb": memory_gb()}
    if torch_limits():
        described["torch_held"] = torch_limits()
    return described


def cpu_isa() -> str:
    """E.g. "AMD EPYC, 2 CPUs, AVX2 + AVX-512 (VNNI, BF16), torch held to AVX2": the line a run prints first."""
    held = f"; torch held by {torch_limits()}" if torch_limits() else ""
    return f"{cpu_model()}, {len(os.sched_getaffinity(0))} CPUs, {isa_summary(cpu_flags())}{held}"
