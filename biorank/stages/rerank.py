"""The rerank stage: the cross-encoder (:class:`~biorank.models.cross_encoder.CrossEncoder`) reorders the top
``depth`` hits of the first stage (Ma et al. §5.1, Hofstätter et al. §2.2), mixed with the first stage's score.
Several cross-encoders named together (``--reranker A,B``) score as one :class:`Ensemble` (Hofstätter et al.,
Table 2, line 12).
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
    import numpy as np

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


ENSEMBLE_SEPARATOR = ","
"""Between the members of an ensemble wherever a reranker is named: ``--reranker A,B`` and the index's record."""
ENSEMBLE_RULES = ("min-max", "mean-logit")
"""How an ensemble combines its members' scores of one query's texts: the mean of each member's scores min-max
normalised over those texts, or the mean of the raw scores (logits)."""
DEFAULT_RULE = "min-max"
"""The rule ``--reranker A,B`` uses (see ``benchmarks/studies/ensembles.py`` and docs/measurements/reranking.md):
min-max needs no two members to share a scale, which a model trained from another base (a fresh head) does not."""


class RerankerError(BiorankError):
    """The index's own reranker is no longer on this machine, a member of an ensemble cannot be loaded, or a
    document to rerank has no text."""


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
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the reranker's weight must be between 0 and 1, not {weight}")
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


def combine(members: Sequence[Sequence[float]], rule: str = DEFAULT_RULE) -> list[float]:
    """An ensemble's score of each of one query's texts from its members' scores of them.

    Args:
        members: one row per member, each one score per text, the texts in the same order.
        rule: ``min-max`` (each row scaled to [0, 1] over the query's texts, then the mean; a member that cannot
            tell the texts apart counts 1 for each, so it moves none) or ``mean-logit`` (the mean of the raw
            scores), one of :data:`ENSEMBLE_RULES`.

    Returns:
        One score per text.

    Example:
        >>> combine([[2.0, 0.0, -1.0], [0.5, 1.5, 1.0]])
        [0.5, 0.6666666666666666, 0.25]
    """
    if rule not in ENSEMBLE_RULES:
        raise ValueError(f"an ensemble's rule must be one of {', '.join(ENSEMBLE_RULES)}, not {rule!r}")
    rows = [min_max(row) for row in members] if rule == "min-max" else [[float(v) for v in row] for row in members]
    return [sum(column) / len(column) for column in zip(*rows, strict=True)]


def ensemble_members(spec: str | Path) -> list[str]:
    """The models of a reranker as named: one, or an ensemble's members (``A,B``), blanks ignored."""
    return [name.strip() for name in str(spec).split(ENSEMBLE_SEPARATOR) if name.strip()]


