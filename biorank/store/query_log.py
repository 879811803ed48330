"""The query log: one record per query biorank answers, written in bulk to ``biorank-queries``.

A record holds when, where and how a query was asked (index, text, mode, λ, k), how long each stage took in
milliseconds (a mapping stage → ms, so a new stage is a new key) and the top hits with every numeric part of
their score (taken from the hit itself, so a part a later stage adds is logged without a change here).

Logging must never cost a query its answer: records are buffered and every :data:`FLUSH_EVERY` of them go out
in one bulk request on a writer thread, while the next queries are searched (a pipeline logs each batch); the
command waits only for the last request when it ends. The first failure to write is said once on stderr and
turns the log off for the rest of the command. ``benchmarks/query_log_overhead.py`` measures the cost.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from biorank.config import QUERY_LOG_INDEX, biorank_version
from biorank.errors import BiorankError
from biorank.store.failures import reason
from biorank.store.mappings.query_log import query_log_index_body
from biorank.store.names import IndexNameError, check_query_log_name
from biorank.types import Echo

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


FLUSH_EVERY = 128
"""Records per bulk request (~150 KB): one cheap request, written while the next 128 queries are searched; a
multiple of the pipeline's 32-query batches."""
TOP_HITS = 10
"""Hits kept per record: what a user looks at, whatever depth a run file needs."""
WRITE_TIMEOUT_S = 10.0


