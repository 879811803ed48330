"""Snippets: the sentences of a query's top documents that best answer it, scored from five perspectives
(Rawal & Baral §3-4, and Rosso-Mateus et al.'s deep-metric scorer) and located by BioASQ offsets.

For the top documents of a query (after reranking where the system reranks), every sentence of each document
(from the sentences index) gets five values, each normalised to [0, 1] within the query (see :func:`query_min_max`):

1. relevance: the cross-encoder reranker on (query, sentence);
2. similarity: cosine of the query's and the sentence's vectors (the index's encoder; OpenSearch computes it
   over the stored sentence vectors, which ``_source`` does not carry, or, in an index that stores none, the
   encoder encodes the candidate sentences at query time: ``sentence_vectors`` in the index record);
3. lexical: BM25 of the sentence (the sentences index's ``text``);
4. metric: the deep-metric sentence scorer (:mod:`biorank.models.metric`: a small CNN over the pair's word-piece
   similarities, milliseconds for a query's sentences where the cross-encoder takes seconds);
5. document: S_doc of its document.

``S_sent = a1·relevance + a2·similarity + a3·lexical + a4·metric + a5·S_doc`` and
``S_doc = b1·BM25(document) + b2·s(1) + b3·s(2) + b4·s(3)``, where s(i) is the document's i-th best sentence
score over the first four perspectives: a document's score cannot contain itself, and within one document
the a5 term is the same for every sentence, so it only decides between sentences of different documents.
A system can also reorder its top documents by S_doc. The weights are tuned by
:mod:`biorank.tuning.snippet_weights` and stored with the index (``snippet_weights`` in its biorank record).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from biorank.config import RESULT_WINDOW
from biorank.errors import BiorankError
from biorank.retrieval.clauses import dense_script_field
from biorank.scores import min_max
from biorank.stages.marks import highlight_request, readable, tagged_spans
from biorank.store.failures import reason
from biorank.store.mappings.sentences import BYTE_SCALE, quantise
from biorank.store.msearch import msearch
from biorank.types import PERSPECTIVES, Advance, Answer, Hit, Sentence, Snippet

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from biorank.models.cross_encoder import CrossEncoder
    from biorank.models.metric import MetricScorer
    from biorank.models.placement import Precision
    from biorank.retrieval.searcher import Searcher
    from biorank.store.record import IndexRecord

DOCUMENT_PARTS = ("bm25", "s1", "s2", "s3")
"""The document weights b1 … b4, in this order."""
WEIGHT_VARIANTS = ("tuned", "equal", *PERSPECTIVES)
"""How a system names its weights: the index's tuned ones (:data:`UNTUNED_WEIGHTS` until tuned), equal ones, or one
perspective."""
SNIPPETS_PER_QUERY = 10
"""BioASQ takes at most 10 snippets per question."""
DOCUMENTS_PER_QUERY = 10
"""Sentences come from the documents a BioASQ answer lists: the top 10."""
SENTENCE_MAX_LENGTH = 128
"""Word pieces of query + sentence for the cross-encoder. Every batch is padded to this length (the reranker's
fixed shape), so it is what a sentence pair costs: the documents' 256 would double it for padding. 128 cuts
hardly any of SciFact's title and abstract sentences behind a claim of median length, or of the 95th percentile
(docs/guides/rerank-snippets.md); a cut sentence keeps its start."""
SENTENCE_BATCH = 16
MAX_SENTENCES_PER_DOCUMENT = 500
_SECTIONS = {"title": 0, "abstract": 1}


class SnippetError(BiorankError):
    """Snippets cannot be scored as asked (no sentences index, weights that do not fit, no cross-encoder)."""


Weights = tuple[float, ...]


@dataclass(frozen=True)
class SnippetWeights:
    """a1 … a5 (``sentence``, in :data:`PERSPECTIVES` order) and b1 … b4 (``document``, :data:`DOCUMENT_PARTS`).

    Only ratios matter for a ranking; the tuner searches each weight in [0, 1] and starts from all equal.
    """

    sentence: Weights = (1.0,) * len(PERSPECTIVES)
    document: Weights = (1.0,) * len(DOCUMENT_PARTS)

    def __post_init__(self) -> None:
        for group, names in (("sentence", PERSPECTIVES), ("document", DOCUMENT_PARTS)):
            values = getattr(self, group)
            if len(values) != len(names) or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                                                    for v in values):
                raise SnippetError(f"{group} weights must be {len(names)} numbers >= 0 ({', '.join(names)}), "
                                   f"not {values!r}")
            object.__setattr__(self, group, tuple(float(v) for v in values))

    @classmethod
    def single(cls, perspective: str) -> SnippetWeights:
        """One perspective alone: (1, 0, 0, 0) and its like, with equal document weights."""
        if perspective not in PERSPECTIVES:
            raise SnippetError(f"unknown perspective {perspective!r}; choose one of {', '.join(PERSPECTIVES)}")
        return cls(sentence=tuple(float(p == perspective) for p in PERSPECTIVES))  # type: ignore[arg-type]

    @classmethod
    def for_index(cls, record: IndexRecord) -> SnippetWeights:
        """The weights ``biorank tune-snippets`` stored with the index, else :data:`UNTUNED_WEIGHTS`."""
        return cls.from_dict(record.snippet_weights) if record.snippet_weights else UNTUNED_WEIGHTS

    @classmethod
    def named(cls, variant: str, record: IndexRecord) -> SnippetWeights:
        """The weights of a :data:`WEIGHT_VARIANTS` name for the index of ``record``."""
        if variant == "tuned":
            return cls.for_index(record)
        return cls() if variant == "equal" else cls.single(variant)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SnippetWeights:
        try:
            # An index tuned before the metric perspective existed scores without it, as it was tuned.
            sentence = {"metric": 0.0, **data["sentence"]}
            return cls(sentence=tuple(float(sentence[p]) for p in PERSPECTIVES),
                       document=tuple(float(data["document"][p]) for p in DOCUMENT_PARTS))
        except (KeyError, TypeError, ValueError) as e:
            raise SnippetError(f"stored snippet weights are incomplete ({e!r}); run biorank tune-snippets "
                               "again") from None

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {"sentence": dict(zip(PERSPECTIVES, self.sentence, strict=True)),
                "document": dict(zip(DOCUMENT_PARTS, self.document, strict=True))}

    def with_group(self, group: str, values: Sequence[float]) -> SnippetWeights:
        """These weights with the ``sentence`` or ``document`` group replaced."""
        return replace(self, **{group: tuple(values)})

    def uses(self, perspective: str) -> bool:
        """Whether the perspective counts at all: only a1 … a4 bring a sentence perspective into the scores."""
        return self.sentence[PERSPECTIVES.index(perspective)] > 0

    def describe(self) -> str:
        a = " ".join(f"{p} {w:.4g}" for p, w in zip(PERSPECTIVES, self.sentence, strict=True))
        b = " ".join(f"{p} {w:.4g}" for p, w in zip(DOCUMENT_PARTS, self.document, strict=True))
        return f"sentence: {a}; document: {b}"


UNTUNED_WEIGHTS = SnippetWeights(sentence=(0.0, 0.496, 0.304, 0.0, 0.989), document=(0.575, 0.818, 0.005, 0.408))
"""What an index without weights of its own scores with: those ``tune-snippets`` found on SciFact's dev split
(``--perspectives similarity,lexical,document``), not equal weights over all five. On BioASQ questions that
neither they nor the shipped cross-encoder saw they rank snippets better than equal weights, and they leave the
relevance perspective out, which spares the cross-encoder over the top documents' sentences: most of a snippet
query's time (``benchmarks/records/snippet_defaults.json``; docs/measurements/snippets.md, "An index never
tuned"). The metric perspective stays at 0: added to them, or tuned with them, it lost snippet MAP on BioASQ
(``benchmarks/records/snippet_metric.json``)."""


def query_min_max(values: np.ndarray) -> np.ndarray:
    """``values`` scaled to [0, 1] within one query; all equal (or none) gives zeros (:func:`min_max`).

    Why per-query min-max for every perspective: the scores only rank the sentences of one query, so what a
    perspective can contribute is its spread within the query. BM25 has no fixed scale (it grows with the
    query's length and rare terms), cosines of one query crowd into a narrow band, and the cross-encoder's
    logits, trained on whole abstracts, shift with the query; min-max gives each the same [0, 1] range in
    every query, so a weight means the same thing across queries. Measured on the SciFact dev split
    (``biorank tune-snippets``), a sigmoid of the logits instead of min-max did not do better
    (docs/measurements/snippets.md).
    """
    import numpy as np

    return np.asarray(min_max(values, equal=0.0), dtype=np.float64)


@dataclass(eq=False)
class SentenceCandidates:
    """One query's candidate sentences with their raw perspective values: what scoring and tuning need.

    ``sentences`` are grouped by document in ranking order, then title before abstract, then by number;
    ``doc_of[i]`` is the position in ``doc_ids`` of sentence i's document. A perspective that was not
    computed is None and counts 0. Built once from the cluster, scored for any weights without it.
    """

    doc_ids: tuple[str, ...]
    doc_bm25: np.ndarray
    sentences: tuple[Sentence, ...]
    doc_of: np.ndarray
    lexical: np.ndarray
    similarity: np.ndarray | None = None
    relevance: np.ndarray | None = None
    metric: np.ndarray | None = None
    matches: tuple[tuple[tuple[int, int], ...], ...] | None = None

    @cached_property
    def normalised(self) -> np.ndarray:
        """(sentences, 4): relevance, similarity, lexical and metric, each min-max normalised within the query."""
        import numpy as np

        columns = [query_min_max(v) if v is not None else np.zeros(len(self.sentences))
                   for v in (self.relevance, self.similarity, self.lexical, self.metric)]
        return np.stack(columns, axis=1) if self.sentences else np.zeros((0, len(columns)))

    @cached_property
    def doc_bm25_normalised(self) -> np.ndarray:
        return query_min_max(self.doc_bm25)

    @cached_property
    def slots(self) -> np.ndarray:
        """(documents, at least 3) sentence positions of each document, -1 where it has no more."""
        import numpy as np

        counts = np.bincount(self.doc_of, minlength=len(self.doc_ids)) if len(self.doc_of) else np.zeros(
            len(self.doc_ids), dtype=np.int64)
        width = max(3, int(counts.max(initial=0)))
        slots = np.full((len(self.doc_ids), width), -1, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
        for d, (start, count) in enumerate(zip(starts, counts, strict=True)):
            slots[d, :count] = np.arange(start, start + count)
        return slots

    def scores(self, weights: SnippetWeights) -> tuple[np.ndarray, np.ndarray]:
        """(S_sent per sentence, S_doc per document) for ``weights``."""
        import numpy as np

        a, b = weights.sentence, weights.document
        partial = self.normalised @ np.asarray(a[:-1])
        slots = self.slots
        best = np.where(slots >= 0, partial[slots] if partial.size else 0.0, -np.inf)
        # Three largest per row, best first; a document with fewer sentences gets 0 for the ones it lacks.
        top = -np.sort(-best, axis=1)[:, :3]
        top[~np.isfinite(top)] = 0.0
        s_doc = b[0] * self.doc_bm25_normalised + top @ np.asarray(b[1:])
        s_sent = partial + a[-1] * query_min_max(s_doc)[self.doc_of] if len(self.doc_of) else partial
        return s_sent, s_doc

    def ranking(self, weights: SnippetWeights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sentence positions best first, S_sent, S_doc); equal scores keep the candidates' order."""
        import numpy as np

        s_sent, s_doc = self.scores(weights)
        return np.lexsort((np.arange(len(s_sent)), -s_sent)), s_sent, s_doc

    def ranked(self, weights: SnippetWeights) -> list[Snippet]:
        """Every candidate sentence as a snippet, best first under ``weights``: one set of candidates (the
        perspectives computed once) answers for any number of weightings."""
        return _snippets(self, *self.ranking(weights))


@dataclass
class SnippetRun:
    """What scoring the sentences of a set of queries gave."""

    ranked: dict[str, list[Snippet]]
    """Every candidate sentence of each query, best first."""
    hits: dict[str, list[Hit]]
    """The hits, with the top documents reordered by S_doc when the scorer re-scores, else as they came."""
    k: int = SNIPPETS_PER_QUERY

    @property
    def snippets(self) -> dict[str, list[Snippet]]:
        """The ``k`` best sentences of each query: what a BioASQ answer lists."""
        return {q: ranked[: self.k] for q, ranked in self.ranked.items()}

    def of_document(self, qid: str, doc_id: str, n: int = 3) -> list[Snippet]:
        """The ``n`` best sentences of one document for query ``qid``."""
        return [s for s in self.ranked.get(qid, ()) if s.doc_id == doc_id][:n]


def sentence_reranker(record: IndexRecord, model: CrossEncoder | str | Path | None = None, *,
                      precision: Precision = "auto", device: str = "auto") -> CrossEncoder:
    """The cross-encoder of the relevance perspective, at sentence length (:data:`SENTENCE_MAX_LENGTH`), chosen as
    the rerank stage chooses its own (:func:`~biorank.stages.rerank.choose_cross_encoder`).

    Args:
        record: the index's record.
        model: one loaded already (read at sentence length without loading it again), a folder or a hub name;
            None takes the index's trained reranker, else the shipped one.
        precision: the backend of a cross-encoder loaded here.
        device: where a cross-encoder loaded here runs (``auto``, ``cpu``, ``cuda``, ``cuda:N``).

    Returns:
        The cross-encoder, scoring batches of :data:`SENTENCE_BATCH` pairs (more on a GPU).

    Example:
        >>> scorer = SnippetScorer.open(searcher, reranker=sentence_reranker(searcher.record))  # doctest: +SKIP
    """
    from biorank.stages.rerank import choose_cross_encoder

    return choose_cross_encoder(record, model, precision=precision, max_length=SENTENCE_MAX_LENGTH,
                                batch_size=SENTENCE_BATCH, device=device)


class SnippetScorer:
    """Scores the sentences of the top documents of queries from the five perspectives.

    The constructor reads nothing from the cluster; :meth:`open` also makes sure the sentences index is there.

    >>> scorer = SnippetScorer.open(searcher, reranker=sentence_reranker(searcher.record))  # doctest: +SKIP
    >>> snippets = scorer.snippets("vitamin D and fractures", hits)  # doctest: +SKIP
    """

    name = "snippets"

    def __init__(self, searcher: Searcher, *, weights: SnippetWeights | None = None,
                 reranker: CrossEncoder | None = None, rescore: bool = False, depth: int = DOCUMENTS_PER_QUERY,
                 k: int = SNIPPETS_PER_QUERY, highlight: bool = False, metric: MetricScorer | None = None) -> None:
        self.searcher = searcher
        self.client = searcher.client
        self.index = searcher.index
        sentences = searcher.record.sentences_index
        if not sentences:
            raise SnippetError(f"index {self.index!r} has no sentences index: re-index without --no-sentences")
        self.sentences_index = sentences
        self.sentence_vectors = searcher.record.sentence_vectors
        self.weights = weights or SnippetWeights.for_index(searcher.record)
        self.reranker = reranker
        self._metric = metric
        self.rescore = rescore
        self.depth = depth
        self.k = k
        self.highlight = highlight

    @classmethod
    def open(cls, searcher: Searcher, **settings: Any) -> SnippetScorer:
        """The scorer of ``searcher``'s index, once the cluster has said that its sentences index exists (an index
        whose sentences index was deleted is refused here, in one line, not at its first query).

        Args:
            searcher: the first stage's searcher (its client, index and record).
            settings: the constructor's keywords (``weights``, ``reranker``, ``rescore``, ``depth``, ``k``,
                ``highlight``, ``metric``: a sentence scorer other than the shipped one).

        Returns:
            The scorer.

        Example:
            >>> SnippetScorer.open(searcher, weights=SnippetWeights.single("lexical"))  # doctest: +SKIP
        """
        scorer = cls(searcher, **settings)
        if not scorer.client.indices.exists(index=scorer.sentences_index):
            raise SnippetError(f"index {scorer.index!r} has no sentences index: re-index without --no-sentences")
        return scorer

    @property
    def notes(self) -> list[str]:
        """What the scores leave out that the weights ask for, in words for the user."""
        if self.weights.uses("relevance") and self.reranker is None:
            return ["no cross-encoder was given, so snippets are scored without the relevance perspective "
                    "(sentence_reranker gives the index's, or the shipped one)"]
        return []

    @property
    def metric(self) -> MetricScorer:
        """The deep-metric sentence scorer: the one given, else the shipped one, loaded once per process on first
        use (a few MB, ONNX Runtime)."""
        if self._metric is None:
            from biorank.models.metric import shipped_metric_scorer

            self._metric = shipped_metric_scorer()
        return self._metric

    @property
    def needs_encoder(self) -> bool:
        """Whether the scores need query vectors (the similarity perspective)."""
        return self.weights.uses("similarity")

    def snippets(self, query: str, hits: Sequence[Hit]) -> list[Snippet]:
        """Every sentence of the top documents of ``hits`` for ``query``, best first."""
        return self.score_many({"q": query}, {"q": hits}, highlight=self.highlight).ranked["q"]

    def run(self, answers: Sequence[Answer], depth: int) -> None:
        """The pipeline's call: each answer gets its ranked sentences (and its hits re-scored, if asked); the
        sentences come from the top :attr:`depth` documents, whatever the first stage's ``depth``."""
        found = self.score_many({a.query_id: a.words for a in answers}, {a.query_id: a.hits for a in answers},
                                highlight=self.highlight)
        for answer in answers:
            answer.snippets = found.ranked.get(answer.query_id, [])
            answer.hits = found.hits.get(answer.query_id, answer.hits)

    def score_many(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]], *,
                   highlight: bool = False, batch: int = 16, progress: Advance | None = None) -> SnippetRun:
        """Every query's sentences ranked by S_sent, and its hits (re-scored by S_doc if asked)."""
        ranked: dict[str, list[Snippet]] = {}
        rescored: dict[str, list[Hit]] = {}
        perspectives = tuple(p for p in ("relevance", "similarity", "metric") if self.weights.uses(p))
        items = [q for q in queries if q in hits]
        for start in range(0, len(items), batch):
            chunk = {q: queries[q] for q in items[start : start + batch]}
            candidates = self.candidates_many(chunk, hits, perspectives=perspectives, highlight=highlight)
            for qid, c in candidates.items():
                order, s_sent, s_doc = c.ranking(self.weights)
                ranked[qid] = _snippets(c, order, s_sent, s_doc)
                rescored[qid] = rescore_hits(hits[qid], s_doc) if self.rescore else list(hits[qid])
            if progress is not None:
                progress(len(chunk))
        return SnippetRun(ranked, rescored, self.k)

    def collect(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]], *, batch: int = 16,
                perspectives: Sequence[str] = PERSPECTIVES,
                progress: Advance | None = None) -> dict[str, SentenceCandidates]:
        """The ``perspectives`` of every query's sentences, ``batch`` queries at a time: the cache tuning scores."""
        if "relevance" in perspectives and self.reranker is None:
            raise SnippetError("the relevance perspective needs a cross-encoder: give the scorer one "
                               "(sentence_reranker gives the index's, or the shipped one)")
        collected: dict[str, SentenceCandidates] = {}
        items = list(queries)
        for start in range(0, len(items), batch):
            chunk = {q: queries[q] for q in items[start : start + batch]}
            collected |= self.candidates_many(chunk, hits, perspectives=perspectives)
            if progress is not None:
                progress(len(chunk))
        return collected

    def candidates_many(self, queries: Mapping[str, str], hits: Mapping[str, Sequence[Hit]], *,
                        perspectives: Sequence[str] = ("relevance", "similarity"),
                        highlight: bool = False) -> dict[str, SentenceCandidates]:
        """Each query's candidate sentences with raw values of ``perspectives`` (lexical always).

        One ``_msearch`` fetches, per query, the sentences of its top documents with their BM25 (and cosine,
        scored by OpenSearch over the stored vectors) and the documents' BM25; the cross-encoder then reads
        every (query, sentence) pair of the batch, and the metric scorer each query's sentences.
        """
        docs = {q: list(dict.fromkeys(h.id for h in hits.get(q, ())[: self.depth])) for q in queries}
        asked = [q for q in queries if docs[q]]
        vectors: dict[str, list[float]] = {}
        if "similarity" in perspectives and asked:
            from biorank.retrieval.searcher import encode_queries

            vectors = encode_queries(self.searcher.load(), {q: queries[q] for q in asked})
        lines: list[dict] = []
        scales: dict[str, float] = {}
        for q in asked:
            vector = vectors.get(q) if self.sentence_vectors != "none" else None
            if vector is not None and self.sentence_vectors == "byte":
                # The k-NN script compares a byte field only with bytes: the query at its own finest scale, and
                # the product of both scales taken out again, so the value is the cosine as in the other choices.
                scale = 127 / max(max(abs(x) for x in vector), 1e-12)
                vector, scales[q] = quantise(vector, scale), scale * BYTE_SCALE
            # A shard lost mid-search is an error (asked again while the cluster drops a dying node), not
            # silently fewer sentences.
            lines += [{"index": self.sentences_index, "allow_partial_search_results": False},
                      sentences_request(queries[q], docs[q], vector, highlight=highlight),
                      {"index": self.index, "allow_partial_search_results": False},
                      document_bm25_request(queries[q], docs[q])]
        responses = msearch(self.client, lines, refused=lambda _, error: SnippetError(
            f"OpenSearch refused the snippet query: {reason(error)}"))
        found = {q: (responses[2 * i], responses[2 * i + 1]) for i, q in enumerate(asked)}
        stored = self.sentence_vectors != "none"
        candidates = {q: _candidates(docs[q], *found.get(q, (None, None)), similarity=stored and q in vectors,
                                     highlight=queries[q] if highlight else None, scale=scales.get(q, 1.0))
                      for q in queries}
        if not stored and vectors:
            self._encode_similarity(candidates, vectors)
        if "relevance" in perspectives and self.reranker is not None:
            pairs = [(queries[q], s.text) for q in queries for s in candidates[q].sentences]
            logits = self.reranker.score_pairs(pairs)
            start = 0
            for q in queries:
                n = len(candidates[q].sentences)
                candidates[q].relevance = logits[start : start + n]
                start += n
        if "metric" in perspectives:
            for q in queries:
                candidates[q].metric = self.metric.scores(queries[q], [s.text for s in candidates[q].sentences])
        return candidates

    def _encode_similarity(self, candidates: Mapping[str, SentenceCandidates],
                           vectors: Mapping[str, Sequence[float]]) -> None:
        """The similarity of an index that stores no sentence vectors: every candidate sentence of the batch
        encoded now, in one call, by the index's encoder (as indexing would have encoded it)."""
        import numpy as np

        asked = [q for q in vectors if candidates[q].sentences]
        texts = [s.text for q in asked for s in candidates[q].sentences]
        encoded = self.searcher.load().encode(texts) if texts else np.zeros((0, 0))
        start = 0
        for q in asked:
            n = len(candidates[q].sentences)
            candidates[q].similarity = encoded[start : start + n] @ np.asarray(vectors[q], dtype=np.float32)
            start += n


