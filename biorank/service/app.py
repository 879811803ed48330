"""The search service: a search page and a JSON API over one index, through the CLI's pipeline.

The encoder (and the cross-encoder, once a request asks for it) is loaded once and kept; each request builds
the cheap pipeline of its mode, switches and filters around them. Requests go through the models one at a
time: on a CPU of a few cores, running two queries' encoders at once only makes both slower.

Safe by default: read-only (no endpoint writes anything but the query log), bounded (query length, k, page,
body size), user text reaches OpenSearch only as match text, script params and filter terms; a down cluster
is a 503 with one line; an API key, when set, guards everything but ``/api/health``.
"""

from __future__ import annotations

import hmac
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field, model_validator

from biorank.config import biorank_version
from biorank.errors import BiorankError
from biorank.pipeline import Pipeline, PipelineSettings
from biorank.retrieval.filters import Filters
from biorank.retrieval.searcher import MAX_QUERY_CHARS, MODES, Searcher, SearchSettings
from biorank.service.page import render_page
from biorank.store.failures import describe
from biorank.store.inspection import NotFound, first_blocks, inspect_document
from biorank.store.query_log import QueryLog

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

MAX_DEPTH = 100
"""Hits per query at most (page times k): deeper pages cost the reranker and the snippets more than they help."""
MAX_BODY_BYTES = 64 * 1024
METADATA = ("journal", "year", "mesh")
PIPELINES_KEPT = 32
PMID = re.compile(r"^\d{1,9}$")


@dataclass(frozen=True)
class ServiceSettings:
    """What ``biorank serve`` serves: an index, its query encoder's backend, the reranker's settings (``pipeline``:
    the cross-encoder, depth, weight, backend; each request sets the mode, switches and filters), optionally
    behind an API key."""

    index: str
    api_key: str | None = None
    precision: str = "auto"
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    query_log: bool = True


class SearchRequest(BaseModel):
    """One search: the fields of ``biorank query``'s options, bounded."""

    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to ask.")
    mode: str = Field("hybrid", pattern="^(" + "|".join(re.escape(m) for m in MODES) + ")$")
    rerank: bool = Field(False, description="Reorder the top hits with the index's cross-encoder.")
    snippets: bool = Field(False, description="Each hit's best sentences, with the query terms' offsets.")
    year: str | None = Field(None, max_length=20, description="2015, 2015-2020, 2015- or -2020.")
    journal: list[str] = Field(default_factory=list, max_length=20, description="Any of these journals.")
    mesh: list[str] = Field(default_factory=list, max_length=20, description="Every one of these MeSH headings.")
    k: int = Field(10, ge=1, le=MAX_DEPTH, description="Hits per page.")
    page: int = Field(1, ge=1, le=MAX_DEPTH)

    @model_validator(mode="after")
    def _bounded(self) -> SearchRequest:
        if self.page * self.k > MAX_DEPTH:
            raise ValueError(f"page times k may be {MAX_DEPTH} at most")
        return self

    @property
    def filters(self) -> Filters:
        return Filters.parse(self.year or None, tuple(self.journal), tuple(self.mesh))


