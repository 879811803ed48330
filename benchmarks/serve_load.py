"""How does ``biorank serve`` hold under load: 1, 4 and 16 concurrent clients for a fixed time each?

First stage only and the full pipeline, on loopback only; throughput, p50/p99 and errors per level, and the
server's memory over the run.

The server is a real ``biorank serve`` process (so its resident memory can be read from /proc); the clients are
threads posting SciFact claims to ``/api/search`` in turn, each waiting for its answer before the next.

    biorank demo                                                   # builds biorank-demo (300 abstracts)
    python -m benchmarks.serve_load --index biorank-demo           # 30 s per level
    python -m benchmarks.serve_load --index scifact --seconds 10 --reranker path/to/cross-encoder

"Full" is hybrid → rerank (with ``--reranker``, else the index's own, else none) → snippets.

What it showed (record ``serve_load.json``, 2026-11-25): requests queue for the models (one at a time: two
queries' encoders on 2 cores only slow each other), so throughput is flat in the clients and p50 grows with the
queue; memory stays put.
"""

from __future__ import annotations

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

from benchmarks import suite
from biorank.cluster.local import free_port

LEVELS = (1, 4, 16)
COLUMNS = suite.columns(("system", "system"), ("clients", "clients"), ("requests", "requests", ","),
                        ("per_s", "requests/s", ".1f"), ("p50", "p50 ms", ",.0f"), ("p99", "p99 ms", ",.0f"),
                        ("errors", "errors"), ("rss_mb", "server RSS MB", ",.0f"))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_until_serving(base: str, server: subprocess.Popen, timeout: float = 300) -> None:
    """Returns once the ``biorank serve`` process ``server`` answers ``/api/health`` at ``base``; exits the
    benchmark if it ends or does not answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/health", timeout=5):
                return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start") from None
            time.sleep(0.5)


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
    return {"clients": clients, "requests": len(latencies), "per_s": round(len(latencies) / wall, 2),
            "p50": round(suite.percentile(latencies, 50), 1), "p99": round(suite.percentile(latencies, 99), 1),
            "errors": errors}


def side_by_side(url: str, index: str, cluster: str | None, reranker: str | None, claims: list[str], extra: dict,
                 ) -> tuple[float, float]:
    """p50 ms of the same claims, one at a time, through an in-process pipeline (what ``biorank query`` runs,
    warm) and through the server: what serving adds."""
    from biorank import ConnectionSettings, Pipeline, PipelineSettings, Searcher, connect

    searcher = Searcher.open(connect(ConnectionSettings.from_env().with_overrides(url=cluster)), index)
    settings = PipelineSettings(rerank=extra.get("rerank", False), snippets="tuned" if extra.get("snippets") else None,
                                highlight=True, **({"reranker": reranker} if reranker else {}))
    pipeline = Pipeline(settings, searcher)
    local = suite.timed(lambda claim: pipeline.search(claim, 10), claims, warm=5)
    served = suite.timed(lambda claim: post(url, {"q": claim, "k": 10, **extra}), claims)
    return statistics.median(local), statistics.median(served)


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="biorank-demo", queries="scifact-claims-train")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrent clients, comma-separated")
    parser.add_argument("--reranker", help="cross-encoder folder for the full pipeline")
    parser.add_argument("--first-stage-only", action="store_true", help="leave the full pipeline out (a quick run)")
    parser.add_argument("--compare", type=int, default=30, help="claims timed in-process and served, one at a time")
    args = parser.parse_args(argv)

    claims = [json.loads(line)["claim"] for line in args.queries.read_text().splitlines()][: args.limit or None]
    port = free_port()
    command = [sys.executable, "-m", "biorank.cli", *(["--url", args.url] if args.url else []), "serve",
               "--index", args.index, "--port", str(port), "--no-log",
               *(["--reranker", args.reranker] if args.reranker else [])]
    server = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base, server)
        url = f"{base}/api/search"
        systems: dict[str, dict] = {"first stage (hybrid)": {}}
        if not args.first_stage_only:  # the index's own reranker, or the shipped one, if the server has either
            rerank = bool(args.reranker) or post(url, {"q": claims[0], "rerank": True}) == 200
            systems[f"full (hybrid{'+rerank' if rerank else ''}+snippets)"] = {"rerank": rerank, "snippets": True}
        for extra in systems.values():  # warm: models loaded, caches filled
            for claim in claims[:5]:
                post(url, {"q": claim, **extra})
        memory = [rss_mb(server.pid)]
        suite.header(f"index {args.index}; {args.seconds:g} s per level; server RSS after warm-up "
                     f"{memory[0]:.0f} MB")
        rows = []
        for name, extra in systems.items():
            for clients in (int(n) for n in args.levels.split(",")):
                row = level(url, clients, args.seconds, claims, extra)
                memory.append(rss_mb(server.pid))
                rows.append({"system": name, **row, "rss_mb": round(memory[-1])})
        compared = {}
        for name, extra in systems.items():
            local, served = side_by_side(url, args.index, args.url, args.reranker, claims[:args.compare], extra)
            compared[name] = {"in_process_p50_ms": round(local, 1), "served_p50_ms": round(served, 1)}
        suite.record(args, COLUMNS, rows, settings={
            "index": args.index, "seconds_per_level": args.seconds, "reranker": args.reranker,
            "server_rss_mb": [round(min(memory)), round(max(memory))],
            f"the first {args.compare} claims one at a time": compared})
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
