"""Tuning the first stage: λ of the hybrid (a grid search on a development set, as Ma et al. did) and, with it,
the pseudo-relevance feedback (:mod:`biorank.retrieval.feedback`); both stored with the index.

The choice can be made on one half of the queries (:func:`~biorank.evaluation.splits.halves`) and reported on the
other (:func:`held_out`), so that no figure it reports is of the queries that chose it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.types import Advance, Qrels

if TYPE_CHECKING:
    from biorank.evaluation.report import EvalReport
    from biorank.retrieval.feedback import Feedback
    from biorank.retrieval.searcher import Searcher

LAMBDA_GRID = (0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1)
"""λ values tune-lambda tries. The steps below 0.01 are there for stronger encoders, whose optimum lies there
(bge-small-en-v1.5's on SciFact; docs/measurements/retrieval.md, "Which encoder")."""


def tune_lambda_grid(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, lambdas: Sequence[float],
                     metric: str, *, feedback: Feedback | None = None, depth: int = 100,
                     progress: Advance | None = None) -> dict[float, float]:
    """``metric`` of the exact hybrid at each λ, with ``feedback`` (none where None); the queries are encoded
    once, not once per λ."""
    from biorank.retrieval.feedback import Feedback
    from biorank.retrieval.searcher import encode_queries

    vectors = encode_queries(searcher.load(), queries)
    table = {}
    for lam in lambdas:
        hits = searcher.with_settings(mode="hybrid", lam=lam, feedback=feedback or Feedback()).search_many(
            queries, depth, progress=progress, vectors=vectors)
        table[lam] = evaluate(run_from_hits(hits), {q: qrels[q] for q in queries}, [metric])[metric]
    return table


def best_first_stage(tables: Mapping[str, Mapping[float, float]]) -> tuple[str, float]:
    """The (feedback name, λ) with the best value; of equal values no feedback (a search sent once), then the
    smallest λ."""
    return max(((name, lam) for name, table in tables.items() for lam in table),
               key=lambda pair: (tables[pair[0]][pair[1]], pair[0] == "none", -pair[1]))


def held_out(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, metric: str,
             systems: Mapping[str, tuple[Feedback, float]], *, depth: int = 100) -> EvalReport:
    """``metric`` of each system (feedback and λ of the exact hybrid) on queries that chose nothing, with paired
    p-values against the first."""
    from biorank.evaluation.report import evaluate_runs

    runs = {name: run_from_hits(searcher.with_settings(mode="hybrid", lam=lam, feedback=feedback)
                                .search_many(queries, depth))
            for name, (feedback, lam) in systems.items()}
    return evaluate_runs(runs, {q: qrels[q] for q in queries}, [metric])
