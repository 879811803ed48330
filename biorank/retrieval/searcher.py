"""First-stage retrieval: BM25, dense, and Ma et al.'s exact hybrid, with typed hits that show their parts.

Every mode returns one hit per document: the documents index holds one entry per block, and requests
collapse on ``id`` so a document is represented by its best block (MaxP). Modes:

- ``bm25``: BM25 over a field set (:data:`FIELD_SETS`); ``text`` (title + abstract, one entry per document) is
  the BEIR baseline, ``passage`` the same per block, ``wordpieces``/``wordpieces+bigrams`` the encoder's word
  pieces (query tokenised by the index's encoder) with or without word-piece bigrams;
- ``dense``: approximate kNN on the Lucene HNSW graph; ``dense-exact``: ``⟨q, v⟩`` of every block, by script;
- ``hybrid``: ``λ·BM25(q, p) + ⟨q, p⟩`` of every block, inside OpenSearch (``script_score``), up to
  ``SearchSettings.exact_limit`` blocks; a larger index takes ``hybrid-approx``'s route (:attr:`Searcher.route`);
- ``hybrid-approx``: the same exact score, over the union of the BM25 top K and the kNN top K blocks only
  (equal to ``hybrid`` when K covers the index; the mode for large collections);
- ``rrf``, ``minmax``: client-side fusion of the BM25 and kNN top K, as reciprocal ranks (Cormack et al.) or as
  min-max normalised scores averaged with equal weights (what OpenSearch's neural-search does), for comparison;
- ``os-hybrid``: neural-search's own ``hybrid`` query through a ``normalization-processor`` pipeline (min-max,
  arithmetic mean), the peer's implementation run side by side; it cannot collapse, so blocks are folded
  into documents here, keeping each document's first (best) block.

User text reaches the cluster only as ``match`` text and as script ``params``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.retrieval.filters import FilterError, Filters
from biorank.retrieval.fusion import minmax_fusion, rrf_fusion
from biorank.retrieval.requests import MATCH_ALL, SHIFT, filtered, knn_query, search_body, text_query
from biorank.store.failures import reason
from biorank.store.names import check_index_name
from biorank.store.record import IndexRecord, check_record
from biorank.store.server import server_version
from biorank.types import Hit

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder

MODES = ("bm25", "dense", "dense-exact", "hybrid", "hybrid-approx", "rrf", "minmax", "os-hybrid")
OS_HYBRID_PIPELINE = {"phase_results_processors": [{"normalization-processor": {
    "normalization": {"technique": "min_max"},
    "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.5, 0.5]}}}}]}
"""The search pipeline of ``os-hybrid``: neural-search's normalisation, min-max and equal-weight mean."""
FIELD_SETS = ("text", "passage", "title+abstract", "wordpieces", "wordpieces+bigrams")
MAX_QUERY_CHARS = 4000
EXACT_LIMIT = 50_000
"""Up to this many blocks ``hybrid`` scores every block; above, the candidate union of the BM25 and kNN top
:data:`UNION_CANDIDATES`. Measured by ``benchmarks/scale.py`` (2 AVX2 cores, p50): the exact hybrid 22.7 ms at
9,878 blocks, 120 ms at 98,780, 218 ms at 296,340; the union of the top 300 62, 64 and 89 ms, with the exact
hybrid's top 10 (overlap@10 1.000 at each size); they cost the same near 50,000 blocks."""
UNION_CANDIDATES = 300
"""K of that union: K = 100 kept overlap@10 at 1.000 up to 98,780 blocks but fell to 0.987 at 296,340."""
MAX_LAMBDA = 1e6
"""Far above any useful λ (BM25 scores are tens), and far below what would overflow a script's double."""


class QueryError(BiorankError):
    """A query that cannot be run as given (empty, too long, unknown mode)."""


