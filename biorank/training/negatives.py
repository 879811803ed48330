"""Training examples from judgements and BM25: Hofstätter et al.'s negative sampling.

For every judged-relevant (query, document) pair, up to ``per_positive`` documents are drawn without
replacement from the query's BM25 top ``from_top`` that are not judged for that query at all, relevant or
not: an unjudged document near the top is far more often a true negative than a judged-non-relevant one is
informative, and a judged document is never used against the query. Their rank is dropped (the draw is
uniform) so that the model cannot learn BM25's position bias.

Hard negatives can come from the hybrid's top instead (``stage="hybrid"``): what the reranker meets at test time
(issue 44), with false negatives filtered (:func:`false_negative`): a judged document is never one, and neither
is a copy of the positive (an abstract indexed twice) or a text that contains the question itself (a
self-supervised question copied from another abstract).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.evaluation.measures import Qrels
from biorank.training.synthetic import contains

if TYPE_CHECKING:
    from biorank.retrieval.searcher import Searcher


@dataclass(frozen=True, slots=True)
class TrainingGroup:
    """One judged-relevant document of a query and the negatives drawn for it."""

    query_id: str
    positive: str
    negatives: tuple[str, ...]


STAGES = ("bm25", "hybrid")


def bm25_candidates(searcher: Searcher, queries: Mapping[str, str], depth: int,
                    progress: Callable[[int], None] | None = None, *, stage: str = "bm25") -> dict[str, list[str]]:
    """The top ``depth`` document ids of each query, best first: BM25 over title + abstract, or with
    ``stage="hybrid"`` the index's hybrid (the reranker's own candidates at test time)."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")
    settings = {"mode": "bm25", "fields": "text"} if stage == "bm25" else {"mode": "hybrid"}
    hits = searcher.with_settings(**settings).search_many(queries, depth, progress=progress)
    return {q: [h.id for h in ranked] for q, ranked in hits.items()}


def false_negative(question: str, positive: str, candidate: str) -> bool:
    """Whether ``candidate`` must not be a negative for (``question``, ``positive``): it is the positive's text
    (white space and case aside), or it contains the question (whose source it then may well be).

    Example:
        >>> false_negative("Aspirin lowers fever.", "Title. Other text.", "A. Aspirin lowers fever. B.")
        True
    """
    return (contains(candidate, positive) and contains(positive, candidate)) or contains(candidate, question)


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
