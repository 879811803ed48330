"""A bulk build finished so that the index takes the room it will keep: merged once its recovery copies can go.

biorank keeps vectors out of ``_source`` (they are searched from their own structures, never read back as JSON).
OpenSearch then stores each entry's whole JSON, vectors included, a second time as ``_recovery_source``, which a
replica or a relocation may need to replay recent writes; a merge drops it once every retention lease of the
shard has passed that write. A lease is renewed in the background about every 30 seconds, so right after a build
the newest segments still carry those copies (as text, several times the vectors' own bytes). Excluding the vectors
from the recovery copies instead (``recovery_source_excludes``) would make that first size the last, but a replica
that replays a write without its vectors would silently serve documents without them; so :func:`compact` waits
for the leases, then merges.

A build that wrote few documents is left as it is (the wait would cost more than the bytes), and an index whose
store is larger than OpenSearch's largest merged segment is not merged into one (a segment that large would never
be merged again as later writes delete from it); its background merges drop the copies as they go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

__all__ = ["COMPACT_FROM", "LEASE_WAIT_S", "MERGE_UP_TO", "Compaction", "compact", "store_bytes"]

COMPACT_FROM = 1_000
"""Documents a run must write before it is compacted: below, waiting up to a lease renewal (about 30 s) costs more
than the few megabytes it saves."""
LEASE_WAIT_S = 90.0
"""How long :func:`compact` waits for the retention leases to pass the last write before it gives up merging."""
MERGE_UP_TO = 5 * 1024**3
"""The largest store merged into one segment: OpenSearch's default ``index.merge.policy.max_merged_segment``."""


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact` did: the primaries' store before and after, and why it did not merge, if it did not."""

    before: int
    after: int
    skipped: str = ""

    @property
    def merged(self) -> bool:
        return not self.skipped


def store_bytes(client: OpenSearch, names: Sequence[str]) -> int:
    """The primaries' store of ``names`` in bytes, as ``biorank stats`` shows it."""
    stats = client.indices.stats(index=",".join(names), metric="store")
    return sum(s["primaries"]["store"]["size_in_bytes"] for s in stats["indices"].values())


def _leases_passed(client: OpenSearch, names: Sequence[str]) -> bool:
    """Whether every lease of every shard copy retains nothing at or below the shard's last write."""
    stats = client.indices.stats(index=",".join(names), metric="docs", level="shards")
    for index in stats["indices"].values():
        for copies in index["shards"].values():
            for copy in copies:
                last = copy["seq_no"]["max_seq_no"]
                leases = copy.get("retention_leases", {}).get("leases", [])
                if any(lease["retaining_seq_no"] <= last for lease in leases):
                    return False
    return True


def compact(client: OpenSearch, names: Sequence[str], *, wait: float = LEASE_WAIT_S,
            waiting: Callable[[float], None] | None = None) -> Compaction:
    """Flush ``names``, wait until their retention leases have passed every write, merge each into one segment.

    Nothing is lost when it is interrupted or gives up: the index stays as it was, only larger.

    Args:
        client: the cluster.
        names: the indices a build just wrote (documents and sentences).
        wait: seconds to wait for the leases at most.
        waiting: called with the seconds waited so far, about once a second (a progress line).

    Returns:
        The sizes before and after, and why it did not merge if it did not.

    Example:
        >>> compact(client, ["scifact", "scifact-sentences"]).after  # doctest: +SKIP
        98304000
    """
    joined = ",".join(names)
    before = store_bytes(client, names)
    if before > MERGE_UP_TO:
        return Compaction(before, before, f"larger than {MERGE_UP_TO // 1024**3} GB: left to background merges")
    # The flush makes every write part of the last commit, which a merge needs before it may drop a copy.
    client.indices.flush(index=joined)
    started = time.monotonic()
    while not _leases_passed(client, names):
        waited = time.monotonic() - started
        if waited >= wait:
            return Compaction(before, before, f"retention leases still behind after {wait:.0f} s")
        if waiting is not None:
            waiting(waited)
        time.sleep(1.0)
    client.indices.forcemerge(index=joined, max_num_segments=1, request_timeout=3600)
    client.indices.refresh(index=joined)
    return Compaction(before, store_bytes(client, names))
