"""The HTTP server under the service: uvicorn, with a bound on how long a request's head may take to arrive.

uvicorn closes a connection that stays idle *between* requests (``timeout_keep_alive``), but a client that sends
half a request line or half its headers and then nothing holds its connection for ever: two hundred such
clients held two hundred connections open. :class:`HeadTimeoutProtocol` gives every request
:data:`HEAD_TIMEOUT_S` from its first byte (or from the connection's start) to its last header; the body has
:data:`biorank.service.bounds.BODY_TIMEOUT_S` of its own (:class:`biorank.service.bounds.BoundedBody`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    import uvicorn

HEAD_TIMEOUT_S = 10.0
"""Seconds from a connection's start, or a kept-alive connection's next byte, to the end of a request's headers."""
KEEP_ALIVE_S = 5
MAX_HEAD_BYTES = 16 * 1024
"""A request line and headers of more bytes are refused (h11 answers 400): a search needs a few hundred."""


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head has not arrived in :data:`HEAD_TIMEOUT_S`."""

    head_timeout_s = HEAD_TIMEOUT_S
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._between_requests() and self._head_deadline is None:
            self._arm()  # the next request of a kept-alive connection begins
        super().data_received(data)
        if not self._between_requests():
            self._disarm()  # its head is in: the application (and the body's own timeout) has it now

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.close()


def server_config(app: Any, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for ``app`` with biorank's bounds: the head timeout, the keep-alive, the head size.

    Args:
        app: the ASGI application (:func:`biorank.service.app.create_app`).
        host: the address to listen on.
        port: the port.
        options: more of ``uvicorn.Config``'s arguments (``log_level``).

    Returns:
        The configuration, for ``uvicorn.Server(config).run()``.

    Example:
        >>> uvicorn.Server(server_config(create_app(service), "127.0.0.1", 8000)).run()  # doctest: +SKIP
    """
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=HeadTimeoutProtocol, timeout_keep_alive=KEEP_ALIVE_S,
                          h11_max_incomplete_event_size=MAX_HEAD_BYTES, **options)