@dataclass(frozen=True)
class SearchSettings:
    """How the first stage searches. ``lam=None`` takes the index's tuned λ, else its encoder's default, else
    :data:`~biorank.config.DEFAULT_LAMBDA`.

    ``fields`` is the BM25 field set; ``None`` means ``text`` for ``bm25`` and ``passage`` for the modes that
    combine BM25 with vectors (which score blocks, so BM25 must be of the same block). ``candidates`` is K of
    ``hybrid-approx``, ``rrf`` and ``minmax``. ``precision`` is the query encoder's backend
    (:data:`~biorank.models.encoder.PRECISIONS`; "auto" is ONNX Runtime, which starts without torch).
    ``filters`` restrict every mode to the documents of some years, journals or MeSH headings
    (:class:`~biorank.retrieval.filters.Filters`). ``exact_limit``: ``hybrid`` over an index of more blocks
    takes ``hybrid-approx``'s route with K = ``union_candidates`` (the script's cost grows with every block,
    the union's with K).
    """

    mode: str = "hybrid"
    lam: float | None = None
    fields: str | None = None
    candidates: int = 1000
    rrf_k: int = 60
    precision: str = "auto"
    filters: Filters = field(default_factory=Filters)
    exact_limit: int = EXACT_LIMIT
    union_candidates: int = UNION_CANDIDATES

    def takes_union(self, blocks: int) -> bool:
        """Whether ``hybrid`` over an index of ``blocks`` blocks scores the candidate union, not every block."""
        return self.mode == "hybrid" and blocks > self.exact_limit

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise QueryError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.fields is not None and self.fields not in FIELD_SETS:
            raise QueryError(f"unknown field set {self.fields!r}; choose one of {', '.join(FIELD_SETS)}")
        if self.lam is not None and not 0 <= self.lam <= MAX_LAMBDA:
            raise QueryError(f"λ must be a number from 0 to {MAX_LAMBDA:g}, not {self.lam}")
        if self.candidates < 1 or self.union_candidates < 1:
            raise QueryError("candidates must be at least 1")
        if self.exact_limit < 0:
            raise QueryError("exact_limit must be at least 0")

    @property
    def field_set(self) -> str:
        return self.fields or ("text" if self.mode == "bm25" else "passage")


