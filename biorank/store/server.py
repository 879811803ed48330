"""What the cluster at the other end is: its OpenSearch version, asked once per client.

biorank sends the same requests to 2.x and 3.x but for two things the version decides: the similarity type
of new indices (3.0 made ``BM25`` mean Lucene's BM25, whose scores lack 2.x's (k1 + 1) factor: λ, the pinned
figures and the tuned snippet weights are on 2.x's scale, which 3.x keeps as ``LegacyBM25``), and messages
about what a cluster lacks (neural-search has no 3.x build on Maven Central).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

_VERSIONS: weakref.WeakKeyDictionary[OpenSearch, str | None] = weakref.WeakKeyDictionary()


def server_version(client: OpenSearch) -> str | None:
    """The cluster's ``version.number`` (``"3.4.0"``), or None when the user may not read it."""
    if client not in _VERSIONS:
        from opensearchpy.exceptions import TransportError

        try:
            _VERSIONS[client] = client.info()["version"]["number"]
        except (TransportError, KeyError, TypeError):
            _VERSIONS[client] = None
    return _VERSIONS[client]



def bm25_similarity(client: OpenSearch) -> str:
    """The similarity type of BM25 with the (k1 + 1) factor on this cluster: ``BM25`` on 2.x (and where the
    version cannot be read), ``LegacyBM25`` on 3.x. Both score alike, so an index ranks and mixes the same on
    either engine (Lucene's own BM25 ranks alike too, but would halve the BM25 part of the hybrid)."""
    version = server_version(client)
    return "LegacyBM25" if version and int(version.split(".")[0]) >= 3 else "BM25"
