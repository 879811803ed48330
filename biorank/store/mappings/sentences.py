"""Settings and mappings of the sentences index: one entry per sentence of a title or abstract.

Offsets follow BioASQ: ``begin``/``end`` are character offsets into the section's text, end exclusive, so a
sentence can be returned as a snippet with ``offsetInBeginSection``/``offsetInEndSection`` as they are.

A sentence's vector is only ever scored within a query's top documents (by script, never through a graph), so
how it is stored is a choice of bytes against precision, :data:`SENTENCE_VECTORS`, kept in the index record
(``sentence_vectors``):

- ``hnsw``: float vectors in a Lucene HNSW graph (what every index before the choice has): the graph and a second
  copy of each vector that the graph keeps beside the doc values the script reads, for no query that walks it;
- ``exact``: float vectors as doc values only (``index.knn`` off: no graph), the same scores;
- ``byte``: each component as a signed byte (:func:`quantise`), a quarter of the floats' bytes, scored against a
  byte-quantised query (the k-NN plugin's script compares bytes with bytes);
- ``none``: no vectors; the snippet stage encodes the top documents' sentences at query time.

Half-precision floats are not a choice: the k-NN plugin's fp16 is Faiss's scalar quantiser, whose native library
the Maven build of the plugin lacks (a Faiss field fails the node's first refresh), and script scoring reads no
other 16-bit vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from biorank.store.mappings.documents import IndexSettings, index_settings
from biorank.store.mappings.fields import knn_vector
from biorank.store.record import new_record

if TYPE_CHECKING:
    import numpy as np

SENTENCE_VECTORS = ("exact", "byte", "hnsw", "none")
"""How the sentences index stores each sentence's vector (see the module's text)."""
DEFAULT_SENTENCE_VECTORS = "byte"
"""What a new sentences index stores: the choice measured best for bytes against snippet MAP
(docs/measurements/snippets.md, record ``sentence_store.json``)."""
BYTE_SCALE = 256.0
"""A stored byte is ``round(256·x)`` of a unit vector's component ``x``, clipped to [-128, 127]: a step of 1/256
(a cosine off by ~0.001) and room for components up to ±0.5; the encoders' unit vectors of 384 dimensions keep
theirs well inside it."""



def sentences_index_body(settings: IndexSettings, *, model: str, dimension: int, documents_index: str,
                         similarity: str = "BM25", vectors: str = DEFAULT_SENTENCE_VECTORS) -> dict:
    if vectors not in SENTENCE_VECTORS:
        raise ValueError(f"sentence vectors must be one of {', '.join(SENTENCE_VECTORS)}, not {vectors!r}")
    body_settings = index_settings(settings, similarity)
    # Without a graph the index needs no k-NN codec: the vectors are doc values, which script scoring reads.
    body_settings["index"]["knn"] = vectors == "hnsw"
    field = {"hnsw": knn_vector(dimension), "exact": {"type": "knn_vector", "dimension": dimension},
             "byte": {"type": "knn_vector", "dimension": dimension, "data_type": "byte"}}.get(vectors)
    return {
        "settings": body_settings,
        "mappings": {
            "_meta": new_record(asdict(settings), kind="sentences", model=model, dimension=dimension,
                                documents_index=documents_index, sentence_vectors=vectors),
            # Vectors as JSON text would be most of the stored bytes; search reads them from the vector field.
            "_source": {"excludes": ["embedding"]},
            "dynamic": "strict",
            "properties": {
                "doc_id": {"type": "keyword"},
                "section": {"type": "keyword"},
                "number": {"type": "integer"},
                "begin": {"type": "integer"},
                "end": {"type": "integer"},
                "text": {"type": "text", "analyzer": settings.analyzer},
                **({"embedding": field} if field else {}),
            },
        },
    }


def quantise(vector: Sequence[float] | np.ndarray, scale: float = BYTE_SCALE) -> list[int]:
    """``vector`` as the signed bytes of a ``byte`` field: each component times ``scale``, rounded and clipped."""
    import numpy as np

    return np.clip(np.rint(np.asarray(vector, dtype=np.float64) * scale), -128, 127).astype(int).tolist()


def stored_vector(vectors: str, vector: np.ndarray) -> dict:
    """The vector part of a sentence's ``_source`` under the choice ``vectors``: nothing where none is stored."""
    if vectors == "none":
        return {}
    return {"embedding": quantise(vector) if vectors == "byte" else vector.tolist()}
