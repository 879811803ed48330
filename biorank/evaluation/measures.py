"""Retrieval measures by an established implementation (ir-measures, over pytrec_eval), named as users type them.

``ndcg@10``, ``map@10`` (TREC's MAP cut at 10, ``AP@10``), ``map@100``, ``recall@100``, ``recall@1000``,
``mrr@10``, ``p@10``: case does not matter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from biorank.errors import BiorankError
from biorank.types import Qrels, Run

_NAMES = {"ndcg": "nDCG", "map": "AP", "recall": "R", "r": "R", "mrr": "RR", "p": "P"}
BEIR_MEASURES = ("ndcg@10", "map@10", "map@100", "recall@100", "recall@1000", "mrr@10", "p@10")


def parse_measure(name: str):
    """The ir-measures object for ``ndcg@10`` and the like."""
    import ir_measures

    m = re.fullmatch(r"([a-z]+)@(\d+)", name.strip().lower())
    if not m or m[1] not in _NAMES:
        raise BiorankError(f"unknown measure {name!r}; use one of {', '.join(BEIR_MEASURES)}")
    return ir_measures.parse_measure(f"{_NAMES[m[1]]}@{m[2]}")


def evaluate(run: Run, qrels: Qrels, measures: Sequence[str]) -> dict[str, float]:
    """Mean of each measure over the queries that have judgements (a query missing from the run scores 0)."""
    import ir_measures

    parsed = {name: parse_measure(name) for name in measures}
    judged = {q: dict(docs) for q, docs in qrels.items()}
    complete_run = {q: dict(run.get(q, {})) or {"__none__": 0.0} for q in judged}
    aggregate = ir_measures.calc_aggregate(list(parsed.values()), judged, complete_run)
    return {name: float(aggregate[m]) for name, m in parsed.items()}


def run_from_hits(hits: Mapping[str, Sequence]) -> dict[str, dict[str, float]]:
    """A run (query -> document -> score) from ranked hits, with scores that keep the ranks' order exactly.

    Scores are taken from the ranks, not the hits' own scores: two documents with equal scores would be
    ordered by the measure library by id, which need not be the order biorank returned them in.
    """
    return {q: {h.id: float(len(hs) - i) for i, h in enumerate(hs)} for q, hs in hits.items()}
