"""TREC run files: ``query Q0 document rank score tag``, the format every IR evaluation tool reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from biorank.types import Hit


def trec_line(qid: str, doc_id: str, rank: int, score: float, tag: str) -> str:
    """One hit as a run line (with its line end): what :func:`write_trec` writes and ``--format trec`` prints.

    Example:
        >>> trec_line("1", "17942999", 1, 0.5, "biorank-bm25")
        '1 Q0 17942999 1 0.500000 biorank-bm25\n'
    """
    return f"{qid} Q0 {doc_id} {rank} {score:.6f} {tag}\n"


def write_trec(path: str | Path, hits: Mapping[str, Sequence[Hit]], tag: str) -> int:
    """Write one line per hit, in rank order; returns the number of lines."""
    lines = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for qid, ranked in hits.items():
            for hit in ranked:
                f.write(trec_line(qid, hit.id, hit.rank, hit.score, tag))
                lines += 1
    return lines


def read_trec(path: str | Path) -> dict[str, dict[str, float]]:
    """query -> document -> score, from a TREC run file."""
    run: dict[str, dict[str, float]] = {}
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"{path}:{number}: a TREC run line has 6 columns, this one {len(parts)}")
            run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run
