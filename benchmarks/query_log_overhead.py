"""What the query log costs a query: batched runs (``search``, ``eval``) and single queries (``query``).

On a SciFact index, with the SciFact train claims, warm:
- batched: a first-stage pipeline over N queries, plain, against the same with its query log, as ``biorank
  search`` runs it (a record per query, a bulk write per 128 records on the writer thread while the next
  queries are searched, waiting for the last one at the end), rounds interleaved so that drift hits both. Two
  overheads, each the difference of the medians over the plain median: wall time, which other jobs on the
  machine disturb, and work — this process's CPU time plus the node's own time searching and indexing the log
  (index stats) — which they disturb far less;
- single: what ``biorank query`` adds after the answer is printed — a new ``QueryLog`` (as in every command:
  it checks the log index once), one record, one bulk write, waited for — against the query's own latency;
- the whole ``biorank query`` command, with and without ``--no-log``, as a user runs it (bm25, no encoder).
The log goes to a scratch index, deleted at the end; the SciFact index is only searched.

    biorank index ../shared/data/scifact/corpus.jsonl --index scifact
    python benchmarks/query_log_overhead.py --index scifact                  # all parts, 300 queries, k = 10
    python benchmarks/query_log_overhead.py --index scifact --limit 300 -k 10 --rounds 9 --parts batched
    python benchmarks/query_log_overhead.py --index scifact --limit 64 -k 1000 --rounds 3 --parts batched
    python benchmarks/query_log_overhead.py --index scifact --parts single,commands --commands 7

Result on this project's machine (2 cores; the node on the same cores, and other engineers' training and
tuning jobs on both, load average 6-8 throughout), SciFact (5,183 abstracts, 9,878 blocks), SciFact train
claims, 2026-11-23, the last three commands above with --url http://127.0.0.1:9200:

    | batched (search_many)  | queries | plain s | logged s | wall time | search work ms/q | log work ms/q |  work |
    |------------------------|--------:|--------:|---------:|----------:|-----------------:|--------------:|------:|
    | bm25, k = 10           |     300 |    0.48 |     0.57 |    +17.0% |             1.63 |         0.134 | +8.2% |
    | hybrid, k = 10         |     300 |   11.94 |    11.40 |     -4.5% |            47.45 |        -0.051 | -0.1% |
    | bm25, k = 1000         |      64 |    4.35 |     4.63 |     +6.4% |           222.80 |        -8.490 | -3.8% |
    | hybrid, k = 1000       |      64 |    7.67 |     6.72 |    -12.4% |           277.07 |         1.324 | +0.5% |

    | single query, after its answer | query p50 ms | log write p50 ms | log write p95 ms |
    |--------------------------------|-------------:|-----------------:|-----------------:|
    | bm25, k = 10                   |          1.8 |              2.0 |              7.7 |
    | hybrid, k = 10                 |        229.9 |              6.6 |             12.1 |

    biorank query (bm25), median of 7: 0.25 s logged, 0.29 s with --no-log

A record costs about 0.13 ms of work (this process building and serialising it, the node indexing it; measured
alone: 0.05 ms of client CPU and 0.05-0.08 ms on the node, about half of it for the ten hits). That is
within the noise — and under 1% — for a hybrid query, biorank's default, and for any query at the depth
``search`` and ``eval`` run at (k = 1000); it is 8% of the work of the cheapest query there is, BM25 at k = 10
(1.6 ms in a batch), whose wall time moved +17% on this loaded machine (the negative rows show how much such
a machine moves by itself). A single ``biorank query`` pays nothing before its answer is printed: the write
after it takes a few milliseconds of a command that takes a quarter of a second even for BM25.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid

from query_latency import QUERIES, percentile

from biorank.cluster.local import LocalNode
from biorank.config import ConnectionSettings
from biorank.evaluation.topics import read_queries
from biorank.pipeline import Pipeline, PipelineSettings
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.store.client import connect
from biorank.store.query_log import QueryLog


def _node_ms(client, index: str, metric: str) -> float:
    """Milliseconds the node has spent searching (query + fetch) or indexing in ``index`` so far."""
    if not client.indices.exists(index=index):
        return 0.0
    total = client.indices.stats(index=index, metric=metric)["indices"][index]["total"]
    if metric == "search":
        return total["search"]["query_time_in_millis"] + total["search"]["fetch_time_in_millis"]
    return total["indexing"]["index_time_in_millis"]


def batched(searcher: Searcher, queries: dict[str, str], k: int, log_index: str, rounds: int) -> dict[str, float]:
    """Wall time, and work: this process's CPU time plus the node's time searching or indexing the log."""
    client, index = searcher.client, searcher.index
    pipeline = Pipeline(PipelineSettings(search=searcher.settings), searcher)
    wall: dict[str, list[float]] = {"plain": [], "logged": []}
    work: dict[str, list[float]] = {"plain": [], "logged": []}
    for _ in range(rounds):
        for variant in ("plain", "logged"):
            searched, indexed = _node_ms(client, index, "search"), _node_ms(client, log_index, "indexing")
            started, cpu = time.perf_counter(), time.process_time()
            if variant == "plain":
                pipeline.run(queries, k)
            else:
                log = QueryLog(client, log_index, command="benchmark")
                pipeline.run(queries, k, log=log)
                log.close()
                assert log.failure is None and log.written == len(queries), log.failure
            wall[variant].append(time.perf_counter() - started)
            node = (_node_ms(client, index, "search") - searched) + (_node_ms(client, log_index, "indexing") - indexed)
            work[variant].append((time.process_time() - cpu) * 1000 + node)
    p, g = statistics.median(wall["plain"]), statistics.median(wall["logged"])
    wp, wg = statistics.median(work["plain"]), statistics.median(work["logged"])
    return {"plain_s": p, "logged_s": g, "wall_pct": 100 * (g - p) / p, "search_work_ms": wp / len(queries),
            "log_work_ms": (wg - wp) / len(queries), "work_pct": 100 * (wg - wp) / wp}


def single(searcher: Searcher, queries: dict[str, str], k: int, log_index: str) -> dict[str, float]:
    search_ms, log_ms = [], []
    pipeline = Pipeline(PipelineSettings(search=searcher.settings), searcher)
    for text in queries.values():
        started = time.perf_counter()
        answer = pipeline.search(text, k)
        answered = time.perf_counter()
        log = QueryLog(searcher.client, log_index, command="benchmark")
        pipeline.log(log, [answer], k, single=True)
        log.close()
        search_ms.append((answered - started) * 1000)
        log_ms.append((time.perf_counter() - answered) * 1000)
    return {"search_p50": percentile(search_ms, 50), "log_p50": percentile(log_ms, 50),
            "log_p95": percentile(log_ms, 95)}


def commands(url: str, index: str, log_index: str, runs: int) -> dict[str, float]:
    env = {**os.environ, "BIORANK_QUERY_LOG_INDEX": log_index}
    times: dict[str, list[float]] = {"logged": [], "no-log": []}
    for i in range(runs):
        for variant in ("logged", "no-log"):
            args = [sys.executable, "-m", "biorank.cli", "--url", url, "query", f"statins and sepsis {i}",
                    "--index", index, "--mode", "bm25", "--json"] + (["--no-log"] if variant == "no-log" else [])
            started = time.perf_counter()
            subprocess.run(args, env=env, check=True, capture_output=True)
            times[variant].append(time.perf_counter() - started)
    return {variant: statistics.median(values) for variant, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="cluster URL (default: the local node)")
    parser.add_argument("--index", default="scifact")
    parser.add_argument("--limit", type=int, default=300, help="queries (0: all)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commands", type=int, default=5, help="runs of the biorank query command per variant")
    parser.add_argument("--parts", default="batched,single,commands", help="which measurements, comma-separated")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    settings = ConnectionSettings.from_env().with_overrides(url=args.url)
    client = connect(settings, echo=print)
    texts = list(read_queries(QUERIES).items())[: args.limit or None]
    queries = dict(texts)
    log_index = f"biorank-queries-benchmark-{uuid.uuid4().hex[:8]}"
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start")
    try:
        print("| mode | plain s | logged s | wall time | search work ms/query | log work ms/query | work |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for mode in ("bm25", "hybrid") if "batched" in parts else ():
            searcher = Searcher(client, args.index, SearchSettings(mode=mode))
            searcher.search_many(dict(texts[:64]), args.k)  # warm: encoder, caches
            r = batched(searcher, queries, args.k, log_index, args.rounds)
            print(f"| {mode} (batched, {len(queries)} queries) | {r['plain_s']:.2f} | {r['logged_s']:.2f} | "
                  f"{r['wall_pct']:+.1f}% | {r['search_work_ms']:.2f} | {r['log_work_ms']:.3f} | "
                  f"{r['work_pct']:+.1f}% |")
        print("\n| mode | query p50 ms | log write p50 ms | log write p95 ms |")
        print("|---|---:|---:|---:|")
        for mode in ("bm25", "hybrid") if "single" in parts else ():
            searcher = Searcher(client, args.index, SearchSettings(mode=mode))
            r = single(searcher, dict(texts[:100]), args.k, log_index)
            print(f"| {mode} (single, after the answer) | {r['search_p50']:.1f} | {r['log_p50']:.1f} | "
                  f"{r['log_p95']:.1f} |")
        if "commands" in parts:
            c = commands(settings.url or LocalNode().status().url, args.index, log_index, args.commands)
            print(f"\nbiorank query (bm25), median of {args.commands}: {c['logged']:.2f} s logged, "
                  f"{c['no-log']:.2f} s with --no-log ({100 * (c['logged'] - c['no-log']) / c['no-log']:+.1f}%)")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        client.indices.delete(index=log_index, ignore_unavailable=True)


if __name__ == "__main__":
    main()
