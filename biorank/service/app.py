"""The search service: a search page and a JSON API over one index, through the CLI's pipeline.

The encoder (and the cross-encoder, once a request asks for it) is loaded once and kept; each request builds
the cheap pipeline of its mode, switches and filters around them. Requests go through each model one at a
time (on a CPU of a few cores, running two queries' encoders at once only makes both slower), but each model
has its own turn: a BM25 request needs none and never waits, and a first-stage request does not wait behind
reranks (seconds each on a CPU). That holds for threads too: a request runs in one of two lanes
(:class:`Lane`), each with threads of its own, the first stage's and the models' (rerank, snippets); a request
waits for its lane's turn without holding a thread, the models' queue is bounded (a request beyond it is
answered 503 with ``Retry-After``), and one whose client goes away before its turn never runs.

Safe by default: read-only (no endpoint writes anything but the query log), bounded (query length, k, page,
the body's bytes however it arrives, chunked too, and the time a request may take to arrive:
:mod:`biorank.service.server`), user text reaches OpenSearch only as match text, script params and filter
terms; every error is ``{"error": "one line"}`` (the page shows the same line); a down cluster is a 503, logged
in one line; an API key, when set, guards everything but ``/api/health``; the page is sent with a content
security policy that allows no script, no framing and no referrer.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field, field_validator, model_validator
from starlette.exceptions import HTTPException

from biorank.config import biorank_version
from biorank.errors import BiorankError
from biorank.models.placement import AskedPlacement
from biorank.pipeline import MAX_DEPTH, Pipeline, PipelineSettings
from biorank.retrieval.filters import Filters
from biorank.retrieval.searcher import MAX_QUERY_CHARS, MODES, Searcher, SearchSettings
from biorank.retrieval.similar import SIMILAR_DEFAULT, SIMILAR_MODES, similar_articles
from biorank.retrieval.syntax import SYNTAXES
from biorank.service.bounds import CLIENT_GONE, PAGE_POLICY, SECURITY_HEADERS, BoundedBody
from biorank.service.downloads import API_FORMATS, download, openapi_downloads
from biorank.service.lanes import Lane, ServiceError
from biorank.service.page import render_page
from biorank.stages.diversity import DEDUPE_THRESHOLD, SORTS
from biorank.stages.facets import FACETS
from biorank.stages.marks import titles_and_fields
from biorank.store.failures import describe
from biorank.store.inspection import NotFound, first_blocks, inspect_document
from biorank.store.query_log import QueryLog

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")
"""FastAPI's API browsers load their scripts from a CDN: they keep the other headers but not the page's policy."""
LOG = logging.getLogger("uvicorn.error")
"""The server's own log (uvicorn configures it): a 503 is one line there, beside uvicorn's."""
METADATA = ("journal", "year", "mesh")
PIPELINES_KEPT = 32
PMID = re.compile(r"^[0-9]{1,9}$")
FIRST_STAGE_THREADS = 16
"""Threads of the first-stage lane: its requests mostly wait for OpenSearch, so several overlap (the encoder is
still taken in turn); more would only contend for the interpreter."""
RERANK_QUEUE = 4
"""Requests that may wait for the models' lane by default, beyond the one it runs: a few reranks' worth of
waiting (seconds each on a CPU), after which a client is better told to come back than kept waiting."""


@dataclass(frozen=True)
class ServiceSettings:
    """What ``biorank serve`` serves: an index, its query encoder's placement, the reranker's settings
    (``pipeline``: the cross-encoder, depth, weight, placement; each request sets the mode, switches and
    filters), optionally behind an API key; ``rerank_queue``: how many requests that rerank or ask for snippets
    may wait for the models beyond the one running (more are answered 503 with ``Retry-After``)."""

    index: str
    api_key: str | None = None
    placement: AskedPlacement = field(default_factory=AskedPlacement)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    query_log: bool = True
    rerank_queue: int = RERANK_QUEUE


class SearchRequest(BaseModel):
    """One search: the fields of ``biorank query``'s options, bounded."""

    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to ask.")
    mode: str = Field("hybrid", pattern="^(" + "|".join(re.escape(m) for m in MODES) + ")$")
    rerank: bool = Field(False, description="Reorder the top hits with the index's cross-encoder.")
    snippets: bool = Field(False, description="Each hit's best sentences, with the query terms' offsets.")
    year: str | None = Field(None, max_length=20, description="2015, 2015-2020, 2015- or -2020.")
    journal: list[str] = Field(default_factory=list, max_length=20, description="Any of these journals.")
    mesh: list[str] = Field(default_factory=list, max_length=20, description="Every one of these MeSH headings.")
    publication_type: list[str] = Field(default_factory=list, max_length=20,
                                        description="Any of these publication types (Review, Clinical Trial...).")
    facets: bool = Field(True, description="Count years, journals, MeSH headings and publication types over the "
                         "first stage's top documents.")
    k: int = Field(10, ge=1, le=MAX_DEPTH, description="Hits per page.")
    page: int = Field(1, ge=1, le=MAX_DEPTH)
    sort: str = Field("relevance", pattern="^(" + "|".join(SORTS) + ")$",
                      description=f"relevance, or date: newest year first within the top {MAX_DEPTH} hits.")
    dedupe: bool | float = Field(
        False, description=f"Drop near-duplicates: true for a cosine of {DEDUPE_THRESHOLD:g} with a better hit, or "
        "a cosine of your own.")
    mmr: float | None = Field(None, ge=0, le=1, description=f"λ of maximal marginal relevance over the top "
                              f"{MAX_DEPTH} hits (1: relevance only, 0: variety only); none keeps the order.")
    syntax: str = Field("auto", pattern="^(" + "|".join(SYNTAXES) + ")$",
                        description="auto: read PubMed's syntax (AND/OR/NOT, phrases, term*, field tags) where the "
                        "query uses it; pubmed: always; plain: never.")
    format: str = Field("json", pattern="^(" + "|".join(API_FORMATS) + ")$",
                        description="json: this answer; csv, ris, bibtex, trec, pmids: the page's hits as a file.")

    @model_validator(mode="after")
    def _bounded(self) -> SearchRequest:
        if self.page * self.k > MAX_DEPTH:
            raise ValueError(f"page times k may be {MAX_DEPTH} at most")
        return self

    @field_validator("mmr", mode="before")
    @classmethod
    def _unset(cls, value: Any) -> Any:
        return None if value == "" else value  # the page's empty field

    @field_validator("dedupe")
    @classmethod
    def _cosine(cls, value: bool | float) -> bool | float:
        if not isinstance(value, bool) and not 0 < value <= 1:
            raise ValueError("dedupe is true, false or a cosine above 0 and at most 1")
        return value

    @property
    def reorder(self) -> dict[str, Any]:
        """The pipeline's ``dedupe``, ``mmr`` and ``sort`` (:mod:`biorank.stages.diversity`)."""
        dedupe = DEDUPE_THRESHOLD if self.dedupe is True else self.dedupe or None
        return {"dedupe": dedupe, "mmr": self.mmr, "sort": self.sort}

    @property
    def filters(self) -> Filters:
        return Filters.parse(self.year or None, tuple(self.journal), tuple(self.mesh), tuple(self.publication_type))