class Searcher:
    """Searches one biorank documents index.

    >>> hits = Searcher(client, "scifact").search("vitamin B12 and homocysteine", k=10)  # doctest: +SKIP
    """

    def __init__(self, client: OpenSearch, index: str, settings: SearchSettings | None = None, *,
                 encoder: Encoder | None = None) -> None:
        self.client = client
        self.index = check_index_name(index)
        self.settings = settings or SearchSettings()
        self.record: IndexRecord = check_record(client, index)
        self._encoder = encoder
        self._blocks: int | None = None
        if encoder is not None and self.needs_encoder:
            check_record(client, index, model=encoder.model_name)

    @property
    def lam(self) -> float:
        if self.settings.lam is not None:
            return self.settings.lam
        return self.record.lam

    @property
    def blocks(self) -> int:
        """How many blocks the index holds (asked once)."""
        if self._blocks is None:
            self._blocks = int(self.client.count(index=self.index)["count"])
        return self._blocks

    @property
    def route(self) -> str:
        """The mode that runs: the settings' own, except ``hybrid`` over more than ``exact_limit`` blocks, which
        takes ``hybrid-approx``'s candidate union."""
        return "hybrid-approx" if self.settings.takes_union(self.blocks) else self.settings.mode

    @property
    def route_note(self) -> str | None:
        """Why ``hybrid`` takes the candidate union here, or None where it runs as asked."""
        if self.route == self.settings.mode:
            return None
        return (f"hybrid over {self.blocks:,} blocks (more than --exact-limit {self.settings.exact_limit:,}): "
                f"the exact score over the union of the BM25 and kNN top {self.candidates:,} "
                "(hybrid-approx), not over every block")

    @property
    def candidates(self) -> int:
        """K of the two-step modes: the settings' own, or ``union_candidates`` where ``hybrid`` was routed."""
        return self.settings.union_candidates if self.route != self.settings.mode else self.settings.candidates

    @property
    def needs_encoder(self) -> bool:
        """Whether this mode encodes queries (vectors, or word pieces of the query)."""
        return self.settings.mode != "bm25" or self.settings.field_set.startswith("wordpieces")

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from biorank.models.encoder import Encoder
            from biorank.models.prefixes import Prefixes

            # The index records how its encoder was named when it was built (a folder, a hub name) and the
            # prefixes it used, and loading that again must give the same weights: the model check below makes
            # sure of it.
            self._encoder = Encoder(self.record.encoder_source, stage="queries",
                                    precision=self.settings.precision,  # type: ignore[arg-type]
                                    prefixes=Prefixes.from_mapping(self.record.prefixes))
            check_record(self.client, self.index, model=self._encoder.model_name)
        return self._encoder

    def with_settings(self, **changes: Any) -> Searcher:
        """The same index, client and encoder with some settings changed (a λ grid, another mode)."""
        return self.with_search(replace(self.settings, **changes))

    def with_search(self, settings: SearchSettings) -> Searcher:
        """The same index, client and encoder searching with ``settings``."""
        clone = Searcher.__new__(Searcher)
        clone.__dict__.update(self.__dict__)
        clone.settings = settings
        return clone

    # Public API ------------------------------------------------------------------------------------------
    def search(self, query: str, k: int = 10, *, explain: bool = False) -> list[Hit]:
        return self.search_many({"q": query}, k, explain=explain)["q"]

    def search_many(self, queries: Mapping[str, str], k: int = 10, *, explain: bool = False,
                    batch: int = 32, progress: Callable[[int], None] | None = None,
                    vectors: Mapping[str, list[float]] | None = None) -> dict[str, list[Hit]]:
        """Hits of every query, sent ``batch`` queries per ``_msearch``; ``progress`` gets queries done.

        ``vectors`` are the queries' vectors when the caller has them already (a λ grid runs the same
        queries many times); otherwise each batch is encoded in one call.
        """
        results: dict[str, list[Hit]] = {}
        items = list(queries.items())
        for start in range(0, len(items), batch):
            chunk = dict(items[start : start + batch])
            results.update(self._search_chunk(chunk, k, explain, vectors=vectors))
            if progress is not None:
                progress(len(chunk))
        return results

    def requests(self, query: str, k: int = 10) -> list[tuple[str, dict]]:
        """Every request the cluster sees for ``query``, as (method and path, body), in order.

        The two-step modes' second request needs the first's answer, so it is shown with the candidates of a
        real run; what is printed is what was sent.
        """
        sent: list[tuple[str, dict]] = []
        self._search_chunk({"q": query}, k, False, sent)
        return sent

    # Internals -------------------------------------------------------------------------------------------
    def _search_chunk(self, queries: dict[str, str], k: int, explain: bool,
                      sent: list[tuple[str, dict]] | None = None,
                      vectors: Mapping[str, list[float]] | None = None) -> dict[str, list[Hit]]:
        for qid, text in queries.items():
            _check_query(qid, text)
        if self.settings.filters and not self.record.filterable:
            # Older builds put the metadata on block 0 only: a filter would silently drop every later block.
            raise FilterError(f"index {self.index!r} was built before biorank stored year, journal and MeSH on "
                              f"every block, so it cannot be filtered; rebuild it with `biorank index ... --index "
                              f"{self.index} --recreate`")
        mode = self.route
        if mode == "bm25":
            vectors = {}
        elif vectors is None or not queries.keys() <= vectors.keys():
            vectors = encode_queries(self.encoder, queries)
        for qid in queries:
            if qid in vectors and len(vectors[qid]) != self.record.dimension:
                # OpenSearch would answer with a stack of script errors per shard.
                raise QueryError(f"the vector of query {qid!r} has {len(vectors[qid])} dimensions; index "
                                 f"{self.index!r} holds {self.record.dimension}-dimensional vectors of "
                                 f"{self.record.model}")
            if qid in vectors and abs(math.fsum(x * x for x in vectors[qid]) - 1) > 1e-3:
                # The exact scores read ⟨q, p⟩ as the cosine of unit vectors (requests.py), as the encoder gives.
                raise QueryError(f"the vector of query {qid!r} is not a unit vector; normalise it first")
        pieces = self._pieces(queries)
        if mode in ("bm25", "dense", "dense-exact", "hybrid"):
            bodies = {q: self._body(mode, queries[q], vectors.get(q), pieces.get(q), k, MATCH_ALL, explain)
                      for q in queries}
            answers = self._msearch(bodies, sent, lambda _: mode in ("bm25", "hybrid"))
            return {q: self._hits(answers[q], mode) for q in queries}

        K = self.candidates
        if mode == "os-hybrid":
            return {q: self._os_hybrid(queries[q], vectors[q], pieces.get(q), k, sent) for q in queries}
        first: dict[tuple[str, str], dict] = {}
        for q in queries:
            first[(q, "bm25")] = self._body("bm25", queries[q], None, pieces.get(q), K, MATCH_ALL, False,
                                                  light=True)
            first[(q, "dense")] = self._body("dense", queries[q], vectors[q], None, K, MATCH_ALL, False,
                                                   light=True)
        answers = self._msearch(first, sent, lambda key: key[1] == "bm25")
        if mode == "hybrid-approx":
            bodies = {}
            for q in queries:
                # Every block of a candidate document is scored: its best hybrid block need not be the best
                # BM25 block nor the best kNN block.
                docs = sorted({h["_source"]["id"] for side in ("bm25", "dense")
                               for h in answers[(q, side)]["hits"]["hits"]})
                candidates = {"terms": {"id": docs}}
                bodies[q] = self._body("hybrid", queries[q], vectors[q], pieces.get(q), k, candidates,
                                             explain)
            final = self._msearch(bodies, sent, lambda _: True)
            return {q: self._hits(final[q], "hybrid") for q in queries}
        fuse = rrf_fusion if mode == "rrf" else minmax_fusion
        results = {}
        for q in queries:
            bm25_hits = self._hits(answers[(q, "bm25")], "bm25")
            dense_hits = self._hits(answers[(q, "dense")], "dense")
            results[q] = fuse(bm25_hits, dense_hits, k=k, rrf_k=self.settings.rrf_k)
        return results

    def _os_hybrid(self, text: str, vector: list[float], pieces: str | None, k: int,
                   sent: list[tuple[str, dict]] | None) -> list[Hit]:
        K = self.candidates
        # Each sub-query carries the clauses every other mode sends, so the two lists it fuses are of the filtered set.
        where = self.settings.filters.clauses()
        body = {"size": K, "_source": ["id", "title", "block"], "query": {"hybrid": {"queries": [
            filtered(text_query(self.settings.field_set, text, pieces), where), knn_query(vector, K, where)]}},
            # A temporary pipeline, part of the request: nothing cluster-wide is created or overwritten.
            "search_pipeline": OS_HYBRID_PIPELINE}
        options = request_options(text_scored=True)
        if sent is not None:
            sent.append((f"GET {self.index}/_search?{_query_string(options)}", body))
        from opensearchpy.exceptions import RequestError, TransportError

        try:
            response = self.client.search(index=self.index, body=body, params=_as_params(options))
        except TransportError as e:
            if not isinstance(e, RequestError) or ("hybrid" not in str(e.info) and "normalization" not in str(e.info)):
                error = e.info.get("error", e.error) if isinstance(e.info, dict) else e.error
                raise BiorankError(refusal(self.settings.mode, self.index, error)) from None
            reason = e.info.get("error", {}).get("reason", "") if isinstance(e.info, dict) else e.info
            version = server_version(self.client)
            if version and int(version.split(".")[0]) >= 3:
                advice = ("Maven Central has no 3.x build of it, so biorank's 3.x node cannot have it; "
                          "`--mode minmax` is the same normalisation done by biorank, or use a 2.19.1 node")
            else:
                advice = "biorank's 2.19.1 node has it (restart an older one to reassemble it)"
            raise BiorankError(
                f"os-hybrid needs OpenSearch's neural-search plugin, which this cluster"
                f"{f' (OpenSearch {version})' if version else ''} lacks ({e.error}: {reason}); {advice}"
            ) from None
        best: dict[str, dict] = {}
        for h in response["hits"]["hits"]:
            best.setdefault(h["_source"]["id"], h)
        return [replace(hit, rank=rank) for rank, hit in
                enumerate(_parse_hits(list(best.values())[:k], "os-hybrid", self.lam), 1)]

    def _body(self, mode: str, text: str, vector: list[float] | None, pieces: str | None, size: int,
              candidates: dict, explain: bool, *, light: bool = False) -> dict:
        return search_body(mode, self.settings.field_set, text, vector, pieces, size, lam=self.lam,
                           candidates=candidates, filters=self.settings.filters.clauses(), explain=explain,
                           light=light)

    def _pieces(self, queries: dict[str, str]) -> dict[str, str]:
        if not self.settings.field_set.startswith("wordpieces"):
            return {}
        tokenized = self.encoder.tokenize_batch(list(queries.values()))
        return {q: " ".join(p) for q, p in zip(queries, tokenized, strict=True)}

    def _msearch(self, bodies: Mapping[Any, dict], sent: list[dict] | None,
                 text_scored: Callable[[Any], bool]) -> dict[Any, dict]:
        """Answers of ``bodies`` in one ``_msearch``; ``text_scored(key)`` says whether that body scores by BM25."""
        keys = list(bodies)
        lines: list[dict] = []
        for key in keys:
            options = request_options(text_scored(key))
            lines += [{"index": self.index, **options}, bodies[key]]
            if sent is not None:
                sent.append((f"GET {self.index}/_search?{_query_string(options)}", bodies[key]))
        responses = self.client.msearch(body=lines)["responses"]
        answers = {}
        for key, response in zip(keys, responses, strict=True):
            if "error" in response:
                raise BiorankError(refusal(self.settings.mode, self.index, response["error"]))
            answers[key] = response
        return answers

    def _hits(self, response: dict, mode: str) -> list[Hit]:
        return list(_parse_hits(response["hits"]["hits"], mode, self.lam))


