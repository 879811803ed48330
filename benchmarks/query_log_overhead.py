"""What does the query log cost a query: batched runs (``search``, ``eval``) and single queries (``query``)?

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
    python -m benchmarks.query_log_overhead --index scifact                  # all parts, 300 queries, k = 10
    python -m benchmarks.query_log_overhead --index scifact --limit 300 -k 10 --rounds 9 --parts batched
    python -m benchmarks.query_log_overhead --index scifact --limit 64 -k 1000 --rounds 3 --parts batched
    python -m benchmarks.query_log_overhead --index scifact --parts single,commands --commands 7

Why the log stays on (records ``query_log_overhead-*.json``, 2026-11-23): a record costs about 0.13 ms of work
(this process building and serialising it, the node indexing it): within the noise, and under 1%, for a hybrid
query and for any query at the depth ``search`` and ``eval`` run at (k = 1000); 8% of the work of the cheapest
query there is, BM25 at k = 10. A single ``biorank query`` pays nothing before its answer is printed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid

from benchmarks import suite
from biorank import ConnectionSettings, Pipeline, PipelineSettings, Searcher, SearchSettings
from biorank.cluster.local import LocalNode
from biorank.evaluation.topics import read_queries
from biorank.store.query_log import QueryLog

BATCHED = suite.columns(("mode", "mode"), ("queries", "queries"), ("plain_s", "plain s", ".2f"),
                        ("logged_s", "logged s", ".2f"), ("wall_pct", "wall time %", "+.1f"),
                        ("search_work_ms", "search work ms/q", ".2f"), ("log_work_ms", "log work ms/q", ".3f"),
                        ("work_pct", "work %", "+.1f"))
SINGLE = suite.columns(("mode", "single query, after its answer"), ("search_p50", "query p50 ms", ".1f"),
                       ("log_p50", "log write p50 ms", ".1f"), ("log_p95", "log write p95 ms", ".1f"))
COMMANDS = suite.columns(("variant", "biorank query (bm25)"), ("median_s", "median s", ".2f"))


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
    pipeline = Pipeline.build(PipelineSettings(search=searcher.settings), searcher)
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
    pipeline = Pipeline.build(PipelineSettings(search=searcher.settings), searcher)
    for text in queries.values():
        started = time.perf_counter()
        answer = pipeline.search(text, k)
        answered = time.perf_counter()
        log = QueryLog(searcher.client, log_index, command="benchmark")
        pipeline.log(log, [answer], k, single=True)
        log.close()
        search_ms.append((answered - started) * 1000)
        log_ms.append((time.perf_counter() - answered) * 1000)
    return {"search_p50": round(suite.percentile(search_ms, 50), 2), "log_p50": round(suite.percentile(log_ms, 50), 2),
            "log_p95": round(suite.percentile(log_ms, 95), 2)}


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


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="scifact", queries="scifact-queries-train")
    parser.set_defaults(limit=300)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commands", type=int, default=5, help="runs of the biorank query command per variant")
    parser.add_argument("--parts", default="batched,single,commands", help="which measurements, comma-separated")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    client = suite.connect(args)
    texts = list(read_queries(args.queries).items())[: args.limit or None]
    queries = dict(texts)
    log_index = f"biorank-queries-benchmark-{uuid.uuid4().hex[:8]}"
    suite.header(f"load average {os.getloadavg()[0]:.1f} at the start")
    settings = {"index": args.index, "k": args.k, "rounds": args.rounds}
    try:
        if "batched" in parts:
            rows = []
            for mode in ("bm25", "hybrid"):
                searcher = Searcher.open(client, args.index, SearchSettings(mode=mode))
                searcher.search_many(dict(texts[:64]), args.k)  # warm: encoder, caches
                r = batched(searcher, queries, args.k, log_index, args.rounds)
                rows.append({"mode": f"{mode}, k = {args.k}", "queries": len(queries),
                             **{key: round(value, 3) for key, value in r.items()}})
            suite.record(args, BATCHED, rows, variant="batched", settings=settings, client=client,
                         notes=f"load average {os.getloadavg()[0]:.1f} at the end")
        if "single" in parts:
            rows = []
            for mode in ("bm25", "hybrid"):
                searcher = Searcher.open(client, args.index, SearchSettings(mode=mode))
                rows.append({"mode": f"{mode}, k = {args.k}", **single(searcher, dict(texts[:100]), args.k, log_index)})
            suite.record(args, SINGLE, rows, variant="single", settings=settings, client=client)
        if "commands" in parts:
            url = ConnectionSettings.from_env().with_overrides(url=args.url).url or LocalNode().status().url
            c = commands(url, args.index, log_index, args.commands)
            suite.record(args, COMMANDS, [{"variant": v, "median_s": round(s, 3)} for v, s in c.items()],
                         variant="commands", settings={**settings, "runs": args.commands}, client=client)
    finally:
        client.indices.delete(index=log_index, ignore_unavailable=True)


if __name__ == "__main__":
    main()