class ServiceError(BiorankError):
    """A request the service refuses (401, 404, 413) with the status it answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class SearchService:
    """The models, the client and the query log of one server; :meth:`search` answers a request."""

    def __init__(self, client: OpenSearch, settings: ServiceSettings, *, query_log_index: str,
                 searcher: Searcher | None = None) -> None:
        self.client = client
        self.settings = settings
        self.log = QueryLog(client, query_log_index, command="serve", enabled=settings.query_log)
        self._lock = threading.Lock()
        self._searcher = searcher
        self._cross_encoder: Any = None
        self._pipelines: OrderedDict[tuple, Pipeline] = OrderedDict()

    @property
    def searcher(self) -> Searcher:
        """The index's searcher with its encoder loaded; made at the first request that reaches the cluster, so a
        server started while the cluster is down answers 503 until it is up."""
        if self._searcher is None:
            self._searcher = Searcher(self.client, self.settings.index,
                                      SearchSettings(precision=self.settings.precision))
        self._searcher.encoder  # noqa: B018 - loaded once, never inside a query's time
        return self._searcher

    def search(self, request: SearchRequest) -> dict[str, Any]:
        filters = request.filters
        depth = request.page * request.k
        with self._lock:
            pipeline = self._pipeline(request.mode, request.rerank, request.snippets, filters)
            answer = pipeline.search(request.q, depth, log=self.log)
            self.log.flush()
        hits = answer.to_dicts()[depth - request.k:]
        metadata = first_blocks(self.client, self.settings.index, [h["id"] for h in hits], METADATA)
        for hit in hits:
            hit |= {key: value for key, value in metadata.get(hit["id"], {}).items() if value not in (None, [])}
            if PMID.match(hit["id"]):
                hit["url"] = f"https://pubmed.ncbi.nlm.nih.gov/{hit['id']}/"
        return {"query": request.q, "index": self.settings.index, "system": pipeline.name,
                "lambda": pipeline.searcher.lam, "filters": filters.describe() if filters else None,
                "page": request.page, "k": request.k, "more": len(answer.hits) == depth and depth < MAX_DEPTH,
                "hits": hits, "ms": {stage: round(ms, 1) for stage, ms in answer.ms.items()},
                "notes": pipeline.notes}

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

    def _pipeline(self, mode: str, rerank: bool, snippets: bool, filters: Filters) -> Pipeline:
        key = (mode, rerank, snippets, filters)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            base = self.searcher
            settings = replace(self.settings.pipeline, search=replace(base.settings, mode=mode, filters=filters),
                               rerank=rerank, snippets="tuned" if snippets else None, highlight=True)
            # The cross-encoder is loaded by the first pipeline that reranks and shared by every later one.
            pipeline = Pipeline(settings, base, cross_encoder=self._cross_encoder)
            self._cross_encoder = self._cross_encoder or pipeline.cross_encoder
            self._pipelines[key] = pipeline
            if len(self._pipelines) > PIPELINES_KEPT:
                self._pipelines.popitem(last=False)
        self._pipelines.move_to_end(key)
        return pipeline


def create_app(service: SearchService) -> FastAPI:
    """The ASGI application of ``service``: ``/`` (the page), ``/api/search``, ``/api/documents/{id}``,
    ``/api/health``, and the OpenAPI description at ``/openapi.json`` (browsable at ``/docs``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()  # what the query log holds is written before the process ends

    app = FastAPI(title="biorank", description=f"Search the biomedical abstracts of index {service.settings.index!r}: "
                  "BM25, dense and hybrid first stages, a cross-encoder reranker and answer snippets.",
                  version=biorank_version(), lifespan=lifespan)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        try:
            _check_size(request)
            _check_key(request, service.settings.api_key)
        except ServiceError as e:
            return _error(request, e.status, str(e))
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> Response:
        return _error(request, 422, _first_problem(error))

    @app.exception_handler(BiorankError)
    async def refused(request: Request, error: BiorankError) -> Response:
        status = error.status if isinstance(error, ServiceError) else 404 if isinstance(error, NotFound) else 400
        return _error(request, status, str(error))

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> Response:
        # opensearch-py's errors: a cluster that cannot be reached is the service being unavailable (503); any
        # other answer of the cluster is a bad gateway (502). Anything else is a bug and shows as one.
        from opensearchpy.exceptions import ConnectionError, TransportError

        if isinstance(error, ConnectionError):
            return _error(request, 503, describe(error) or "OpenSearch cannot be reached")
        if isinstance(error, TransportError):
            return _error(request, 502, describe(error) or str(error))
        raise error

    @app.post("/api/search", summary="Search the index")
    def api_search(request: SearchRequest) -> dict[str, Any]:
        """The hits of one query with every part of their score, their metadata and, when asked, their best
        sentences with offsets — the fields of ``biorank query --json`` — and each stage's milliseconds."""
        return service.search(request)

    @app.get("/api/documents/{doc_id}", summary="One stored document")
    def api_document(doc_id: str) -> dict[str, Any]:
        return service.document(doc_id)

    @app.get("/api/health", summary="The cluster's and the index's health")
    def api_health() -> dict[str, Any]:
        return service.health()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page(request: Request) -> HTMLResponse:
        params = request.query_params
        form = {"q": params.get("q", ""), "mode": params.get("mode", "hybrid"), "rerank": "rerank" in params,
                "snippets": "snippets" in params, "year": params.get("year", ""),
                "journal": [j for j in params.getlist("journal") if j.strip()],
                "mesh": [m for m in params.getlist("mesh") if m.strip()], "page": params.get("page", "1")}
        result, error, status = None, None, 200
        if form["q"].strip():
            try:
                result = service.search(SearchRequest.model_validate({**form, "year": form["year"] or None}))
            except BiorankError as e:
                error, status = str(e), 400
            except ValueError as e:  # pydantic's validation error
                error, status = _first_problem(e), 422
        return HTMLResponse(render_page(form, result, error, index=service.settings.index, modes=MODES,
                                        key=params.get("key")), status_code=status)

    return app


def _check_size(request: Request) -> None:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise ServiceError(413, f"a request body may have {MAX_BODY_BYTES} bytes at most")


def _check_key(request: Request, api_key: str | None) -> None:
    if api_key is None or request.url.path == "/api/health":
        return
    given = request.headers.get("x-api-key") or request.query_params.get("key") or ""
    if not hmac.compare_digest(given.encode(), api_key.encode()):
        raise ServiceError(401, "this server needs its API key: send it as the X-API-Key header (or ?key=)")


def _error(request: Request, status: int, message: str) -> Response:
    if request.url.path.startswith("/api/") or request.url.path.startswith("/openapi"):
        return JSONResponse({"error": message}, status_code=status)
    return HTMLResponse(render_page({}, None, message), status_code=status)


def _first_problem(error: Exception) -> str:
    """The first thing wrong with a request, in one line (pydantic lists them all, with their context)."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    return str(error)

