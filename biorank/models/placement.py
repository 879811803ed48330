"""Where and how a model runs, decided in one place: its :class:`Placement` (backend, precision, device).

A model runs in torch (fp32, bf16, and fp16 on a GPU), or from its exported graph on the CPU in ONNX Runtime
(fp32 or int8 weights) or OpenVINO (the fp32 graph, inferred in bf16 where the CPU computes it natively;
:mod:`.runtime`). ``--precision`` names a placement: ``fp32``, ``bf16`` and ``fp16`` are torch's, ``onnx`` is
ONNX Runtime at fp32, ``int8`` ONNX Runtime with int8 weights, ``openvino`` OpenVINO. :meth:`Placement.choose`
is the only code that reads "auto", of the precision and of the device alike; the encoder, the cross-encoder and
training run where it says. What "auto" means:

- Queries: ONNX Runtime fp32 unless a GPU is named outright (a query is encoded in milliseconds; torch's import
  takes seconds).
- Documents and the cross-encoder's pairs on the CPU: the fastest of the backends installed here that keep the
  numbers close to fp32 (:func:`cpu_candidates`), as this machine timed them once (:mod:`.calibration`: a CPU's
  flags do not tell which is fastest); ONNX Runtime fp32 unless another took at most :data:`FASTER_BY` of its
  time. On a GPU, torch: bf16 where the GPU computes it natively, else fp16. Never int8 (its vectors miss the
  cosine the index's vectors must keep with fp32's).
- Training, and a model already in torch: bf16 where the device computes it natively, else fp32.

The device is ``auto``, ``cpu``, ``cuda`` or ``cuda:N``. ``auto`` takes a GPU where torch is installed and sees
one, else the CPU. Without an NVIDIA or ROCm driver on the machine the answer is the CPU without importing torch
(seconds), so a command that runs in ONNX Runtime starts as fast as before. A device named outright is checked at
once: ``cuda`` where torch is missing, sees no GPU or not that many is one line (:class:`DeviceError`) before a
corpus is read or a cluster asked.

On a GPU the models run in torch under autocast (layer norms and softmax stay fp32); the exported graphs run on the
CPU only. A GPU reads far larger batches than a CPU: the encoder's are sorted by length and cut by word pieces
(padding included), so a batch of sentences holds many more rows than a batch of abstracts; the cross-encoder's
keep their fixed shape (every pair's score independent of its batch neighbours, :mod:`.cross_encoder`) with more
rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from biorank.errors import BiorankError
from biorank.models.extras import installed, require_torch

__all__ = [
    "DEFAULT_PRECISION",
    "DEVICE_HELP",
    "DEVICE_PATTERN",
    "GPU_ENCODER_TOKENS",
    "GPU_PAIR_TOKENS",
    "GRAPHS",
    "PRECISIONS",
    "AskedPlacement",
    "Backend",
    "DeviceError",
    "Placement",
    "Precision",
    "TextKind",
    "check_device",
    "check_precision",
    "cpu_candidates",
    "cpu_flags",
    "cpu_model",
    "fastest",
    "has_gpu",
    "length_batches",
    "native_bf16",
    "resolve_device",
]

Precision = Literal["auto", "fp32", "bf16", "fp16", "onnx", "int8", "openvino"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16", "fp16", "onnx", "int8", "openvino")
"""The names of placements ``--precision`` takes besides "auto"."""
DEFAULT_PRECISION: Precision = "auto"
Backend = Literal["torch", "onnx", "openvino"]
TextKind = Literal["documents", "queries", "pairs"]
"""What a model mostly reads, which "auto" decides by (not a pipeline's stage): an encoder's documents or queries,
a cross-encoder's pairs."""
FASTER_BY = 0.9
"""On the CPU "auto" leaves ONNX Runtime fp32 (the reference numbers) only for a backend timed at most this share
of its time: a closer call is within the noise of a few seconds' timing."""
GRAPHS: dict[str, tuple[Backend, str]] = {"onnx": ("onnx", "fp32"), "int8": ("onnx", "int8"),
                                          "openvino": ("openvino", "fp32")}
"""The names that run an exported graph on the CPU, with its backend and precision: ONNX Runtime at fp32 (the same
vectors as torch fp32) and with int8 weights (dynamic quantisation); and the fp32 graph compiled by OpenVINO's CPU
plugin, which infers in bf16 by itself where the CPU computes it natively (AVX512-BF16, AMX), faster there than
torch's bf16 (docs/concepts/precision.md)."""

DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
DEVICE_HELP = "auto, cpu, cuda or cuda:N"
GPU_ENCODER_TOKENS = 65_536
"""Word pieces (padding included) of one encoder batch on a GPU: about 200 abstracts of 300 word pieces, or 2,000
sentences of 30. A batch this size leaves a small BERT's kernels big enough to keep a GPU busy while its activations
stay within a few hundred MB; ``benchmarks/gpu_stages.py --batch-tokens`` measures other sizes."""
GPU_PAIR_TOKENS = 8_192
"""Word pieces of one cross-encoder batch on a GPU: 32 pairs of 256 (a rerank depth of 20 in one batch), 64
sentences of 128."""


class DeviceError(BiorankError, ValueError):
    """A device that cannot run here (no torch, no GPU, no such GPU), or a precision that does not run on it."""


def has_gpu() -> bool:
    """Whether torch sees a GPU. Without an NVIDIA or ROCm driver the answer is no, without importing torch
    (seconds) on every start of a command that may run in ONNX Runtime.

    Returns:
        True where torch is installed and ``torch.cuda.is_available()``.

    Example:
        >>> has_gpu() in (True, False)
        True
    """
    drivers = ("/proc/driver/nvidia", "/dev/nvidia0", "/dev/kfd")
    if not installed("torch") or not any(Path(p).exists() for p in drivers):
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: str | None = "auto") -> str:
    """The torch device a model runs on: ``auto`` (or None) a GPU where torch sees one, else ``cpu``; ``cuda`` and
    ``cuda:N`` as given once checked.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

    Returns:
        ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        DeviceError: another name; a GPU asked for where torch sees none, or fewer GPUs than N + 1.
        TorchUnavailable: a GPU asked for where torch is not installed.

    Example:
        >>> resolve_device("cpu")
        'cpu'
    """
    name = device or "auto"
    if not DEVICE_PATTERN.fullmatch(name):
        raise DeviceError(f"device {name!r}: use {DEVICE_HELP}")
    if name == "auto":
        return "cuda" if has_gpu() else "cpu"
    if name == "cpu":
        return name
    require_torch(f"--device {name}")
    import torch

    if not torch.cuda.is_available():
        build = " (this torch is a CPU-only build)" if torch.version.cuda is None else ""
        raise DeviceError(f"--device {name}: torch sees no GPU on this machine{build}; use --device cpu or auto")
    index, count = int(name.partition(":")[2] or 0), torch.cuda.device_count()
    if index >= count:
        seen = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise DeviceError(f"--device {name}: torch sees {count} GPU{'s' if count > 1 else ''} here ({seen})")
    return name


