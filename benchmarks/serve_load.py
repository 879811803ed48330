"""How does ``biorank serve`` hold under load: 1, 4 and 16 concurrent clients for a fixed time each, and do
first-stage requests keep their speed while dozens of clients ask for reranks?

First stage only and the full pipeline, on loopback only; throughput, p50/p99 and errors per level, and the
server's memory over the run.

The server is a real ``biorank serve`` process (so its resident memory and CPU time can be read from /proc); the
clients are threads posting SciFact claims to ``/api/search`` in turn, each waiting for its answer before the next.

    biorank demo                                                   # builds biorank-demo (300 abstracts)
    python -m benchmarks.serve_load --index biorank-demo           # 30 s per level
    python -m benchmarks.serve_load --index scifact --seconds 10 --reranker path/to/cross-encoder
    python -m benchmarks.serve_load --contention                   # 45 rerank + 2 bm25 clients, 15 s

"Full" is hybrid → rerank (with ``--reranker``, else the index's own, else none) → snippets.

``--contention`` (record ``serve_load-contention``) is the security review's probe 4.10: ``--rerankers`` clients
asking for bm25 + rerank (k 1) and ``--bm25-clients`` asking for bm25 alone, for ``--seconds``. A client answered
503 waits what ``Retry-After`` says, as a well-behaved one does; at the end every client hangs up, answered or
not, and the server's CPU is sampled each second for ``--idle-seconds``: requests whose clients left must not go
on computing. The demo's index is built from its sample when it is missing.

What it showed (record ``serve_load.json``, 2026-11-25): requests queue for the models (one at a time: two
queries' encoders on 2 cores only slow each other), so throughput is flat in the clients and p50 grows with the
queue; memory stays put.
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections.abc import Iterator
from pathlib import Path

from benchmarks import suite
from biorank.cluster.local import free_port

LEVELS = (1, 4, 16)
CONTENTION_COLUMNS = suite.columns(
    ("request", "request"), ("clients", "clients"), ("requests", "requests", ","), ("answered", "answered", ","),
    ("busy", "503 busy", ","), ("left", "left unanswered", ","), ("errors", "errors"), ("p50", "p50 ms", ",.0f"),
    ("p95", "p95 ms", ",.0f"))
IDLE_CPU = 0.1
"""The server counts as idle below this many cores busy: no request computing, only the process's housekeeping."""
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


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used, all its threads together (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ask(url: str, body: dict, timeout: float = 120) -> tuple[int | None, float]:
    """(status, seconds its ``Retry-After`` asks to wait: 0 without one) of posting ``body``; (None, 0) when no
    answer came within ``timeout`` s (the client hangs up)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return response.status, 0.0
    except urllib.error.HTTPError as e:
        return e.code, float(e.headers.get("retry-after") or 0)
    except (TimeoutError, urllib.error.URLError):
        return None, 0.0


def post(url: str, body: dict) -> int:
    return ask(url, body)[0] or 0


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


def contention(url: str, server: subprocess.Popen, seconds: float, claims: list[str], rerankers: int,
               bm25_clients: int, idle_seconds: float) -> tuple[list[dict], list[float]]:
    """Rerank and bm25 clients at once for ``seconds``; then the server's CPU (cores busy) each second
    for ``idle_seconds`` after every client has hung up."""
    kinds = {"bm25 + rerank, k 1": ({"mode": "bm25", "rerank": True, "k": 1}, rerankers),
             "bm25, k 10": ({"mode": "bm25", "k": 10}, bm25_clients)}
    seen: dict[str, dict] = {kind: {"ms": [], "busy": 0, "left": 0, "other": 0} for kind in kinds}
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(kind: str, extra: dict, offset: int) -> None:
        i = offset
        while (left := stop - time.monotonic()) > 0:
            started = time.perf_counter()
            status, retry_after = ask(url, {"q": claims[i % len(claims)], **extra}, timeout=left)
            took = (time.perf_counter() - started) * 1000
            with lock:
                counts = seen[kind]
                if status == 200:
                    counts["ms"].append(took)
                else:
                    counts["busy" if status == 503 else "left" if status is None else "other"] += 1
            if status == 503:
                time.sleep(max(0.0, min(retry_after, stop - time.monotonic())))
            i += 1

    threads = [threading.Thread(target=client, args=(kind, extra, n))
               for kind, (extra, clients) in kinds.items() for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu = []
    for _ in range(int(idle_seconds)):
        before, started = cpu_seconds(server.pid), time.monotonic()
        time.sleep(1)
        cpu.append(round((cpu_seconds(server.pid) - before) / (time.monotonic() - started), 2))
    rows = []
    for kind, (_, clients) in kinds.items():
        counts = seen[kind]
        ms = counts["ms"]
        rows.append({"request": kind, "clients": clients,
                     "requests": len(ms) + counts["busy"] + counts["left"] + counts["other"],
                     "answered": len(ms), "busy": counts["busy"], "left": counts["left"], "errors": counts["other"],
                     "p50": round(suite.percentile(ms, 50), 1) if ms else float("nan"),
                     "p95": round(suite.percentile(ms, 95), 1) if ms else float("nan")})
    return rows, cpu


def ensure_index(args: argparse.Namespace) -> None:
    """The demo's index is built from its sample where it is missing (as ``biorank demo`` does); any other must
    exist."""
    from biorank.demo import DEMO_INDEX, index_sample

    client = suite.connect(args)
    if not client.indices.exists(index=args.index):
        if args.index != DEMO_INDEX:
            raise SystemExit(f"no index {args.index}: build it first, or measure {DEMO_INDEX}, built here if missing")
        print(f"indexing the demo's sample into {DEMO_INDEX}", flush=True)
        index_sample(client, DEMO_INDEX)


def side_by_side(url: str, index: str, cluster: str | None, reranker: str | None, claims: list[str], extra: dict,
                 ) -> tuple[float, float]:
    """p50 ms of the same claims, one at a time, through an in-process pipeline (what ``biorank query`` runs,
    warm) and through the server: what serving adds."""
    from biorank import ConnectionSettings, Pipeline, PipelineSettings, Searcher, connect

    searcher = Searcher.open(connect(ConnectionSettings.from_env().with_overrides(url=cluster)), index)
    settings = PipelineSettings(rerank=extra.get("rerank", False), snippets="tuned" if extra.get("snippets") else None,
                                highlight=True, **({"reranker": reranker} if reranker else {}))
    pipeline = Pipeline.build(settings, searcher)
    local = suite.timed(lambda claim: pipeline.search(claim, 10), claims, warm=5)
    served = suite.timed(lambda claim: post(url, {"q": claim, "k": 10, **extra}), claims)
    return statistics.median(local), statistics.median(served)


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="biorank-demo", queries="scifact-claims-train")
    parser.add_argument("--seconds", type=float, default=None, help="per level (default 30); --contention: in all "
                        "(default 15)")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrent clients, comma-separated")
    parser.add_argument("--reranker", help="cross-encoder folder for the full pipeline")
    parser.add_argument("--first-stage-only", action="store_true", help="leave the full pipeline out (a quick run)")
    parser.add_argument("--compare", type=int, default=30, help="claims timed in-process and served, one at a time")
    parser.add_argument("--contention", action="store_true",
                        help="rerank clients beside bm25 clients instead of the levels (record serve_load-contention)")
    parser.add_argument("--rerankers", type=int, default=45, help="--contention: clients asking for reranks")
    parser.add_argument("--bm25-clients", type=int, default=2, help="--contention: clients asking for bm25 alone")
    parser.add_argument("--idle-seconds", type=float, default=10,
                        help="--contention: seconds the server's CPU is sampled after the clients left")
    args = parser.parse_args(argv)

    claims = [json.loads(line)["claim"] for line in args.queries.read_text().splitlines()][: args.limit or None]
    if args.contention:
        ensure_index(args)
    with serving(args) as (url, server):
        (contend if args.contention else levels)(args, url, server, claims)


@contextlib.contextmanager
def serving(args: argparse.Namespace) -> Iterator[tuple[str, subprocess.Popen]]:
    """A ``biorank serve`` process over ``args.index`` on a free loopback port, until the block ends: (the URL
    of its ``/api/search``, the process)."""
    port = free_port()
    command = [sys.executable, "-m", "biorank.cli", *(["--url", args.url] if args.url else []), "serve",
               "--index", args.index, "--port", str(port), "--no-log",
               *(["--reranker", args.reranker] if args.reranker else [])]
    server = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base, server)
        yield f"{base}/api/search", server
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)


def levels(args: argparse.Namespace, url: str, server: subprocess.Popen, claims: list[str]) -> None:
    """1, 4 and 16 clients (``--levels``) of the first stage, then of the full pipeline; record ``serve_load``."""
    seconds = args.seconds or 30
    systems: dict[str, dict] = {"first stage (hybrid)": {}}
    if not args.first_stage_only:  # the index's own reranker, or the shipped one, if the server has either
        rerank = bool(args.reranker) or post(url, {"q": claims[0], "rerank": True}) == 200
        systems[f"full (hybrid{'+rerank' if rerank else ''}+snippets)"] = {"rerank": rerank, "snippets": True}
    for extra in systems.values():  # warm: models loaded, caches filled
        for claim in claims[:5]:
            post(url, {"q": claim, **extra})
    memory = [rss_mb(server.pid)]
    suite.header(f"index {args.index}; {seconds:g} s per level; server RSS after warm-up {memory[0]:.0f} MB")
    rows = []
    for name, extra in systems.items():
        for clients in (int(n) for n in args.levels.split(",")):
            row = level(url, clients, seconds, claims, extra)
            memory.append(rss_mb(server.pid))
            rows.append({"system": name, **row, "rss_mb": round(memory[-1])})
    compared = {}
    for name, extra in systems.items():
        local, served = side_by_side(url, args.index, args.url, args.reranker, claims[:args.compare], extra)
        compared[name] = {"in_process_p50_ms": round(local, 1), "served_p50_ms": round(served, 1)}
    suite.record(args, COLUMNS, rows, settings={
        "index": args.index, "seconds_per_level": seconds, "reranker": args.reranker,
        "server_rss_mb": [round(min(memory)), round(max(memory))],
        f"the first {args.compare} claims one at a time": compared})


def contend(args: argparse.Namespace, url: str, server: subprocess.Popen, claims: list[str]) -> None:
    """Rerank clients beside bm25 clients, then the server's CPU once they left; record ``serve_load-contention``."""
    seconds = args.seconds or 15
    post(url, {"q": claims[0], "mode": "bm25", "rerank": True, "k": 1})  # warm: the cross-encoder loaded
    for claim in claims[:5]:
        post(url, {"q": claim, "mode": "bm25"})
    load = os.getloadavg()[0]
    suite.header(f"index {args.index}; {args.rerankers} rerank and {args.bm25_clients} bm25 clients for "
                 f"{seconds:g} s; load average {load:.1f}")
    rows, cpu = contention(url, server, seconds, claims, args.rerankers, args.bm25_clients, args.idle_seconds)
    idle_after = next((i for i in range(len(cpu)) if max(cpu[i:]) < IDLE_CPU), None)
    print(f"server CPU (cores) each second after the clients left: {cpu}; idle after {idle_after} s", flush=True)
    suite.record(args, CONTENTION_COLUMNS, rows, variant="contention", settings={
        "index": args.index, "seconds": seconds, "reranker": args.reranker,
        "server_cpu_after_clients_left": cpu, "server_idle_after_s": idle_after, "idle_below_cores": IDLE_CPU},
        notes=f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs; the node, "
              "the server and the clients on the same cores")

if __name__ == "__main__":
    main()