def sentences_request(query: str, doc_ids: Sequence[str], vector: Sequence[float] | None = None, *,
                      highlight: bool = False) -> dict:
    """Every sentence of ``doc_ids``: ``_score`` is its BM25 (0 without a query term), ``similarity`` its cosine.

    The ``match`` is a ``should`` beside a ``filter``, so sentences without a query term are returned too.
    """
    body: dict[str, Any] = {
        "size": min(RESULT_WINDOW, len(doc_ids) * MAX_SENTENCES_PER_DOCUMENT),
        "query": {"bool": {"should": [{"match": {"text": query}}], "filter": [{"terms": {"doc_id": list(doc_ids)}}]}},
        "_source": ["doc_id", "section", "number", "begin", "end", "text"],
    }
    if vector is not None:
        # Unit vectors: the inner product is the cosine.
        body["script_fields"] = {"similarity": dense_script_field(vector)}
    if highlight:
        body["highlight"] = highlight_request("text")
    return body


def document_bm25_request(query: str, doc_ids: Sequence[str]) -> dict:
    """BM25 of each document's ``text`` (title + abstract, on its first block); 0 without a query term."""
    return {"size": len(doc_ids), "_source": ["id"],
            "query": {"bool": {"should": [{"match": {"text": query}}],
                               "filter": [{"terms": {"id": list(doc_ids)}}, {"term": {"block": 0}}]}}}


