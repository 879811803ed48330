"""Settings and mappings of the sentences index: one entry per sentence of a title or abstract.

Offsets follow BioASQ: ``begin``/``end`` are character offsets into the section's text, end exclusive, so a
sentence can be returned as a snippet with ``offsetInBeginSection``/``offsetInEndSection`` as they are.
"""

from __future__ import annotations

from dataclasses import asdict

from biorank.store.mappings.documents import IndexSettings, index_settings
from biorank.store.mappings.fields import knn_vector
from biorank.store.record import new_record


def sentences_index_body(settings: IndexSettings, *, model: str, dimension: int, documents_index: str,
                         similarity: str = "BM25") -> dict:
    return {
        "settings": index_settings(settings, similarity),
        "mappings": {
            "_meta": new_record(asdict(settings), kind="sentences", model=model, dimension=dimension,
                          documents_index=documents_index),
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
                "embedding": knn_vector(dimension),
            },
        },
    }
