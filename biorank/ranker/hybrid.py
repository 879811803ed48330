"""Ma et al.'s hybrid score, ``λ·BM25(q, p) + ⟨q, p⟩``, computed exactly inside OpenSearch."""

from __future__ import annotations

from collections.abc import Sequence

# Fixed source: user text reaches the cluster only as match text and as params, never inside the script.
# ``_score`` is the BM25 of the bool's should clause (0 where no term matches); a document without a vector
# gets a dense part of 0. The shift keeps scores non-negative (OpenSearch rejects negative ones) and, being
# the same for every document, leaves the order alone; 1 suffices for unit vectors.
HYBRID_SCRIPT = (
    "double d = doc[params.field].size() == 0 ? 0 : innerProduct(params.query_vector, doc[params.field]);"
    " return Math.max(0, params.lam * _score + d + params.shift);"
)
DENSE_SCRIPT = "doc[params.field].size() == 0 ? 0 : innerProduct(params.query_vector, doc[params.field])"
MATCH_ALL = {"match_all": {}}


def hybrid_query(
    text_query: dict,
    query_vector: Sequence[float],
    *,
    lam: float,
    candidates: dict = MATCH_ALL,
    vector_field: str = "embedding",
    shift: float = 1.0,
) -> dict:
    """Scores every entry that ``candidates`` matches with ``lam·BM25 + ⟨q, v⟩ + shift``.

    ``text_query`` (a ``match`` on the BM25 field, say) only provides ``_score``: as a ``should`` beside a
    ``filter`` it is optional, so an entry without a query term is still scored, with a BM25 of 0. With
    ``match_all`` as the candidates every entry of the index is scored (the exact mode); with an ``ids``
    filter only those (the approximate mode's union of BM25 and kNN candidates), each still exactly.
    """
    return {
        "script_score": {
            "query": {"bool": {"should": [text_query], "filter": [candidates]}},
            "script": {
                "source": HYBRID_SCRIPT,
                "params": {
                    "field": vector_field,
                    "query_vector": [float(x) for x in query_vector],
                    "lam": float(lam),
                    "shift": float(shift),
                },
            },
        }
    }


def exact_hybrid_query(
    query_text: str,
    query_vector: Sequence[float],
    *,
    lam: float,
    text_field: str = "text",
    vector_field: str = "embedding",
    shift: float = 1.0,
) -> dict:
    """:func:`hybrid_query` over every entry, with a plain ``match`` on ``text_field`` as the BM25 part."""
    return hybrid_query(
        {"match": {text_field: query_text}}, query_vector, lam=lam, vector_field=vector_field, shift=shift
    )


def dense_script_field(query_vector: Sequence[float], vector_field: str = "embedding") -> dict:
    """A ``script_fields`` entry returning ``⟨q, v⟩`` of each hit, so a hit's score can be taken apart."""
    return {"script": {"source": DENSE_SCRIPT, "params": {"field": vector_field,
                                                          "query_vector": [float(x) for x in query_vector]}}}
