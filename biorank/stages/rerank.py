"""The rerank stage: the cross-encoder (:class:`~biorank.models.cross_encoder.CrossEncoder`) reorders the top
``depth`` hits of the first stage (Ma et al. §5.1, Hofstätter et al. §2.2), mixed with the first stage's score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.models.cross_encoder import DEFAULT_MAX_LENGTH
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.retrieval.fusion import min_max
from biorank.store.inspection import first_blocks
from biorank.types import Answer, Hit

if TYPE_CHECKING:
    from biorank.models.cross_encoder import CrossEncoder, Precision
    from biorank.retrieval.searcher import Searcher
    from biorank.store.record import IndexRecord

DEFAULT_DEPTH = 20
"""How many first-stage hits are reranked by default (see ``benchmarks/reranker_speed.py``)."""
DEFAULT_LENGTH = DEFAULT_MAX_LENGTH
"""Word pieces of query + title + abstract the cross-encoder reads by default: 256, what the shipped one was
trained with. 83% of SciFact's and 85% of BioASQ's candidates are longer; reading up to 512 (86% then whole)
scored SciFact dev +0.010 and BioASQ 7B -0.000 (nDCG@10 at w 0.4, neither significant) for 2.5x the time
(20 hits: 1.65 s -> 4.2 s in ONNX Runtime fp32 on 2 cores), so 512 is a choice (``--rerank-length``)."""
DEFAULT_WEIGHT = 0.3
"""The reranker's share of the final score, the first stage's being the rest (see :func:`reorder`), where
``tune-rerank`` stored none for the index and its cross-encoder. 0.3 for the shipped cross-encoder over the bge
hybrid's top 20 (nDCG@10; its card): SciFact dev +0.013, BioASQ 7B +0.009, NFCorpus dev +0.001; 0.4 gained more on
SciFact (+0.019) and lost on NFCorpus (-0.006), 0.5 lost 0.019 there: the best weight depends on the collection."""


class RerankerError(BiorankError):
    """The index's own reranker is no longer on this machine, or a document to rerank has no text."""


def document_text(title: str, abstract: str) -> str:
    """What the reranker reads of a document: title and abstract, as Ma et al. and BEIR give them."""
    return f"{title} {abstract}".strip()


def reorder(hits: Sequence[Hit], scores: Sequence[float], weight: float = 1.0) -> list[Hit]:
    """Hits with the first ``len(scores)`` reordered by the reranker, the rest after them unchanged.

    With ``weight`` 1 the order is the reranker's alone (Ma et al., Hofstätter et al.); below 1 it is
    ``weight · r + (1 - weight) · f`` of the reranker's and the first stage's scores, each min-max normalised
    over the reranked hits, so that neither scale dominates. Equal scores keep their first-stage order, so
    ties never depend on anything else. The hits below the reranked depth keep their order and get scores
    under the lowest reranked one, so a run file written from the scores sorts exactly as the list does.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the reranker's weight must be between 0 and 1, not {weight}")
    depth = len(scores)
    final = list(scores)
    if weight < 1.0:
        first = min_max([h.score for h in hits[:depth]])
        final = [weight * r + (1.0 - weight) * f for r, f in zip(min_max(scores), first, strict=True)]
    return place(hits, final, rerank=list(scores))


def place(hits: Sequence[Hit], final: Sequence[float], **parts: Sequence[float]) -> list[Hit]:
    """The hits with the first ``len(final)`` ordered and scored by ``final`` (equal scores keep their order)
    and the rest after them in their order, scored below the lowest, so a run file written from the scores
    sorts exactly as the list does. ``parts`` are score parts to set on the top hits, one value per hit."""
    depth = len(final)
    top = [replace(hits[i], rank=rank, score=float(final[i]), **{name: values[i] for name, values in parts.items()})
           for rank, i in enumerate(rerank_order(final), 1)]
    floor = min((float(f) for f in final), default=0.0) - 1.0
    tail = [replace(hit, rank=rank, score=floor - offset)
            for offset, (rank, hit) in enumerate(enumerate(hits[depth:], depth + 1))]
    return top + tail


def rerank_order(scores: Sequence[float]) -> list[int]:
    """Positions by descending score; equal scores keep their first-stage order."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


