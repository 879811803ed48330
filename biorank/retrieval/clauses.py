"""The query clauses of the first stage, built without a cluster (so they can be tested and printed offline):
BM25 field sets, kNN, and Ma et al.'s hybrid score ``λ·BM25(q, p) + ⟨q, p⟩`` computed exactly inside OpenSearch.
The modes (:mod:`biorank.retrieval.modes`) compose them into whole request bodies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from biorank.retrieval.boosts import Boosts

# User text reaches the cluster only as match text and as params, never inside a script.
#
# The vector part is the k-NN plugin's own exact scoring script (``knn_score``), not Painless's ``innerProduct``,
# which turns the query vector from a list of doubles into floats again for every document: the node's share of a
# hybrid search fell with it (``benchmarks/records/query_latency-knn-score.json``; docs/measurements/speed.md).
# Its ``cosinesimil`` space scores ``(1 + cos) / 2``, so a boost of 2 gives ``1 + ⟨q, p⟩`` for biorank's unit
# vectors: the shift of 1 keeps scores non-negative (OpenSearch rejects negative ones) and, being the same for
# every document, leaves the order alone. The BM25 part is a ``should`` clause boosted by λ (0 where no term
# matches), and a block without a vector, which the script scores 0, gets its 1 back from a clause of its own:
# a dense part of 0.
DENSE_SCRIPT = "doc[params.field].size() == 0 ? 0 : innerProduct(params.query_vector, doc[params.field])"
MATCH_ALL = {"match_all": {}}
SHIFT = 1.0
"""What every exact score carries on top of ``λ·BM25 + ⟨q, p⟩``; unit vectors give ``⟨q, p⟩ >= -1``."""
KNN_SCORE = "knn_score"


def dense_query(
    query_vector: Sequence[float],
    *,
    candidates: dict = MATCH_ALL,
    filters: Sequence[dict] = (),
    vector_field: str = "embedding",
) -> dict:
    """``1 + ⟨q, v⟩`` of every entry that ``candidates`` and ``filters`` match, exactly; 1 for one without a
    vector."""
    return _exact(query_vector, candidates, filters, vector_field)


def hybrid_query(
    text_query: dict,
    query_vector: Sequence[float],
    *,
    lam: float,
    candidates: dict = MATCH_ALL,
    filters: Sequence[dict] = (),
    vector_field: str = "embedding",
) -> dict:
    """Scores every entry that ``candidates`` and ``filters`` match with ``lam·BM25 + ⟨q, v⟩ + 1``.

    ``text_query`` (a ``match`` on the BM25 field, say) only provides the BM25 part: as a ``should`` beside the
    vector part it is optional, so an entry without a query term is still scored, with a BM25 of 0. With
    ``match_all`` as the candidates every entry of the index is scored (the exact mode); with an ``ids``
    filter only those (the approximate mode's union of BM25 and kNN candidates), each still exactly; ``filters``
    (:meth:`~biorank.retrieval.filters.Filters.clauses`) restrict either.
    """
    bm25 = {"bool": {"should": [text_query], "boost": float(lam)}}
    return _exact(query_vector, candidates, filters, vector_field, bm25)


def _exact(query_vector: Sequence[float], candidates: dict, filters: Sequence[dict], vector_field: str,
           *also: dict) -> dict:
    """The vector part over the candidates, the vector-less blocks' 1, and ``also`` added to every score."""
    vector_part = {
        "script_score": {
            "query": {"bool": {"filter": [candidates, *filters]}},
            "script": {
                "lang": "knn",
                "source": KNN_SCORE,
                "params": {
                    "field": vector_field,
                    "query_value": [float(x) for x in query_vector],
                    "space_type": "cosinesimil",
                },
            },
            "boost": 2.0,
        }
    }
    vectorless = {"constant_score": {"filter": {"bool": {"must_not": [{"exists": {"field": vector_field}}]}},
                                     "boost": SHIFT}}
    return {"bool": {"must": [vector_part], "should": [vectorless, *also]}}


def dense_script_field(query_vector: Sequence[float], vector_field: str = "embedding") -> dict:
    """A ``script_fields`` entry returning ``⟨q, v⟩`` of each hit, so a hit's score can be taken apart."""
    return {"script": {"source": DENSE_SCRIPT, "params": {"field": vector_field,
                                                          "query_vector": [float(x) for x in query_vector]}}}


def text_query(fields: str, text: str, pieces: str | None, boosts: Boosts | None = None) -> dict:
    """The BM25 part over field set ``fields``; ``pieces`` are the query's word pieces for the word-piece sets;
    ``boosts`` add the title's and MeSH's BM25 with their weights (:mod:`biorank.retrieval.boosts`)."""
    if boosts:
        return {"bool": {"should": [text_query(fields, text, pieces), *boosts.clauses(text)]}}
    if fields == "title+abstract":
        return {"multi_match": {"query": text, "fields": ["title", "abstract"], "type": "most_fields"}}
    if fields == "wordpieces":
        return {"match": {"wordpieces": pieces}}
    if fields == "wordpieces+bigrams":
        return {"bool": {"should": [{"match": {"wordpieces": pieces}},
                                    {"match": {"wordpieces.bigrams": pieces}}]}}
    return {"match": {fields: text}}


def filtered(query: dict, filters: Sequence[dict]) -> dict:
    """``query`` scoring only the entries every filter clause matches (itself when there are none)."""
    return {"bool": {"must": [query], "filter": list(filters)}} if filters else query


def knn_query(vector: list[float] | None, k: int, filters: Sequence[dict] = ()) -> dict:
    """The ``k`` nearest blocks; with filters, the nearest among the blocks they match (Lucene filters while
    it searches the graph, and searches exactly when the filtered set is small), not a filtered top k."""
    knn: dict = {"vector": vector, "k": k}
    if filters:
        knn["filter"] = {"bool": {"filter": list(filters)}}
    return {"knn": {"embedding": knn}}
