"""Score arithmetic that fusion, reranking, ensembles and snippets share, below every layer that scores."""

from __future__ import annotations

from collections.abc import Sequence


def min_max(values: Sequence[float], *, equal: float = 1.0) -> list[float]:
    """Scores scaled to [0, 1] by their own min and max; all equal (no order to keep) gives ``equal`` each.

    Fusion and reranking take 1, as neural-search does: a list's documents stay above those it does not have.
    Snippet perspectives take 0: a perspective that cannot tell a query's sentences apart adds nothing.
    """
    low, high = min(values, default=0.0), max(values, default=0.0)
    return [(float(v) - low) / (high - low) if high > low else equal for v in values]
