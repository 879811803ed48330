"""The lanes of the search service: threads of its own for each kind of request, with a bounded queue before the
models' (a request beyond it is answered 503 with ``Retry-After``), and the error that carries a status."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio

from biorank.errors import BiorankError

RETRY_AFTER_S = 2
"""What a 503 of a full queue asks its client to wait: about one rerank on a CPU, when a place may have freed."""
T = TypeVar("T")


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
