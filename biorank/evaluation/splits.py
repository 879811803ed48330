"""The development split that tuning uses: a fixed share of a query set (e.g. 20% of SciFact train).

Tuning on the dev split and reporting on the rest (or on a kept-back test set) keeps a tuned number honest.
A query is in the dev split by a hash of its id alone, never by the other ids of its file: the claims that
SciFact's cited-abstract qrels and its evidence file put in dev are the same, and a judged query added or
removed later moves no other query, so tuned values and dev figures stay comparable.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from biorank.types import Qrels

DEV_FRACTION = 0.2
JUDGED = "judged"
"""The name that :func:`split_judged` hashes with every query id (the supervision's own sources use theirs)."""


def hashed_fraction(source: str, query_id: str) -> float:
    """A number in [0, 1) fixed by a hash of the source's name and the query id alone: a query below a share
    stays below it whatever other queries are added, removed or reordered."""
    digest = hashlib.sha256(f"{source}\0{query_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def hashed_split(source: str, query_id: str, fraction: float = DEV_FRACTION) -> Literal["dev", "train"]:
    """``dev`` for a fixed ``fraction`` of query ids, by :func:`hashed_fraction`."""
    return "dev" if hashed_fraction(source, query_id) < fraction else "train"


Split = Literal["dev", "rest", "all"]
SPLITS: tuple[Split, ...] = ("dev", "rest", "all")


def judged_queries(qrels: Qrels) -> list[str]:
    """The ids of the queries with at least one relevant document: what every split is drawn from."""
    return sorted(q for q, docs in qrels.items() if any(grade > 0 for grade in docs.values()))


def split_judged(qrels: Qrels, split: Split) -> list[str]:
    """The judged queries of ``split``: the fixed dev share, the rest, or all of them. Tuning, training and
    evaluation all choose their queries here, so "dev" names the same queries everywhere."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    judged = judged_queries(qrels)
    if split == "all":
        return judged
    wanted = "dev" if split == "dev" else "train"
    return [q for q in judged if hashed_split(JUDGED, q) == wanted]