class SearchService:
    """The models, the client and the query log of one server; :meth:`search` answers a request on the calling
    thread, :meth:`answer` in the request's lane (what the application calls)."""

    def __init__(self, client: OpenSearch, settings: ServiceSettings, *, query_log_index: str,
                 searcher: Searcher | None = None) -> None:
        self.client = client
        self.settings = settings
        self.log = _SharedLog(QueryLog(client, query_log_index, command="serve", enabled=settings.query_log))
        self._pipelines_lock = threading.Lock()
        # One turn per model, not one for everything: requests that need another model, or none, go on meanwhile.
        self._encoder_turn = threading.Lock()
        self._rerank_turn = threading.Lock()
        self._searcher = searcher
        self._cross_encoder: Any = None
        self._pipelines: OrderedDict[tuple, Pipeline] = OrderedDict()
        self.first_stage_lane = Lane(FIRST_STAGE_THREADS)
        # One thread: the models take one request at a time anyway (_rerank_turn), so a second would only wait.
        self.model_lane = Lane(1, settings.rerank_queue, kind="searches with a rerank or snippets")

    def load(self) -> Searcher:
        """Opens the index's searcher and loads its encoder, once: ``biorank serve`` calls it before the first
        request, so that no query's time includes a load; otherwise the first request that reaches the cluster
        does, so a server started while the cluster is down answers 503 until it is up.

        Returns:
            The searcher every request's pipeline is built around.

        Example:
            >>> SearchService(client, ServiceSettings(index="scifact"), query_log_index="q").load()  # doctest: +SKIP
        """
        if self._searcher is None:
            self._searcher = Searcher.open(self.client, self.settings.index,
                                           SearchSettings(placement=self.settings.placement))
        self._searcher.load()
        return self._searcher

    async def answer(self, request: SearchRequest, gone: anyio.Event | None = None) -> dict[str, Any]:
        """:meth:`search` in the request's lane: the models' for a rerank or snippets, else the first stage's.

        Args:
            request: the search.
            gone: set when the request's client has gone; a request still waiting for its turn then never runs.

        Raises:
            ServiceError: 503 when the models' queue is full, 499 when the client went away first.
        """
        lane = self.model_lane if request.rerank or request.snippets else self.first_stage_lane
        return await lane.run(functools.partial(self.search, request), gone)

    def search(self, request: SearchRequest) -> dict[str, Any]:
        filters = request.filters
        depth = request.page * request.k
        with self._pipelines_lock:
            pipeline = self._pipeline(request.mode, request.rerank, request.snippets, filters, request.facets,
                                      request.reorder, request.syntax)
        parsed = pipeline.searcher.parse(request.q)
        with self._turn(pipeline):
            answer = pipeline.search(request.q, depth, log=self.log)  # type: ignore[arg-type]
        self.log.flush()
        hits = answer.to_dicts()[depth - request.k:]
        found = titles_and_fields(self.client, self.settings.index, answer.words, [h["id"] for h in hits], METADATA,
                                  refused=BiorankError)
        self._describe(hits, {doc_id: fields for doc_id, (fields, _) in found.items()})
        for hit in hits:
            if spans := found.get(hit["id"], ({}, ()))[1]:
                hit["title_matches"] = [list(span) for span in spans]
        return {"query": request.q, "index": self.settings.index, "system": pipeline.name,
                "lambda": pipeline.searcher.lam, "filters": filters.describe() if filters else None,
                "page": request.page, "k": request.k, "more": len(answer.hits) == depth and depth < MAX_DEPTH,
                "hits": hits, "ms": {stage: round(ms, 1) for stage, ms in answer.ms.items()},
                "notes": pipeline.notes + list(parsed.notes if parsed else ()),
                **({"parsed": parsed.describe()} if parsed else {}),
                **({"facets": answer.facets.to_dict()} if answer.facets else {})}

    def similar(self, doc_id: str, k: int = 10, mode: str = SIMILAR_DEFAULT) -> dict[str, Any]:
        """The articles similar to stored document ``doc_id`` (:mod:`biorank.retrieval.similar`), each with its
        metadata as a search's hits have it.

        Args:
            doc_id: the document's id.
            k: how many.
            mode: dense, hybrid or bm25.

        Returns:
            The document's id and title, the mode, λ, the hits and the milliseconds it took.

        Raises:
            NotFound: no such document (404).

        Example:
            >>> service.similar("4983", k=5)["hits"][0]["id"]  # doctest: +SKIP
        """
        started = time.perf_counter()
        found = similar_articles(self.load().with_settings(mode=mode), doc_id, k)
        answer = found.to_dict()
        self._describe(answer["hits"])
        return answer | {"ms": {"similar": round((time.perf_counter() - started) * 1000, 1)}}

    def _describe(self, hits: list[dict[str, Any]], metadata: dict[str, dict] | None = None) -> None:
        """Each hit's metadata (journal, year, MeSH: ``metadata`` where the caller read it already) and, for a PMID,
        its PubMed address, in place."""
        if metadata is None:
            metadata = first_blocks(self.client, self.settings.index, [h["id"] for h in hits], METADATA)
        for hit in hits:
            hit |= {key: value for key, value in metadata.get(hit["id"], {}).items() if value not in (None, [])}
            if PMID.match(hit["id"]):
                hit["url"] = f"https://pubmed.ncbi.nlm.nih.gov/{hit['id']}/"

    def document(self, doc_id: str) -> dict[str, Any]:
        """The stored fields of one document (block 0's: title, abstract, journal, year, MeSH)."""
        stored = inspect_document(self.client, self.settings.index, doc_id)
        return {"id": doc_id, **{k: v for k, v in stored.fields.items() if k not in ("content_hash", "text")},
                "blocks": len(stored.blocks), "sentences": len(stored.sentences)}

    def health(self) -> dict[str, Any]:
        health = self.client.cluster.health(index=self.settings.index)
        return {"status": health["status"], "index": self.settings.index,
                "encoder": self._searcher.record.model if self._searcher else None}

    def close(self) -> None:
        self.log.close()

    def _turn(self, pipeline: Pipeline) -> Any:
        """The lock of the slowest model ``pipeline`` runs: the cross-encoder's for a rerank or snippets (their
        first stage may encode the query beside a first-stage request: ONNX Runtime sessions run concurrently),
        the encoder's for dense and hybrid, none for BM25."""
        if pipeline.reranker is not None or pipeline.snippets is not None:
            return self._rerank_turn
        if pipeline.searcher.needs_encoder:
            return self._encoder_turn
        return contextlib.nullcontext()

    def _pipeline(self, mode: str, rerank: bool, snippets: bool, filters: Filters, facets: bool = False,
                  reorder: dict[str, Any] | None = None, syntax: str = "auto") -> Pipeline:
        key = (mode, rerank, snippets, filters, facets, tuple((reorder or {}).items()), syntax)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            base = self.load()
            search = replace(base.settings, mode=mode, filters=filters, syntax=syntax)
            settings = replace(self.settings.pipeline, search=search,
                               rerank=rerank, snippets="tuned" if snippets else None, highlight=True,
                               facets=tuple(FACETS) if facets else (), **(reorder or {}))
            # The cross-encoder is loaded by the first pipeline that reranks and shared by every later one.
            pipeline = Pipeline.build(settings, base, cross_encoder=self._cross_encoder)
            self._cross_encoder = self._cross_encoder or pipeline.cross_encoder
            self._pipelines[key] = pipeline
            if len(self._pipelines) > PIPELINES_KEPT:
                self._pipelines.popitem(last=False)
        self._pipelines.move_to_end(key)
        return pipeline


