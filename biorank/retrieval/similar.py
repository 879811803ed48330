"""Similar articles: the documents nearest one stored document, found as a query would find them.

PubMed shows "similar articles" beside every citation; here the query is the document itself. Its dense part is
the document's own stored block-0 vector (read back by a script field, as the vector field is left out of
``_source``: :func:`~biorank.store.inspection.block_vectors`), so nothing is encoded at query time and no encoder
is loaded. Its BM25 part is OpenSearch's ``more_like_this`` over the document's title and abstract: the query
takes only the :data:`MAX_QUERY_TERMS` terms of highest tf-idf, so a 4,000-word abstract costs as many clauses as
a short one and never meets ``indices.query.bool.max_clause_count``. The two are combined by the same mode classes
as a typed query (:mod:`biorank.retrieval.modes`: the hybrid is ``λ·BM25 + ⟨q, p⟩`` with the index's λ), and the
document itself is excluded by a filter clause, so it is never among its own similar articles.

The document's text reaches OpenSearch only as ``more_like_this`` text and its vector only as script params.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.retrieval.modes import Mode, Query
from biorank.retrieval.transport import refusal, request_options
from biorank.store.inspection import NotFound, block_vectors
from biorank.store.msearch import msearch

if TYPE_CHECKING:
    from biorank.retrieval.searcher import Searcher
    from biorank.types import Hit

SIMILAR_MODES = ("dense", "hybrid", "bm25")
"""The first stages a similar-articles search runs: the vector alone, the hybrid with the index's λ, BM25 alone."""
SIMILAR_DEFAULT = "dense"
"""The vector alone: a whole abstract's distinctive terms give BM25 a far larger share than a typed query's few
words, for which λ was tuned, and on SciFact's co-cited abstracts the hybrid at the index's λ found fewer
neighbours than the vector did (``benchmarks/records/similar_articles.json``)."""
MAX_QUERY_TERMS = 25
"""Terms of the document that its BM25 part searches for (``more_like_this``'s own default): the document's
most distinctive ones by tf-idf, and a bound on the clauses however long the abstract is."""
MIN_DOC_FREQ = 2
"""A term in fewer documents (blocks, for the block field sets) is left out: found only in the document itself,
it could match nothing else."""


class SimilarError(BiorankError):
    """A similar-articles search that cannot run as asked (a mode it does not support, no vector to start from)."""


@dataclass
class SimilarArticles:
    """The articles similar to one document: which document, how they were found, and the hits, best first."""

    doc_id: str
    title: str
    mode: str
    """The first stage that ran (``hybrid``, ``hybrid-approx`` over a large index, ``dense``, ``bm25``)."""
    lam: float | None
    """λ of the hybrid (the index's), None for a mode λ does not weigh."""
    hits: list[Hit] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready: the document, the mode, λ and the hits (as ``Hit.to_dict`` gives them)."""
        return {"id": self.doc_id, "title": self.title, "mode": self.mode, "lambda": self.lam,
                "hits": [h.to_dict() for h in self.hits]}


def similar_articles(searcher: Searcher, doc_id: str, k: int = 10) -> SimilarArticles:
    """The ``k`` documents most similar to stored document ``doc_id``, by ``searcher``'s mode and filters.

    Args:
        searcher: a searcher over the documents index; its mode is one of :data:`SIMILAR_MODES` (``hybrid``
            weighs BM25 by the index's λ, and takes the candidate union over an index too large to score whole,
            as a typed query does); its filters restrict the similar articles.
        doc_id: the document's id (a PMID, a SciFact id).
        k: how many similar documents.

    Returns:
        The document's title, the mode that ran, λ where it counts, and the hits, best first, without the
        document itself.

    Raises:
        NotFound: no document ``doc_id`` in the index (the API answers 404).
        SimilarError: a mode outside :data:`SIMILAR_MODES`, a word-piece field set, or a dense or hybrid search
            from a document stored without a vector.

    Example:
        >>> found = similar_articles(Searcher.open(connect(), "scifact"), "4983", k=5)  # doctest: +SKIP
        >>> [(h.rank, h.id) for h in found.hits]  # doctest: +SKIP
    """
    settings = searcher.settings
    if settings.mode not in SIMILAR_MODES:
        raise SimilarError(f"similar articles are found by {', '.join(SIMILAR_MODES)}, not {settings.mode!r}")
    if settings.field_set.startswith("wordpieces"):
        raise SimilarError("similar articles search the text fields, not word pieces: leave the field set unset")
    if k < 1:
        raise SimilarError(f"k must be at least 1, not {k}")
    stored = block_vectors(searcher.client, searcher.index, [doc_id], ("title", "abstract")).get(doc_id)
    if stored is None:
        raise NotFound(f"no document {doc_id!r} in {searcher.index!r}")
    (fields, vector) = stored
    title = fields.get("title") or ""
    mode = searcher.mode()
    if mode.vectors and vector is None:
        raise SimilarError(f"document {doc_id!r} is stored without a vector: use --mode bm25")
    text = " ".join(t for t in (title, fields.get("abstract") or "") if t)
    lexical = (like_text(settings.field_set, text),) if text.strip() else ()
    if not mode.vectors and not lexical:
        raise SimilarError(f"document {doc_id!r} has no title or abstract to search for")
    query = Query(doc_id, "", vector if mode.vectors else None, None, (not_document(doc_id),), lexical)
    answers = _rounds(searcher, mode, query, k)
    hits = mode.hits([query], k, answers)[doc_id]
    return SimilarArticles(doc_id, title, searcher.route, searcher.lam if mode.weighs_lambda else None, hits[:k])


def like_text(field_name: str, text: str, max_query_terms: int = MAX_QUERY_TERMS) -> dict:
    """The BM25 part of a similar-articles search: ``more_like_this`` over ``field_name`` for ``text``, bounded.

    Any one of the chosen terms matches (as a plain ``match`` does), so the hybrid's BM25 part is 0 only where
    none is present.

    Args:
        field_name: the BM25 field (``text``, ``passage``; ``title+abstract`` searches both).
        text: the document's title and abstract.
        max_query_terms: how many of its terms, those of highest tf-idf.

    Returns:
        The clause.

    Example:
        >>> like_text("text", "Folate and homocysteine")["more_like_this"]["max_query_terms"]
        25
    """
    fields = ["title", "abstract"] if field_name == "title+abstract" else [field_name]
    return {"more_like_this": {"fields": fields, "like": text, "max_query_terms": max_query_terms,
                               "min_term_freq": 1, "min_doc_freq": MIN_DOC_FREQ, "minimum_should_match": 1}}


def not_document(doc_id: str) -> dict:
    """The filter clause that leaves out every block of ``doc_id``."""
    return {"bool": {"must_not": [{"term": {"id": doc_id}}]}}


def _rounds(searcher: Searcher, mode: Mode, query: Query, k: int) -> dict[Hashable, dict]:
    """The mode's rounds for one query, each in one ``_msearch`` with the options every search carries."""
    answers: dict[Hashable, dict] | None = None
    for _ in range(mode.rounds):
        requests = mode.requests([query], k, answers)
        lines: list[dict] = []
        for request in requests:
            lines += [{"index": searcher.index, **request_options(request.text_scored)}, request.body]
        responses = msearch(searcher.client, lines, refused=lambda _, error: BiorankError(
            refusal(searcher.settings.mode, searcher.index, error)))
        answers = {r.key: response for r, response in zip(requests, responses, strict=True)}
    assert answers is not None
    return answers
