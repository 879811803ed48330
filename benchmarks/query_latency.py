"""First-stage latency per mode: p50/p95 over the SciFact train claims on a SciFact index, warm, one at a time.

Each query is timed end to end as a user's ``Searcher.search`` call sees it: encoding the query (for every
mode but bm25) plus the round trips to the cluster. The encoder's share is reported on its own, and so are
the ratios hybrid ÷ bm25 and hybrid-approx ÷ hybrid measured in the same run.

    biorank index ../shared/data/scifact/corpus.jsonl --index scifact
    python benchmarks/query_latency.py --index scifact            # all 809 claims, k = 10
    python benchmarks/query_latency.py --index scifact --limit 200

Result on this project's machine (2 cores, the local node on the same cores, heap 1 GB), all 5,183 SciFact
abstracts (9,878 blocks), the first 300 claims, k = 10, K = 1000 candidates, 2026-11-22:

    | mode                   | p50 ms | p95 ms | mean ms |
    |------------------------|-------:|-------:|--------:|
    | (query encoding alone) |    7.5 |   10.4 |     7.9 |
    | bm25                   |    2.2 |    4.5 |     2.4 |
    | dense                  |   12.0 |   16.7 |    13.0 |
    | dense-exact            |   18.4 |   25.2 |    20.0 |
    | hybrid                 |   18.7 |   26.7 |    20.1 |
    | hybrid-approx          |   79.7 |  106.8 |    86.6 |
    | rrf                    |   77.3 |  103.9 |    85.3 |
    | minmax                 |   79.5 |  112.3 |    88.1 |
    | os-hybrid              |  106.8 |  119.5 |   108.1 |

    hybrid / bm25 (p50): 8.67; hybrid-approx / hybrid (p50): 4.26

The exact hybrid costs what exact dense costs (one script over all 9,878 blocks, ~11 ms on the node) plus
the query's encoding (7.5 ms); BM25 alone needs no encoder. At this size the approximate hybrid is 4x
slower than the exact one: its two candidate lists of K = 1000 each take ~40 ms on the node (collecting and
fetching 1,000 hits), more than scoring every block. The exact mode's cost grows with the collection, the
approximate mode's with K: the approximate mode is for collections far larger than SciFact's.

On an AVX2-only AMD EPYC (2 cores, 2026-11-26, all-MiniLM-L6-v2, 150 claims), after the vector part moved from
Painless's ``innerProduct`` to the k-NN plugin's ``knn_score`` script, alternated with the code before:

    | run    | encoding | bm25 | dense-exact | hybrid | hybrid / bm25 |
    |--------|---------:|-----:|------------:|-------:|--------------:|
    | before |      8.0 |  8.8 |        35.0 |   39.6 |          4.51 |
    | after  |      7.8 |  8.5 |        29.5 |   31.3 |          3.67 |
    | before |      9.8 |  8.2 |        35.9 |   38.0 |          4.61 |
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from machine import cpu_isa

from biorank.config import ConnectionSettings
from biorank.evaluation.topics import read_queries
from biorank.pipeline import Pipeline
from biorank.retrieval.searcher import MODES, Searcher, SearchSettings
from biorank.store.client import connect

QUERIES = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "queries_train.jsonl"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="cluster URL (default: the local node)")
    parser.add_argument("--index", default="scifact")
    parser.add_argument("--limit", type=int, default=0, help="queries to time (0: all)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--precision", default="auto", help="the query encoder's backend (auto: ONNX Runtime)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--reranker", help="a cross-encoder folder: also time hybrid -> rerank 20 -> snippets")
    parser.add_argument("--rerank-precisions", default="auto", help="comma-separated, for --reranker")
    args = parser.parse_args()
    client = connect(ConnectionSettings.from_env().with_overrides(url=args.url), echo=print)
    queries = list(read_queries(QUERIES).values())[: args.limit or None]
    base = Searcher(client, args.index, SearchSettings(mode="bm25", precision=args.precision))
    print(f"CPU: {cpu_isa()}; {len(queries)} queries, k = {args.k}, query encoder {base.encoder.precision}")

    encoder = base.encoder
    encoder.encode(queries[:16])  # warm-up: the first call pays for kernels and allocations
    encode_ms = []
    for text in queries:
        started = time.perf_counter()
        encoder.encode([text])
        encode_ms.append((time.perf_counter() - started) * 1000)

    p50: dict[str, float] = {}
    print("| mode | p50 ms | p95 ms | mean ms |")
    print("|---|---:|---:|---:|")
    print(f"| (query encoding alone) | {percentile(encode_ms, 50):.1f} | {percentile(encode_ms, 95):.1f} | "
          f"{statistics.fmean(encode_ms):.1f} |")
    for mode in args.modes.split(","):
        searcher = base.with_settings(mode=mode)
        for text in queries[:20]:
            searcher.search(text, args.k)  # warm: caches, JIT, the pipeline of os-hybrid
        times = []
        for text in queries:
            started = time.perf_counter()
            searcher.search(text, args.k)
            times.append((time.perf_counter() - started) * 1000)
        p50[mode] = percentile(times, 50)
        print(f"| {mode} | {p50[mode]:.1f} | {percentile(times, 95):.1f} | {statistics.fmean(times):.1f} |")
    if {"hybrid", "bm25"} <= p50.keys():
        print(f"\nhybrid / bm25 (p50): {p50['hybrid'] / p50['bm25']:.2f}")
    if args.reranker:
        for precision in args.rerank_precisions.split(","):
            pipeline_latency(base, queries, args.k, args.reranker, precision)


def pipeline_latency(base: Searcher, queries: list[str], k: int, reranker: str, precision: str) -> None:
    """p50 of each stage of hybrid -> rerank 20 -> snippets, as ``biorank query --rerank --snippets`` runs it."""
    pipeline = Pipeline.build("hybrid+rerank+snippets", base, reranker=reranker, precision=precision)
    for text in queries[:10]:
        pipeline.search(text, k)
    stages: dict[str, list[float]] = {}
    for text in queries:
        for stage, ms in pipeline.search(text, k).ms.items():
            stages.setdefault(stage, []).append(ms)
    print(f"\nhybrid -> rerank 20 -> snippets, cross-encoder {pipeline.cross_encoder.precision}: " + ", ".join(
        f"{stage} p50 {percentile(ms, 50):.1f} ms" for stage, ms in stages.items()))


if __name__ == "__main__":
    main()
