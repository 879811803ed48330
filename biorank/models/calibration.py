"""How fast each backend runs a BERT on this machine's CPU, timed once and kept: what "auto" chooses by there.

A CPU's flags do not tell: the same AVX512-BF16 flag is on CPUs where torch's bf16 runs twice as fast as ONNX
Runtime's fp32 and on CPUs where it runs slower (``benchmarks/records/light_install*.json``). So the first model
placed with "auto" on a CPU where more than one backend could run it
(:func:`~biorank.models.placement.cpu_candidates`) times each candidate on the shipped cross-encoder (a BERT of
the default encoder's shape: 12 layers, 384 wide) over real (title, abstract) and (title, sentence) pairs of the
bundled SciFact sample: a batch of 10 pairs of 256 word pieces (abstracts, the pairs a rerank scores) and one of
32 pairs of 64 (sentences). Each backend takes a few seconds. The times are kept in the cache
(``calibration.json``) per CPU model, core count and installed versions, so a new CPU or a new ONNX Runtime, OpenVINO
or torch is timed afresh; :meth:`Placement.choose <biorank.models.placement.Placement.choose>` takes the fastest
of them. ``biorank machine`` shows them, ``biorank machine --recalibrate`` times again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata, resources
from pathlib import Path

from biorank.config import default_cache
from biorank.models.export import export_bert_checkpoint
from biorank.models.pairs import load_cross_encoder, torch_scores
from biorank.models.placement import (
    GRAPHS,
    PRECISIONS,
    TextKind,
    cpu_candidates,
    cpu_flags,
    cpu_model,
    resolve_device,
)
from biorank.models.runtime import OnnxModel, cached, physical_cores
from biorank.models.shipped import SHIPPED_FOLDER, SHIPPED_RERANKER, WEIGHTS, shipped_identity

__all__ = ["SHAPES", "Calibration", "calibrate", "calibration_file", "kept", "machine", "measured"]

SHAPES: dict[str, tuple[int, int]] = {"long": (10, 256), "short": (32, 64)}
"""The batches timed, as (pairs, word pieces): abstracts and the pairs a rerank scores; sentences."""
STAGE_SHAPES: dict[str, tuple[str, ...]] = {"documents": ("long", "short"), "pairs": ("long",)}
"""Which batches a stage's time adds up: an index encodes abstracts and their sentences; a rerank scores pairs."""
VERSIONED = ("onnxruntime", "openvino", "torch", "transformers", "biorank")
_known: dict[str, Calibration] = {}


@dataclass(frozen=True)
class Calibration:
    """The times of one machine: milliseconds per batch of each shape (:data:`SHAPES`), per placement name.

    Example:
        >>> Calibration("x", {}, {"onnx": {"long": 900.0, "short": 400.0}}).stage_ms("documents")
        {'onnx': 1300.0}
    """

    key: str
    machine: dict
    ms: dict[str, dict[str, float]] = field(default_factory=dict)
    date: str = ""

    def stage_ms(self, stage: TextKind) -> dict[str, float]:
        """Milliseconds each placement took on what ``stage`` reads (its batches' sum)."""
        return {name: sum(times[shape] for shape in STAGE_SHAPES[stage]) for name, times in self.ms.items()
                if all(shape in times for shape in STAGE_SHAPES[stage])}


def machine() -> dict:
    """What the times depend on: the CPU's model, cores and vector flags, and the backends' versions."""
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"})
    versions = {}
    for package in VERSIONED:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    # The candidates too: a process without torch (or without OpenVINO) keeps times of its own.
    return {"cpu": cpu_model(), "cores": physical_cores(), "flags": flags, "versions": versions,
            "candidates": _candidates()}


def _candidates() -> list[str]:
    """Every placement "auto" could take here, ONNX Runtime's first."""
    union = set(cpu_candidates("documents") + cpu_candidates("pairs"))
    return sorted(union, key=lambda name: (name != "onnx", PRECISIONS.index(name)))  # type: ignore[arg-type]


def calibration_file() -> Path:
    """Where the times are kept: ``calibration.json`` in biorank's cache [BIORANK_CACHE]."""
    return default_cache() / "calibration.json"


