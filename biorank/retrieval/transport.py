"""How a search request travels: the options every search carries beside its body, and one line for an error
a cluster answered it with (the searcher's and similar articles' requests alike)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from biorank.store.failures import lost_node, missing_shards, reason


def request_options(text_scored: bool) -> dict[str, Any]:
    """How a search runs on a cluster of many shards, beside its body.

    BM25 weighs a term by its document frequency, which each shard counts among its own blocks: over several
    shards the same block would score differently by where it lives, and the hybrid's λ·BM25 with it. A
    ``dfs_query_then_fetch`` search first gathers the statistics of every shard, so scores are those of one
    shard (OpenSearch skips that round when there is one shard). Partial results are refused: a lost shard
    must be an error, not a silently shorter ranking.
    """
    options: dict[str, Any] = {"allow_partial_search_results": False}
    if text_scored:
        options["search_type"] = "dfs_query_then_fetch"
    return options


def as_params(options: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}


def query_string(options: Mapping[str, Any]) -> str:
    return "&".join(f"{k}={v}" for k, v in as_params(options).items())


def refusal(mode: str, index: str, error: Any) -> str:
    """One line for an error OpenSearch answered a search with; shards without a live copy are named."""
    missing = missing_shards(error)
    if missing or lost_node(error):
        where = f"shards {missing} have" if missing else "a shard has"
        return (f"index {index!r} cannot be searched in full: {where} no live copy (a node holding them is down "
                f"and they have no replica); restart the node (`biorank cluster start` restarts lost local "
                f"nodes) or build the index with --replicas 1 so that a lost node costs no answers")
    why = reason(error)
    if clauses := re.search(r"maxClauseCount is set to (\d+)", why):
        # Each distinct term of the query is a clause of the BM25 leg: the text is too long, not malformed.
        return (f"the query has more distinct terms than OpenSearch takes in one query ({clauses.group(1)}: "
                "indices.query.bool.max_clause_count); shorten it")
    return f"OpenSearch refused the {mode} query on {index!r}: {why}"
