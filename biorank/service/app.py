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

import asyncio
import contextlib
import functools
import hmac
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field, model_validator
from starlette.exceptions import HTTPException

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
BODY_TIMEOUT_S = 10.0
"""How long a request's body may take to arrive, all of it: a client that sends a byte now and then must not
hold a worker (and the body in memory) for ever."""
SECURITY_HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}
"""On every answer. No referrer also keeps a ``?key=`` in the page's address out of the sites its links lead to."""
PAGE_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
               "base-uri 'none'; frame-ancestors 'none'")
"""The page's content security policy: its one inline style sheet, no script at all, forms only to itself."""
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")
"""FastAPI's API browsers load their scripts from a CDN: they keep the other headers but not the page's policy."""
LOG = logging.getLogger("uvicorn.error")
"""The server's own log (uvicorn configures it): a 503 is one line there, beside uvicorn's."""
METADATA = ("journal", "year", "mesh")
PIPELINES_KEPT = 32
PMID = re.compile(r"^\d{1,9}$")
FIRST_STAGE_THREADS = 16
"""Threads of the first-stage lane: its requests mostly wait for OpenSearch, so several overlap (the encoder is
still taken in turn); more would only contend for the interpreter."""
RERANK_QUEUE = 4
"""Requests that may wait for the models' lane by default, beyond the one it runs: a few reranks' worth of
waiting (seconds each on a CPU), after which a client is better told to come back than kept waiting."""
RETRY_AFTER_S = 2
"""What a 503 of a full queue asks its client to wait: about one rerank on a CPU, when a place may have freed."""
CLIENT_GONE = "biorank.client_gone"
"""The scope's key of the event :class:`BoundedBody` sets when a request's client closes its connection."""
T = TypeVar("T")


@dataclass(frozen=True)
class ServiceSettings:
    """What ``biorank serve`` serves: an index, its query encoder's backend and device, the reranker's settings
    (``pipeline``: the cross-encoder, depth, weight, backend, device; each request sets the mode, switches and
    filters), optionally behind an API key; ``rerank_queue``: how many requests that rerank or ask for snippets
    may wait for the models beyond the one running (more are answered 503 with ``Retry-After``)."""

    index: str
    api_key: str | None = None
    precision: str = "auto"
    device: str = "auto"
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
    """A request the service refuses (401, 404, 413, 503) with the status it answers, and the seconds after
    which it is worth trying again, when there are such (a full queue)."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after)} if self.retry_after is not None else {}


class Lane:
    """Threads of its own for one kind of request, and a queue before them, bounded or not.

    A request waits for its turn on the event loop, holding no thread: a lane full of slow requests takes
    nothing from another lane (anyio's shared pool of threads did: waiting reranks held every thread of it). A
    request whose client goes away while it waits leaves the queue without running; one already running
    finishes, as a model's batch cannot be stopped half-way, and its answer is dropped.

    Args:
        threads: requests that run at once.
        queue: requests that may wait beyond those (None: any number); one more is refused (503).
        kind: what its requests are, for the 503's message.
    """

    def __init__(self, threads: int, queue: int | None = None, *, kind: str = "searches") -> None:
        self.queue = queue
        self.kind = kind
        self.waiting = 0
        self.running = 0
        self.dropped = 0
        """Requests that left the queue unrun because their client had gone."""
        self._turns = anyio.Semaphore(threads)
        self._threads = anyio.CapacityLimiter(threads)

    async def run(self, work: Callable[[], T], gone: anyio.Event | None = None) -> T:
        """``work()`` on one of the lane's threads, once it is this request's turn.

        Args:
            work: what the request computes.
            gone: set when the request's client has gone (:data:`CLIENT_GONE`): a request still waiting
                then leaves the queue.

        Raises:
            ServiceError: 503 (with ``Retry-After``) when the queue is full; 499 when the client went away
                before the request's turn (no one reads that answer; it ends the request).
        """
        if self.queue is not None and self._turns.value == 0 and self.waiting >= self.queue:
            raise ServiceError(503, f"the server is busy: {self.waiting} {self.kind} are waiting already; try "
                                    f"again in {RETRY_AFTER_S} s", retry_after=RETRY_AFTER_S)
        self.waiting += 1
        try:
            admitted = await self._admitted(gone)
        finally:
            self.waiting -= 1
        if not admitted:
            self.dropped += 1
            raise ServiceError(499, "the client closed its connection before its request's turn")
        self.running += 1
        try:
            return await anyio.to_thread.run_sync(work, limiter=self._threads)
        finally:
            self.running -= 1
            self._turns.release()

    async def _admitted(self, gone: anyio.Event | None) -> bool:
        """Waits for a turn and takes it; False, without one, when the client goes away first."""
        if gone is None:
            await self._turns.acquire()
            return True
        admitted = False
        async with anyio.create_task_group() as group:

            async def leave() -> None:
                await gone.wait()
                group.cancel_scope.cancel()

            group.start_soon(leave)
            await self._turns.acquire()  # a turn given just as the wait is cancelled is given back by anyio
            admitted = True
            group.cancel_scope.cancel()
        if admitted and gone.is_set():  # the turn came as the client went: no one to compute it for
            self._turns.release()
            return False
        return admitted


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
                                           SearchSettings(precision=self.settings.precision,
                                                          device=self.settings.device))
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
            pipeline = self._pipeline(request.mode, request.rerank, request.snippets, filters)
        with self._turn(pipeline):
            answer = pipeline.search(request.q, depth, log=self.log)  # type: ignore[arg-type]
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

    def _turn(self, pipeline: Pipeline) -> Any:
        """The lock of the slowest model ``pipeline`` runs: the cross-encoder's for a rerank or snippets (their
        first stage may encode the query beside a first-stage request: ONNX Runtime sessions run concurrently),
        the encoder's for dense and hybrid, none for BM25."""
        if pipeline.reranker is not None or pipeline.snippets is not None:
            return self._rerank_turn
        if pipeline.searcher.needs_encoder:
            return self._encoder_turn
        return contextlib.nullcontext()

    def _pipeline(self, mode: str, rerank: bool, snippets: bool, filters: Filters) -> Pipeline:
        key = (mode, rerank, snippets, filters)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            base = self.load()
            settings = replace(self.settings.pipeline, search=replace(base.settings, mode=mode, filters=filters),
                               rerank=rerank, snippets="tuned" if snippets else None, highlight=True)
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

    @app.post("/api/search", summary="Search the index",
              responses={503: {"description": "Too many requests wait for the models; see Retry-After."}})
    async def api_search(request: SearchRequest, http: Request) -> dict[str, Any]:
        """The hits of one query with every part of their score, their metadata and, when asked, their best
        sentences with offsets — the fields of ``biorank query --json`` — and each stage's milliseconds."""
        return await service.answer(request, http.scope.get(CLIENT_GONE))

    @app.get("/api/documents/{doc_id}", summary="One stored document")
    def api_document(doc_id: str) -> dict[str, Any]:
        return service.document(doc_id)

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
        form = {"q": params.get("q", ""), "mode": params.get("mode", "hybrid"), "rerank": "rerank" in params,
                "snippets": "snippets" in params, "year": params.get("year", ""),
                "journal": [j for j in params.getlist("journal") if j.strip()],
                "mesh": [m for m in params.getlist("mesh") if m.strip()], "page": params.get("page", "1")}
        result, error, status, headers = None, None, 200, {}
        if form["q"].strip():
            try:
                search = SearchRequest.model_validate({**form, "year": form["year"] or None})
                result = await service.answer(search, request.scope.get(CLIENT_GONE))
            except ServiceError as e:
                error, status, headers = str(e), e.status, e.headers
            except BiorankError as e:
                error, status = str(e), 400
            except ValueError as e:  # pydantic's validation error
                error, status = _first_problem(e), 422
        return HTMLResponse(render_page(form, result, error, index=service.settings.index, modes=MODES,
                                        key=params.get("key")), status_code=status, headers=headers)

    app.add_middleware(BoundedBody)
    return app


