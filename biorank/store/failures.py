"""OpenSearch's errors as one line a user can act on: the status, the error type and reason, and the fix."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any


def reason(error: Any) -> str:
    """The most specific one-line reason in an OpenSearch error (an exception's body, or the body itself)."""
    body = getattr(error, "info", error)
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict):
            # A search rejected before it reached a shard has no root cause, and its own reason is empty: the
            # reason is in caused_by.
            causes = [*body.get("root_cause", []), body.get("caused_by") or {}, body]
            cause = next((c for c in causes if c.get("reason")), body)
            return f"{cause.get('type', 'error')}: {cause.get('reason') or ''}".strip().rstrip(":")
    if isinstance(error, BaseException) and hasattr(error, "error"):
        return str(error.error)
    return str(body)


def describe(error: Exception, where: str = "OpenSearch") -> str | None:
    """One line for an exception of opensearch-py, or None when it is not one.

    ``where`` names the cluster (``OpenSearch at https://…``, credentials already removed).
    """
    from opensearchpy.exceptions import (
        AuthenticationException,
        AuthorizationException,
        ConnectionError,
        SSLError,
        TransportError,
    )

    if isinstance(error, SSLError):
        cause = str(error.info) if error.info else str(error.error)
        return (f"TLS with {where} failed ({cause}); give the CA that signed the cluster's certificate with "
                "--ca-file (BIORANK_CA_FILE), or turn verification off with --no-verify")
    if isinstance(error, ConnectionError):
        cause = error.info if isinstance(error.info, str) else type(error.info).__name__
        return f"lost the connection to {where} ({cause})"
    if isinstance(error, AuthenticationException):
        return f"{where} refused the credentials; check --user/--password (BIORANK_USER/BIORANK_PASSWORD)"
    if isinstance(error, AuthorizationException):
        # A HEAD request (does the index exist?) is refused without a body, so without the permission's name.
        why = reason(error) or "the user may not do what this command needs"
        return (f"{where} answered 403: {why}; the user lacks that permission: ask the cluster's administrator "
                "for it, or use another --user")
    if isinstance(error, TransportError):
        line = f"{where} answered {error.status_code}: {reason(error)}"
        if "cluster_manager_not_discovered" in line or "master_not_discovered" in line:
            line += ("; the cluster has elected no cluster manager, so too few of its nodes run "
                     "(`biorank cluster status` shows the local ones, `biorank cluster start` restarts them)")
        return line
    return None


LOST_NODE = ("no_shard_available_action_exception", "node_not_connected_exception", "node_disconnected_exception",
             "connect_transport_exception")
"""Shard failures that mean a node holding a shard copy is gone, not that the query is wrong."""

_PAUSES = (0.2, 0.5, 1.0, 2.0)
"""Seconds before asking again after a node went away mid-search: the cluster notices a killed node within
milliseconds to a second or two (its connections close), after which the search goes to live copies."""


def _body(error: Any) -> dict:
    error = error.get("error", error) if isinstance(error, dict) else error
    return error if isinstance(error, dict) else {}


def missing_shards(error: Any) -> str | None:
    """The shards a search was refused for because they have no assigned copy at all, as OpenSearch lists them."""
    found = re.search(r"missing shards (\[.*\])\. ", json.dumps(_body(error)))
    return found.group(1) if found else None


def lost_node(error: Any) -> bool:
    """Whether a search's error (an exception's ``info``, or an ``_msearch`` response's ``error``) is a shard
    failure from a node that went away, not from the query."""
    body = _body(error)
    causes = [*body.get("root_cause", []), body.get("caused_by") or {}, body]
    return any(isinstance(c, dict) and c.get("type") in LOST_NODE for c in causes)


def patiently(ask: Callable[[], dict], pauses: tuple[float, ...] = _PAUSES) -> dict:
    """``ask()``'s answer (of ``_search`` or ``_msearch``), asked again while it failed only because a node went
    away during the search.

    Such a search fails on a shard even where a replica lives: OpenSearch moves a shard's request to another
    copy only before it reaches one, and the query and fetch phases after a ``dfs`` phase must go to the copy
    that answered it. Once the cluster has dropped the node the same search goes to live copies, so a service
    keeps answering while a node dies. A shard without any copy fails as "missing shards" at once and is not
    asked again, nor is any other error.

    Example:
        >>> patiently(lambda: {"responses": [{"hits": {"hits": []}}]})
        {'responses': [{'hits': {'hits': []}}]}
    """
    from opensearchpy.exceptions import TransportError

    for pause in pauses:
        try:
            answer = ask()
        except TransportError as e:
            if not _passing(e.info):
                raise
        else:
            if not any(_passing(r["error"]) for r in answer.get("responses", ()) if "error" in r):
                return answer
        time.sleep(pause)
    return ask()


def _passing(error: Any) -> bool:
    return lost_node(error) and not missing_shards(error)