class _SharedLog:
    """The service's query log for requests on several threads at once: :class:`QueryLog` buffers without a lock."""

    def __init__(self, log: QueryLog) -> None:
        self._log = log
        self._lock = threading.Lock()

    def add(self, **record: Any) -> None:
        with self._lock:
            self._log.add(**record)

    def flush(self) -> None:
        with self._lock:
            self._log.flush()

    def close(self) -> None:
        with self._lock:
            self._log.close()


def create_app(service: SearchService) -> FastAPI:
    """The ASGI application of ``service``: ``/`` (the page), ``/api/search``, ``/api/documents/{id}``,
    ``/api/health``, and the OpenAPI description at ``/openapi.json`` (browsable at ``/docs``).

    Args:
        service: the models, client and query log to answer with.

    Returns:
        The application, its bodies bounded however they arrive (:class:`BoundedBody`); serve it with
        :func:`biorank.service.server.serve`, which bounds the time a request's head may take too.

    Example:
        >>> service = SearchService(client, ServiceSettings(index="scifact"),  # doctest: +SKIP
        ...                         query_log_index="biorank-queries")
        >>> app = create_app(service)  # doctest: +SKIP
    """
    from opensearchpy.exceptions import ConnectionError, TransportError

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()  # what the query log holds is written before the process ends

    app = FastAPI(title="biorank", description=f"Search the biomedical abstracts of index {service.settings.index!r}: "
                  "BM25, dense and hybrid first stages, a cross-encoder reranker and answer snippets.",
                  version=biorank_version(), lifespan=lifespan,
                  # A redirect to the path with or without its slash would take its Location from the Host
                  # header, which the client chooses: a path that is not an endpoint is a 404.
                  redirect_slashes=False)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        try:
            _check_key(request, service.settings.api_key)
        except ServiceError as e:
            response = _error(request, e.status, str(e))
        else:
            response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        if request.url.path not in DOCS_PATHS:
            response.headers["content-security-policy"] = PAGE_POLICY
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> Response:
        return _error(request, 422, _first_problem(error))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        # Starlette's own refusals (an unknown path, a method not allowed) in the one shape, not {"detail": ...}.
        return _error(request, error.status_code, str(error.detail))

    @app.exception_handler(BiorankError)
    async def refused(request: Request, error: BiorankError) -> Response:
        status = error.status if isinstance(error, ServiceError) else 404 if isinstance(error, NotFound) else 400
        return _error(request, status, str(error), error.headers if isinstance(error, ServiceError) else None)

    # Handlers of these classes answer, where one of Exception would answer and raise again for the server to log
    # a traceback: a cluster that cannot be reached is the service being unavailable (503), any other answer of
    # the cluster a bad gateway (502), each one line in the server's log. Anything else is a bug and shows as one.
    @app.exception_handler(ConnectionError)
    async def unavailable(request: Request, error: ConnectionError) -> Response:
        message = describe(error) or "OpenSearch cannot be reached"
        LOG.warning("503 %s %s: %s", request.method, request.url.path, message)
        return _error(request, 503, message)

    @app.exception_handler(TransportError)
    async def bad_gateway(request: Request, error: TransportError) -> Response:
        message = describe(error) or str(error)
        LOG.warning("502 %s %s: %s", request.method, request.url.path, message)
        return _error(request, 502, message)

    @app.post("/api/search", summary="Search the index", response_model=None,
              responses={**openapi_downloads(),
                         503: {"description": "Too many requests wait for the models; see Retry-After."}})
    async def api_search(request: SearchRequest, http: Request) -> dict[str, Any] | Response:
        """The hits of one query with every part of their score, their metadata and, when asked, their best
        sentences with offsets — the fields of ``biorank query --json`` — and each stage's milliseconds; with a
        ``format`` other than json, the same hits as a file to download (RIS, BibTeX, CSV, TREC, PMIDs)."""
        answer = await service.answer(request, http.scope.get(CLIENT_GONE))
        if request.format == "json":
            return answer
        return await download(service.client, service.settings.index, request.format, answer,
                              f"biorank-{request.mode}")

    @app.get("/api/documents/{doc_id}", summary="One stored document")
    def api_document(doc_id: str) -> dict[str, Any]:
        return service.document(doc_id)

    @app.get("/api/documents/{doc_id}/similar", summary="Articles similar to one stored document")
    async def api_similar(doc_id: str, http: Request, k: int = Query(10, ge=1, le=MAX_DEPTH),
                          mode: str = Query(SIMILAR_DEFAULT, pattern="^(" + "|".join(SIMILAR_MODES) + ")$"),
                          ) -> dict[str, Any]:
        """The ``k`` documents nearest this one: its stored vector as the query (``mode`` hybrid adds its most
        distinctive terms, with the index's λ; bm25 takes the terms alone), the document itself left out; 404 for
        an unknown id."""
        return await service.first_stage_lane.run(functools.partial(service.similar, doc_id, k, mode),
                                                  http.scope.get(CLIENT_GONE))

    @app.get("/api/health", summary="The cluster's and the index's health")
    def api_health() -> dict[str, Any]:
        return service.health()

    @app.head("/api/health", include_in_schema=False)
    def api_health_head() -> Response:
        """What load balancers and uptime checks probe with: the same checks, no body (503 without a cluster)."""
        service.health()
        return Response()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page(request: Request) -> HTMLResponse:
        params = request.query_params
        form = _page_form(params)
        result, error, status, headers = None, None, 200, {}
        if form["similar"] or form["q"].strip():
            try:
                if form["similar"]:
                    # A hit's "similar articles" link: a GET the page's policy allows without a script.
                    found = await service.first_stage_lane.run(functools.partial(
                        service.similar, form["similar"], 10, SIMILAR_DEFAULT), request.scope.get(CLIENT_GONE))
                    result = found | {"system": f"similar articles ({found['mode']})", "similar_to": found["id"],
                                      "notes": [f"the articles most like {found['id']}: {found['title']}"]}
                else:
                    search = SearchRequest.model_validate({**form, "year": form["year"] or None})
                    result = await service.answer(search, request.scope.get(CLIENT_GONE))
            except ServiceError as e:
                error, status, headers = str(e), e.status, e.headers
            except BiorankError as e:
                error, status = str(e), 404 if isinstance(e, NotFound) else 400
            except ValueError as e:  # pydantic's validation error
                error, status = _first_problem(e), 422
        return HTMLResponse(render_page(form, result, error, index=service.settings.index, modes=MODES,
                                        key=params.get("key")), status_code=status, headers=headers)

    @app.get("/export", include_in_schema=False)
    async def export(request: Request) -> Response:
        """The page's download links: the page's search (its form's fields) as a file in ``format``."""
        from pydantic import ValidationError

        form = _page_form(request.query_params)
        try:
            # A file holds no facet counts: none are made for it.
            search = SearchRequest.model_validate({**form, "year": form["year"] or None, "facets": False,
                                                   "format": request.query_params.get("format", "ris")})
        except ValidationError as e:
            return _error(request, 422, _first_problem(e))
        answer = await service.answer(search, request.scope.get(CLIENT_GONE))
        return await download(service.client, service.settings.index, search.format, answer,
                              f"biorank-{search.mode}")

    app.add_middleware(BoundedBody)
    return app