class BoundedBody:
    """ASGI middleware: a request's body is read here first, counting its bytes as they arrive, and the request
    goes on only if it is complete within :data:`MAX_BODY_BYTES` and :data:`BODY_TIMEOUT_S`; else 413 or 408.
    Then it watches the connection for the client's leaving, which it signals through the scope's
    :data:`CLIENT_GONE` event.

    ``Content-Length`` alone bounds nothing: a chunked body (``Transfer-Encoding: chunked``) has none, and was
    read whole, however large. Bodies here are a search's few hundred bytes, so holding one is cheap.

    Args:
        app: the ASGI application behind it.
        limit: bytes a body may have (default :data:`MAX_BODY_BYTES`).
        timeout: seconds the whole body may take to arrive (default :data:`BODY_TIMEOUT_S`).
    """

    def __init__(self, app: Any, limit: int | None = None, timeout: float | None = None) -> None:
        self.app = app
        self.limit = MAX_BODY_BYTES if limit is None else limit
        self.timeout = BODY_TIMEOUT_S if timeout is None else timeout

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await _refuse(send, path, 413, f"a request body may have {self.limit} bytes at most")
            return
        body, more = bytearray(), True
        deadline = asyncio.get_running_loop().time() + self.timeout
        while more:
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(left, 0))
            except TimeoutError:
                await _refuse(send, path, 408, f"the request body did not arrive within {self.timeout:g} s")
                return
            if message["type"] == "http.disconnect":
                return  # the client is gone; there is no one to answer
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await _refuse(send, path, 413, f"a request body may have {self.limit} bytes at most")
                return
        # After the body, all a client can send is its disconnect: watched here, by the one reader of the
        # connection, and set as an event the application waits on (Lane) instead of polling for it.
        gone = anyio.Event()
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                await gone.wait()
                return {"type": "http.disconnect"}
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        failed: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            scope[CLIENT_GONE] = gone
            try:
                await self.app(scope, replay, send)
            except Exception as e:  # raised as itself below, not wrapped in the task group's ExceptionGroup
                failed = e
            group.cancel_scope.cancel()
        if failed is not None:
            raise failed


async def _refuse(send: Any, path: str, status: int, message: str) -> None:
    """An error answered before the application saw the request, in the one shape, and the connection closed
    (the rest of the body is not read)."""
    if path.startswith("/api/") or path.startswith("/openapi"):
        body, kind = JSONResponse({"error": message}).body, b"application/json"
    else:
        body, kind = render_page({}, None, message).encode(), b"text/html; charset=utf-8"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode()), (b"connection", b"close"),
               *((name.encode(), value.encode()) for name, value in SECURITY_HEADERS.items()),
               (b"content-security-policy", PAGE_POLICY.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
