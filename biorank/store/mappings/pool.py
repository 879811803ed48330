"""Settings and mappings of a training pool: every text that training may draw a BM25 negative from.

A pool is a working index of :mod:`biorank.training.supervision`, not a searchable collection: no vectors, no
biorank record, one entry per text (an abstract, a sentence or a snippet) with the document it comes from, so
that every text of a judged document can be kept out of a query's negatives.
"""

from __future__ import annotations

from biorank.store.mappings.documents import IndexSettings, index_settings


def pool_index_body(settings: IndexSettings, similarity: str = "BM25") -> dict:
    return {
        "settings": index_settings(settings, similarity),
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "document": {"type": "keyword"},
                "text": {"type": "text", "analyzer": settings.analyzer},
            },
        },
    }