class Ensemble:
    """Cross-encoders scoring the same (query, text) pairs as one (Hofstätter et al.'s ensemble of BERT_CAT models):
    each member scores every batch the rerank or snippet stage gives it, and :func:`combine` makes one score of
    theirs per text, grouped by query. It reads as a :class:`~biorank.models.cross_encoder.CrossEncoder` does
    (``score``, ``score_pairs``, ``resized``, ``model_name``), so every stage and command takes it where it takes
    one; :meth:`member_scores` gives each member's own.

    >>> Ensemble.load(["biorank-reranker", "models/reranker-minilm"]).score("vitamin D", texts)  # doctest: +SKIP
    """

    def __init__(self, members: Sequence[CrossEncoder], rule: str = DEFAULT_RULE) -> None:
        if len(members) < 2:
            raise ValueError("an ensemble has at least two members")
        if rule not in ENSEMBLE_RULES:
            raise ValueError(f"an ensemble's rule must be one of {', '.join(ENSEMBLE_RULES)}, not {rule!r}")
        self.members = list(members)
        self.rule = rule

    @classmethod
    def load(cls, names: Sequence[str], *, precision: Precision = "auto", max_length: int = DEFAULT_LENGTH,
             batch_size: int | None = None, rule: str = DEFAULT_RULE, device: str = "auto") -> Ensemble:
        """The ensemble of the cross-encoders ``names``, each loaded once (a name given twice is one model).

        Args:
            names: the members, each what ``--reranker`` takes alone (the shipped ``biorank-reranker``, a folder of
                ``train-reranker``, a hub name).
            precision: the backend of every member.
            max_length: the word pieces of each pair the members read.
            batch_size: pairs per batch; None takes each model's default.
            rule: how their scores are combined (:func:`combine`).
            device: where every member runs (``auto``, ``cpu``, ``cuda``, ``cuda:N``).

        Returns:
            The ensemble, every member loaded.

        Raises:
            RerankerError: one line naming the first member that is missing or cannot be loaded; a folder that is
                not there is found before any member is loaded.

        Example:
            >>> Ensemble.load(["biorank-reranker", "models/reranker-minilm"], max_length=256)  # doctest: +SKIP
        """
        from biorank.models.cross_encoder import CrossEncoder

        spec = ENSEMBLE_SEPARATOR.join(names)
        for name in names:
            folder = Path(name).expanduser()
            if name == SHIPPED_RERANKER or not _looks_like_a_path(name):
                continue
            if not folder.exists():
                raise RerankerError(f"reranker {name!r} of the ensemble {spec!r} does not exist")
            if not (folder / "config.json").is_file():
                raise RerankerError(f"reranker {name!r} of the ensemble {spec!r} is not a model folder (it has no "
                                    f"config.json; train-reranker writes one)")
        shape = {"batch_size": batch_size} if batch_size is not None else {}
        loaded: dict[str, CrossEncoder] = {}
        for name in names:
            if name in loaded:
                continue
            try:
                # A folder by its absolute path: the index's record may store the ensemble (tune-rerank).
                loaded[name] = CrossEncoder(str(Path(name).expanduser().resolve()) if _looks_like_a_path(name)
                                            else name, precision=precision, max_length=max_length, device=device,
                                            **shape)
            except (BiorankError, OSError, ValueError) as e:
                first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise RerankerError(f"reranker {name!r} of the ensemble {spec!r} cannot be loaded: {first_line}"
                                    ) from None
        return cls([loaded[name] for name in names], rule)

    @property
    def max_length(self) -> int:
        """The word pieces of each pair every member reads."""
        return self.members[0].max_length

    @property
    def batch_size(self) -> int:
        """Pairs per batch, the first member's (members loaded together share it)."""
        return self.members[0].batch_size

    @property
    def precision(self) -> str:
        """The first member's precision (members loaded together share it)."""
        return self.members[0].precision

    @property
    def source(self) -> str:
        """What loads it again, as ``--reranker`` and the index's record name it: the members' sources."""
        return ENSEMBLE_SEPARATOR.join(m.source for m in self.members)

    @property
    def model_name(self) -> str:
        """A stable identifier: the rule and each member's (a weight tuned for it holds for it alone)."""
        return f"{self.rule}({ENSEMBLE_SEPARATOR.join(m.model_name for m in self.members)})"

    def resized(self, *, max_length: int, batch_size: int) -> Ensemble:
        """The same members in memory, read at another length (sentences): nothing is loaded again."""
        resized: dict[int, CrossEncoder] = {}
        for member in self.members:
            if id(member) not in resized:
                resized[id(member)] = member.resized(max_length=max_length, batch_size=batch_size)
        return Ensemble([resized[id(m)] for m in self.members], self.rule)

    def member_scores(self, pairs: Sequence[tuple[str, str]]) -> list[np.ndarray]:
        """Each member's score of each pair (one array per member, in pair order); a member named twice scores
        once."""
        scored: dict[int, np.ndarray] = {}
        for member in self.members:
            if id(member) not in scored:
                scored[id(member)] = member.score_pairs(pairs)
        return [scored[id(m)] for m in self.members]

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One ensemble score per text for ``query``, in input order; higher is more relevant."""
        return self.score_pairs([(query, text) for text in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One ensemble score per (query, text) pair, in input order, combined over the pairs of each query."""
        return self.combined(pairs, self.member_scores(pairs))

    def combined(self, pairs: Sequence[tuple[str, str]], members: Sequence[Sequence[float]]) -> np.ndarray:
        """The members' scores of ``pairs`` combined by :attr:`rule`, each query's pairs apart (min-max scales
        over one query's texts)."""
        import numpy as np

        by_query: dict[str, list[int]] = {}
        for i, (query, _) in enumerate(pairs):
            by_query.setdefault(query, []).append(i)
        out = np.empty(len(pairs), dtype=np.float64)
        for at in by_query.values():
            out[at] = combine([[row[i] for i in at] for row in members], self.rule)
        return out


def _looks_like_a_path(name: str) -> bool:
    """Whether a reranker's name is a folder rather than a hub name (``owner/model``): a hub name never starts
    with ``/``, ``.`` or ``~`` nor has more than one ``/``."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or Path(name).exists()


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
        if not 0.0 <= weight <= 1.0:
            raise RerankerError(f"the reranker's weight must be between 0 and 1, not {weight}")
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
        reranked = self.rerank_many({a.query_id: a.query for a in answers}, {a.query_id: a.hits for a in answers})
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