def check_precision(precision: str, device: str | None) -> None:
    """Refuse a precision that cannot run on ``device``: an exported graph's (onnx, int8, openvino) on a GPU
    named outright, fp16 on the CPU.

    Args:
        precision: a name of :data:`PRECISIONS`, or ``auto``.
        device: the device asked for (``auto`` runs an exported graph on the CPU whatever the machine has).

    Raises:
        DeviceError: in one line, with what to use instead.

    Example:
        >>> check_precision("onnx", "cuda")  # doctest: +SKIP
        DeviceError: precision onnx runs in ONNX Runtime on the CPU, not on cuda: ...
    """
    asked = device or "auto"
    if precision in GRAPHS and asked not in ("auto", "cpu"):
        runtime = "OpenVINO" if precision == "openvino" else "ONNX Runtime"
        raise DeviceError(f"precision {precision} runs in {runtime} on the CPU, not on {asked}: use auto, bf16, "
                          "fp16 or fp32 there, or --device cpu")
    if precision == "fp16" and resolve_device(asked) == "cpu":
        raise DeviceError("precision fp16 runs on a GPU, and this model would run on the CPU: use auto, bf16 or fp32")


def check_device(device: str | None, *precisions: str | None) -> str:
    """What a command checks before any work: the device exists here and every precision given runs on it.

    ``auto`` is not resolved (a command whose models run in ONNX Runtime never imports torch for it) unless a
    precision needs a GPU.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        precisions: the precisions of the command's models (None: not given).

    Returns:
        The device as asked (``auto`` stays ``auto``: each model resolves it for its own stage).

    Example:
        >>> check_device("cpu", "auto", "onnx")
        'cpu'
    """
    name = device or "auto"
    if name != "auto":
        resolve_device(name)
    for precision in precisions:
        if precision is not None:
            check_precision(precision, name)
    return name


