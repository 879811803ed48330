"""Where a model runs: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, checked before any work, and the batches a GPU gets.

``auto`` takes a GPU where torch is installed and sees one, else the CPU. Without an NVIDIA or ROCm driver on the
machine the answer is the CPU without importing torch (seconds), so a command that runs in ONNX Runtime starts as
fast as before. A device named outright is checked at once: ``cuda`` where torch is missing, sees no GPU or not
that many is one line (:class:`DeviceError`) before a corpus is read or a cluster asked.

On a GPU the models run in torch, bf16 where the GPU computes it natively, else fp16 (autocast: layer norms and
softmax stay fp32); the precisions of the exported graphs (onnx, int8, openvino) run on the CPU only. A GPU reads
far larger batches than a CPU: the encoder's are sorted by length and cut by word pieces (padding included), so a
batch of sentences holds many more rows than a batch of abstracts; the cross-encoder's keep their fixed shape
(every pair's score independent of its batch neighbours, :mod:`.cross_encoder`) with more rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from biorank.errors import BiorankError
from biorank.models.extras import installed, require_torch
from biorank.models.runtime import ONNX_PRECISIONS

__all__ = [
    "DEVICE_HELP",
    "DEVICE_PATTERN",
    "GPU_ENCODER_TOKENS",
    "GPU_PAIR_TOKENS",
    "DeviceError",
    "check_device",
    "check_precision",
    "has_gpu",
    "length_batches",
    "resolve_device",
]

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
        precision: a precision of :data:`~biorank.models.encoder.PRECISIONS`, or ``auto``.
        device: the device asked for (``auto`` runs an exported graph on the CPU whatever the machine has).

    Raises:
        DeviceError: in one line, with what to use instead.

    Example:
        >>> check_precision("onnx", "cuda")  # doctest: +SKIP
        DeviceError: precision onnx runs in ONNX Runtime on the CPU, not on cuda: ...
    """
    asked = device or "auto"
    if precision in ONNX_PRECISIONS and asked not in ("auto", "cpu"):
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
