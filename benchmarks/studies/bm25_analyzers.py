"""Which BM25 text analysis and parameters should the documents index use, on the development data?

Each combination of analyser (``english``: standard tokenizer, possessive and Porter stemming, English stop
words; ``standard``: tokenizer + lower-casing only) and BM25 parameters builds the ``text`` field exactly as
biorank's documents mapping does (title + abstract in one field, one shard) and runs every development query:

- SciFact train: 5,183 abstracts, 809 claims, BEIR qrels (cited abstracts);
- NFCorpus dev: 3,193 documents (text pre-processed by its authors), 324 judged title queries, graded qrels.

    python -m benchmarks.studies.bm25_analyzers                 # on the local node (started if needed)
    python -m benchmarks.studies.bm25_analyzers --url http://localhost:9200

Decision (record ``bm25_analyzers.json``, 2026-11-22): ``english``, which wins by 0.03 nDCG@10 on both
collections; k1/b move nDCG@10 by at most 0.004, so biorank keeps the Anserini BEIR values (0.9, 0.4).
"""

from __future__ import annotations

import uuid

import ir_measures
from ir_measures import R, nDCG
from opensearchpy import helpers

from benchmarks import suite
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.indexer.readers import read_records
from biorank.store.mappings.documents import ANALYZERS, IndexSettings, index_settings
from biorank.types import Abstract

COLLECTIONS = {
    "scifact train": ("scifact-corpus", "scifact-queries-train", "scifact-qrels-train"),
    "nfcorpus dev": ("nfcorpus-docs", "nfcorpus-queries", "nfcorpus-qrels"),
}
COLUMNS = suite.columns(("collection", "collection"), ("analyzer", "analyzer"), ("k1", "k1"), ("b", "b"),
                        ("ndcg10", "nDCG@10", ".4f"), ("r100", "R@100", ".4f"))
PARAMETERS = [(0.9, 0.4), (1.2, 0.75)]


def run_bm25(client, index: str, queries: dict[str, str], depth: int = 100) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    ids = list(queries)
    for start in range(0, len(ids), 100):
        chunk = ids[start : start + 100]
        body = []
        for qid in chunk:
            body += [{"index": index}, {"size": depth, "_source": False, "query": {"match": {"text": queries[qid]}}}]
        for qid, answer in zip(chunk, client.msearch(body=body)["responses"], strict=True):
            run[qid] = {hit["_id"]: hit["_score"] for hit in answer["hits"]["hits"]}
    return run


def main(argv: list[str] | None = None) -> None:
    args = suite.parser(__doc__, __file__).parse_args(argv)
    client = suite.connect(args)
    rows = []
    for name, (corpus, queries_file, qrels_file) in COLLECTIONS.items():
        docs = [r for r in read_records(suite.data(corpus)) if isinstance(r, Abstract)]
        queries = read_queries(suite.data(queries_file))
        qrels = read_qrels(suite.data(qrels_file))
        queries = {q: t for q, t in queries.items() if q in qrels}
        for analyzer in ANALYZERS:
            for k1, b in PARAMETERS:
                index = f"bench-analyzer-{uuid.uuid4().hex[:8]}"
                settings = IndexSettings(analyzer=analyzer, k1=k1, b=b)
                client.indices.create(index=index, body={
                    "settings": index_settings(settings),
                    "mappings": {"properties": {"text": {"type": "text", "analyzer": analyzer}}},
                })
                try:
                    helpers.bulk(client, ({"_index": index, "_id": d.id, "text": f"{d.title}\n{d.abstract}"}
                                          for d in docs), refresh="wait_for")
                    run = run_bm25(client, index, queries)
                    scores = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, run)
                    rows.append({"collection": f"{name} ({len(queries)} q)", "analyzer": analyzer, "k1": k1, "b": b,
                                 "ndcg10": round(scores[nDCG @ 10], 4), "r100": round(scores[R @ 100], 4)})
                finally:
                    client.indices.delete(index=index)
    suite.record(args, COLUMNS, rows, client=client)


if __name__ == "__main__":
    main()
