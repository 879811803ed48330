"""The development split that tuning uses: a fixed, seeded share of a query set (e.g. 20% of SciFact train).

Tuning on the dev split and reporting on the rest (or on a kept-back test set) keeps a tuned number honest.
The split depends only on the query ids, the share and the seed, never on the order of a file.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from typing import Literal

from biorank.config import SEED
from biorank.types import Qrels

DEV_FRACTION = 0.2
DEV_SEED = SEED


def dev_split(query_ids: Iterable[str], fraction: float = DEV_FRACTION, seed: int = DEV_SEED) -> tuple[
        list[str], list[str]]:
    """(rest, dev): ``fraction`` of the ids, drawn with ``seed`` from the sorted ids, is the dev split."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be between 0 and 1, not {fraction}")
    ids = sorted(set(query_ids))
    dev = set(random.Random(seed).sample(ids, round(len(ids) * fraction)))
    return [q for q in ids if q not in dev], [q for q in ids if q in dev]


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
    rest, dev = dev_split(judged)
    return dev if split == "dev" else rest
