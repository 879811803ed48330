"""Training examples from judgements and BM25: Hofstätter et al.'s negative sampling.

For every judged-relevant (query, document) pair, up to ``per_positive`` documents are drawn without
replacement from the query's BM25 top ``from_top`` that are not judged for that query at all, relevant or
not: an unjudged document near the top is far more often a true negative than a judged-non-relevant one is
informative, and a judged document is never used against the query. Their rank is dropped (the draw is
uniform) so that the model cannot learn BM25's position bias.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.evaluation.measures import Qrels

if TYPE_CHECKING:
    from biorank.retrieval.searcher import Searcher


@dataclass(frozen=True, slots=True)
class TrainingGroup:
    """One judged-relevant document of a query and the negatives drawn for it."""

    query_id: str
    positive: str
    negatives: tuple[str, ...]


def bm25_candidates(searcher: Searcher, queries: Mapping[str, str], depth: int,
                    progress: Callable[[int], None] | None = None) -> dict[str, list[str]]:
    """The BM25 (title + abstract) top ``depth`` document ids of each query, best first."""
    hits = searcher.with_settings(mode="bm25", fields="text").search_many(queries, depth, progress=progress)
    return {q: [h.id for h in ranked] for q, ranked in hits.items()}


def sample_negatives(candidates: Mapping[str, Sequence[str]], qrels: Qrels, query_ids: Sequence[str], *,
                     per_positive: int = 20, seed: int = 0) -> list[TrainingGroup]:
    """One group per judged-relevant pair of ``query_ids``, each with up to ``per_positive`` negatives.

    Deterministic for a seed: queries and their positives are visited in sorted order, each with its own
    random stream, so adding a query never changes another query's negatives.
    """
    groups: list[TrainingGroup] = []
    for qid in sorted(query_ids):
        judged = qrels.get(qid, {})
        pool = [doc for doc in candidates.get(qid, ()) if doc not in judged]
        for positive in sorted(doc for doc, grade in judged.items() if grade > 0):
            rng = random.Random(f"{seed}:{qid}:{positive}")
            negatives = rng.sample(pool, min(per_positive, len(pool)))
            groups.append(TrainingGroup(qid, positive, tuple(negatives)))
    return groups
