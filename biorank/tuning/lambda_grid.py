"""Tuning the first stage: λ of the hybrid (a grid search on a development set, as Ma et al. did) and, with it,
the pseudo-relevance feedback (:mod:`biorank.retrieval.feedback`), the title's and MeSH's weights in the BM25 leg
(:mod:`biorank.retrieval.boosts`) and BM25's k1 and b; all stored with the index.

The choice can be made on one half of the queries (:func:`~biorank.evaluation.splits.halves`) and reported on the
other (:func:`held_out`), so that no figure it reports is of the queries that chose it.

k1 and b are the index's own similarity, fixed while it is open: trying a pair closes the index, sets it and
opens it again (:func:`~biorank.store.indices.set_bm25_parameters`), so searches of that index fail for a moment
each time; the index's own pair is set again at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.retrieval.boosts import Boosts
from biorank.retrieval.feedback import Feedback
from biorank.store.indices import bm25_parameters, set_bm25_parameters
from biorank.types import Advance, Qrels

if TYPE_CHECKING:
    from biorank.evaluation.report import EvalReport
    from biorank.retrieval.searcher import Searcher

LAMBDA_GRID = (0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1)
"""λ values tune-lambda tries. The steps below 0.01 are there for stronger encoders, whose optimum lies there
(bge-small-en-v1.5's on SciFact; docs/measurements/retrieval.md, "Which encoder")."""


@dataclass(frozen=True)
class Variant:
    """One first stage a λ grid runs: its feedback, its field boosts and BM25's ``(k1, b)`` (None: the index's
    own, left as it is)."""

    feedback: Feedback = field(default_factory=Feedback)
    boosts: Boosts = field(default_factory=Boosts)
    bm25: tuple[float, float] | None = None

    @property
    def name(self) -> str:
        """``none`` for the plain hybrid, else what differs from it (``rm3; title 0.5; k1 1.2 b 0.75``)."""
        parts = [self.feedback.name] if self.feedback else []
        parts += [self.boosts.name] if self.boosts else []
        parts += [f"k1 {self.bm25[0]:g} b {self.bm25[1]:g}"] if self.bm25 else []
        return "; ".join(parts) or "none"


@contextlib.contextmanager
def bm25_kept(searcher: Searcher) -> Iterator[tuple[float, float]]:
    """The index's BM25 ``(k1, b)`` now, set again on leaving whatever the block changed or raised."""
    original = bm25_parameters(searcher.client, searcher.index)
    try:
        yield original
    finally:
        if bm25_parameters(searcher.client, searcher.index) != original:
            set_bm25_parameters(searcher.client, searcher.index, *original)


def _with_bm25(searcher: Searcher, pair: tuple[float, float]) -> None:
    """Sets the index's BM25 to ``pair`` where it differs."""
    if bm25_parameters(searcher.client, searcher.index) != pair:
        set_bm25_parameters(searcher.client, searcher.index, *pair)


def tune_lambda_grid(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, lambdas: Sequence[float],
                     metric: str, *, feedback: Feedback | None = None, boosts: Boosts | None = None,
                     depth: int = 100, progress: Advance | None = None) -> dict[float, float]:
    """``metric`` of the exact hybrid at each λ, with ``feedback`` and ``boosts`` (none where None), over the
    index's BM25 as it is set; the queries are encoded once, not once per λ."""
    from biorank.retrieval.searcher import encode_queries

    vectors = encode_queries(searcher.load(), queries)
    table = {}
    for lam in lambdas:
        hits = searcher.with_settings(mode="hybrid", lam=lam, feedback=feedback or Feedback(),
                                      boosts=boosts or Boosts()).search_many(
            queries, depth, progress=progress, vectors=vectors)
        table[lam] = evaluate(run_from_hits(hits), {q: qrels[q] for q in queries}, [metric])[metric]
    return table


def tune_first_stage(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, lambdas: Sequence[float],
                     metric: str, variants: Sequence[Variant], *, depth: int = 100,
                     progress: Advance | None = None) -> dict[str, dict[float, float]]:
    """The λ grid of every variant, by the variant's name; the variants of one BM25 pair run together (one close
    and open of the index per pair), and the index's own pair is set again at the end."""
    tables: dict[str, dict[float, float]] = {}
    with bm25_kept(searcher) as original:
        for pair in dict.fromkeys(v.bm25 for v in variants):
            _with_bm25(searcher, pair or original)
            for variant in (v for v in variants if v.bm25 == pair):
                tables[variant.name] = tune_lambda_grid(searcher, queries, qrels, lambdas, metric,
                                                        feedback=variant.feedback, boosts=variant.boosts,
                                                        depth=depth, progress=progress)
    return tables


def best_first_stage(tables: Mapping[str, Mapping[float, float]]) -> tuple[str, float]:
    """The (variant name, λ) with the best value; of equal values the plain hybrid (``none``: a search sent
    once, the index's BM25), then the smallest λ."""
    return max(((name, lam) for name, table in tables.items() for lam in table),
               key=lambda pair: (tables[pair[0]][pair[1]], pair[0] == "none", -pair[1]))


def held_out(searcher: Searcher, queries: Mapping[str, str], qrels: Qrels, metric: str,
             systems: Mapping[str, tuple[Variant, float]], *, depth: int = 100) -> EvalReport:
    """``metric`` of each system (a variant and λ of the exact hybrid) on queries that chose nothing, with paired
    p-values against the first; a variant without a BM25 pair runs on the index's own, set again at the end."""
    from biorank.evaluation.report import evaluate_runs

    runs = {}
    with bm25_kept(searcher) as original:
        for name, (variant, lam) in systems.items():
            _with_bm25(searcher, variant.bm25 or original)
            runs[name] = run_from_hits(searcher.with_settings(mode="hybrid", lam=lam, feedback=variant.feedback,
                                                              boosts=variant.boosts).search_many(queries, depth))
    return evaluate_runs(runs, {q: qrels[q] for q in queries}, [metric])
