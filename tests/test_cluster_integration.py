"""What biorank needs from OpenSearch, proved on a real node: k-NN, Lucene HNSW, exact hybrid scoring."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence

import numpy as np
import pytest
from opensearchpy import OpenSearch

from biorank.cluster.artifacts import ENGINES
from biorank.demo import sample_path
from biorank.indexer.readers import read_records
from biorank.retrieval.clauses import KNN_SCORE, hybrid_query
from biorank.store.mappings.documents import IndexSettings, index_settings
from biorank.store.mappings.fields import knn_vector
from biorank.store.server import bm25_similarity

# Run on the second engine version too (README's test command).
pytestmark = pytest.mark.engines


def exact_hybrid_query(text: str, vector: Sequence[float], *, lam: float) -> dict:
    """The exact hybrid over every entry of the test's plain index, a ``match`` on ``text`` its BM25 part."""
    return hybrid_query({"match": {"text": text}}, vector, lam=lam)


def test_knn_plugin_is_installed(opensearch: OpenSearch) -> None:
    plugins = {row["component"] for row in opensearch.cat.plugins(format="json")}
    assert "opensearch-knn" in plugins
    if os.environ.get("BIORANK_TEST_URL") is None:
        # biorank's own node: neural-search where Maven Central has a build of it (2.19.1, not 3.x).
        version = opensearch.info()["version"]["number"]
        assert ("opensearch-neural-search" in plugins) == ("opensearch-neural-search" in ENGINES[version].plugins)


def test_bm25_keeps_the_k1_plus_1_factor_on_every_engine(opensearch: OpenSearch, index_name: str) -> None:
    """3.x's "BM25" drops 2.x's (k1 + 1) factor, which would halve the hybrid's BM25 part; biorank's indices
    score the 2.x way on both (λ, pinned figures and tuned weights stay comparable)."""
    settings = IndexSettings()
    opensearch.indices.create(index=index_name, body={
        "settings": index_settings(settings, bm25_similarity(opensearch)),
        "mappings": {"properties": {"t": {"type": "text", "analyzer": "standard"}}}})
    for i, text in enumerate(["alpha beta", "alpha gamma delta", "epsilon"]):
        opensearch.index(index=index_name, id=str(i), body={"t": text}, refresh=True)
    hits = opensearch.search(index=index_name, body={"query": {"match": {"t": "alpha"}}})["hits"]["hits"]
    k1, b, avgdl, idf = settings.k1, settings.b, 6 / 3, math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    expected = {str(i): idf * (k1 + 1) / (1 + k1 * (1 - b + b * dl / avgdl)) for i, dl in ((0, 2), (1, 3))}
    assert {h["_id"]: h["_score"] for h in hits} == pytest.approx(expected, rel=1e-6)


def _lucene_score(ip: float) -> float:
    # Lucene's innerproduct similarity: 1 + ip for ip >= 0, 1 / (1 - ip) below.
    return 1 + ip if ip >= 0 else 1 / (1 - ip)


def test_lucene_knn_query_matches_hand_computation(opensearch: OpenSearch, index_name: str) -> None:
    vectors = {"a": [0.6, 0.8, 0.0], "b": [1.0, 0.0, 0.0], "c": [0.0, 0.0, 1.0], "d": [-0.8, 0.6, 0.0]}
    opensearch.indices.create(
        index=index_name,
        body={"settings": {"index": {"knn": True}}, "mappings": {"properties": {"v": knn_vector(3)}}},
    )
    for doc_id, v in vectors.items():
        opensearch.index(index=index_name, id=doc_id, body={"v": v})
    opensearch.indices.refresh(index=index_name)

    mapping = opensearch.indices.get_mapping(index=index_name)[index_name]["mappings"]["properties"]["v"]
    assert mapping["method"]["engine"] == "lucene"

    q = [0.8, 0.6, 0.0]
    hits = opensearch.search(index=index_name, body={"size": 4, "query": {"knn": {"v": {"vector": q, "k": 4}}}})
    got = [(h["_id"], h["_score"]) for h in hits["hits"]["hits"]]
    # By hand: a·q = .96, b·q = .8, c·q = 0, d·q = -.28.
    assert [doc_id for doc_id, _ in got] == ["a", "b", "c", "d"]
    for (_, score), ip in zip(got, [0.96, 0.8, 0.0, -0.28], strict=True):
        assert score == pytest.approx(_lucene_score(ip), rel=1e-6)


