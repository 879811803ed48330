"""Tuning the reranker's weight for one index: the cross-encoder's share of the final score (see
:func:`~biorank.stages.rerank.reorder`), by a grid on a development set, stored with the index like λ.

The best weight depends on the collection, the first stage and the cross-encoder (the shipped one over the bge
hybrid: 0.4 on SciFact dev and BioASQ 7B, 0.2-0.3 on NFCorpus dev). The cross-encoder scores each query's top
``depth`` once; every weight of the grid only recombines those scores with the first stage's, so the whole grid
costs one rerank pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from biorank.evaluation.measures import evaluate, run_from_hits
from biorank.pipeline import BATCH, Pipeline
from biorank.stages.rerank import reorder
from biorank.types import Qrels, StageProgress, stage_counter

if TYPE_CHECKING:
    from biorank.stages.rerank import Reranker

WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Weights tune-rerank tries: 0 is the first stage alone, 1 the cross-encoder alone."""


def tune_rerank_weight(first_stage: Pipeline, reranker: Reranker, queries: Mapping[str, str], qrels: Qrels,
                       weights: Sequence[float], metric: str, *,
                       progress: StageProgress | None = None) -> dict[float, float]:
    """``metric`` of ``first_stage`` reranked by ``reranker`` at each weight, over ``queries``."""
    if first_stage.reranker is not None or first_stage.snippets is not None:
        raise ValueError(f"tune the weight over a first stage alone, not {first_stage.name}")
    # As deep as tune-lambda's runs, so a metric like recall@100 sees the hits below the reranked ones too.
    depth = max(reranker.depth, 100)
    found = first_stage.run(queries, depth, progress=stage_counter(progress, "first stage", len(queries)))
    hits = {q: answer.hits for q, answer in found.items()}
    advance = stage_counter(progress, "rerank", len(queries))
    scores: dict[str, list[float]] = {}
    items = list(queries.items())
    for start in range(0, len(items), BATCH):
        batch = dict(items[start : start + BATCH])
        scores |= reranker.score_many(batch, {q: hits[q] for q in batch})
        advance(len(batch))
    judged = {q: qrels[q] for q in queries}
    return {weight: evaluate(run_from_hits({q: reorder(hits[q], scores[q], weight) for q in queries}), judged,
                             [metric])[metric] for weight in weights}
