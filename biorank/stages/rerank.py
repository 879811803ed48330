"""The rerank stage: the cross-encoder (:class:`~biorank.models.cross_encoder.CrossEncoder`) reorders the top
``depth`` hits of the first stage (Ma et al. §5.1, Hofstätter et al. §2.2), mixed with the first stage's score.
Several cross-encoders named together (``--reranker A,B``) score as one
:class:`~biorank.models.ensemble.Ensemble`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.models.cross_encoder import DEFAULT_MAX_LENGTH
from biorank.models.ensemble import Ensemble, combine, ensemble_members
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.scores import min_max
from biorank.store.inspection import first_blocks
from biorank.types import Answer, Hit

if TYPE_CHECKING:

    from biorank.models.cross_encoder import CrossEncoder
    from biorank.models.placement import Precision
    from biorank.retrieval.searcher import Searcher
    from biorank.store.record import IndexRecord

DEFAULT_DEPTH = 20
"""How many first-stage hits are reranked by default (see ``benchmarks/reranker_speed.py``)."""
DEFAULT_LENGTH = DEFAULT_MAX_LENGTH
"""Word pieces of query + title + abstract the cross-encoder reads by default: 256, what the shipped one was
trained with. Most candidates are longer, but reading up to 512 gained nothing significant for a multiple of the
time, so 512 is a choice (``--rerank-length``; ``benchmarks/records/eval-rerank-length.json``;
docs/measurements/reranking.md, "How much of an abstract it reads")."""
DEFAULT_WEIGHT = 0.3
"""The reranker's share of the final score, the first stage's being the rest (see :func:`reorder`), where
``tune-rerank`` stored none for the index and its cross-encoder. 0.3 is the weight at which the shipped
cross-encoder gains over the bge hybrid on every development collection; larger weights gain more on some and
lose on others, as the best weight depends on the collection (``benchmarks/records/eval-rerank-weight.json``;
docs/measurements/reranking.md, "The rerank weight")."""

WEIGHT_RANGE: tuple[float, float] = (0, 1)
"""The weights the reranker may have: 0 keeps the first stage's order, 1 takes the reranker's alone."""


class RerankerError(BiorankError):
    """The index's own reranker is no longer on this machine, a member of an ensemble cannot be loaded, or a
    document to rerank has no text."""


def check_weight(weight: float, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` where ``weight`` lies outside :data:`WEIGHT_RANGE`, as each caller reports its own errors."""
    low, high = WEIGHT_RANGE
    if not low <= weight <= high:
        raise error(f"the reranker's weight must be between {low:g} and {high:g}, not {weight}")


def document_text(title: str, abstract: str) -> str:
    """What the reranker reads of a document: title and abstract, as Ma et al. and BEIR give them."""
    return f"{title} {abstract}".strip()


def reorder(hits: Sequence[Hit], scores: Sequence[float], weight: float = 1.0, *,
            members: Sequence[Sequence[float]] | None = None) -> list[Hit]:
    """Hits with the first ``len(scores)`` reordered by the reranker, the rest after them unchanged.

    With ``weight`` 1 the order is the reranker's alone (Ma et al., Hofstätter et al.); below 1 it is
    ``weight · r + (1 - weight) · f`` of the reranker's and the first stage's scores, each min-max normalised
    over the reranked hits, so that neither scale dominates. Equal scores keep their first-stage order, so
    ties never depend on anything else. The hits below the reranked depth keep their order and get scores
    under the lowest reranked one, so a run file written from the scores sorts exactly as the list does.
    ``members`` (an ensemble's: one row of scores per member) are kept on each reranked hit as
    ``rerank_members``.
    """
    check_weight(weight)
    depth = len(scores)
    final = list(scores)
    if weight < 1.0:
        first = min_max([h.score for h in hits[:depth]])
        final = [weight * r + (1.0 - weight) * f for r, f in zip(min_max(scores), first, strict=True)]
    parts: dict[str, Sequence[Any]] = {"rerank": list(scores)}
    if members is not None:
        parts["rerank_members"] = [tuple(float(row[i]) for row in members) for i in range(depth)]
    return place(hits, final, **parts)


