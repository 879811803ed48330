"""Bulk writes that retry what the cluster asks to be retried and report, per item, what failed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from biorank.errors import ClusterUnavailable

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


@dataclass(frozen=True, slots=True)
class WriteFailure:
    index: str
    id: str
    reason: str


class BulkWriter:
    """Sends actions in bulk requests of ``chunk_size``; a 429 (queue full) is retried with exponential backoff.

    Timeouts are retried by the client itself (``retry_on_timeout``); a cluster that stays unreachable ends
    the run with :class:`ClusterUnavailable`, after which a re-run resumes (the pipeline skips what is in).
    """

    def __init__(self, client: OpenSearch, *, chunk_size: int = 500, max_retries: int = 6,
                 initial_backoff: float = 1.0) -> None:
        self._client = client
        self._chunk_size = chunk_size
        self._max_retries = max_retries
        self._initial_backoff = initial_backoff

    def write(self, actions: Iterable[dict]) -> list[WriteFailure]:
        from opensearchpy import helpers
        from opensearchpy.exceptions import ConnectionError, ConnectionTimeout

        failures = []
        try:
            for ok, item in helpers.streaming_bulk(
                self._client, actions, chunk_size=self._chunk_size, max_retries=self._max_retries,
                initial_backoff=self._initial_backoff, raise_on_error=False, raise_on_exception=True,
            ):
                if not ok:
                    op, result = next(iter(item.items()))
                    # Deleting a stale entry that is already gone is the state we wanted.
                    if op == "delete" and result.get("status") == 404:
                        continue
                    error = result.get("error", result.get("status"))
                    reason = error.get("reason", str(error)) if isinstance(error, dict) else str(error)
                    failures.append(WriteFailure(result.get("_index", "?"), str(result.get("_id")), reason))
        except (ConnectionError, ConnectionTimeout) as e:
            raise ClusterUnavailable(
                f"lost the connection to OpenSearch while writing ({e.info if isinstance(e.info, str) else e}); "
                "what was written is kept: run the same command again to resume"
            ) from None
        return failures
