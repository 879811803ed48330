"""Reordering the final hits: near-duplicates dropped, maximal marginal relevance, newest first.

A stage after the reranker and before the snippets (:mod:`biorank.pipeline`), so the snippets are made for the
documents a person will see. It works on every hit the stages before it returned, and asks the pipeline for at
least :data:`CANDIDATES` of them: a fixed candidate set, so that page 2 of a reordered ranking continues page 1
(a set that grew with the page would reorder differently on each page), and enough that a page stays full after
duplicates are dropped.

- ``dedupe``: a hit whose block-0 vector has a cosine of at least the threshold with a better-ranked hit that was
  kept is dropped. MEDLINE holds reprints, duplicate publications and errata of the same text, and NFCorpus the
  same abstract under several ids: they crowd a page with one result. :data:`DEDUPE_THRESHOLD` was chosen on
  NFCorpus's real duplicates (``benchmarks/studies/near_duplicates.py`` and its records).
- ``mmr``: Carbonell and Goldstein's maximal marginal relevance: the hits are chosen one at a time, each the one
  maximising ``λ·relevance - (1 - λ)·max cosine with those chosen``, relevance being the final score min-max
  scaled over the candidates (:func:`~biorank.scores.min_max`). λ = 1 keeps the order; lower values trade
  relevance for variety.
- ``sort="date"``: the newest publication year first (block 0's ``year``), ties in their order by relevance,
  documents without a year last.

The vectors (and years) of a batch's hits are read in one request (:func:`~biorank.store.inspection.block_vectors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.scores import min_max
from biorank.store.inspection import block_vectors, first_blocks
from biorank.types import Answer, Hit

if TYPE_CHECKING:
    import numpy as np
    from opensearchpy import OpenSearch

SORTS = ("relevance", "date")
"""How hits are ordered: by the last stage's score, or newest first within the candidates."""
CANDIDATES = 100
"""Hits the reordering works on at least (the first stage and the reranker return this many): the service's
deepest page (``MAX_DEPTH``), so every page is a slice of one reordered list."""
DEDUPE_THRESHOLD = 0.98
"""The cosine of block-0 vectors from which a hit counts as a near-duplicate of a better one (see the module's
docstring for how it was chosen)."""

Vectors = Mapping[str, Sequence[float] | None]
"""Document id -> its block-0 vector (None where it has none)."""


class ReorderError(BiorankError):
    """A reordering asked for with a value it cannot take (a threshold or λ outside [0, 1], an unknown sort)."""


def check_reorder(dedupe: float | None, mmr: float | None, sort: str) -> None:
    """Refuse, in one line, a threshold or λ outside its range or an unknown sort.

    Args:
        dedupe: the near-duplicate threshold (a cosine in (0, 1]), or None for no deduplication.
        mmr: MMR's λ (in [0, 1]), or None for no MMR.
        sort: one of :data:`SORTS`.

    Example:
        >>> check_reorder(0.97, 0.7, "date")
    """
    if dedupe is not None and not 0 < dedupe <= 1:
        raise ReorderError(f"the near-duplicate threshold is a cosine above 0 and at most 1, not {dedupe}")
    if mmr is not None and not 0 <= mmr <= 1:
        raise ReorderError(f"MMR's λ is from 0 (variety only) to 1 (relevance only), not {mmr}")
    if sort not in SORTS:
        raise ReorderError(f"unknown sort {sort!r}; choose one of {', '.join(SORTS)}")


def similarities(hits: Sequence[Hit], vectors: Vectors) -> np.ndarray:
    """The cosine of every two hits' vectors (n by n); 0 where either has none (nothing is known to be alike).

    Example:
        >>> similarities([Hit("a", "", 1, 1.0), Hit("b", "", 2, 1.0)], {"a": [3, 4], "b": None}).tolist()
        [[1.0, 0.0], [0.0, 0.0]]
    """
    import numpy as np  # here, not at the top: the CLI starts without numpy (the pipeline imports this module)

    given = [vectors.get(h.id) for h in hits]
    dimension = max((len(v) for v in given if v), default=0)
    matrix = np.array([v if v else [0.0] * dimension for v in given], dtype=np.float64).reshape(len(hits), dimension)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return matrix @ matrix.T


def drop_duplicates(hits: Sequence[Hit], vectors: Vectors, threshold: float) -> list[Hit]:
    """``hits`` without those whose vector has a cosine of at least ``threshold`` with a better hit kept.

    Args:
        hits: best first.
        vectors: each hit's block-0 vector (a hit without one is never a duplicate).
        threshold: the cosine from which two documents count as one.

    Returns:
        The hits kept, in their order (ranks unchanged: :class:`Reorder` renumbers).

    Example:
        >>> a, b, c = (Hit(i, "", r, 1.0) for r, i in enumerate("abc", 1))
        >>> [h.id for h in drop_duplicates([a, b, c], {"a": [1, 0], "b": [1, 0.01], "c": [0, 1]}, 0.97)]
        ['a', 'c']
    """
    cosine = similarities(hits, vectors)
    kept: list[int] = []
    for i in range(len(hits)):
        if not kept or cosine[i, kept].max() < threshold:
            kept.append(i)
    return [hits[i] for i in kept]


