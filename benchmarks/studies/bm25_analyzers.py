"""Which BM25 text analysis and parameters the documents index uses: measured on the development data.

Each combination of analyser (``english``: standard tokenizer, possessive and Porter stemming, English stop
words; ``standard``: tokenizer + lower-casing only) and BM25 parameters builds the ``text`` field exactly as
biorank's documents mapping does (title + abstract in one field, one shard) and runs every development query:

- SciFact train: 5,183 abstracts, 809 claims, BEIR qrels (cited abstracts);
- NFCorpus dev: 3,193 documents (text pre-processed by its authors), 324 judged title queries, graded qrels.

    python benchmarks/bm25_analyzers.py                 # on the local node (started if needed)
    python benchmarks/bm25_analyzers.py --url http://localhost:9200

Result on OpenSearch 2.19.1 (the local node), 2026-11-22:

    | collection            | analyzer | k1  | b    | nDCG@10 | R@100  |
    |-----------------------|----------|----:|-----:|--------:|-------:|
    | scifact train (809 q) | english  | 0.9 | 0.4  | 0.6974  | 0.9289 |
    | scifact train (809 q) | english  | 1.2 | 0.75 | 0.6988  | 0.9332 |
    | scifact train (809 q) | standard | 0.9 | 0.4  | 0.6655  | 0.9037 |
    | scifact train (809 q) | standard | 1.2 | 0.75 | 0.6682  | 0.9081 |
    | nfcorpus dev (324 q)  | english  | 0.9 | 0.4  | 0.3057  | 0.2307 |
    | nfcorpus dev (324 q)  | english  | 1.2 | 0.75 | 0.3056  | 0.2296 |
    | nfcorpus dev (324 q)  | standard | 0.9 | 0.4  | 0.2752  | 0.2029 |
    | nfcorpus dev (324 q)  | standard | 1.2 | 0.75 | 0.2788  | 0.2042 |

``english`` wins by 0.03 nDCG@10 on both collections; k1/b move nDCG@10 by at most 0.004, so biorank keeps
the Anserini BEIR values (0.9, 0.4) and its SciFact train BM25 (0.6974) sits where an independent
implementation put it (0.6945), as it should before anything is tuned.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import ir_measures
from ir_measures import R, nDCG
from opensearchpy import helpers

from biorank.config import ConnectionSettings
from biorank.evaluation.topics import read_qrels, read_queries
from biorank.indexer.readers import read_records
from biorank.store.client import connect
from biorank.store.mappings.documents import ANALYZERS, IndexSettings, index_settings
from biorank.types import Abstract

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
COLLECTIONS = {
    "scifact train": ("scifact/corpus.jsonl", "scifact/queries_train.jsonl", "scifact/qrels/train.tsv"),
    "nfcorpus dev": ("nfcorpus/dev.docs", "nfcorpus/dev.titles.queries", "nfcorpus/dev.2-1-0.qrel"),
}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="cluster URL (default: the local node)")
    args = parser.parse_args()
    client = connect(ConnectionSettings.from_env().with_overrides(url=args.url), echo=print)

    print("| collection | analyzer | k1 | b | nDCG@10 | R@100 |")
    print("|---|---|---:|---:|---:|---:|")
    for name, (corpus, queries_file, qrels_file) in COLLECTIONS.items():
        docs = [r for r in read_records(DATA / corpus) if isinstance(r, Abstract)]
        queries = read_queries(DATA / queries_file)
        qrels = read_qrels(DATA / qrels_file)
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
                    print(f"| {name} ({len(queries)} q) | {analyzer} | {k1} | {b} | "
                          f"{scores[nDCG @ 10]:.4f} | {scores[R @ 100]:.4f} |")
                finally:
                    client.indices.delete(index=index)


if __name__ == "__main__":
    main()