def _candidates(doc_ids: list[str], sentences: dict | None, documents: dict | None, *, similarity: bool,
                highlight: str | None, scale: float = 1.0) -> SentenceCandidates:
    """A query's candidate sentences from the snippet search's answers; ``highlight`` is the query whose terms
    were tagged (:mod:`biorank.stages.marks` keeps the spans a reader should see), None where none were."""
    import numpy as np

    position = {d: i for i, d in enumerate(doc_ids)}
    rows = []
    for h in (sentences or {}).get("hits", {}).get("hits", []):
        s = h["_source"]
        if s["doc_id"] not in position:
            continue
        sentence = Sentence(s["doc_id"], s["section"], s["number"], s["begin"], s["end"], s["text"])
        cosine = float(h["fields"]["similarity"][0]) / scale if similarity else 0.0
        marked = (h.get("highlight", {}).get("text") or [None])[0]
        rows.append(((position[sentence.doc_id], _SECTIONS.get(sentence.section, 2), sentence.number), sentence,
                     float(h["_score"]), cosine,
                     readable(tagged_spans(marked, sentence.text), sentence.text, highlight) if highlight else ()))
    if sentences is not None and sentences["hits"]["total"]["value"] > len(rows) and \
            sentences["hits"]["total"].get("relation") == "eq":
        raise SnippetError(f"the top documents have more than {len(rows)} sentences; score fewer documents")
    rows.sort(key=lambda row: row[0])
    bm25 = dict.fromkeys(doc_ids, 0.0)
    for h in (documents or {}).get("hits", {}).get("hits", []):
        bm25[h["_source"]["id"]] = float(h["_score"])
    return SentenceCandidates(
        doc_ids=tuple(doc_ids), doc_bm25=np.array([bm25[d] for d in doc_ids], dtype=np.float64),
        sentences=tuple(r[1] for r in rows), doc_of=np.array([r[0][0] for r in rows], dtype=np.int64),
        lexical=np.array([r[2] for r in rows], dtype=np.float64),
        similarity=np.array([r[3] for r in rows], dtype=np.float64) if similarity else None,
        matches=tuple(r[4] for r in rows) if highlight is not None else None)


