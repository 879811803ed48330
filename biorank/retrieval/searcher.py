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

Each mode is a class of :mod:`biorank.retrieval.modes`, which builds its request bodies and reads its answers;
the :class:`Searcher` keeps the index, its record, the encoder and the transport. User text reaches the cluster
only as ``match`` text and as script ``params``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.models.placement import AskedPlacement
from biorank.retrieval.boosts import Boosts
from biorank.retrieval.feedback import (
    Feedback,
    expansion,
    first_pass_body,
    relevance_model,
    rocchio,
    term_vectors_body,
    terms_of,
)
from biorank.retrieval.filters import FilterError, Filters
from biorank.retrieval.modes import MODE_TABLE, Lexical, Mode, Query, Request
from biorank.retrieval.syntax import STORED, SYNTAXES, ParsedQuery, QuerySyntaxError, read
from biorank.retrieval.transport import as_params, query_string, refusal, request_options
from biorank.store.failures import patiently
from biorank.store.inspection import stored_vector
from biorank.store.msearch import msearch
from biorank.store.names import check_index_name
from biorank.store.record import IndexRecord, read_record, verify_record

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder
    from biorank.types import Hit

MODES = tuple(MODE_TABLE)
"""Every first-stage mode's name, in the table's order."""
FIELD_SETS = ("text", "passage", "title+abstract", "wordpieces", "wordpieces+bigrams")
MAX_QUERY_CHARS = 4000
EXACT_LIMIT = 50_000
"""Up to this many blocks ``hybrid`` scores every block; above, the candidate union of the BM25 and kNN top
:data:`UNION_CANDIDATES`. The exact hybrid's cost grows with the index and the union's with K, and the two cost
the same near this size, where the union still finds the exact hybrid's top 10 (``benchmarks/records/scale-speed.json``,
``scale-quality.json``; docs/measurements/scale.md, "The hybrid's route")."""
UNION_CANDIDATES = 300
"""K of that union: with it the exact hybrid's top 10 stayed whole at every index size measured, with 100 not at
the largest (``benchmarks/records/scale-quality.json``)."""
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
    ``hybrid-approx``, ``rrf`` and ``minmax``. ``placement`` is where the query encoder runs: "auto" is ONNX Runtime
    on the CPU, which starts without torch, unless a GPU is named (:mod:`biorank.models.placement`).
    ``filters`` restrict every mode to the documents of some years, journals or MeSH headings
    (:class:`~biorank.retrieval.filters.Filters`). ``syntax`` is how a query's text is read
    (:data:`~biorank.retrieval.syntax.SYNTAXES`): ``auto`` reads PubMed's syntax in a query that uses it
    (:mod:`biorank.retrieval.syntax`), ``pubmed`` in every query, ``plain`` in none. ``feedback`` and ``boosts``
    (:mod:`biorank.retrieval.boosts`) None: the index's tuned ones where the mode and field set take them.
    ``exact_limit``: ``hybrid`` over an index of more blocks takes ``hybrid-approx``'s route with K =
    ``union_candidates`` (the script's cost grows with every block, the union's with K).
    """

    mode: str = "hybrid"
    lam: float | None = None
    fields: str | None = None
    candidates: int = 1000
    rrf_k: int = 60
    placement: AskedPlacement = field(default_factory=AskedPlacement)
    filters: Filters = field(default_factory=Filters)
    exact_limit: int = EXACT_LIMIT
    union_candidates: int = UNION_CANDIDATES
    syntax: str = "auto"
    feedback: Feedback | None = None
    boosts: Boosts | None = None

    def takes_union(self, blocks: int) -> bool:
        """Whether ``hybrid`` over an index of ``blocks`` blocks scores the candidate union, not every block."""
        return self.mode_class.larger is not None and blocks > self.exact_limit

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
        if self.syntax not in SYNTAXES:
            raise QueryError(f"unknown syntax {self.syntax!r}; choose one of {', '.join(SYNTAXES)}")
        if self.feedback is not None:
            self.feedback.check(self.mode, self.field_set, lexical=self.mode_class.lexical,
                                vectors=self.mode_class.vectors)
        if self.boosts is not None and self.mode_class.lexical:
            self.boosts.check(self.field_set)

    @property
    def mode_class(self) -> type[Mode]:
        """The class of :attr:`mode` in :data:`~biorank.retrieval.modes.MODE_TABLE`: what it needs and how it is
        described."""
        return MODE_TABLE[self.mode]

    @property
    def field_set(self) -> str:
        """The BM25 field set: the settings' own, else the mode's default (``text`` for ``bm25``, ``passage`` for
        the modes that score blocks)."""
        return self.fields or self.mode_class.default_fields


class Searcher:
    """Searches one biorank documents index: keeps the index, its record, the query encoder and the transport,
    and runs the settings' mode (a class of :data:`~biorank.retrieval.modes.MODE_TABLE`) over it.

    The constructor reads nothing from the cluster and loads no model: :meth:`open` reads the index's record,
    :meth:`load` loads the encoder (a search loads it on first use where its mode needs one).

    Example:
        >>> searcher = Searcher.open(connect(), "scifact")  # doctest: +SKIP
        >>> hits = searcher.search("vitamin B12 and homocysteine", k=10)  # doctest: +SKIP
    """

    def __init__(self, client: OpenSearch, record: IndexRecord, settings: SearchSettings | None = None, *,
                 encoder: Encoder | None = None, blocks: int | None = None) -> None:
        """A searcher over the index of ``record``, without a request.

        Args:
            client: the cluster's client.
            record: the index's record, as :meth:`open` or :func:`~biorank.store.record.read_record` gives it.
            settings: how to search (the default :class:`SearchSettings` is the exact hybrid).
            encoder: a query encoder loaded already (shared between searchers), checked against the record.
            blocks: how many blocks the index holds, where the caller knows (else asked at the first search
                that needs it).
        """
        if not isinstance(record, IndexRecord):
            # The constructor reads nothing; the old two-argument call is named, not misread.
            raise TypeError(f"Searcher(client, {record!r}) takes an index record; open an index by its name with "
                            f"Searcher.open(client, {record!r})")
        self.client = client
        self.record = record
        self.index = check_index_name(record.index)
        self.settings = settings or SearchSettings()
        verify_record(record)
        self._encoder = encoder
        self._blocks = blocks
        self._stored: set[str] | None = None
        if encoder is not None and self.needs_encoder:
            verify_record(record, model=encoder.model_name)
        if self.settings.boosts is not None and self.settings.mode_class.lexical:
            self.settings.boosts.check(self.settings.field_set, searchable_mesh=record.searchable_mesh)

    @classmethod
    def open(cls, client: OpenSearch, index: str, settings: SearchSettings | None = None, *,
             encoder: Encoder | None = None) -> Searcher:
        """The searcher of index ``index``, its record read from the cluster (the one request it makes).

        Args:
            client: the cluster's client (:func:`~biorank.store.client.connect`).
            index: the documents index's name.
            settings: how to search.
            encoder: a query encoder loaded already; it must be the one the index was built with.

        Returns:
            The searcher; an index biorank did not build, or built otherwise, is refused with one line
            (:class:`~biorank.store.record.IndexMismatch`).

        Example:
            >>> bm25 = Searcher.open(connect(), "scifact", SearchSettings(mode="bm25"))  # doctest: +SKIP
        """
        return cls(client, read_record(client, check_index_name(index)), settings, encoder=encoder)

    @property
    def lam(self) -> float:
        """λ of the hybrid score: the settings' own, else the index's tuned one, else its encoder's default."""
        if self.settings.lam is not None:
            return self.settings.lam
        return self.record.lam

    @property
    def feedback(self) -> Feedback:
        """The pseudo-relevance feedback that runs: the settings' own, else the index's tuned one where the mode
        takes it, else none."""
        if self.settings.feedback is not None:
            return self.settings.feedback
        stored = Feedback.from_record(self.record.feedback)
        mode = self.settings.mode_class
        fits = stored.fits(self.settings.mode, self.settings.field_set, lexical=mode.lexical, vectors=mode.vectors)
        return stored if fits else Feedback()

    @property
    def boosts(self) -> Boosts:
        """The title's and MeSH's BM25 weights: the settings', else the index's tuned ones where they fit, else none."""
        if not self.settings.mode_class.lexical:
            return Boosts()
        if self.settings.boosts is not None:
            return self.settings.boosts
        stored = Boosts.from_record(self.record.boosts)
        return stored if stored.fits(self.settings.field_set, searchable_mesh=self.record.searchable_mesh) else Boosts()

    @property
    def blocks(self) -> int:
        """How many blocks the index holds (asked once, and shared by the searchers :meth:`with_search` makes)."""
        if self._blocks is None:
            self._blocks = int(self.client.count(index=self.index)["count"])
        return self._blocks

    @property
    def route(self) -> str:
        """The mode that runs: the settings' own, except ``hybrid`` over more than ``exact_limit`` blocks, which
        takes ``hybrid-approx``'s candidate union."""
        mode = self.settings.mode_class
        return mode.larger if mode.larger and self.settings.takes_union(self.blocks) else self.settings.mode

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
        return self.settings.mode_class.vectors or self.settings.field_set.startswith("wordpieces")

    @property
    def encoder(self) -> Encoder | None:
        """The query encoder, once given or loaded (:meth:`load`); None before."""
        return self._encoder

    def load(self) -> Encoder:
        """Loads the index's query encoder, unless it is loaded already (a service does this before its first
        request, so that no query's time includes a load).

        The index records how its encoder was named when it was built (a folder, a hub name) and the prefixes it
        used; loading that again must give the same weights, which the record's model identity checks.

        Returns:
            The encoder, shared with every searcher :meth:`with_search` makes afterwards.

        Example:
            >>> Searcher.open(connect(), "scifact").load().model_name  # doctest: +SKIP
        """
        if self._encoder is None:
            from biorank.models.encoder import Encoder
            from biorank.models.prefixes import Prefixes

            encoder = Encoder(self.record.encoder_source, stage="queries",
                              precision=self.settings.placement.precision,
                              device=self.settings.placement.device,
                              prefixes=Prefixes.from_mapping(self.record.prefixes))
            verify_record(self.record, model=encoder.model_name)
            self._encoder = encoder
        return self._encoder

    def mode(self) -> Mode:
        """The mode that runs (:attr:`route`), built from :data:`~biorank.retrieval.modes.MODE_TABLE` with these
        settings: what builds the request bodies and reads the answers."""
        return MODE_TABLE[self.route](fields=self.settings.field_set, lam=self.lam,
                                      filters=tuple(self.settings.filters.clauses()), candidates=self.candidates,
                                      rrf_k=self.settings.rrf_k, boosts=self.boosts)

    def with_settings(self, **changes: Any) -> Searcher:
        """The same index, client and encoder with some settings changed (a λ grid, another mode).

        Example:
            >>> searcher.with_settings(mode="bm25", fields="passage").search("statins")  # doctest: +SKIP
        """
        return self.with_search(replace(self.settings, **changes))

    def with_search(self, settings: SearchSettings) -> Searcher:
        """The same index, client, record and encoder searching with ``settings`` (nothing read or loaded)."""
        return Searcher(self.client, self.record, settings, encoder=self._encoder, blocks=self._blocks)

    # Public API ------------------------------------------------------------------------------------------
    def search(self, query: str, k: int = 10, *, explain: bool = False) -> list[Hit]:
        """The top ``k`` documents for one query, one hit per document, best first.

        Args:
            query: what a person typed (at most :data:`MAX_QUERY_CHARS` characters).
            k: how many documents to return.
            explain: ask OpenSearch how each score was made (``Hit.explanation``).

        Returns:
            The hits, each with the score parts its mode knows (``bm25``, ``dense``, ``hybrid``). The encoder is
            loaded on the first search whose mode needs it (:meth:`load`).

        Example:
            >>> for hit in searcher.search("Does folic acid lower homocysteine?", k=3):  # doctest: +SKIP
            ...     print(hit.rank, hit.id, hit.bm25, hit.dense, hit.title)
        """
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
            results.update(self._run(chunk, k, explain, vectors=vectors))
            if progress is not None:
                progress(len(chunk))
        return results

    def parse(self, query: str) -> ParsedQuery | None:
        """``query`` read under the settings' ``syntax``: its PubMed-syntax tree, or None where it is plain text.

        Args:
            query: what a person typed.

        Returns:
            The parsed query (:class:`~biorank.retrieval.syntax.ParsedQuery`), or None.

        Raises:
            QuerySyntaxError: the query does not parse, or tags a field this index holds no values in (one
                line; the first such check asks the cluster once which metadata the index holds).

        Example:
            >>> searcher.parse("metformin AND 2015:2024[dp]").describe()  # doctest: +SKIP
            'AND(tiab:metformin, dp:2015:2024)'
        """
        parsed = read(query, self.settings.syntax)
        if parsed is None or not parsed.stored_tags:
            return parsed
        stored = self.stored_fields()
        if missing := sorted((t for t in parsed.stored_tags if not set(t.fields) & stored), key=lambda t: t.name):
            raise QuerySyntaxError(f"index {self.index!r} holds no {' or '.join(t.what + 's' for t in missing)}, so "
                                   f"{' and '.join(f'[{t.name}]' for t in missing)} cannot match anything (its "
                                   "source did not carry them, or it was built before biorank stored them)")
        return parsed

    def stored_fields(self) -> set[str]:
        """The metadata fields PubMed's tags search that hold a value in at least one document (asked once)."""
        if self._stored is None:
            body = {"size": 0, "query": {"term": {"block": 0}},
                    "aggs": {f: {"filter": {"exists": {"field": f}}} for f in sorted(STORED)}}
            counts = patiently(lambda: self.client.search(index=self.index, body=body))["aggregations"]
            self._stored = {f for f in STORED if counts[f]["doc_count"]}
        return self._stored

    def sent_requests(self, query: str, k: int = 10) -> list[tuple[str, dict]]:
        """Every request the cluster sees for ``query``, as (method and path, body), in order.

        The two-step modes' second request needs the first's answer, so it is shown with the candidates of a
        real run; what is printed is what was sent.
        """
        sent: list[tuple[str, dict]] = []
        self._run({"q": query}, k, False, sent=sent)
        return sent

    # Internals -------------------------------------------------------------------------------------------
    def search_counted(self, queries: Mapping[str, str], k: int, aggregations: Mapping[str, dict], *,
                       explain: bool = False) -> tuple[dict[str, list[Hit]], dict[str, dict]]:
        """The hits of every query, and ``aggregations`` computed by the very request that ranked them.

        Counts over what the first stage ranks (the facets: :mod:`biorank.stages.facets`) cost no round trip and
        no fetch of their own this way: each query's last request (the one that scores its documents) carries the
        aggregations. A mode that ranks in the client (``rrf``, ``minmax``) or through a search pipeline
        (``os-hybrid``) has no such request, and its queries get no counts.

        Args:
            queries: query id -> text, one batch (one ``_msearch`` per round).
            k: how many documents each query asks for.
            aggregations: the ``aggs`` of a search body.
            explain: ask OpenSearch how each score was made.

        Returns:
            (query id -> hits, query id -> the ``aggregations`` of its answer, where it has one).

        Example:
            >>> years = {"years": {"terms": {"field": "year"}}}
            >>> hits, counts = searcher.search_counted({"q": "statins"}, 10, years)  # doctest: +SKIP
        """
        counted: dict[str, dict] = {}
        return self._run(dict(queries), k, explain, aggregations=dict(aggregations), counted=counted), counted

    def _run(self, queries: dict[str, str], k: int, explain: bool, *, sent: list[tuple[str, dict]] | None = None,
             vectors: Mapping[str, list[float]] | None = None, aggregations: dict | None = None,
             counted: dict[str, dict] | None = None) -> dict[str, list[Hit]]:
        """One batch through the mode: its rounds of requests, then its hits (``aggregations``: added to each
        query's last request, their answers into ``counted``; :meth:`search_counted`)."""
        for qid, text in queries.items():
            _check_query(qid, text)
        if self.settings.filters and not self.record.filterable:
            # Older builds put the metadata on block 0 only: a filter would silently drop every later block.
            raise FilterError(f"index {self.index!r} was built before biorank stored year, journal and MeSH on "
                              f"every block, so it cannot be filtered; rebuild it with `biorank index ... --index "
                              f"{self.index} --recreate`")
        parsed = {q: p for q, text in queries.items() if (p := self.parse(text)) is not None}
        if parsed:
            # A parsed query ranks by its free text and its tree filters; given vectors were of the whole text.
            queries = {q: parsed[q].free_text if q in parsed else text for q, text in queries.items()}
            vectors = {q: v for q, v in (vectors or {}).items() if q not in parsed} or None
        mode = self.mode()
        # A query left without free text (every term tagged) has nothing to encode: BM25 over its tags ranks it.
        alone = {q for q in parsed if not queries[q]} if mode.vectors else set()
        texts = {q: text for q, text in queries.items() if q not in alone}
        if not mode.vectors or not texts:
            vectors = {}
        elif vectors is None or not texts.keys() <= vectors.keys():
            vectors = encode_queries(self.load(), texts)
        for qid in texts:
            if qid in vectors:
                self._check_vector(qid, vectors[qid])
        pieces = self._pieces(queries)
        batch = [Query(q, text, vectors.get(q), pieces.get(q), *self._clauses(parsed.get(q), sent))
                 for q, text in queries.items()]
        hits: dict[str, list[Hit]] = {}
        lexical = Lexical(fields=self.settings.field_set, lam=self.lam, filters=tuple(self.settings.filters.clauses()))
        for runner, group in ((mode, [q for q in batch if q.id not in alone]),
                              (lexical, [q for q in batch if q.id in alone])):
            if group:
                if runner is mode and self.feedback:
                    group = self._fed_back(mode, group, sent)
                extend = (lambda body: {**body, "aggs": aggregations}) if aggregations else None
                answers = self._rounds(runner, group, k, explain, sent, extend)
                hits |= runner.hits(group, k, answers)
                if counted is not None:
                    counted |= {q.id: answers[q.id]["aggregations"] for q in group
                                if "aggregations" in answers.get(q.id, {})}
        return {q: hits[q] for q in queries}

    def _rounds(self, runner: Mode, group: list[Query], k: int, explain: bool, sent: list[tuple[str, dict]] | None,
                extend: Callable[[dict], dict] | None = None) -> dict[Hashable, dict]:
        """The answers of every round of ``runner`` for ``group``; ``extend`` changes the body of each query's own
        request in the last round (aggregations, the feedback pass's vectors)."""
        answers: dict[Hashable, dict] | None = None
        for round_ in range(runner.rounds):
            requests = runner.requests(group, k, answers, explain=explain)
            if extend and round_ == runner.rounds - 1:
                ids = {q.id for q in group}
                requests = [replace(r, body=extend(r.body)) if r.key in ids and not r.alone else r
                            for r in requests]
            answers = self._send(runner, requests, sent)
        assert answers is not None
        return answers

    def _fed_back(self, mode: Mode, group: list[Query], sent: list[tuple[str, dict]] | None) -> list[Query]:
        """``group`` changed by the feedback of its first pass: RM3's terms added to the BM25 leg, the vector moved
        by Rocchio (:mod:`biorank.retrieval.feedback`)."""
        feedback = self.feedback
        answers = self._rounds(mode, group, feedback.depth, False, sent, first_pass_body if feedback.rocchio else None)
        found = mode.hits(group, feedback.depth, answers)
        raw = {q.id: answers[q.id]["hits"]["hits"] for q in group}
        models: dict[str, tuple[dict, dict]] = {}
        if feedback.rm3:
            field_name = self.settings.field_set
            top = {q.id: raw[q.id][: feedback.docs] for q in group}
            body = term_vectors_body(field_name, [h["_id"] for q in group for h in top[q.id]],
                                     [q.text for q in group])
            if sent is not None:
                sent.append((f"GET {self.index}/_mtermvectors", body))
            vectors = iter(patiently(lambda: self.client.mtermvectors(index=self.index, body=body))["docs"])
            documents = {q.id: [(hit.score, *terms_of(next(vectors), field_name))
                                for hit, _ in zip(found[q.id], top[q.id], strict=False)] for q in group}
            for q in group:
                model = relevance_model(documents[q.id], feedback.terms)
                models[q.id] = (model, terms_of(next(vectors), field_name)[0])
        changed = []
        for q in group:
            change: dict[str, Any] = {}
            if q.id in models and q.text and (terms := expansion(*models[q.id], self.settings.field_set,
                                                                 feedback.original_weight)):
                change |= {"lexical": (*q.lexical, *terms), "text_weight": feedback.original_weight}
            if feedback.rocchio and q.vector is not None:
                blocks = [v for h in raw[q.id][: feedback.rocchio_docs] if (v := stored_vector(h)) is not None]
                change["vector"] = rocchio(q.vector, blocks, feedback.rocchio_alpha, feedback.rocchio_beta)
            changed.append(replace(q, **change))
        return changed

    def _clauses(self, parsed: ParsedQuery | None,
                 sent: list[tuple[str, dict]] | None) -> tuple[tuple[dict, ...], tuple[dict, ...]]:
        """A parsed query's filter and its BM25 leg's extra clauses (none for plain text)."""
        if parsed is None:
            return (), ()
        return (parsed.filter_clause(lambda field_name, text: self._stem(field_name, text, sent)),
                ), parsed.lexical_clauses()

    def _stem(self, field_name: str, text: str, sent: list[tuple[str, dict]] | None) -> str:
        """A truncated term as the field's analyser indexes it (``biguanide*`` must find ``biguanid``, the English
        stem), or the term in lower case where the analyser cuts it in pieces or drops it."""
        body = {"field": field_name, "text": text}
        if sent is not None:
            sent.append((f"GET {self.index}/_analyze", body))
        tokens = patiently(lambda: self.client.indices.analyze(index=self.index, body=body))["tokens"]
        return tokens[0]["token"] if len(tokens) == 1 else text.lower()

    def _check_vector(self, qid: str, vector: Sequence[float]) -> None:
        if len(vector) != self.record.dimension:
            # OpenSearch would answer with a stack of script errors per shard.
            raise QueryError(f"the vector of query {qid!r} has {len(vector)} dimensions; index "
                             f"{self.index!r} holds {self.record.dimension}-dimensional vectors of "
                             f"{self.record.model}")
        if abs(math.fsum(x * x for x in vector) - 1) > 1e-3:
            # The exact scores read ⟨q, p⟩ as the cosine of unit vectors (clauses.py), as the encoder gives.
            raise QueryError(f"the vector of query {qid!r} is not a unit vector; normalise it first")

    def _pieces(self, queries: dict[str, str]) -> dict[str, str]:
        if not self.settings.field_set.startswith("wordpieces"):
            return {}
        tokenized = self.load().tokenize_batch(list(queries.values()))
        return {q: " ".join(p) for q, p in zip(queries, tokenized, strict=True)}

    def _send(self, mode: Mode, requests: Sequence[Request],
              sent: list[tuple[str, dict]] | None) -> dict[Hashable, dict]:
        """The answers of one round: the batched requests in one ``_msearch``, then each ``alone`` one by itself."""
        answers: dict[Hashable, dict] = {}
        batched = [r for r in requests if not r.alone]
        lines: list[dict] = []
        for request in batched:
            options = request_options(request.text_scored)
            lines += [{"index": self.index, **options}, request.body]
            if sent is not None:
                sent.append((f"GET {self.index}/_search?{query_string(options)}", request.body))
        responses = msearch(self.client, lines,
                            refused=lambda _, error: BiorankError(refusal(self.settings.mode, self.index, error)))
        for request, response in zip(batched, responses, strict=True):
            answers[request.key] = response
        for request in (r for r in requests if r.alone):
            options = request_options(request.text_scored)
            if sent is not None:
                sent.append((f"GET {self.index}/_search?{query_string(options)}", request.body))
            answers[request.key] = self._search_alone(mode, request.body, options)
        return answers

    def _search_alone(self, mode: Mode, body: dict, options: Mapping[str, Any]) -> dict:
        from opensearchpy.exceptions import TransportError

        try:
            return patiently(lambda: self.client.search(index=self.index, body=body, params=as_params(options)))
        except TransportError as e:
            message = mode.refused(e, self.client)
            if message is None:
                error = e.info.get("error", e.error) if isinstance(e.info, dict) else e.error
                message = refusal(self.settings.mode, self.index, error)
            raise BiorankError(message) from None


def encode_queries(encoder: Encoder, queries: Mapping[str, str]) -> dict[str, list[float]]:
    """Query id -> unit vector, in one encoder call."""
    matrix = encoder.encode(list(queries.values()), role="query")
    return {q: row.tolist() for q, row in zip(queries, matrix, strict=True)}


def _check_query(qid: str, text: str) -> None:
    if not text or not text.strip():
        raise QueryError(f"query {qid!r} is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"query {qid!r} has {len(text)} characters; at most {MAX_QUERY_CHARS} are accepted")
