"""One pipeline: the first stage, then (where asked) its facets, then the cross-encoder, then (where asked) near-
duplicates dropped, MMR and the date order (:mod:`biorank.stages.diversity`), then snippets — what
``query``, ``search``, ``eval``, ``export-bioasq``, ``tune-snippets`` and the server all run, so what is served is
what is evaluated.

A pipeline is built once, from a system name or settings: each stage is constructed once (its models loaded
before any query, so no query's time includes a load), every stage has the same shape (``run(answers, depth)``
over a batch of :class:`~biorank.types.Answer`), and one clock times them: each stage over a batch, its time
shared equally among the batch's queries.

System names are a small grammar: a first stage (:data:`BASE_SYSTEMS`), then its feedback (``+rm3``,
``+rocchio`` or ``+rm3+rocchio``: :mod:`biorank.retrieval.feedback`), then ``+rerank``, then ``+snippets``
with an optional weights variant (``-equal``, ``-relevance``, ``-similarity``, ``-lexical``, ``-metric``,
``-document``), then ``+rescore``: ``hybrid+rm3+rerank+snippets-lexical+rescore``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from biorank.errors import BiorankError
from biorank.models.cross_encoder import LENGTHS
from biorank.models.placement import AskedPlacement
from biorank.retrieval.feedback import NAMES, Feedback
from biorank.retrieval.searcher import SearchSettings
from biorank.stages.diversity import CANDIDATES, Reorder, check_reorder
from biorank.stages.facets import FACET_CANDIDATES, FacetCounter, check_candidates, parse_facets
from biorank.stages.rerank import DEFAULT_DEPTH, DEFAULT_LENGTH, Reranker, check_weight
from biorank.stages.snippets import DOCUMENTS_PER_QUERY, WEIGHT_VARIANTS, SnippetScorer, SnippetWeights
from biorank.types import Advance, Answer

if TYPE_CHECKING:
    from biorank.models.cross_encoder import CrossEncoder
    from biorank.retrieval.searcher import Searcher
    from biorank.stages.snippets import SentenceCandidates
    from biorank.store.query_log import QueryLog

BASE_SYSTEMS: dict[str, dict[str, Any]] = {
    "bm25": {"mode": "bm25", "fields": "text"},
    "bm25-passage": {"mode": "bm25", "fields": "passage"},
    "bm25-wordpieces": {"mode": "bm25", "fields": "wordpieces"},
    "bm25-bigrams": {"mode": "bm25", "fields": "wordpieces+bigrams"},
    "dense": {"mode": "dense"},
    "dense-exact": {"mode": "dense-exact"},
    "hybrid": {"mode": "hybrid"},
    "hybrid-approx": {"mode": "hybrid-approx"},
    "rrf": {"mode": "rrf"},
    "minmax": {"mode": "minmax"},
    "os-hybrid": {"mode": "os-hybrid"},
}
"""The first-stage systems by name, with which every system name starts; the index's tuned λ applies unless the
settings name one."""
RERANK = "+rerank"
SNIPPETS = "+snippets"
RESCORE = "+rescore"
BATCH = 32
"""Queries per batch through every stage: one ``_msearch``, one read of the texts to rerank."""
MAX_DEPTH = CANDIDATES
"""Hits per query at most when paging (page times k): deeper pages cost the reranker and the snippets more than
they help, and every page is then a slice of the one list the reordering stages work on."""


class PipelineError(BiorankError):
    """A system name outside the grammar, or settings no pipeline can run."""


def page_depth(page: int, k: int) -> int:
    """How many hits to ask a pipeline for to show page ``page`` of ``k`` (its last ``k`` are the page).

    Args:
        page: the page, from 1.
        k: hits per page.

    Returns:
        ``page * k``.

    Raises:
        PipelineError: a page below 1, or a later page reaching past :data:`MAX_DEPTH` hits (the first page takes
            any ``k``, as a ranking of the whole ``k`` does).

    Example:
        >>> page_depth(3, 10)
        30
    """
    if page < 1:
        raise PipelineError(f"pages count from 1, not {page}")
    if page > 1 and page * k > MAX_DEPTH:
        raise PipelineError(f"page times k may be {MAX_DEPTH} at most (page {page} of {k} is {page * k})")
    return page * k


@dataclass(frozen=True)
class PipelineSettings:
    """What a pipeline runs. ``reranker=None`` takes the index's own (else the shipped one); ``rerank_weight=None``
    the one ``tune-rerank`` stored for the index and that cross-encoder (else
    :data:`~biorank.stages.rerank.DEFAULT_WEIGHT`); ``snippets`` is a weights variant
    (:data:`~biorank.stages.snippets.WEIGHT_VARIANTS`), None for no snippets; ``rescore`` reorders the top
    documents by S_doc (implies snippets)."""

    search: SearchSettings = field(default_factory=SearchSettings)
    rerank: bool = False
    reranker: str | None = None
    rerank_depth: int = DEFAULT_DEPTH
    rerank_weight: float | None = None
    rerank_length: int = DEFAULT_LENGTH
    """Word pieces of query + title + abstract the cross-encoder reads (see
    :data:`~biorank.stages.rerank.DEFAULT_LENGTH`)."""
    placement: AskedPlacement = field(default_factory=AskedPlacement)
    """Where the cross-encoder runs (rerank and the snippets' relevance perspective; the query encoder's is the
    ``search`` settings' own): :mod:`biorank.models.placement`."""
    snippets: str | None = None
    rescore: bool = False
    highlight: bool = False
    """Mark the query terms in snippets (what a person reads; evaluation does without)."""
    explain: bool = False
    """Ask OpenSearch how each first-stage score was made."""
    facets: tuple[str, ...] = ()
    """Facets to count over the first stage's top ``facet_candidates`` documents (:mod:`biorank.stages.facets`:
    ``year``, ``journal``, ``mesh``, ``pt``); none by default."""
    facet_candidates: int = FACET_CANDIDATES
    dedupe: float | None = None
    """Drop the hits whose block-0 vector's cosine with a better hit kept is at least this
    (:mod:`biorank.stages.diversity`, after the reranker); None keeps them."""
    mmr: float | None = None
    """λ of maximal marginal relevance, reordering the top candidates after the reranker; None keeps the order."""
    sort: str = "relevance"
    """``relevance``, or ``date``: newest first within the top candidates (:mod:`biorank.stages.diversity`)."""

    def __post_init__(self) -> None:
        check_reorder(self.dedupe, self.mmr, self.sort)
        if self.rescore and self.sort != "relevance":
            raise PipelineError("--rescore orders the top hits by their snippets' score, --sort date by year: "
                                "choose one")
        if self.facets:
            object.__setattr__(self, "facets", parse_facets(self.facets))
            check_candidates(self.facet_candidates)
        if self.rescore and self.snippets is None:
            object.__setattr__(self, "snippets", "tuned")
        if self.snippets is not None and self.snippets not in WEIGHT_VARIANTS:
            raise PipelineError(f"unknown snippet weights {self.snippets!r}; choose one of "
                                f"{', '.join(WEIGHT_VARIANTS)}")
        if self.rerank_depth < 1:
            raise PipelineError(f"the rerank depth must be at least 1, not {self.rerank_depth}")
        if not LENGTHS[0] <= self.rerank_length <= LENGTHS[1]:
            raise PipelineError(f"the cross-encoder reads {LENGTHS[0]} to {LENGTHS[1]} word pieces, not "
                                f"{self.rerank_length}")
        if self.rerank_weight is not None:
            check_weight(self.rerank_weight, PipelineError)

    @classmethod
    def parse(cls, name: str, **changes: Any) -> PipelineSettings:
        """The settings of system ``name`` (see the module's grammar); ``changes`` set the other fields."""
        stages, found, tail = name.strip().partition(SNIPPETS)
        variant, rescore = None, False
        if found:
            rescore = tail.endswith(RESCORE)
            tail = tail.removesuffix(RESCORE)
            variant = tail.removeprefix("-") if tail.startswith("-") else "tuned" if not tail else ""
            if variant not in WEIGHT_VARIANTS or tail == "-tuned":
                raise PipelineError(f"unknown system {name!r}: +snippets takes "
                                  f"{', '.join('-' + v for v in WEIGHT_VARIANTS[1:])} (or nothing, the tuned "
                                  f"weights) and then {RESCORE}")
        first = stages.removesuffix(RERANK)
        base, _, feedback = first.partition("+")
        if base not in BASE_SYSTEMS or stages not in (first, first + RERANK) or (first != base
                                                                             and feedback not in NAMES[1:]):
            raise PipelineError(f"unknown system {name!r}; known: {', '.join(system_names())}, +rm3, +rocchio or "
                                f"+rm3+rocchio after the first stage, and +snippets with -equal or one perspective "
                                f"and {RESCORE}")
        search = replace(changes.pop("search", SearchSettings()), **BASE_SYSTEMS[base])
        if feedback:
            search = replace(search, feedback=Feedback.named(feedback))
        return cls(**{"search": search, "rerank": stages.endswith(RERANK), "snippets": variant, "rescore": rescore,
                      **changes})

    def with_system(self, name: str) -> PipelineSettings:
        """The stages of system ``name`` with everything else of these settings (λ, K, reranker, depth, weight,
        length, placement): how ``eval`` runs several systems with one set of options."""
        system = PipelineSettings.parse(name)
        feedback = system.search.feedback or self.search.feedback
        return replace(self, search=replace(self.search, mode=system.search.mode, fields=system.search.fields,
                                            feedback=feedback),
                       rerank=system.rerank, snippets=system.snippets, rescore=system.rescore)

    @property
    def name(self) -> str:
        """The system name of these settings (the grammar's), or the mode and field set where no name fits."""
        # Settings naming no field set match a stage naming none or the mode's default ("bm25" is text).
        fields = (self.search.fields,) if self.search.fields else (None, self.search.field_set)
        base = next((n for n, s in BASE_SYSTEMS.items() if s["mode"] == self.search.mode and s.get("fields") in fields),
                    None)
        name = base or f"{self.search.mode}({self.search.field_set})"
        name += f"+{self.search.feedback.name}" if self.search.feedback else ""
        name += RERANK if self.rerank else ""
        if self.snippets is not None:
            name += SNIPPETS + ("" if self.snippets == "tuned" else f"-{self.snippets}")
            name += RESCORE if self.rescore else ""
        return name


def system_names() -> list[str]:
    """Every first stage, with and without the reranker and snippets."""
    return [f"{name}{rerank}{snippets}" for name in BASE_SYSTEMS for rerank in ("", RERANK)
            for snippets in ("", SNIPPETS)]


def with_snippets(name: str) -> str:
    """System ``name``, with snippets if it has none."""
    return name if SNIPPETS in name else name + SNIPPETS


class Stage(Protocol):
    """A step of the pipeline: changes each answer of a batch in place (its hits, its snippets)."""

    name: str

    def run(self, answers: Sequence[Answer], depth: int) -> None: ...


class FirstStage:
    """The searcher as a stage: the top ``depth`` hits of each query, and its facets where asked: counted by the
    request that ranks the hits, or, for a mode without one, over the top ``facets.candidates`` it ranks and one
    request more (:mod:`biorank.stages.facets`)."""

    name = "first_stage"

    def __init__(self, searcher: Searcher, *, explain: bool = False, facets: FacetCounter | None = None) -> None:
        self.searcher = searcher
        self.explain = explain
        self.facets = facets

    def run(self, answers: Sequence[Answer], depth: int) -> None:
        queries = {a.query_id: a.query for a in answers}
        counted: dict[str, dict] | None = None
        if self.facets is not None and self.facets.in_request(self.searcher):
            found, counted = self.searcher.search_counted(queries, depth, self.facets.aggregations(),
                                                          explain=self.explain)
        else:
            breadth = max(depth, self.facets.candidates) if self.facets is not None else depth
            found = self.searcher.search_many(queries, breadth, explain=self.explain, batch=max(len(answers), 1))
        for answer in answers:
            if counted is not None and self.facets is not None:
                answer.facets = self.facets.read(counted[answer.query_id])
            answer.hits = found[answer.query_id]
            if (parsed := self.searcher.parse(answer.query)) is not None:
                answer.ranked_by = parsed.words
        if self.facets is not None and counted is None:
            self.facets.count(answers, depth)


class Pipeline:
    """First stage (and its facets) → rerank → reorder → snippets over one index, built once and run for any number
    of queries.

    >>> pipeline = Pipeline.build("hybrid+rerank+snippets", Searcher.open(connect(), "scifact"))  # doctest: +SKIP
    >>> answer = pipeline.search("Does vitamin D prevent fractures?", k=10)  # doctest: +SKIP
    >>> answer.hits[0].id, answer.top_snippets(3)  # doctest: +SKIP
    """

    def __init__(self, settings: PipelineSettings, searcher: Searcher, *, reranker: Reranker | None = None,
                 snippets: SnippetScorer | None = None) -> None:
        # Reads nothing and loads nothing: the stages come built (:meth:`build` chooses, opens and loads them), as
        # Searcher.open reads what a Searcher's constructor does not. Stages the settings ask for and that were not
        # given are refused, never silently left out.
        if (settings.rerank and reranker is None) or (settings.snippets is not None and snippets is None):
            raise PipelineError(f"{settings.name} needs its stages built: open it with Pipeline.build")
        self.settings = settings
        self.searcher = searcher
        # Facets load nothing: the settings that ask for them build them here.
        self.facets = FacetCounter(searcher.client, searcher.index, settings.facets,
                                   candidates=settings.facet_candidates) if settings.facets else None
        self.first = FirstStage(searcher, explain=settings.explain, facets=self.facets)
        self.reranker = reranker
        self.snippets = snippets
        # Reordering loads nothing either: its hits' vectors are read per batch.
        self.reorder = Reorder(searcher.client, searcher.index, dedupe=settings.dedupe, mmr=settings.mmr,
                               sort=settings.sort) if settings.dedupe is not None or settings.mmr is not None \
            or settings.sort != "relevance" else None
        self.stages: list[Stage] = [s for s in (self.first, reranker, self.reorder, snippets) if s is not None]

    @classmethod
    def build(cls, system: str | PipelineSettings, searcher: Searcher, *, cross_encoder: CrossEncoder | None = None,
              snippet_weights: SnippetWeights | None = None, **changes: Any) -> Pipeline:
        """The pipeline of a system name (``hybrid+rerank+snippets``) or of settings, its stages opened and its
        models loaded before any query (so no query's time includes a load); ``changes`` set settings fields
        (``search=SearchSettings(lam=0.1)``, ``rerank_depth=30``). ``cross_encoder`` shares one loaded model
        between pipelines (``eval`` runs several)."""
        parse = PipelineSettings.parse if isinstance(system, str) else replace
        settings = parse(system, **changes)
        searcher = searcher.with_search(settings.search)
        reranker = None
        if settings.rerank:
            # The cross-encoder and its weight are chosen where the reranker chooses them for every path: a shared
            # one (eval's pipelines) read at this length, else the settings' model, else the index's own.
            reranker = Reranker.for_index(searcher, cross_encoder or settings.reranker,
                                          precision=settings.placement.precision,
                                          device=settings.placement.device,
                                          depth=settings.rerank_depth, weight=settings.rerank_weight,
                                          length=settings.rerank_length)
            cross_encoder = reranker.cross_encoder
        snippets = _snippet_stage(searcher, settings, cross_encoder, snippet_weights)
        if searcher.needs_encoder or (snippets is not None and snippets.needs_encoder):
            searcher.load()
        return cls(settings, searcher, reranker=reranker, snippets=snippets)

    @property
    def name(self) -> str:
        """The system name of what this pipeline runs (``hybrid+rerank+snippets``): :attr:`PipelineSettings.name`
        with the feedback that runs, the index's tuned one where the settings name none (the query log and the
        service say what ran)."""
        search = replace(self.settings.search, feedback=self.searcher.feedback or None)
        return replace(self.settings, search=search).name

    @property
    def cross_encoder(self) -> CrossEncoder | None:
        """The reranker's cross-encoder, loaded at document length, for other pipelines to share (the snippet
        stage reads it at sentence length without loading it again)."""
        return self.reranker.cross_encoder if self.reranker is not None else None

    @property
    def notes(self) -> list[str]:
        """What the user should know about how answers are made (hybrid's candidate union over a large index, a
        perspective that could not be computed)."""
        route = [self.searcher.route_note] if self.searcher.route_note else []
        if self.reorder is not None:
            route.append(f"{self.reorder.describe()} within the top {CANDIDATES} hits")
        return route + (list(self.snippets.notes) if self.snippets is not None else [])

    def search(self, query: str, k: int = 10, *, log: QueryLog | None = None) -> Answer:
        """One query's answer: its top ``k`` hits, snippets where the pipeline makes them, and each stage's ms."""
        return self._run({"q": query}, k, self.stages, log=log, single=True)["q"]

    def run(self, queries: Mapping[str, str], k: int = 10, *, progress: Advance | None = None,
            log: QueryLog | None = None) -> dict[str, Answer]:
        """Every query's answer, :data:`BATCH` queries at a time through every stage. ``progress`` is told about
        queries done by each stage (so ``len(queries) * len(self.stages)`` in all); ``log`` gets a record
        per query as each batch is done."""
        return self._run(queries, k, self.stages, progress=progress, log=log)

    def candidates(self, queries: Mapping[str, str], k: int, *, perspectives: Sequence[str],
                   progress: Advance | None = None) -> dict[str, SentenceCandidates]:
        """Each query's candidate sentences with the raw values of ``perspectives``, from the top documents of
        the stages before the snippets: what ``tune-snippets`` tunes on."""
        if self.snippets is None:
            raise PipelineError(f"{self.name} makes no snippets: name a system with {SNIPPETS}")
        before = [s for s in self.stages if s is not self.snippets]
        answers = self._run(queries, k, before, progress=progress)
        return self.snippets.collect(queries, {q: a.hits for q, a in answers.items()}, perspectives=perspectives,
                                     progress=progress)

    def _run(self, queries: Mapping[str, str], k: int, stages: Sequence[Stage], *, progress: Advance | None = None,
             log: QueryLog | None = None, single: bool = False) -> dict[str, Answer]:
        if k < 1:
            raise PipelineError(f"k must be at least 1, not {k}")
        depth = self.depth(k)
        answers: dict[str, Answer] = {}
        items = list(queries.items())
        for start in range(0, len(items), BATCH):
            batch = [Answer(qid, text) for qid, text in items[start : start + BATCH]]
            for stage in stages:
                started = time.perf_counter()
                stage.run(batch, depth)
                share = (time.perf_counter() - started) * 1000 / len(batch)
                for answer in batch:
                    answer.ms[stage.name] = share
                if progress is not None:
                    progress(len(batch))
            for answer in batch:
                answer.hits = answer.hits[:k]
                answer.ms["total"] = sum(answer.ms.values())
                answers[answer.query_id] = answer
            if log is not None:
                self.log(log, batch, k, single=single)
        return answers

    def sent_requests(self, query: str, k: int = 10) -> list[tuple[str, dict]]:
        """Every first-stage request for ``query`` as (method and path, body), ready for Dev Tools."""
        return self.searcher.sent_requests(query, self.depth(k))

    def depth(self, k: int) -> int:
        """How many hits the first stage returns for the top ``k``: more where the reranker reorders more, or the
        reordering works on its candidates (:data:`~biorank.stages.diversity.CANDIDATES`)."""
        return max(k, self.reranker.depth if self.reranker is not None else k,
                   self.reorder.depth if self.reorder is not None else k)

    def log(self, log: QueryLog, answers: Sequence[Answer], k: int, *, single: bool = False) -> None:
        """Buffer a query-log record per answer: where and how it was asked, each stage's ms, its top hits; a
        ``single`` query (``biorank query``) is logged without an id or a system name."""
        search = self.searcher.settings
        # A record of a mode that λ does not weigh, or BM25 does not score, carries none rather than one that did
        # not count.
        mode = search.mode_class
        system = None if single else self.name
        for answer in answers:
            log.add(index=self.searcher.index, query=answer.query, mode=search.mode, k=k, latency_ms=answer.ms,
                    hits=answer.hits, lam=self.searcher.lam if mode.weighs_lambda else None,
                    query_id=None if single else answer.query_id, system=system,
                    bm25_fields=search.field_set if mode.lexical else None, batch=len(answers))


def _snippet_stage(searcher: Searcher, settings: PipelineSettings, cross_encoder: CrossEncoder | None,
                   weights: SnippetWeights | None) -> SnippetScorer | None:
    """The snippet stage of ``settings`` (None without snippets), its relevance perspective scored by the
    pipeline's cross-encoder at sentence length, else the index's, else the shipped one."""
    from biorank.stages.snippets import sentence_reranker

    if settings.snippets is None:
        return None
    weights = weights or SnippetWeights.named(settings.snippets, searcher.record)
    relevance = sentence_reranker(searcher.record, cross_encoder or settings.reranker,
                                  precision=settings.placement.precision,
                                  device=settings.placement.device) if weights.uses("relevance") else None
    return SnippetScorer.open(searcher, weights=weights, reranker=relevance, rescore=settings.rescore,
                              depth=DOCUMENTS_PER_QUERY, highlight=settings.highlight)
