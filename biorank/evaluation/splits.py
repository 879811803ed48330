"""The development split that tuning uses: a fixed, seeded share of a query set (e.g. 20% of SciFact train).

Tuning on the dev split and reporting on the rest (or on a kept-back test set) keeps a tuned number honest.
The split depends only on the query ids, the share and the seed, never on the order of a file.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

DEV_FRACTION = 0.2
DEV_SEED = 20261122


def dev_split(query_ids: Iterable[str], fraction: float = DEV_FRACTION, seed: int = DEV_SEED) -> tuple[
        list[str], list[str]]:
    """(rest, dev): ``fraction`` of the ids, drawn with ``seed`` from the sorted ids, is the dev split."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be between 0 and 1, not {fraction}")
    ids = sorted(set(query_ids))
    dev = set(random.Random(seed).sample(ids, round(len(ids) * fraction)))
    return [q for q in ids if q not in dev], [q for q in ids if q in dev]
