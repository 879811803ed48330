"""Bulk writes that retry what the cluster asks to be retried and report, per item, what failed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

from biorank.errors import ClusterUnavailable
from biorank.store.failures import reason

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


@dataclass(frozen=True, slots=True)
class WriteFailure:
    index: str
    id: str
    reason: str


def data_nodes(client: OpenSearch) -> int:
    """How many nodes of the cluster hold data: the bulk streams that keep every one of them writing."""
    return max(1, int(client.cluster.health().get("number_of_data_nodes") or 1))


class BulkWriter:
    """Sends actions in bulk requests of ``chunk_size``; a 429 (queue full) is retried with exponential backoff.

    With ``streams`` above 1, the requests of one :meth:`write` go out that many at a time (the client spreads
    them over the nodes it knows), in requests no larger than an even share of the actions, so a batch of
    one encoder round keeps every node of a multi-node cluster writing instead of one after the other; Python
    builds requests far faster than a node indexes them (vectors into HNSW graphs), so the cluster is the bound.

    A request the cluster refuses as a whole (400: one invalid action fails them all; 413: too large) is split
    in halves and sent again, down to single actions, so only the actions at fault fail and the rest go in.
    Timeouts are retried by the client itself (``retry_on_timeout``); a cluster that stays unreachable ends
    the run with :class:`ClusterUnavailable`, after which a re-run resumes (the pipeline skips what is in).
    """

    def __init__(self, client: OpenSearch, *, chunk_size: int = 500, max_retries: int = 6,
                 initial_backoff: float = 1.0, streams: int = 1) -> None:
        self._client = client
        self._chunk_size = chunk_size
        self._streams = max(1, streams)
        self._max_retries = max_retries
        self._initial_backoff = initial_backoff

    def write(self, actions: Iterable[dict]) -> list[WriteFailure]:
        from opensearchpy.exceptions import ConnectionError, ConnectionTimeout

        failures = []
        try:
            if self._streams == 1:
                for chunk in _batched(actions, self._chunk_size):
                    failures += self._send(list(chunk))
            else:
                from concurrent.futures import ThreadPoolExecutor

                actions = list(actions)
                share = min(self._chunk_size, max(1, -(-len(actions) // self._streams)))
                with ThreadPoolExecutor(self._streams, thread_name_prefix="biorank-bulk-stream") as pool:
                    for sent in pool.map(self._send, map(list, _batched(actions, share))):
                        failures += sent
        except (ConnectionError, ConnectionTimeout) as e:
            raise ClusterUnavailable(
                f"lost the connection to OpenSearch while writing ({e.info if isinstance(e.info, str) else e}); "
                "what was written is kept: run the same command again to resume"
            ) from None
        return failures

    def _send(self, chunk: list[dict]) -> list[WriteFailure]:
        from opensearchpy import helpers
        from opensearchpy.exceptions import ConnectionError, TransportError

        failures = []
        try:
            for ok, item in helpers.streaming_bulk(
                self._client, chunk, chunk_size=len(chunk), max_retries=self._max_retries,
                initial_backoff=self._initial_backoff, raise_on_error=False, raise_on_exception=True,
            ):
                if not ok:
                    op, result = next(iter(item.items()))
                    # Deleting a stale entry that is already gone is the state we wanted.
                    if op == "delete" and result.get("status") == 404:
                        continue
                    error = result.get("error", result.get("status"))
                    why = error.get("reason", str(error)) if isinstance(error, dict) else str(error)
                    failures.append(WriteFailure(result.get("_index", "?"), str(result.get("_id")), why))
        except TransportError as e:
            if isinstance(e, ConnectionError) or e.status_code not in _WHOLE_REQUEST_REFUSED:
                raise
            # Writes are idempotent (fixed ids, deletes of what is gone are ignored), so resending the part of
            # the chunk that may have gone in before the refusal is safe.
            if len(chunk) == 1:
                return [WriteFailure(chunk[0].get("_index", "?"), str(chunk[0].get("_id")),
                                     f"OpenSearch refused it: {e.status_code} {reason(e)}")]
            half = len(chunk) // 2
            return self._send(chunk[:half]) + self._send(chunk[half:])
        return failures


_WHOLE_REQUEST_REFUSED = (400, 413)


def _batched(items: Iterable[dict], size: int) -> Iterable[tuple[dict, ...]]:
    iterator = iter(items)
    while chunk := tuple(islice(iterator, size)):
        yield chunk