class QueryLogError(BiorankError):
    """The query log cannot be read, or refused a write (which :class:`QueryLog` says once, never raises)."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def hit_parts(hit: Any) -> dict[str, Any]:
    """The id and every finite number of a hit (rank, block, score parts); a ``Hit`` or a mapping."""
    data = hit.to_dict() if hasattr(hit, "to_dict") else dict(hit)
    parts: dict[str, Any] = {"id": str(data["id"])}
    for key, value in data.items():
        # bool is an int to Python, and NaN or infinity would make OpenSearch refuse the whole record.
        if key != "id" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            parts[key] = value
    return parts


class QueryLog:
    """Buffers query records and writes them in bulk on a writer thread; never raises.

    One request is in flight at a time, so records arrive in order and memory stays bounded; :meth:`close`
    (or leaving the ``with`` block) sends the rest and waits for it.

    >>> with QueryLog(client, command="query") as log:  # doctest: +SKIP
    ...     log.add(index="scifact", query="...", mode="bm25", k=10, latency_ms={"first_stage": 3.1}, hits=hits)
    """

    def __init__(self, client: OpenSearch | None, index: str = QUERY_LOG_INDEX, *, command: str,
                 enabled: bool = True, flush_every: int = FLUSH_EVERY,
                 warn: Echo | None = None) -> None:
        self.client = client
        self.command = command
        self.enabled = enabled and client is not None
        self.index = index
        self.flush_every = max(1, flush_every)
        self.run = uuid.uuid4().hex[:12]
        self.written = 0
        self.failure: str | None = None
        self._warn = warn or _stderr
        if self.enabled:
            try:
                check_query_log_name(index)
            except IndexNameError as e:
                # A pattern or a list (BIORANK_QUERY_LOG_INDEX) is refused before anything reaches the cluster,
                # said once, and costs no query its answer: the log is off for this command.
                self.failure, self.enabled = str(e), False
                self._warn(f"warning: {e}; the queries are answered and not logged")
        self._buffer: list[dict] = []
        self._ready = False
        self._writer: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    def __enter__(self) -> QueryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, *, index: str, query: str, mode: str, k: int, latency_ms: Mapping[str, float],
            hits: Sequence[Any], lam: float | None = None, query_id: str | None = None, system: str | None = None,
            bm25_fields: str | None = None, batch: int = 1) -> None:
        """Buffer one record; ``latency_ms`` is stage → milliseconds, ``hits`` are ranked hits or mappings."""
        if not self.enabled:
            return
        record = {
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "run": self.run,
            "command": self.command,
            "index": index,
            "system": system,
            "query_id": query_id,
            "query": query,
            "mode": mode,
            "bm25_fields": bm25_fields,
            "lambda": lam,
            "k": k,
            "batch": batch,
            "hits_returned": len(hits),
            "latency_ms": {stage: round(float(ms), 3) for stage, ms in latency_ms.items()},
            "hits": [hit_parts(h) for h in hits[:TOP_HITS]],
        }
        self._buffer.append({key: value for key, value in record.items() if value is not None})
        if len(self._buffer) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Hand what is buffered to the writer thread and return; waits only while an earlier request is out."""
        if not self.enabled or not self._buffer:
            return
        records, self._buffer = self._buffer, []
        self._wait()
        if not self.enabled:  # the earlier request failed
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="biorank-query-log")
        self._pending = self._writer.submit(self._write, records)

    def close(self) -> None:
        """Send what is buffered and wait until everything is written, or its failure said."""
        self.flush()
        self._wait()
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def _write(self, records: list[dict]) -> None:
        """One bulk request; on failure warn once, drop the records and log nothing more."""
        try:
            self._ensure_index()
            action = json.dumps({"index": {"_index": self.index}})
            extra = {"biorank_version": biorank_version()}
            # Serialised here, compactly, on the writer thread: the client would do it again line by line.
            body = "".join(f"{action}\n{json.dumps(r | extra, ensure_ascii=False, separators=(',', ':'))}\n"
                           for r in records)
            response = self.client.bulk(body=body, request_timeout=WRITE_TIMEOUT_S)
            if response.get("errors"):
                failed = [i["index"] for i in response["items"] if i.get("index", {}).get("error")]
                self.written += len(records) - len(failed)
                raise QueryLogError(reason(failed[0]["error"]) + f" ({len(failed)} of {len(records)} records)")
            self.written += len(records)
        except Exception as e:  # whatever breaks the log must not break the query
            self.failure = reason(e)
            self.enabled = False
            self._warn(f"warning: the query log could not be written to {self.index!r} ({self.failure}); the "
                       "queries were answered, and this command logs no more (--no-log or BIORANK_QUERY_LOG=0 "
                       "turns the log off)")

    def _ensure_index(self) -> None:
        if self._ready:
            return
        from opensearchpy.exceptions import NotFoundError, RequestError

        try:
            mapping = self.client.indices.get_mapping(index=self.index)
        except NotFoundError:
            try:
                self.client.indices.create(index=self.index, body=query_log_index_body())
            except RequestError as e:
                # Another biorank process may have created it a moment ago.
                if e.error != "resource_already_exists_exception":
                    raise
        else:
            meta = next(iter(mapping.values()))["mappings"].get("_meta", {}).get("biorank", {})
            if meta.get("kind") != "query_log":
                raise QueryLogError(f"index {self.index!r} exists but is not a biorank query log")
        self._ready = True


def recent_queries(client: OpenSearch, index: str = QUERY_LOG_INDEX, *, last: int = 20,
                   searched_index: str | None = None) -> list[dict]:
    """The ``last`` records, newest first; ``searched_index`` keeps those of one documents index."""
    from opensearchpy.exceptions import AuthorizationException, NotFoundError

    # Refreshed and searched by name: a pattern would refresh and read every index it matches.
    check_query_log_name(index)

    try:
        # A record is searchable only after a refresh: the one written a moment ago should be listed. A
        # read-only user may not refresh, and sees the log as of the last refresh (a second at most).
        with contextlib.suppress(AuthorizationException):
            client.indices.refresh(index=index)
        query = {"term": {"index": searched_index}} if searched_index else {"match_all": {}}
        response = client.search(index=index, body={"size": last, "query": query,
                                                    "sort": [{"timestamp": "desc"}]})
    except NotFoundError:
        raise QueryLogError(f"no query log yet: index {index!r} does not exist (biorank query, search and eval "
                            "write it)") from None
    return [h["_source"] for h in response["hits"]["hits"]]
