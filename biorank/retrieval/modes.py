"""The first-stage modes: one small class per family on one base (:class:`Mode`), chosen from one table
(:data:`MODE_TABLE`) keyed by the mode's name.

A mode builds the bodies of its requests and reads their answers; it never reaches a cluster itself. The
:class:`~biorank.retrieval.searcher.Searcher` around it keeps the index, its record, the encoder and the
transport (``_msearch`` batches, the options every request carries, errors as one line), and runs a mode in
rounds: round 0's requests are sent, their answers given back to build round 1's (the candidate union needs
the candidates first), and the last round's answers become the hits. So every body can be built, tested and
printed without a cluster, and a new mode is one class and one entry of the table.

Families (the module docstring of :mod:`biorank.retrieval.searcher` says what each mode scores):

- :class:`Lexical` (``bm25``): BM25 over a field set;
- :class:`DenseKnn` (``dense``): approximate kNN on the HNSW graph; :class:`DenseExact` (``dense-exact``): the
  inner product of every block, by the k-NN plugin's script;
- :class:`ExactHybrid` (``hybrid``): ``λ·BM25 + ⟨q, p⟩`` of every block; :class:`UnionHybrid`
  (``hybrid-approx``): the same score over the union of the BM25 and kNN top K;
- :class:`Fusion` (``rrf``, ``minmax``): client-side fusion of the BM25 and kNN top K;
- :class:`OsHybrid` (``os-hybrid``): neural-search's own ``hybrid`` query, sent on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from biorank.retrieval.boosts import Boosts
from biorank.retrieval.clauses import (
    MATCH_ALL,
    SHIFT,
    dense_query,
    dense_script_field,
    filtered,
    hybrid_query,
    knn_query,
    text_query,
)
from biorank.retrieval.fusion import min_max_fusion, rrf_fusion
from biorank.types import Hit

if TYPE_CHECKING:
    from opensearchpy import OpenSearch
    from opensearchpy.exceptions import TransportError

OS_HYBRID_PIPELINE = {"phase_results_processors": [{"normalization-processor": {
    "normalization": {"technique": "min_max"},
    "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.5, 0.5]}}}}]}
"""The search pipeline of ``os-hybrid``: neural-search's normalisation, min-max and equal-weight mean."""


@dataclass(frozen=True)
class Query:
    """One query as a mode reads it: its id, its text, its unit vector and its word pieces where the mode and
    field set need them."""

    id: str
    text: str
    vector: list[float] | None = None
    pieces: str | None = None
    filters: tuple[dict, ...] = ()
    """Clauses of this query's own beside the mode's: a PubMed-syntax query's tree (:mod:`biorank.retrieval.syntax`)."""
    lexical: tuple[dict, ...] = ()
    """Clauses that add to this query's BM25 part: its title- and abstract-tagged terms, RM3's feedback terms."""
    text_weight: float = 1.0
    """The weight of the text's own BM25 beside those clauses (RM3's original-query weight)."""


@dataclass(frozen=True)
class Request:
    """One search a mode asks for. ``key`` finds its answer again; ``text_scored`` says that BM25 scores it (so
    it runs as ``dfs_query_then_fetch``); ``alone`` sends it by itself to ``_search`` rather than in the round's
    ``_msearch`` (a ``search_pipeline`` in the body)."""

    key: Hashable
    body: dict
    text_scored: bool
    alone: bool = False


