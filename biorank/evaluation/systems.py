"""The systems ``biorank eval`` can run, by name: each a first-stage configuration over one index.

Later stages (a reranker, snippets) add systems here under names such as ``hybrid+rerank``; a system is a
function from queries to ranked hits, so the evaluation does not care how the hits were made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.ranker.reranker import DEFAULT_DEPTH, DEFAULT_WEIGHT
from biorank.ranker.snippets import WEIGHT_VARIANTS

if TYPE_CHECKING:
    from biorank.ranker.reranker import Reranker
    from biorank.ranker.searcher import Hit, Searcher
    from biorank.ranker.snippets import Snippet

SNIPPET_DOCUMENTS = 10
"""Snippets come from the documents a BioASQ answer lists: the top 10."""

# name -> SearchSettings changes; the index's tuned λ applies unless a name says otherwise.
FIRST_STAGE: dict[str, dict] = {
    "bm25": {"mode": "bm25", "fields": "text"},
    "bm25-passage": {"mode": "bm25", "fields": "passage"},
    "bm25-wordpieces": {"mode": "bm25", "fields": "wordpieces"},
    "bm25-bigrams": {"mode": "bm25", "fields": "wordpieces+bigrams"},
    "dense": {"mode": "dense"},
    "dense-exact": {"mode": "dense-exact"},
    "hybrid": {"mode": "hybrid"},
    "hybrid-approx": {"mode": "hybrid-approx"},
    "rrf": {"mode": "rrf"},
    "minmax": {"mode": "minmax"},
    "os-hybrid": {"mode": "os-hybrid"},
}


RERANK = "+rerank"
"""Suffix of a system whose first-stage top ``depth`` is reordered by the cross-encoder reranker."""
SNIPPETS = "+snippets"
"""Suffix of a system that also returns snippets: the best sentences of its top 10 documents, scored with the
index's tuned weights; ``+snippets-equal`` uses equal weights and ``+snippets-relevance`` (``-similarity``,
``-lexical``, ``-document``) one perspective alone."""
RESCORE = "+rescore"
"""After a ``+snippets`` suffix: the top 10 documents are also reordered by S_doc, their score from their
sentences."""


@dataclass
class SystemRun:
    hits: dict[str, list[Hit]]
    snippets: dict[str, list[Snippet]] | None = None
    stage_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    """Milliseconds per query of the stages after the first: stage -> query -> ms (``rerank``, ``snippets``)."""
    notes: list[str] = field(default_factory=list)
    """What the user should know about how the run was made (a perspective that could not be computed)."""


def system_names() -> list[str]:
    return [f"{name}{rerank}{snippets}" for name in FIRST_STAGE for rerank in ("", RERANK)
            for snippets in ("", SNIPPETS)]


def snippet_system(name: str) -> tuple[str, str | None, bool]:
    """(the system before ``+snippets``, its weights variant or None without snippets, whether it re-scores)."""
    stages, found, tail = name.partition(SNIPPETS)
    if not found:
        return name, None, False
    rescore = tail.endswith(RESCORE)
    tail = tail.removesuffix(RESCORE)
    variant = tail.removeprefix("-") if tail.startswith("-") else "tuned" if not tail else ""
    if variant not in WEIGHT_VARIANTS or tail == "-tuned":
        raise BiorankError(f"unknown system {name!r}: +snippets takes "
                           f"{', '.join('-' + v for v in WEIGHT_VARIANTS[1:])} (or nothing, the tuned weights) "
                           f"and then {RESCORE}")
    return stages, variant, rescore


def with_snippets(name: str) -> str:
    """System ``name``, with snippets if it has none."""
    return name if snippet_system(name)[1] is not None else name + SNIPPETS


def first_stage_searcher(name: str, searcher: Searcher) -> Searcher:
    """The searcher system ``name`` runs its first stage with; an unknown name is an error."""
    stages = snippet_system(name)[0]
    base = stages.removesuffix(RERANK)
    if base not in FIRST_STAGE or stages not in system_names():
        raise BiorankError(f"unknown system {name!r}; known: {', '.join(system_names())}, and +snippets with "
                           f"-equal or one perspective and {RESCORE}")
    return searcher.with_settings(**FIRST_STAGE[base])


def run_system(name: str, searcher: Searcher, queries: Mapping[str, str], k: int,
               progress: Callable[[int], None] | None = None, *, reranker: Reranker | None = None,
               depth: int = DEFAULT_DEPTH, weight: float = DEFAULT_WEIGHT,
               rerank_progress: Callable[[int], None] | None = None,
               snippet_progress: Callable[[int], None] | None = None) -> SystemRun:
    """Ranked hits (and snippets, for ``...+snippets``) of system ``name`` for every query.

    ``progress`` counts queries through the first stage, ``rerank_progress`` through the reranker, which a
    ``+rerank`` system takes from ``reranker``, else from the index's record, and ``snippet_progress`` through
    the sentence scoring (whose cross-encoder is the same model, else the index's).
    """
    stages, variant, rescore = snippet_system(name)
    hits = first_stage_searcher(name, searcher).search_many(queries, k, progress=progress)
    stage_ms: dict[str, dict[str, float]] = {}
    if RERANK in stages:
        from biorank.ranker.reranker import Reranker, index_reranker, rerank_many

        reranker = reranker or Reranker(index_reranker(searcher.meta, searcher.index))
        started = time.perf_counter()
        hits = rerank_many(reranker, searcher.client, searcher.index, queries, hits, depth, weight,
                           progress=rerank_progress)
        # rerank_many reads every query's texts in one request, so each query gets an equal share of the stage.
        share = (time.perf_counter() - started) * 1000 / max(len(hits), 1)
        stage_ms["rerank"] = dict.fromkeys(hits, share)
    if variant is None:
        return SystemRun(hits, stage_ms=stage_ms)
    from biorank.ranker.snippets import SnippetScorer, SnippetWeights, sentence_reranker

    weights = SnippetWeights.named(variant, searcher.meta)
    relevance = sentence_reranker(searcher.meta, searcher.index, reranker) if weights.uses("relevance") else None
    if variant == "relevance" and relevance is None:
        raise BiorankError(f"{name} needs a cross-encoder and index {searcher.index!r} has no reranker: train one "
                           "with `biorank train-reranker`")
    scorer = SnippetScorer(searcher, weights=weights, reranker=relevance, rescore=rescore, depth=SNIPPET_DOCUMENTS)
    found = scorer.score_many(queries, hits, progress=snippet_progress)
    return SystemRun(found.hits, found.snippets, {**stage_ms, "snippets": found.ms}, scorer.notes)