def length_batches(lengths: Sequence[int], *, rows: int | None, tokens: int | None) -> list[list[int]]:
    """Indices of texts in batches, shortest texts first, each batch padded to its longest: at most ``rows`` texts
    and ``tokens`` word pieces with padding (a text longer than ``tokens`` gets a batch of its own).

    Args:
        lengths: each text's word pieces.
        rows: most texts in a batch (None: no limit).
        tokens: most word pieces in a batch, padding included (None: no limit).

    Returns:
        The batches, each a list of indices into ``lengths``; every index once.

    Example:
        >>> length_batches([30, 5, 300, 6], rows=None, tokens=64)
        [[1, 3], [0], [2]]
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:
        # Sorted ascending, so this text is the batch's longest: the batch would be len + 1 rows of it.
        full = rows is not None and len(batch) >= rows
        if batch and (full or (tokens is not None and lengths[i] * (len(batch) + 1) > tokens)):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


def native_bf16(torch: Any, device: Any) -> bool:
    """Whether the device computes in bf16 natively; emulated bf16 is far slower than fp32."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type == "cpu":
        # Private probes of torch.cpu; should one vanish, fp32 is the safe answer.
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)
    return False


def _cpuinfo(field: str) -> str:
    """The first ``field`` line of Linux's /proc/cpuinfo (empty elsewhere): read without importing torch."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    return set(_cpuinfo("flags").split())


def cpu_model() -> str:
    """The CPU's model name as Linux gives it (empty elsewhere)."""
    return _cpuinfo("model name")


def cpu_candidates(stage: TextKind) -> tuple[Precision, ...]:
    """The placements "auto" may take on the CPU for ``stage``, of those installed here.

    ONNX Runtime fp32 always; OpenVINO where it is installed (for pairs only where torch is not: torch pads every
    batch of pairs to one shape, so a pair's score never moves with its batch neighbours, as OpenVINO's
    length-sorted batches let it); torch bf16 where torch is installed and the CPU computes bf16 natively. Never
    int8 (vectors that miss fp32's cosine) nor torch fp32 (ONNX Runtime's numbers, more slowly). Queries: ONNX
    Runtime only.

    Args:
        stage: what the model will mostly read.

    Returns:
        Placement names, ``onnx`` first.

    Example:
        >>> cpu_candidates("queries")
        ('onnx',)
    """
    if stage == "queries":
        return ("onnx",)
    torch_here = all(installed(module) for module in ("torch", "transformers", "sentence_transformers"))
    names: list[Precision] = ["onnx"]
    if installed("openvino") and (stage == "documents" or not torch_here):
        names.append("openvino")
    if torch_here and cpu_flags() & {"avx512_bf16", "amx_bf16"}:
        names.append("bf16")
    return tuple(names)


def fastest(candidates: Sequence[Precision], measured: Mapping[str, float]) -> Precision:
    """The candidate that took least time, unless ONNX Runtime fp32 took at most 1/:data:`FASTER_BY` as long.

    Example:
        >>> fastest(("onnx", "bf16"), {"onnx": 1000.0, "bf16": 950.0})
        'onnx'
        >>> fastest(("onnx", "bf16"), {"onnx": 1000.0, "bf16": 500.0})
        'bf16'
    """
    timed = [name for name in candidates if name in measured]
    if not timed:
        return "onnx"
    best = min(timed, key=measured.__getitem__)
    if "onnx" in measured and measured[best] > FASTER_BY * measured["onnx"]:
        return "onnx"
    return best