@dataclass(frozen=True)
class Mode:
    """A first-stage mode: how it searches (``fields``: the BM25 field set; ``lam``: λ; ``filters``: the clauses
    of :meth:`~biorank.retrieval.filters.Filters.clauses`; ``candidates``: K of the two-step modes; ``rrf_k``:
    RRF's constant; ``boosts``: the title's and MeSH's weights beside the field set), the body every request
    starts from, and what the searcher asks of it.

    ``rounds`` is how many times :meth:`requests` is called; each call after the first gets the answers of the
    one before it, and :meth:`hits` the answers of the last. The class attributes say what the searcher must
    provide and how to describe the mode, without a branch on its name anywhere else.

    Example:
        >>> mode = MODE_TABLE["bm25"](fields="text", lam=0.0)
        >>> mode.requests([Query("q1", "folic acid")], k=5)[0].body["query"]
        {'match': {'text': 'folic acid'}}
    """

    fields: str
    lam: float
    filters: tuple[dict, ...] = ()
    candidates: int = 1000
    rrf_k: int = 60
    boosts: Boosts = field(default_factory=Boosts)

    rounds: ClassVar[int] = 1
    vectors: ClassVar[bool] = True
    """Whether the queries need vectors (every mode but BM25)."""
    lexical: ClassVar[bool] = True
    """Whether BM25 over a field set scores it (the query log records the field set then)."""
    weighs_lambda: ClassVar[bool] = False
    """Whether λ weighs its score (the query log records λ then)."""
    default_fields: ClassVar[str] = "passage"
    """The BM25 field set when the settings name none."""
    larger: ClassVar[str | None] = None
    """The mode that runs instead over an index larger than ``exact_limit`` blocks, or None."""

    def requests(self, queries: Sequence[Query], k: int, answers: Mapping[Hashable, dict] | None = None, *,
                 explain: bool = False) -> list[Request]:
        """This mode's requests for ``queries`` (one per query unless the mode says otherwise).

        Args:
            queries: the queries of one batch, with vectors and word pieces where the mode needs them.
            k: how many documents each query asks for.
            answers: the previous round's answers by request key (None in round 0).
            explain: ask OpenSearch how each final score was made.

        Returns:
            The requests of this round, in the order they are sent.
        """
        return [Request(q.id, self.body(q, k, explain=explain), self.lexical) for q in queries]

    def hits(self, queries: Sequence[Query], k: int, answers: Mapping[Hashable, dict]) -> dict[str, list[Hit]]:
        """Each query's hits from the last round's answers.

        Args:
            queries: the queries of the batch.
            k: how many documents each query asked for.
            answers: the last round's answers by request key.

        Returns:
            Query id -> hits, best first, one per document.
        """
        return {q.id: list(self.parse(answers[q.id]["hits"]["hits"])) for q in queries}

    def body(self, query: Query, size: int, *, explain: bool = False, light: bool = False,
             candidates: dict = MATCH_ALL) -> dict:
        """One search of this mode, collapsed on ``id`` so each document is represented by its best block;
        ``light`` asks for ids only (candidate lists); the exact modes score only the blocks ``candidates``
        matches."""
        # Candidate lists need ids and scores only.
        source = ["id"] if light else ["id", "title", "block"]
        body: dict = {"size": size, "collapse": {"field": "id"}, "_source": source}
        body.update(self.query(query, size, candidates))
        if explain:
            body["explain"] = True
        return body

    def query(self, query: Query, size: int, candidates: dict = MATCH_ALL) -> dict:
        """The ``query`` part of :meth:`body` (and what else scores it, as ``script_fields``)."""
        raise NotImplementedError

    def text(self, query: Query) -> dict:
        """The BM25 part: the field set's match of the query's text, and what its tagged terms add; a query with
        neither (only metadata tags) matches every entry its filters let through."""
        if not query.lexical:
            return text_query(self.fields, query.text, query.pieces, self.boosts) if query.text else MATCH_ALL
        clauses = [text_query(self.fields, query.text, query.pieces, self.boosts)] if query.text else []
        if clauses and query.text_weight != 1.0:
            clauses = [{"bool": {"should": clauses, "boost": query.text_weight}}]
        return {"bool": {"should": [*clauses, *query.lexical]}}

    def filters_of(self, query: Query) -> tuple[dict, ...]:
        """The mode's filter clauses and the query's own."""
        return (*self.filters, *query.filters)

    def parse(self, raw: Sequence[dict]) -> Iterator[Hit]:
        """One :class:`~biorank.types.Hit` per answered document, in order, with the score parts this mode knows."""
        for rank, h in enumerate(raw, 1):
            yield self.hit(h, float(h["_score"]), _common(h, rank))

    def hit(self, raw: dict, score: float, common: dict[str, Any]) -> Hit:
        """The hit of one answered document (``common``: id, title, rank, block, explanation)."""
        return Hit(score=score, **common)

    def refused(self, error: TransportError, client: OpenSearch) -> str | None:
        """A message of this mode's own for an error a request was answered with, or None for the searcher's."""
        return None


def _common(h: dict, rank: int) -> dict[str, Any]:
    source = h.get("_source", {})
    return {"id": source.get("id", h["_id"]), "title": source.get("title", ""), "rank": rank,
            "block": source.get("block", 0), "explanation": h.get("_explanation")}


def lucene_inner_product(score: float) -> float:
    """⟨q, p⟩ back from a Lucene ``innerproduct`` kNN score (1 + ip for ip >= 0, 1 / (1 - ip) below).

    Example:
        >>> lucene_inner_product(1.25), lucene_inner_product(0.5)
        (0.25, -1.0)
    """
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


