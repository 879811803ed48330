"""Does `biorank serve` answer every request, with the right hits, while a node of its cluster is killed, and
does its memory hold over a long run?

Fault under load: a 3-node local cluster of biorank's own, the demo sample (300 SciFact abstracts) indexed into it
with 3 shards and ``--replicas 1``, a real ``biorank serve`` process over all three nodes, and clients posting a
mix of first-stage (bm25, hybrid) and reranked (hybrid + the shipped cross-encoder) requests for ``--seconds``.
node-1, the first host of the server's client, is killed with ``kill -9`` at ``--kill-at`` s and started again at
``--restart-at`` s. Every answer is checked against a fault-free pass over the same requests (the same hit ids in
the same order); p50/p99 before the kill, during (kill until the index is green again) and after.

Then the soak: ``--soak-seconds`` of the same mix on the same server, its resident memory sampled every
``--sample-every`` s: memory must level off, not grow with the requests served.

    python -m benchmarks.serve_faults                                        # 60 s of faults, 10 min soak
    python -m benchmarks.serve_faults --seconds 30 --soak-seconds 0 --no-record

The server runs with ``--no-log`` (the query log is measured by ``query_log_overhead.py``); cluster, server and
clients share the machine's cores, so the latencies include that contention.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import suite
from benchmarks.serve_load import rss_mb, wait_until_serving
from biorank.cluster.local import LocalNode, NodeSettings, free_port, port_is_free
from biorank.demo import sample_path

INDEX = "serve-faults"
FAULT_COLUMNS = suite.columns(("phase", "phase"), ("kind", "requests of"), ("requests", "requests", ","),
                              ("errors", "errors"), ("wrong", "wrong hit lists"), ("p50", "p50 ms", ",.0f"),
                              ("p99", "p99 ms", ",.0f"))
SOAK_COLUMNS = suite.columns(("minute", "minute"), ("requests", "requests", ","), ("errors", "errors"),
                             ("wrong", "wrong hit lists"), ("p50", "p50 ms", ",.0f"),
                             ("rss_mb", "server RSS MB", ",.0f"))


@dataclass
class Answer:
    at: float
    """Seconds since the load began, when the request was sent."""
    kind: str
    ms: float
    error: str | None
    right: bool


@dataclass
class Load:
    """Clients that walk the request mix, each answer timed and checked against the fault-free one."""

    url: str
    requests: list[dict]
    expected: list[list[str]]
    answers: list[Answer] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, clients: int, until: threading.Event) -> None:
        threads = [threading.Thread(target=self._client, args=(n, clients, until)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _client(self, offset: int, clients: int, until: threading.Event) -> None:
        turn = offset
        while not until.is_set():
            n = turn % len(self.requests)
            turn += clients
            sent = time.monotonic()
            try:
                ids, error = hit_ids(self.url, self.requests[n]), None
            except Exception as e:  # every failure is counted; none stops the clients
                ids, error = None, str(e)[:200]
            answer = Answer(sent - self.started, "rerank" if self.requests[n].get("rerank") else "first stage",
                            (time.monotonic() - sent) * 1000, error, ids == self.expected[n])
            with self.lock:
                self.answers.append(answer)


def hit_ids(url: str, body: dict) -> list[str]:
    """The hit ids ``serve`` answers ``body`` with; anything but a 200 raises with its status and line."""
    request = urllib.request.Request(f"{url}/api/search", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return [hit["id"] for hit in json.loads(response.read())["hits"]]
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{e.code} {e.read()[:200]!r}") from None


def rows_of(answers: list[Answer], label: str) -> list[dict]:
    rows = []
    for kind in ("first stage", "rerank"):
        mine = [a for a in answers if a.kind == kind]
        ms = [a.ms for a in mine]
        rows.append({"phase": label, "kind": kind, "requests": len(mine),
                     "errors": sum(a.error is not None for a in mine),
                     "wrong": sum(a.error is None and not a.right for a in mine),
                     "p50": suite.percentile(ms, 50) if ms else float("nan"),
                     "p99": suite.percentile(ms, 99) if ms else float("nan")})
    return rows


def free_ports(count: int) -> int:
    for base in range(19410, 19500, count):
        if all(port_is_free(base + i) for i in range(count)):
            return base
    raise SystemExit(f"no {count} consecutive free ports in 19410-19499")


def green(client, timeout: float = 300) -> None:
    client.cluster.health(index=INDEX, params={"wait_for_status": "green", "wait_for_nodes": "3",
                                               "timeout": f"{timeout:.0f}s"}, request_timeout=timeout + 10)


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False, queries="scifact-claims-train")
    parser.add_argument("--seconds", type=float, default=60, help="load with the fault (at least until green again)")
    parser.add_argument("--kill-at", type=float, default=15)
    parser.add_argument("--restart-at", type=float, default=30)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--soak-seconds", type=float, default=600)
    parser.add_argument("--soak-clients", type=int, default=2)
    parser.add_argument("--sample-every", type=float, default=10)
    parser.add_argument("--heap", default="512m", help="per node")
    args = parser.parse_args(argv)
    claims = [json.loads(line)["claim"] for line in args.queries.read_text().splitlines()][: args.limit or 30]
    # Two first-stage requests per claim and a rerank after every third: one request in seven reranks.
    requests = [r for i, c in enumerate(claims) for r in (
        {"q": c, "k": 10, "mode": "bm25"}, {"q": c, "k": 10, "mode": "hybrid"},
        *([{"q": c, "k": 10, "mode": "hybrid", "rerank": True}] if i % 3 == 0 else []))]

    home = Path(tempfile.mkdtemp(prefix="biorank-serve-faults-"))
    home.chmod(0o755)  # as root, the nodes run as another user
    node = LocalNode(NodeSettings(home=home, nodes=3, port=free_ports(3), heap=args.heap, start_timeout=600))
    server = None
    try:
        node.start()
        urls = ",".join(node.status().urls)
        env = {**os.environ, "BIORANK_QUERY_LOG": "0", "PYTHONUNBUFFERED": "1"}
        subprocess.run([sys.executable, "-m", "biorank.cli", "--url", urls, "index", str(sample_path()), "--index",
                        INDEX, "--no-sentences", "--shards", "3", "--replicas", "1"], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        from biorank.store.client import connect

        client = connect(urls)
        green(client)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "biorank.cli", "--url", urls, "serve", "--index", INDEX,
                                   "--port", str(port), "--no-log"], env=env)
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(url, server)
        expected = [hit_ids(url, r) for r in requests]  # the fault-free pass, which also warms every model
        suite.header(f"3 nodes (heap {args.heap} each), index {INDEX}: 300 abstracts, 3 shards, 1 replica; "
                     f"{len(requests)} requests in the mix ({sum('rerank' in r for r in requests)} reranked), "
                     f"{args.clients} clients; node-1 killed at {args.kill_at:g} s, started at {args.restart_at:g} s")

        load, stop, marks = Load(url, requests, expected), threading.Event(), {}

        def fault() -> None:
            time.sleep(max(args.kill_at - (time.monotonic() - load.started), 0))
            victim = node.status().members[0]
            marks["kill"] = time.monotonic() - load.started
            os.kill(victim.pid, signal.SIGKILL)
            time.sleep(max(args.restart_at - (time.monotonic() - load.started), 0))
            marks["restart"] = time.monotonic() - load.started
            node.start()
            green(client)
            marks["green"] = time.monotonic() - load.started
            # The load goes on long enough after the cluster is whole again to time "after".
            time.sleep(max(args.seconds - marks["green"], 10))
            stop.set()

        faulting = threading.Thread(target=fault)
        faulting.start()
        load.run(args.clients, stop)
        faulting.join()
        phases = {"before": [a for a in load.answers if a.at < marks["kill"]],
                  "during": [a for a in load.answers if marks["kill"] <= a.at < marks["green"]],
                  "after": [a for a in load.answers if a.at >= marks["green"]]}
        rows = [row for label, answers in phases.items() for row in rows_of(answers, label)]
        errors = sorted({a.error for a in load.answers if a.error})
        suite.record(args, FAULT_COLUMNS, rows, variant="fault", settings={
            "nodes": 3, "heap_per_node": args.heap, "shards": 3, "replicas": 1, "documents": 300,
            "clients": args.clients, "requests_in_mix": len(requests), "seconds": round(load.answers[-1].at, 1),
            "killed_at_s": round(marks["kill"], 1), "restarted_at_s": round(marks["restart"], 1),
            "green_again_at_s": round(marks["green"], 1), "distinct_errors": errors[:5]},
            client=client, notes="during: from the kill -9 of node-1 until the index is green again on 3 nodes")

        if args.soak_seconds > 0:
            soak, stop = Load(url, requests, expected), threading.Event()
            samples = [(0.0, rss_mb(server.pid))]
            running = threading.Thread(target=soak.run, args=(args.soak_clients, stop))
            running.start()
            while time.monotonic() - soak.started < args.soak_seconds:
                time.sleep(args.sample_every)
                samples.append((time.monotonic() - soak.started, rss_mb(server.pid)))
            stop.set()
            running.join()
            rows = []
            for minute in range(int(args.soak_seconds // 60) or 1):
                mine = [a for a in soak.answers if minute * 60 <= a.at < (minute + 1) * 60]
                rss = [mb for at, mb in samples if minute * 60 < at <= (minute + 1) * 60] or [samples[-1][1]]
                rows.append({"minute": minute + 1, "requests": len(mine),
                             "errors": sum(a.error is not None for a in mine),
                             "wrong": sum(a.error is None and not a.right for a in mine),
                             "p50": suite.percentile([a.ms for a in mine], 50) if mine else float("nan"),
                             "rss_mb": max(rss)})
            suite.record(args, SOAK_COLUMNS, rows, variant="soak", settings={
                "clients": args.soak_clients, "seconds": args.soak_seconds, "sample_every_s": args.sample_every,
                "rss_mb_samples": [[round(at), round(mb, 1)] for at, mb in samples]}, client=client,
                notes="server RSS: the largest sample of each minute; every sample is in settings")
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
        node.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
