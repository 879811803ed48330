"""First-stage latency per mode: p50/p95 over the SciFact train claims on a SciFact index, warm, one at a time.

Each query is timed end to end as a user's ``Searcher.search`` call sees it: encoding the query (for every
mode but bm25) plus the round trips to the cluster. The encoder's share is reported on its own, and so are
the ratios hybrid ÷ bm25 and hybrid-approx ÷ hybrid measured in the same run.

    biorank index ../shared/data/scifact/corpus.jsonl --index scifact
    python benchmarks/query_latency.py --index scifact            # all 809 claims, k = 10
    python benchmarks/query_latency.py --index scifact --limit 200

Result on this project's machine (2 cores, the local node on the same cores, heap 1 GB), all 5,183 SciFact
abstracts (9,878 blocks), 809 claims, k = 10, K = 1000 candidates, 2026-11-22:

    RESULTS
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from biorank.cluster.client import connect
from biorank.config import ConnectionSettings
from biorank.evaluation.topics import read_queries
from biorank.ranker.searcher import MODES, Searcher, SearchSettings

QUERIES = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "queries_train.jsonl"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="cluster URL (default: the local node)")
    parser.add_argument("--index", default="scifact")
    parser.add_argument("--limit", type=int, default=0, help="queries to time (0: all)")
    parser.add_argument("-k", type=int, default=10)
    args = parser.parse_args()
    client = connect(ConnectionSettings.from_env().with_overrides(url=args.url), echo=print)
    queries = list(read_queries(QUERIES).values())[: args.limit or None]
    base = Searcher(client, args.index, SearchSettings(mode="bm25"))

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
    for mode in MODES:
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
    print(f"\nhybrid / bm25 (p50): {p50['hybrid'] / p50['bm25']:.2f}; "
          f"hybrid-approx / hybrid (p50): {p50['hybrid-approx'] / p50['hybrid']:.2f}")


if __name__ == "__main__":
    main()