class Lexical(Mode):
    """``bm25``: BM25 over the field set; ``text`` (one entry per document) unless the settings name another."""

    vectors = False
    default_fields = "text"

    def query(self, query: Query, size: int, candidates: dict = MATCH_ALL) -> dict:
        if query.filters:
            # A parsed query's tree decides what is found, BM25 only the order: a document its filter lets through
            # is found without the text's terms (a truncated stem is no word of the index).
            return {"query": {"bool": {"should": [self.text(query)], "filter": list(self.filters_of(query))}}}
        return {"query": filtered(self.text(query), self.filters_of(query))}

    def hit(self, raw: dict, score: float, common: dict[str, Any]) -> Hit:
        return Hit(score=score, bm25=score, **common)


class DenseKnn(Mode):
    """``dense``: approximate kNN on the Lucene HNSW graph, its score turned back into ``⟨q, p⟩``."""

    lexical = False

    def query(self, query: Query, size: int, candidates: dict = MATCH_ALL) -> dict:
        # kNN returns blocks; asking for more than ``size`` leaves enough documents after collapsing.
        return {"query": knn_query(query.vector, max(size * 3, 100), self.filters_of(query))}

    def hit(self, raw: dict, score: float, common: dict[str, Any]) -> Hit:
        dense = lucene_inner_product(score)
        return Hit(score=dense, dense=dense, **common)


class DenseExact(Mode):
    """``dense-exact``: ``⟨q, v⟩`` of every block (or of the candidates), by the k-NN plugin's script."""

    lexical = False

    def query(self, query: Query, size: int, candidates: dict = MATCH_ALL) -> dict:
        return {"query": dense_query(query.vector, candidates=candidates, filters=self.filters_of(query))}

    def hit(self, raw: dict, score: float, common: dict[str, Any]) -> Hit:
        return Hit(score=score - SHIFT, dense=score - SHIFT, **common)


class ExactHybrid(Mode):
    """``hybrid``: ``λ·BM25 + ⟨q, p⟩`` of every block inside OpenSearch; over an index of more than
    ``exact_limit`` blocks, :class:`UnionHybrid` runs instead."""

    weighs_lambda = True
    larger = "hybrid-approx"

    def query(self, query: Query, size: int, candidates: dict = MATCH_ALL) -> dict:
        return {"query": hybrid_query(self.text(query), query.vector, lam=self.lam, candidates=candidates,
                                      filters=self.filters_of(query)),
                "script_fields": {"dense": dense_script_field(query.vector)}}

    def hit(self, raw: dict, score: float, common: dict[str, Any]) -> Hit:
        dense = float(raw["fields"]["dense"][0])
        hybrid = score - SHIFT
        # The BM25 part is what is left of the score; with λ = 0 it did not count and is not known.
        bm25 = (hybrid - dense) / self.lam if self.lam > 0 else None
        return Hit(score=hybrid, bm25=bm25, dense=dense, hybrid=hybrid, **common)


class TwoLists(Mode):
    """The modes that start from two candidate lists per query: the BM25 and the kNN top ``candidates``."""

    def lists(self, queries: Sequence[Query]) -> list[Request]:
        """Round 0: per query, the BM25 top K (key ``(id, "bm25")``) and the kNN top K (``(id, "dense")``),
        ids only."""
        bm25, knn = Lexical(**self._shared()), DenseKnn(**self._shared())
        return [request for q in queries for request in (
            Request((q.id, "bm25"), bm25.body(q, self.candidates, light=True), True),
            Request((q.id, "dense"), knn.body(q, self.candidates, light=True), False))]

    def _shared(self) -> dict[str, Any]:
        return {"fields": self.fields, "lam": self.lam, "filters": self.filters, "boosts": self.boosts}


class UnionHybrid(TwoLists, ExactHybrid):
    """``hybrid-approx``: the exact hybrid score over the union of the BM25 and kNN top K only (equal to
    ``hybrid`` when K covers the index; the mode for large collections)."""

    rounds = 2
    larger = None

    def requests(self, queries: Sequence[Query], k: int, answers: Mapping[Hashable, dict] | None = None, *,
                 explain: bool = False) -> list[Request]:
        if answers is None:
            return self.lists(queries)
        requests = []
        for q in queries:
            # Every block of a candidate document is scored: its best hybrid block need not be the best BM25
            # block nor the best kNN block.
            docs = sorted({h["_source"]["id"] for side in ("bm25", "dense")
                           for h in answers[(q.id, side)]["hits"]["hits"]})
            requests.append(Request(q.id, self.body(q, k, explain=explain, candidates={"terms": {"id": docs}}), True))
        return requests


