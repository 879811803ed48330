"""Tuning λ of the hybrid: a grid search on a development set, as Ma et al. did, stored with the index."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.types import Advance, Qrels

if TYPE_CHECKING:
    from biorank.retrieval.searcher import Searcher

LAMBDA_GRID = (0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1)
"""λ values tune-lambda tries. The steps below 0.01 are there for stronger encoders, whose optimum lies there
(bge-small-en-v1.5's on SciFact; docs/measurements/retrieval.md, "Which encoder")."""


def tune_lambda_grid(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, lambdas: Sequence[float],
                     metric: str, *, depth: int = 100,
                     progress: Advance | None = None) -> dict[float, float]:
    """``metric`` of the exact hybrid at each λ; the queries are encoded once, not once per λ."""
    from biorank.retrieval.searcher import encode_queries

    vectors = encode_queries(searcher.load(), queries)
    table = {}
    for lam in lambdas:
        hits = searcher.with_settings(mode="hybrid", lam=lam).search_many(
            queries, depth, progress=progress, vectors=vectors)
        table[lam] = evaluate(run_from_hits(hits), {q: qrels[q] for q in queries}, [metric])[metric]
    return table
