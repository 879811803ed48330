"""Fusing a BM25 and a dense ranking client-side: the peers' ways, for comparison with the exact hybrid.

- Reciprocal rank fusion (Cormack et al., 2009): ``Σ 1 / (rrf_k + rank)`` over the lists a document is in.
- Min-max fusion, as OpenSearch's neural-search ``normalization-processor`` does with ``min_max`` and
  ``arithmetic_mean``: each list's scores scaled to [0, 1] by its own min and max, then averaged with equal
  weights; a document missing from a list gets 0 there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from biorank.scores import min_max

if TYPE_CHECKING:
    from biorank.types import Hit


def _merge(bm25: Sequence[Hit], dense: Sequence[Hit], scores: dict[str, float], k: int) -> list[Hit]:
    by_id = {h.id: h for h in dense}
    by_id.update({h.id: replace(h, dense=by_id[h.id].dense if h.id in by_id else None) for h in bm25})
    # Ties are broken by id so that a fused ranking never depends on dictionary order.
    order = sorted(scores, key=lambda doc: (-scores[doc], doc))[:k]
    return [replace(by_id[doc], rank=rank, score=scores[doc]) for rank, doc in enumerate(order, 1)]


def rrf_fusion(bm25: Sequence[Hit], dense: Sequence[Hit], *, k: int, rrf_k: int = 60) -> list[Hit]:
    scores: dict[str, float] = {}
    for ranking in (bm25, dense):
        for position, hit in enumerate(ranking, 1):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (rrf_k + position)
    return _merge(bm25, dense, scores, k)


def _min_max_by_id(ranking: Sequence[Hit]) -> dict[str, float]:
    return dict(zip((h.id for h in ranking), min_max([h.score for h in ranking]), strict=True))


def min_max_fusion(bm25: Sequence[Hit], dense: Sequence[Hit], *, k: int, rrf_k: int = 60) -> list[Hit]:
    """Equal-weight mean of min-max normalised scores (``rrf_k`` is accepted and ignored, for one signature)."""
    left, right = _min_max_by_id(bm25), _min_max_by_id(dense)
    scores = {doc: 0.5 * left.get(doc, 0.0) + 0.5 * right.get(doc, 0.0) for doc in left.keys() | right.keys()}
    return _merge(bm25, dense, scores, k)