class Reranker:
    """The rerank stage of one index: reads the top ``depth`` hits' texts and reorders them by the cross-encoder,
    mixed with the first stage (see :func:`reorder`).

    >>> Reranker.for_index(searcher).rerank("vitamin D and fractures", hits)  # doctest: +SKIP
    """

    name = "rerank"

    def __init__(self, cross_encoder: CrossEncoder, client: Any, index: str, *, depth: int = DEFAULT_DEPTH,
                 weight: float = DEFAULT_WEIGHT) -> None:
        if depth < 1:
            raise RerankerError(f"the rerank depth must be at least 1, not {depth}")
        if not 0.0 <= weight <= 1.0:
            raise RerankerError(f"the reranker's weight must be between 0 and 1, not {weight}")
        self.cross_encoder = cross_encoder
        self.client = client
        self.index = index
        self.depth = depth
        self.weight = weight

    @classmethod
    def for_index(cls, searcher: Searcher, model: CrossEncoder | str | Path | None = None, *,
                  precision: Precision = "auto", depth: int = DEFAULT_DEPTH, weight: float | None = None,
                  length: int = DEFAULT_LENGTH) -> Reranker:
        """The rerank stage of ``searcher``'s index, its cross-encoder and weight chosen from the index's record.

        Args:
            searcher: the first stage's searcher (its client, index and record).
            model: a cross-encoder loaded already (shared; read at ``length`` without loading it again), a folder
                or a hub name; None takes the index's own, else the shipped one (:func:`choose_cross_encoder`).
            precision: the backend of a cross-encoder loaded here.
            depth: how many of the first stage's hits are reordered.
            weight: the cross-encoder's share of the final score; None takes the one ``tune-rerank`` stored for the
                index and that cross-encoder, else :data:`DEFAULT_WEIGHT` (:func:`index_weight`).
            length: word pieces of each (query, title + abstract) pair the cross-encoder reads.

        Returns:
            The stage, its model loaded.

        Example:
            >>> Reranker.for_index(searcher, depth=30).rerank("vitamin D and fractures", hits)  # doctest: +SKIP
        """
        cross_encoder = choose_cross_encoder(searcher.record, model, precision=precision, max_length=length)
        if weight is None:
            weight = index_weight(searcher.record, cross_encoder)
        return cls(cross_encoder, searcher.client, searcher.index, depth=depth, weight=weight)

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """The same hits, the top ``depth`` reordered."""
        return self.rerank_many({"q": query}, {"q": hits})["q"]

    def rerank_many(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]]) -> dict[str, list[Hit]]:
        """Every query's hits with its top ``depth`` reordered; the texts of all of them are read in one request."""
        scores = self.score_many(queries, hits)
        return {qid: reorder(ranked, scores[qid], self.weight) for qid, ranked in hits.items()}

    def score_many(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]]) -> dict[str, list[float]]:
        """The cross-encoder's score of each query's top ``depth`` hits, in their order, before any mixing."""
        texts = fetch_texts(self.client, self.index, [h.id for ranked in hits.values() for h in ranked[: self.depth]])
        scores = {}
        for qid, ranked in hits.items():
            top = list(ranked[: self.depth])
            missing = [h.id for h in top if h.id not in texts]
            if missing:
                raise RerankerError(f"no text to rerank for documents {', '.join(missing[:5])}")
            scores[qid] = [float(s) for s in self.cross_encoder.score(queries[qid], [texts[h.id] for h in top])]
        return scores

    def run(self, answers: Sequence[Answer], depth: int) -> None:
        """The pipeline's call: each answer's hits reranked in place (the top :attr:`depth` of the ``depth`` the
        first stage found)."""
        reranked = self.rerank_many({a.query_id: a.query for a in answers}, {a.query_id: a.hits for a in answers})
        for answer in answers:
            answer.hits = reranked[answer.query_id]


def index_reranker(record: IndexRecord) -> str:
    """The reranker an index was given by ``biorank train-reranker``, else the one shipped with biorank; a clear
    error when the index's own is no longer on this machine (falling back then would change results silently)."""
    model, index = record.reranker, record.index
    if not model:
        return SHIPPED_RERANKER
    if not Path(model).is_dir():
        raise RerankerError(f"the reranker of index {index!r} is not on this machine: {model} does not exist; "
                            f"train it again, or name one with --reranker (e.g. {SHIPPED_RERANKER}, the shipped one)")
    return model


def choose_cross_encoder(record: IndexRecord, model: CrossEncoder | str | Path | None = None, *,
                         precision: Precision = "auto", max_length: int = DEFAULT_LENGTH,
                         batch_size: int | None = None) -> CrossEncoder:
    """The one place that chooses a cross-encoder: for the rerank stage (:meth:`Reranker.for_index`, and so the
    pipeline) and for the snippets' relevance perspective
    (:func:`~biorank.stages.snippets.sentence_reranker`), so every path reads the same model.

    Args:
        record: the index's record, which may name a cross-encoder of its own (``biorank train-reranker``).
        model: a cross-encoder loaded already, a folder or a hub name; None takes the index's own, else the shipped
            one (:func:`index_reranker`).
        precision: the backend of a cross-encoder loaded here.
        max_length: the word pieces of each pair it reads; a loaded one is read at this length without loading
            it again.
        batch_size: pairs per batch; None keeps a loaded one's, or the model's default.

    Returns:
        The cross-encoder.

    Example:
        >>> choose_cross_encoder(searcher.record, max_length=128).model_name  # doctest: +SKIP
    """
    from biorank.models.cross_encoder import CrossEncoder

    if isinstance(model, CrossEncoder):
        if model.max_length == max_length and batch_size in (None, model.batch_size):
            return model
        # A shared model read at another length: the same weights, nothing loaded again.
        return model.resized(max_length=max_length, batch_size=batch_size or model.batch_size)
    shape = {"batch_size": batch_size} if batch_size is not None else {}
    return CrossEncoder(str(model) if model else index_reranker(record), precision=precision, max_length=max_length,
                        **shape)


def index_weight(record: IndexRecord, cross_encoder: CrossEncoder | str) -> float:
    """The weight ``tune-rerank`` stored for the index and ``cross_encoder`` (or its identity), else
    :data:`DEFAULT_WEIGHT`: a weight tuned for another cross-encoder says nothing about this one's scores. The
    identity (a digest of the model's files) is computed only when the index has a tuned weight to match."""
    tuned = record.rerank_tuning
    if not tuned:
        return DEFAULT_WEIGHT
    identity = cross_encoder if isinstance(cross_encoder, str) else cross_encoder.model_name
    return float(tuned["weight"]) if tuned.get("reranker") == identity else DEFAULT_WEIGHT


def fetch_texts(client: Any, index: str, ids: Sequence[str]) -> dict[str, str]:
    """Title + abstract of each document, read from its first block (which holds the whole document)."""
    sources = first_blocks(client, index, ids, ("title", "abstract"))
    return {doc_id: document_text(s.get("title", ""), s.get("abstract", "")) for doc_id, s in sources.items()}