class Fusion(TwoLists):
    """``rrf``, ``minmax``: the BM25 and kNN top K fused client-side by :attr:`fuse`
    (:mod:`biorank.retrieval.fusion`), for comparison with the exact hybrid."""

    fuse: ClassVar[Callable[..., list[Hit]]]

    def requests(self, queries: Sequence[Query], k: int, answers: Mapping[Hashable, dict] | None = None, *,
                 explain: bool = False) -> list[Request]:
        return self.lists(queries)

    def hits(self, queries: Sequence[Query], k: int, answers: Mapping[Hashable, dict]) -> dict[str, list[Hit]]:
        bm25, knn = Lexical(**self._shared()), DenseKnn(**self._shared())
        return {q.id: type(self).fuse(list(bm25.parse(answers[(q.id, "bm25")]["hits"]["hits"])),
                                      list(knn.parse(answers[(q.id, "dense")]["hits"]["hits"])),
                                      k=k, rrf_k=self.rrf_k) for q in queries}


class Rrf(Fusion):
    """``rrf``: reciprocal rank fusion (Cormack et al.)."""

    fuse = staticmethod(rrf_fusion)


class MinMax(Fusion):
    """``minmax``: min-max normalised scores averaged with equal weights (neural-search's way)."""

    fuse = staticmethod(min_max_fusion)


class OsHybrid(Mode):
    """``os-hybrid``: neural-search's own ``hybrid`` query through a ``normalization-processor`` pipeline (min-max,
    arithmetic mean), the peer's implementation run side by side. It cannot collapse, so blocks are folded into
    documents here, keeping each document's first (best) block."""

    def requests(self, queries: Sequence[Query], k: int, answers: Mapping[Hashable, dict] | None = None, *,
                 explain: bool = False) -> list[Request]:
        K = self.candidates
        requests = []
        for q in queries:
            # Each sub-query carries the clauses every other mode sends, so the two lists it fuses are of the
            # filtered set.
            body = {"size": K, "_source": ["id", "title", "block"], "query": {"hybrid": {"queries": [
                filtered(self.text(q), self.filters_of(q)),
                knn_query(q.vector, K, self.filters_of(q))]}},
                # A temporary pipeline, part of the request: nothing cluster-wide is created or overwritten.
                "search_pipeline": OS_HYBRID_PIPELINE}
            requests.append(Request(q.id, body, True, alone=True))
        return requests

    def hits(self, queries: Sequence[Query], k: int, answers: Mapping[Hashable, dict]) -> dict[str, list[Hit]]:
        found = {}
        for q in queries:
            best: dict[str, dict] = {}
            for h in answers[q.id]["hits"]["hits"]:
                best.setdefault(h["_source"]["id"], h)
            found[q.id] = list(self.parse(list(best.values())[:k]))
        return found

    def refused(self, error: TransportError, client: OpenSearch) -> str | None:
        """Where the cluster does not know the ``hybrid`` query, which version would, in one line."""
        from opensearchpy.exceptions import RequestError

        from biorank.store.server import server_version

        if not isinstance(error, RequestError) or ("hybrid" not in str(error.info)
                                                   and "normalization" not in str(error.info)):
            return None
        reason = error.info.get("error", {}).get("reason", "") if isinstance(error.info, dict) else error.info
        version = server_version(client)
        if version and int(version.split(".")[0]) >= 3:
            advice = ("Maven Central has no 3.x build of it, so biorank's 3.x node cannot have it; "
                      "`--mode minmax` is the same normalisation done by biorank, or use a 2.19.1 node")
        else:
            advice = "biorank's 2.19.1 node has it (restart an older one to reassemble it)"
        return (f"os-hybrid needs OpenSearch's neural-search plugin, which this cluster"
                f"{f' (OpenSearch {version})' if version else ''} lacks ({error.error}: {reason}); {advice}")


MODE_TABLE: dict[str, type[Mode]] = {
    "bm25": Lexical,
    "dense": DenseKnn,
    "dense-exact": DenseExact,
    "hybrid": ExactHybrid,
    "hybrid-approx": UnionHybrid,
    "rrf": Rrf,
    "minmax": MinMax,
    "os-hybrid": OsHybrid,
}
"""Every first-stage mode by name: a new mode is one class and one entry here."""