def _page_form(params: Any) -> dict[str, Any]:
    """The page's form fields from a query string: what the page searches with and its links carry."""
    return {"q": params.get("q", ""), "mode": params.get("mode", "hybrid"), "rerank": "rerank" in params,
            "snippets": "snippets" in params, "year": params.get("year", ""),
            "journal": [j for j in params.getlist("journal") if j.strip()],
            "mesh": [m for m in params.getlist("mesh") if m.strip()], "page": params.get("page", "1"),
            "publication_type": [t for t in params.getlist("publication_type") if t.strip()],
            "facets": params.get("facets") != "0", "sort": params.get("sort", "relevance"),
            "dedupe": "dedupe" in params, "mmr": params.get("mmr", ""), "similar": params.get("similar", "")[:100]}


def _check_key(request: Request, api_key: str | None) -> None:
    if api_key is None or request.url.path == "/api/health":
        return
    given = request.headers.get("x-api-key") or request.query_params.get("key") or ""
    if not hmac.compare_digest(given.encode(), api_key.encode()):
        raise ServiceError(401, "this server needs its API key: send it as the X-API-Key header (or ?key=)")


def _error(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    if request.url.path.startswith("/api/") or request.url.path.startswith("/openapi"):
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    return HTMLResponse(render_page({}, None, message), status_code=status, headers=headers)


def _first_problem(error: Exception) -> str:
    """The first thing wrong with a request, in one line (pydantic lists them all, with their context)."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    return str(error)