def mmr_order(hits: Sequence[Hit], vectors: Vectors, lam: float) -> list[Hit]:
    """``hits`` reordered by maximal marginal relevance.

    Args:
        hits: best first, with their final scores.
        vectors: each hit's block-0 vector (a hit without one is like none chosen).
        lam: λ: the weight of relevance (the scores min-max scaled over ``hits``) against the largest cosine
            with the hits chosen before.

    Returns:
        The same hits, in the order MMR chooses them (ranks unchanged: :class:`Reorder` renumbers).

    Example:
        >>> a, b, c = (Hit(i, "", r, s) for r, (i, s) in enumerate([("a", 3.0), ("b", 2.9), ("c", 2.0)], 1))
        >>> [h.id for h in mmr_order([a, b, c], {"a": [1, 0], "b": [1, 0], "c": [0, 1]}, 0.5)]
        ['a', 'c', 'b']
    """
    import numpy as np

    if not hits:
        return []
    relevance = np.array(min_max([h.score for h in hits]))
    cosine = similarities(hits, vectors)
    left = np.ones(len(hits), dtype=bool)
    closest = np.zeros(len(hits))
    """Each hit's largest cosine with the hits chosen so far (none chosen: 0)."""
    order: list[int] = []
    for _ in range(len(hits)):
        marginal = np.where(left, lam * relevance - (1 - lam) * closest, -np.inf)
        best = int(np.argmax(marginal))  # the first of equals: the better-ranked hit
        order.append(best)
        left[best] = False
        closest = np.maximum(closest, cosine[:, best])
    return [hits[i] for i in order]


def newest_first(hits: Sequence[Hit], years: Mapping[str, int | None]) -> list[Hit]:
    """``hits`` by publication year, newest first; equal years (and documents without one, last) keep their
    order.

    Example:
        >>> a, b, c = (Hit(i, "", r, 1.0) for r, i in enumerate("abc", 1))
        >>> [h.id for h in newest_first([a, b, c], {"a": 2010, "b": 2016, "c": None})]
        ['b', 'a', 'c']
    """
    return sorted(hits, key=lambda h: (years.get(h.id) is None, -(years.get(h.id) or 0)))


class Reorder:
    """The stage: each answer's hits deduplicated, reordered by MMR and sorted by date, as the settings ask.

    Builds nothing and loads nothing; each batch reads its hits' vectors (or years) in one request.

    Args:
        client: the cluster's client.
        index: the documents index the hits are of.
        dedupe: the near-duplicate threshold, or None.
        mmr: MMR's λ, or None.
        sort: one of :data:`SORTS`.

    Example:
        >>> stage = Reorder(client, "scifact", dedupe=DEDUPE_THRESHOLD, mmr=0.7)  # doctest: +SKIP
        >>> stage.run([answer], depth=stage.depth)  # doctest: +SKIP
    """

    name = "reorder"

    def __init__(self, client: OpenSearch, index: str, *, dedupe: float | None = None, mmr: float | None = None,
                 sort: str = "relevance") -> None:
        check_reorder(dedupe, mmr, sort)
        self.client = client
        self.index = index
        self.dedupe = dedupe
        self.mmr = mmr
        self.sort = sort

    @property
    def depth(self) -> int:
        """How many hits the stages before it must return: :data:`CANDIDATES`."""
        return CANDIDATES

    def run(self, answers: Sequence[Answer], depth: int) -> None:
        """The pipeline's call: each answer's hits reordered in place and numbered again from 1."""
        ids = [h.id for a in answers for h in a.hits]
        vectors: dict[str, list[float] | None] = {}
        years: dict[str, int | None] = {}
        if self.dedupe is not None or self.mmr is not None:
            stored = block_vectors(self.client, self.index, ids, ("year",) if self.sort == "date" else ())
            vectors = {i: vector for i, (_, vector) in stored.items()}
            years = {i: fields.get("year") for i, (fields, _) in stored.items()}
        elif self.sort == "date":
            years = {i: s.get("year") for i, s in first_blocks(self.client, self.index, ids, ("year",)).items()}
        for answer in answers:
            hits = answer.hits
            if self.dedupe is not None:
                hits = drop_duplicates(hits, vectors, self.dedupe)
            if self.mmr is not None:
                hits = mmr_order(hits, vectors, self.mmr)
            if self.sort == "date":
                hits = newest_first(hits, years)
            answer.hits = [replace(h, rank=rank) for rank, h in enumerate(hits, 1)]

    def describe(self) -> str:
        """What it does, for a system's name: ``dedupe 0.97, mmr 0.7, newest first``."""
        parts = [f"dedupe {self.dedupe:g}"] if self.dedupe is not None else []
        parts += [f"mmr {self.mmr:g}"] if self.mmr is not None else []
        return ", ".join(parts + (["newest first"] if self.sort == "date" else []))