def place(hits: Sequence[Hit], final: Sequence[float], **parts: Sequence[Any]) -> list[Hit]:
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

    def __init__(self, cross_encoder: CrossEncoder | Ensemble, client: Any, index: str, *, depth: int = DEFAULT_DEPTH,
                 weight: float = DEFAULT_WEIGHT) -> None:
        if depth < 1:
            raise RerankerError(f"the rerank depth must be at least 1, not {depth}")
        check_weight(weight, RerankerError)
        self.cross_encoder = cross_encoder
        self.client = client
        self.index = index
        self.depth = depth
        self.weight = weight

    @classmethod
    def for_index(cls, searcher: Searcher, model: CrossEncoder | Ensemble | str | Path | None = None, *,
                  precision: Precision = "auto", depth: int = DEFAULT_DEPTH, weight: float | None = None,
                  length: int = DEFAULT_LENGTH, device: str = "auto") -> Reranker:
        """The rerank stage of ``searcher``'s index, its cross-encoder and weight chosen from the index's record.

        Args:
            searcher: the first stage's searcher (its client, index and record).
            model: a cross-encoder or ensemble loaded already (shared; read at ``length`` without loading it
                again), a folder or a hub name, or several separated by commas (an :class:`Ensemble`); None takes
                the index's own, else the shipped one (:func:`choose_cross_encoder`).
            precision: the backend of a cross-encoder loaded here.
            depth: how many of the first stage's hits are reordered.
            weight: the cross-encoder's share of the final score; None takes the one ``tune-rerank`` stored for the
                index and that cross-encoder, else :data:`DEFAULT_WEIGHT` (:func:`index_weight`).
            length: word pieces of each (query, title + abstract) pair the cross-encoder reads.
            device: where a cross-encoder loaded here runs (``auto``, ``cpu``, ``cuda``, ``cuda:N``).

        Returns:
            The stage, its model loaded.

        Example:
            >>> Reranker.for_index(searcher, depth=30).rerank("vitamin D and fractures", hits)  # doctest: +SKIP
        """
        cross_encoder = choose_cross_encoder(searcher.record, model, precision=precision, max_length=length,
                                             device=device)
        if weight is None:
            weight = index_weight(searcher.record, cross_encoder)
        return cls(cross_encoder, searcher.client, searcher.index, depth=depth, weight=weight)

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """The same hits, the top ``depth`` reordered."""
        return self.rerank_many({"q": query}, {"q": hits})["q"]

    def rerank_many(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]]) -> dict[str, list[Hit]]:
        """Every query's hits with its top ``depth`` reordered; the texts of all of them are read in one request.
        An ensemble's hits keep each member's score (``rerank_members``)."""
        scores, members = self._scored(queries, hits)
        return {qid: reorder(ranked, scores[qid], self.weight, members=members.get(qid))
                for qid, ranked in hits.items()}

    def score_many(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]]) -> dict[str, list[float]]:
        """The cross-encoder's (or ensemble's) score of each query's top ``depth`` hits, in their order, before any
        mixing."""
        return self._scored(queries, hits)[0]

    def _scored(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]]
                ) -> tuple[dict[str, list[float]], dict[str, list[list[float]]]]:
        """The scores of each query's top ``depth`` hits, and an ensemble's members' scores (none for one model):
        each member scores the same batches of a query's pairs."""
        texts = fetch_texts(self.client, self.index, [h.id for ranked in hits.values() for h in ranked[: self.depth]])
        scores: dict[str, list[float]] = {}
        members: dict[str, list[list[float]]] = {}
        for qid, ranked in hits.items():
            top = list(ranked[: self.depth])
            missing = [h.id for h in top if h.id not in texts]
            if missing:
                raise RerankerError(f"no text to rerank for documents {', '.join(missing[:5])}")
            pairs = [(queries[qid], texts[h.id]) for h in top]
            if isinstance(self.cross_encoder, Ensemble):
                members[qid] = [[float(v) for v in row] for row in self.cross_encoder.member_scores(pairs)]
                scores[qid] = combine(members[qid], self.cross_encoder.rule)
            else:
                scores[qid] = [float(v) for v in self.cross_encoder.score_pairs(pairs)]
        return scores, members

    def run(self, answers: Sequence[Answer], depth: int) -> None:
        """The pipeline's call: each answer's hits reranked in place (the top :attr:`depth` of the ``depth`` the
        first stage found)."""
        reranked = self.rerank_many({a.query_id: a.words for a in answers}, {a.query_id: a.hits for a in answers})
        for answer in answers:
            answer.hits = reranked[answer.query_id]