def _snippets(c: SentenceCandidates, order: np.ndarray, s_sent: np.ndarray, s_doc: np.ndarray) -> list[Snippet]:
    document = query_min_max(s_doc)
    values = {"relevance": c.relevance, "similarity": c.similarity, "lexical": c.lexical, "metric": c.metric}
    normalised = {p: c.normalised[:, i] if values[p] is not None else None for i, p in enumerate(values)}
    snippets = []
    for i in order:
        s = c.sentences[i]
        parts = {p: float(v[i]) for p, v in normalised.items() if v is not None}
        snippets.append(Snippet(s.doc_id, s.section, s.number, s.begin, s.end, s.text, float(s_sent[i]),
                                document=float(document[c.doc_of[i]]), matches=c.matches[i] if c.matches else (),
                                **parts))
    return snippets


def rescore_hits(hits: Sequence[Hit], s_doc: Sequence[float]) -> list[Hit]:
    """The hits with the first ``len(s_doc)`` ordered by S_doc (ties keep their order) and scored by it; the
    rest follow in their order with scores below, so a run file sorts as the list does."""
    from biorank.stages.rerank import place

    # The rerank score part stays: a +rerank+snippets+rescore hit keeps the cross-encoder's score beside S_doc.
    return place(hits, [float(s) for s in s_doc])