def request_options(text_scored: bool) -> dict[str, Any]:
    """How a search runs on a cluster of many shards, beside its body.

    BM25 weighs a term by its document frequency, which each shard counts among its own blocks: over several
    shards the same block would score differently by where it lives, and the hybrid's λ·BM25 with it. A
    ``dfs_query_then_fetch`` search first gathers the statistics of every shard, so scores are those of one
    shard (OpenSearch skips that round when there is one shard). Partial results are refused: a lost shard
    must be an error, not a silently shorter ranking.
    """
    options: dict[str, Any] = {"allow_partial_search_results": False}
    if text_scored:
        options["search_type"] = "dfs_query_then_fetch"
    return options


def _as_params(options: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}


def _query_string(options: Mapping[str, Any]) -> str:
    return "&".join(f"{k}={v}" for k, v in _as_params(options).items())


_LOST_NODE = ("no_shard_available_action_exception", "node_not_connected_exception", "node_disconnected_exception",
              "connect_transport_exception")
"""Shard failures that mean a node holding a shard copy is gone, not that the query is wrong."""


def refusal(mode: str, index: str, error: Any) -> str:
    """One line for an error OpenSearch answered a search with; shards without a live copy are named."""
    causes = [*error.get("root_cause", []), error.get("caused_by") or {}] if isinstance(error, dict) else []
    missing = re.search(r"missing shards (\[.*\])\. ", json.dumps(error))
    if missing or any(c.get("type") in _LOST_NODE for c in causes):
        where = f"shards {missing.group(1)} have" if missing else "a shard has"
        return (f"index {index!r} cannot be searched in full: {where} no live copy (a node holding them is down "
                f"and they have no replica); restart the node (`biorank cluster start` restarts lost local "
                f"nodes) or build the index with --replicas 1 so that a lost node costs no answers")
    return f"OpenSearch refused the {mode} query on {index!r}: {reason(error)}"


