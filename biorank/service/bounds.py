"""What every request of the search service is held to before the application sees it: a body of bounded bytes
arriving within a bounded time, the security headers, and the event that says its client has gone."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from fastapi.responses import JSONResponse

from biorank.service.page import render_page

MAX_BODY_BYTES = 64 * 1024
BODY_TIMEOUT_S = 10.0
"""How long a request's body may take to arrive, all of it: a client that sends a byte now and then must not
hold a worker (and the body in memory) for ever."""
SECURITY_HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}
"""On every answer. No referrer also keeps a ``?key=`` in the page's address out of the sites its links lead to."""
PAGE_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
               "base-uri 'none'; frame-ancestors 'none'")
"""The page's content security policy: its one inline style sheet, no script at all, forms only to itself."""
CLIENT_GONE = "biorank.client_gone"
"""The scope's key of the event :class:`BoundedBody` sets when a request's client closes its connection."""


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
