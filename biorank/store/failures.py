"""OpenSearch's errors as one line a user can act on: the status, the error type and reason, and the fix."""

from __future__ import annotations

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