def sample_records(n: int = 40) -> list:
    return list(itertools.islice(read_records(sample_path(), "scifact"), n))


@pytest.fixture
def hybrid_index(opensearch: OpenSearch, index_name: str) -> tuple[str, dict[str, np.ndarray]]:
    """40 real SciFact abstracts with seeded unit vectors; one abstract deliberately has no vector."""
    rng = np.random.default_rng(7)
    records = sample_records()
    opensearch.indices.create(
        index=index_name,
        body={
            "settings": {"index": {"knn": True, "number_of_shards": 1}},
            "mappings": {"properties": {"text": {"type": "text", "analyzer": "english"}, "embedding": knn_vector(8)}},
        },
    )
    vectors: dict[str, np.ndarray] = {}
    for i, r in enumerate(records):
        body: dict = {"text": f"{r.title}\n{r.abstract}"}
        if i != 3:
            v = rng.normal(size=8)
            vectors[r.id] = (v / np.linalg.norm(v)).astype(np.float32)
            body["embedding"] = vectors[r.id].tolist()
        opensearch.index(index=index_name, id=r.id, body=body)
    opensearch.indices.refresh(index=index_name)
    return index_name, vectors


def test_exact_hybrid_equals_lambda_bm25_plus_dot(opensearch: OpenSearch, hybrid_index) -> None:
    index, vectors = hybrid_index
    query = "vitamin B12 deficiency and homocysteine"
    q = np.random.default_rng(11).normal(size=8)
    q = (q / np.linalg.norm(q)).astype(np.float32)
    lam = 0.37

    body = {"size": 100, "query": exact_hybrid_query(query, q.tolist(), lam=lam)}
    hits = opensearch.search(index=index, body=body)["hits"]["hits"]
    assert len(hits) == 40, "every document is scored, matching a query term or not"

    for hit in hits:
        explained = opensearch.explain(index=index, id=hit["_id"], body={"query": {"match": {"text": query}}})
        bm25 = explained["explanation"]["value"] if explained["matched"] else 0.0
        dense = float(np.dot(q, vectors[hit["_id"]])) if hit["_id"] in vectors else 0.0
        assert hit["_score"] == pytest.approx(lam * bm25 + dense + 1.0, abs=1e-4), hit["_id"]
    assert any(h["_score"] > 1.5 for h in hits), "some documents must carry a BM25 part"


def test_document_without_vector_scores_its_bm25_part_only(opensearch: OpenSearch, hybrid_index) -> None:
    index, vectors = hybrid_index
    no_vector = next(r.id for r in sample_records() if r.id not in vectors)
    q = [1.0] + [0.0] * 7
    body = {"size": 100, "query": exact_hybrid_query("zzzunmatchedterm", q, lam=1.0)}
    scores = {h["_id"]: h["_score"] for h in opensearch.search(index=index, body=body)["hits"]["hits"]}
    # The vector script scores a block without a vector 0; the hybrid counts its dense part as 0, not -1.
    assert scores[no_vector] == pytest.approx(1.0)
    assert all(scores[i] == pytest.approx(1.0 + float(v[0]), abs=1e-6) for i, v in vectors.items())
    assert len(scores) == 40


def test_user_text_travels_only_as_query_text_and_params(opensearch: OpenSearch, hybrid_index) -> None:
    index, _ = hybrid_index
    q = [1.0] + [0.0] * 7
    hostile = 'homocysteine"); return 1e9; // \'} {"script": "Math.random()"} params.lam = 1000;'
    body = exact_hybrid_query(hostile, q, lam=0.5)
    script = body["bool"]["must"][0]["script_score"]["script"]
    assert script["source"] == KNN_SCORE and script["params"]["query_value"] == q and hostile not in str(script)
    assert body["bool"]["should"][-1] == {"bool": {"should": [{"match": {"text": hostile}}], "boost": 0.5}}

    hostile_hits = opensearch.search(index=index, body={"size": 5, "query": body})["hits"]["hits"]
    # The hostile text is only words to match: its scores are those of its plain terms.
    plain_words = "homocysteine return 1e9 script Math.random params.lam 1000"
    plain = opensearch.search(index=index, body={"size": 5, "query": exact_hybrid_query(plain_words, q, lam=0.5)})
    assert [(h["_id"], h["_score"]) for h in hostile_hits] == [
        (h["_id"], h["_score"]) for h in plain["hits"]["hits"]
    ]
    assert max(h["_score"] for h in hostile_hits) < 1e3
