"""The systems ``biorank eval`` can run, by name: each a first-stage configuration over one index.

Later stages (a reranker, snippets) add systems here under names such as ``hybrid+rerank``; a system is a
function from queries to ranked hits, so the evaluation does not care how the hits were made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.errors import BiorankError

if TYPE_CHECKING:
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


SNIPPETS = "+snippets"
"""Suffix of a system that also returns snippets: the best sentences of its top 10 documents."""


@dataclass
class SystemRun:
    hits: dict[str, list[Hit]]
    snippets: dict[str, list[Snippet]] | None = None


def system_names() -> list[str]:
    return [*FIRST_STAGE, *(f"{name}{SNIPPETS}" for name in FIRST_STAGE)]


def run_system(name: str, searcher: Searcher, queries: Mapping[str, str], k: int,
               progress: Callable[[int], None] | None = None) -> SystemRun:
    """Ranked hits (and snippets, for ``...+snippets``) of system ``name`` for every query."""
    base = name.removesuffix(SNIPPETS)
    if base not in FIRST_STAGE:
        raise BiorankError(f"unknown system {name!r}; known: {', '.join(system_names())}")
    hits = searcher.with_settings(**FIRST_STAGE[base]).search_many(queries, k, progress=progress)
    if not name.endswith(SNIPPETS):
        return SystemRun(hits)
    from biorank.ranker.snippets import SnippetFinder

    finder = SnippetFinder(searcher.client, searcher.index)
    requests = {q: (queries[q], [h.id for h in hits[q][:SNIPPET_DOCUMENTS]]) for q in queries}
    return SystemRun(hits, finder.snippets_many(requests))
