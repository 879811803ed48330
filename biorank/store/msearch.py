"""Many searches in one ``_msearch``: the one way every caller sends them, asked again as :func:`patiently` asks.

``_msearch`` answers each search on its own, so one search refused is an answer holding an ``error``, not an
exception; every caller wants the first such refusal raised as one line of its own words, and none wants a
search that failed only because a node went away while it ran (:func:`~biorank.store.failures.patiently`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.store.failures import patiently

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


def msearch(client: OpenSearch, lines: Sequence[dict], *,
            refused: Callable[[int, dict], BiorankError]) -> list[dict]:
    """The answers of the searches in ``lines`` (each a header, then a body), in order.

    Args:
        client: the cluster's client.
        lines: ``_msearch``'s body: a header (``{"index": ...}`` and options), then the search's body, per search.
        refused: the error to raise for the ``i``-th search answered with ``error`` (OpenSearch's error object).

    Returns:
        One answer per search; none where ``lines`` is empty (nothing is sent).

    Example:
        >>> msearch(None, [], refused=lambda i, error: BiorankError(str(error)))
        []
    """
    if not lines:
        return []
    responses = patiently(lambda: client.msearch(body=list(lines)))["responses"]
    for i, response in enumerate(responses):
        if "error" in response:
            raise refused(i, response["error"])
    return responses