def index_reranker(record: IndexRecord) -> str:
    """The reranker an index was given (by ``biorank train-reranker``, or an ensemble by ``tune-rerank``), else the
    one shipped with biorank; a clear error when the index's own, or a member of its ensemble, is no longer on this
    machine (falling back then would change results silently)."""
    model, index = record.reranker, record.index
    if not model:
        return SHIPPED_RERANKER
    for member in ensemble_members(model):
        if member != SHIPPED_RERANKER and not Path(member).is_dir():
            raise RerankerError(f"the reranker of index {index!r} is not on this machine: {member} does not exist; "
                                f"train it again, or name one with --reranker (e.g. {SHIPPED_RERANKER}, the shipped "
                                f"one)")
    return model


def choose_cross_encoder(record: IndexRecord, model: CrossEncoder | Ensemble | str | Path | None = None, *,
                         precision: Precision = "auto", max_length: int = DEFAULT_LENGTH,
                         batch_size: int | None = None, device: str = "auto") -> CrossEncoder | Ensemble:
    """The one place that chooses a cross-encoder: for the rerank stage (:meth:`Reranker.for_index`, and so the
    pipeline) and for the snippets' relevance perspective
    (:func:`~biorank.stages.snippets.sentence_reranker`), so every path reads the same model.

    Args:
        record: the index's record, which may name a cross-encoder of its own (``biorank train-reranker``).
        model: a cross-encoder or ensemble loaded already, a folder or a hub name, or several of them separated
            by commas (an :class:`Ensemble`); None takes the index's own, else the shipped one
            (:func:`index_reranker`).
        precision: the backend of a cross-encoder loaded here.
        max_length: the word pieces of each pair it reads; a loaded one is read at this length without loading
            it again.
        batch_size: pairs per batch; None keeps a loaded one's, or the model's default.
        device: where a cross-encoder loaded here runs (a loaded one stays where it is).

    Returns:
        The cross-encoder, or the ensemble of those named.

    Example:
        >>> choose_cross_encoder(searcher.record, max_length=128).model_name  # doctest: +SKIP
    """
    from biorank.models.cross_encoder import CrossEncoder

    if isinstance(model, CrossEncoder | Ensemble):
        if model.max_length == max_length and batch_size in (None, model.batch_size):
            return model
        # A shared model read at another length: the same weights, nothing loaded again.
        return model.resized(max_length=max_length, batch_size=batch_size or model.batch_size)
    names = ensemble_members(model or index_reranker(record))
    if not names:
        raise RerankerError(f"no reranker in {str(model)!r}: name one, or several separated by commas")
    if len(names) > 1:
        return Ensemble.load(names, precision=precision, max_length=max_length, batch_size=batch_size,
                             device=device)
    shape = {"batch_size": batch_size} if batch_size is not None else {}
    return CrossEncoder(names[0], precision=precision, max_length=max_length, device=device, **shape)


def index_weight(record: IndexRecord, cross_encoder: CrossEncoder | Ensemble | str) -> float:
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
