"""Field definitions shared by every biorank index."""

from __future__ import annotations


def knn_vector(dimension: int, space_type: str = "innerproduct") -> dict:
    """A ``knn_vector`` on the Lucene engine.

    The engine is always named: since 2.18 OpenSearch defaults to Faiss, whose native library the Maven
    build of k-NN lacks, so an unnamed engine breaks at the first query on the local node. Lucene has
    supported ``innerproduct`` since 2.13; biorank stores unit vectors, so it equals cosine.
    """
    return {
        "type": "knn_vector",
        "dimension": dimension,
        "method": {"name": "hnsw", "engine": "lucene", "space_type": space_type},
    }
