"""Load on ``biorank serve``: 1, 4 and 16 concurrent clients for a fixed time each, first stage only and the
full pipeline, on loopback only; throughput, p50/p99 and errors per level, and the server's memory over the run.

The server is a real ``biorank serve`` process (so its resident memory can be read from /proc); the clients are
threads posting SciFact claims to ``/api/search`` in turn, each waiting for its answer before the next.

    biorank demo                                                   # builds biorank-demo (300 abstracts)
    python benchmarks/serve_load.py --index biorank-demo           # 30 s per level
    python benchmarks/serve_load.py --index scifact --seconds 10 --reranker path/to/cross-encoder

"Full" is hybrid → rerank (with ``--reranker``, else the index's own, else none) → snippets.

Result (2026-11-25, AMD EPYC, 2 CPUs, AVX2 only; biorank-demo: 300 abstracts, bge-small-en-v1.5 in ONNX Runtime;
a MiniLM-based cross-encoder from ``train-reranker --max-steps 20``; 20 s per level; node, server and clients on
the same 2 cores):

    | system                | clients | requests | requests/s | p50 ms | p99 ms | errors | server RSS MB |
    |-----------------------|--------:|---------:|-----------:|-------:|-------:|-------:|--------------:|
    | first stage (hybrid)  |       1 |      884 |       44.2 |     21 |     49 |      0 |           638 |
    | first stage (hybrid)  |       4 |      915 |       45.6 |     84 |    158 |      0 |           639 |
    | first stage (hybrid)  |      16 |      774 |       37.9 |    412 |    560 |      0 |           644 |
    | full                  |       1 |        8 |        0.4 |  2,685 |  3,142 |      0 |           645 |
    | full                  |       4 |       12 |        0.4 |  8,772 | 10,124 |      0 |           646 |
    | full                  |      16 |       24 |        0.4 | 29,530 | 42,708 |      0 |           648 |

    the first 30 claims one at a time: first stage 35 ms in-process, 43 ms served; full 2,750 ms, 2,845 ms

Requests queue for the models (one at a time: two queries' encoders on 2 cores only slow each other), so
throughput is flat in the clients and p50 grows with the queue; memory stays put.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from machine import cpu_isa

from biorank.cluster.local import free_port

QUERIES = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "claims_train.jsonl"
LEVELS = (1, 4, 16)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def post(url: str, body: dict) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def level(url: str, clients: int, seconds: float, claims: list[str], extra: dict) -> dict:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(offset: int) -> None:
        nonlocal errors
        i = offset
        while time.monotonic() < stop:
            started = time.perf_counter()
            status = post(url, {"q": claims[i % len(claims)], "k": 10, **extra})
            took = (time.perf_counter() - started) * 1000
            with lock:
                latencies.append(took)
                errors += status != 200
            i += clients

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return {"clients": clients, "requests": len(latencies), "per_s": len(latencies) / wall, "p50": q[49],
            "p99": q[98], "errors": errors}


def side_by_side(url: str, index: str, cluster: str | None, reranker: str | None, claims: list[str], extra: dict,
                 ) -> tuple[float, float]:
    """p50 ms of the same claims, one at a time, through an in-process pipeline (what ``biorank query`` runs,
    warm) and through the server: what serving adds."""
    from biorank.config import ConnectionSettings
    from biorank.pipeline import Pipeline, PipelineSettings
    from biorank.retrieval.searcher import Searcher
    from biorank.store.client import connect

    searcher = Searcher(connect(ConnectionSettings.from_env().with_overrides(url=cluster)), index)
    settings = PipelineSettings(rerank=extra.get("rerank", False), snippets="tuned" if extra.get("snippets") else None,
                                highlight=True, **({"reranker": reranker} if reranker else {}))
    pipeline = Pipeline(settings, searcher)
    for claim in claims[:5]:
        pipeline.search(claim, 10)
    local, served = [], []
    for claim in claims:
        started = time.perf_counter()
        pipeline.search(claim, 10)
        local.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        post(url, {"q": claim, "k": 10, **extra})
        served.append((time.perf_counter() - started) * 1000)
    return statistics.median(local), statistics.median(served)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", default="biorank-demo")
    parser.add_argument("--url", help="cluster URL (default: the local node)")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--reranker", help="cross-encoder folder for the full pipeline")
    parser.add_argument("--compare", type=int, default=30, help="claims timed in-process and served, one at a time")
    args = parser.parse_args()

    claims = [json.loads(line)["claim"] for line in QUERIES.read_text().splitlines()]
    port = free_port()
    command = [sys.executable, "-m", "biorank.cli", *(["--url", args.url] if args.url else []), "serve",
               "--index", args.index, "--port", str(port), "--no-log",
               *(["--reranker", args.reranker] if args.reranker else [])]
    server = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/health", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.5)
        url = f"{base}/api/search"
        rerank = bool(args.reranker) or post(url, {"q": claims[0], "rerank": True}) == 200
        systems = {"first stage (hybrid)": {}, f"full (hybrid{'+rerank' if rerank else ''}+snippets)":
                   {"rerank": rerank, "snippets": True}}
        for extra in systems.values():  # warm: models loaded, caches filled
            for claim in claims[:5]:
                post(url, {"q": claim, **extra})
        memory = [rss_mb(server.pid)]
        print(f"{cpu_isa()}; index {args.index}; {args.seconds:g} s per level; server RSS after warm-up "
              f"{memory[0]:.0f} MB\n")
        print("| system | clients | requests | requests/s | p50 ms | p99 ms | errors | server RSS MB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, extra in systems.items():
            for clients in LEVELS:
                row = level(url, clients, args.seconds, claims, extra)
                memory.append(rss_mb(server.pid))
                print(f"| {name} | {clients} | {row['requests']} | {row['per_s']:.1f} | {row['p50']:.0f} | "
                      f"{row['p99']:.0f} | {row['errors']} | {memory[-1]:.0f} |", flush=True)
        print(f"\nserver RSS over the run: {min(memory):.0f}-{max(memory):.0f} MB\n")
        for name, extra in systems.items():
            local, served = side_by_side(url, args.index, args.url, args.reranker, claims[:args.compare], extra)
            print(f"{name}, the first {args.compare} claims one at a time: in-process pipeline p50 {local:.0f} ms, "
                  f"through the server {served:.0f} ms")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