def encode_queries(encoder: Encoder, queries: Mapping[str, str]) -> dict[str, list[float]]:
    """Query id -> unit vector, in one encoder call."""
    matrix = encoder.encode(list(queries.values()), role="query")
    return {q: row.tolist() for q, row in zip(queries, matrix, strict=True)}


def _check_query(qid: str, text: str) -> None:
    if not text or not text.strip():
        raise QueryError(f"query {qid!r} is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"query {qid!r} has {len(text)} characters; at most {MAX_QUERY_CHARS} are accepted")


def lucene_inner_product(score: float) -> float:
    """⟨q, p⟩ back from a Lucene ``innerproduct`` kNN score (1 + ip for ip >= 0, 1 / (1 - ip) below)."""
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


def _parse_hits(raw: Sequence[dict], mode: str, lam: float) -> Iterator[Hit]:
    for rank, h in enumerate(raw, 1):
        source = h.get("_source", {})
        score = float(h["_score"])
        common = {"id": source.get("id", h["_id"]), "title": source.get("title", ""), "rank": rank,
                  "block": source.get("block", 0), "explanation": h.get("_explanation")}
        if mode == "bm25":
            yield Hit(score=score, bm25=score, **common)
        elif mode == "os-hybrid":
            yield Hit(score=score, **common)
        elif mode == "dense":
            dense = lucene_inner_product(score)
            yield Hit(score=dense, dense=dense, **common)
        elif mode == "dense-exact":
            yield Hit(score=score - SHIFT, dense=score - SHIFT, **common)
        else:
            dense = float(h["fields"]["dense"][0])
            hybrid = score - SHIFT
            # The BM25 part is what is left of the score; with λ = 0 it did not count and is not known.
            bm25 = (hybrid - dense) / lam if lam > 0 else None
            yield Hit(score=hybrid, bm25=bm25, dense=dense, hybrid=hybrid, **common)