def _auto(stage: TextKind, device: str | None, measured: Mapping[str, float] | None) -> str:
    """What "auto" means for a stage on this machine (why: this module's docstring).

    Args:
        stage: what the model will mostly read.
        device: the device asked for: ``auto`` or None (a GPU where torch sees one, else the CPU), ``cpu``,
            ``cuda`` or ``cuda:N``.
        measured: this machine's milliseconds per placement on the CPU (:mod:`.calibration`); None where it was
            not timed (ONNX Runtime fp32 then).

    Returns:
        One of ``onnx``, ``openvino``, ``bf16``, ``fp16`` or ``fp32``.
    """
    asked = device or "auto"
    if stage == "queries" and asked in ("auto", "cpu"):
        return "onnx"
    target = resolve_device(asked)
    if target != "cpu":
        import torch

        return "bf16" if native_bf16(torch, torch.device(target)) else "fp16"
    return fastest(cpu_candidates(stage), measured) if measured else "onnx"


def _check_name(precision: str) -> None:
    if precision != "auto" and precision not in PRECISIONS:
        raise DeviceError(f"precision must be auto or one of {', '.join(PRECISIONS)}, not {precision!r}")


@dataclass(frozen=True)
class Placement:
    """Where and how one model runs: its backend, its numeric precision and its device (``cpu``, ``cuda``,
    ``cuda:N``; an exported graph's is always ``cpu``).

    Example:
        >>> Placement.choose("int8", "cpu")
        Placement(backend='onnx', precision='int8', device='cpu')
        >>> Placement.choose("auto", "cpu", "queries").name
        'onnx'
    """

    backend: Backend
    precision: str
    device: str = "cpu"

    @property
    def name(self) -> Precision:
        """The ``--precision`` name of this placement (``onnx`` is ONNX Runtime at fp32, ``int8`` with int8
        weights, ``openvino`` OpenVINO; torch's are its precisions)."""
        if self.backend == "torch":
            return self.precision  # type: ignore[return-value]
        return "int8" if self.precision == "int8" else self.backend

    @property
    def graph(self) -> bool:
        """Whether the model runs from its exported graph (ONNX Runtime or OpenVINO), not in torch."""
        return self.backend != "torch"

    @classmethod
    def choose(cls, asked: str = DEFAULT_PRECISION, device: str | None = "auto", stage: TextKind = "documents", *,
               measured: Mapping[str, float] | None = None, in_torch: bool = False) -> Placement:
        """The placement of a model: ``asked`` (a name of :data:`PRECISIONS`, or "auto") on ``device``.

        Args:
            asked: what the user asked for; "auto" picks by ``stage`` and the machine (this module's docstring).
            device: ``auto`` (or None), ``cpu``, ``cuda`` or ``cuda:N``.
            stage: what the model will mostly read.
            measured: this machine's milliseconds per placement for ``stage`` on the CPU
                (:func:`biorank.models.calibration.measured`), which "auto" takes the fastest of.
            in_torch: the model must run in torch (training, a model in memory): "auto" is bf16 where the device
                computes it natively, else fp32.

        Returns:
            The placement, its device resolved.

        Raises:
            DeviceError: an unknown name, a device that is not here, or a name that does not run on it.
        """
        _check_name(asked)
        if in_torch:
            target = resolve_device(device)
            if asked == "auto":
                import torch

                asked = "bf16" if native_bf16(torch, torch.device(target)) else "fp32"
            return cls("torch", asked, target)
        check_precision(asked, device)
        name = _auto(stage, device, measured) if asked == "auto" else asked
        if name in GRAPHS:
            return cls(*GRAPHS[name], "cpu")
        return cls("torch", name, resolve_device(device))


@dataclass(frozen=True)
class AskedPlacement:
    """A placement as asked for: a ``--precision`` name (or "auto") and a device (``auto``, ``cpu``, ``cuda``,
    ``cuda:N``). Settings carry this, one per model, rather than a :class:`Placement`: choosing needs the model's
    stage, this machine's timings and sometimes torch (:meth:`Placement.choose`, when the model loads), and
    building settings does no I/O. Names are checked here, what the machine has when the model loads.

    Example:
        >>> AskedPlacement("int8", "cpu")
        AskedPlacement(precision='int8', device='cpu')
    """

    precision: Precision = DEFAULT_PRECISION
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_name(self.precision)
        if not DEVICE_PATTERN.fullmatch(self.device):
            raise DeviceError(f"device {self.device!r}: use {DEVICE_HELP}")