def _key(facts: dict) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def _read() -> dict:
    try:
        return json.loads(calibration_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write(entry: Calibration) -> None:
    """Keep ``entry`` beside the other machines' (a shared home); a cache that cannot be written keeps it for this
    process only."""
    path = calibration_file()
    entries = _read()
    entries[entry.key] = asdict(entry)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        part.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
        part.replace(path)
    except OSError:
        pass


def _pairs() -> dict[str, list[tuple[str, str]]]:
    """Real pairs of each shape from the bundled sample: another abstract's title as the query."""
    with gzip.open(str(resources.files("biorank") / "data" / "scifact-sample.jsonl.gz"), "rt", encoding="utf-8") as f:
        docs = [json.loads(next(f)) for _ in range(20)]
    long = [(docs[i + 10]["title"], f"{docs[i]['title']} {' '.join(docs[i]['abstract'])}") for i in range(10)]
    sentences = [(doc["title"], s) for doc in reversed(docs) for s in docs[0]["abstract"] + doc["abstract"]]
    return {"long": long, "short": sentences[: SHAPES["short"][0]]}


def _scorer(name: str) -> Callable[[Sequence[tuple[str, str]], int], object]:
    """A function scoring a batch of pairs at a length with the shipped cross-encoder as placement ``name``
    runs it."""
    if name in GRAPHS:
        identity = shipped_identity()
        folder = cached(identity, "cross-encoder", name) or export_bert_checkpoint(  # type: ignore[arg-type]
            SHIPPED_FOLDER / WEIGHTS, SHIPPED_FOLDER, identity, SHAPES["long"][1])
        model = OnnxModel(folder, name)  # type: ignore[arg-type]
        return lambda pairs, length: model.score_pairs(pairs, batch_size=len(pairs), max_length=length)
    torch_model, tokenizer = load_cross_encoder(SHIPPED_RERANKER)
    torch_model.eval()
    return lambda pairs, length: torch_scores(torch_model, tokenizer, pairs, rows=len(pairs), max_length=length,
                                              device="cpu", precision=name)


def _time(name: str, pairs: dict[str, list[tuple[str, str]]]) -> dict[str, float]:
    """Milliseconds of each shape's batch, the best of two after one to warm up (kernels, allocations)."""
    score = _scorer(name)
    times = {}
    for shape, (_, length) in SHAPES.items():
        score(pairs[shape], length)
        runs = []
        for _ in range(2):
            started = time.perf_counter()
            score(pairs[shape], length)
            runs.append((time.perf_counter() - started) * 1000)
        times[shape] = min(runs)
    return times


def calibrate(names: Sequence[str] | None = None, *, say: Callable[[str], None] | None = None) -> Calibration:
    """Time each placement ``names`` (every one "auto" could take here where None) now, and keep the times.

    Args:
        names: placement names (:data:`~biorank.models.placement.PRECISIONS`) to time.
        say: told what is being timed (a progress line); stderr where None.

    Returns:
        This machine's times; a backend that failed to run is left out.

    Example:
        >>> calibrate(["onnx"]).ms["onnx"]["long"] > 0  # doctest: +SKIP
        True
    """
    facts = machine()
    chosen = list(names) if names is not None else _candidates()
    tell = say or (lambda text: print(text, file=sys.stderr, flush=True))
    tell(f"timing {', '.join(chosen)} on this CPU once, for precision auto (a few seconds each) ...")
    pairs = _pairs()
    ms = {}
    for name in chosen:
        try:
            ms[name] = _time(name, pairs)
        except Exception as error:  # a backend that cannot run here is simply not a candidate
            tell(f"  {name} left out: {type(error).__name__}: {str(error)[:200]}")
    entry = Calibration(_key(facts), facts, ms, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    _known[entry.key] = entry
    _write(entry)
    return entry


def kept() -> Calibration | None:
    """This machine's times as kept, without timing anything; None where it was never timed."""
    facts = machine()
    key = _key(facts)
    if key not in _known:
        stored = _read().get(key)
        if stored is None:
            return None
        _known[key] = Calibration(**stored)
    return _known[key]


def measured(asked: str, device: str | None, stage: TextKind) -> Mapping[str, float] | None:
    """What :meth:`Placement.choose <biorank.models.placement.Placement.choose>` chooses ``asked`` by: for
    "auto" on the CPU where more than one backend could run ``stage``, this machine's milliseconds per placement
    (timed now, once, if they were never timed); None elsewhere (a name asked outright, a GPU, queries).

    Args:
        asked: the precision asked for.
        device: the device asked for.
        stage: what the model will mostly read.

    Returns:
        Milliseconds per placement name, or None.
    """
    if asked != "auto" or stage == "queries" or (device or "auto") not in ("auto", "cpu"):
        return None
    candidates = cpu_candidates(stage)
    if len(candidates) < 2 or resolve_device(device) != "cpu":
        return None
    # Installing or upgrading a backend changes the machine's key (its versions), so it is timed afresh.
    entry = kept() or calibrate()
    return entry.stage_ms(stage)
