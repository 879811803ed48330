"""What several test modules run the same way: a node of their own, and an index run to be interrupted."""

from __future__ import annotations

import contextlib
import gzip
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from opensearchpy import OpenSearch

from biorank.cluster.local import LocalNode, NodeSettings

SCIFACT_SLICE = 600
"""Abstracts of the suite's SciFact index (conftest's ``scifact_index``): the corpus's first, real ones. Indexing all
5,183 took a third of the suite's time; every abstract's sentences are checked without a node (test_indexing.py)."""


def one_line(result: Any) -> str:
    """The one line a refused command printed (exit status 1): a refusal, not a traceback."""
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    return lines[0]


@contextlib.contextmanager
def node_of_its_own(prefix: str, **settings: Any) -> Iterator[LocalNode]:
    """A started local node (or cluster) in a temporary home of its own, stopped and removed afterwards."""
    # Not under pytest's tmp dirs: those are private to root, and as root the node runs as another user.
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)
    node = LocalNode(NodeSettings(home=home, **settings))
    try:
        node.start()
        yield node
    finally:
        node.stop()
        shutil.rmtree(home, ignore_errors=True)


def index_until(command: list[str], cwd: Path, client: OpenSearch, index: str, operations: int,
                **popen: Any) -> subprocess.Popen:
    """``biorank index`` started as ``command``, returned still running once ``index`` has taken more than
    ``operations`` writes (they count as soon as the node takes them, refresh or not)."""
    log = cwd / "index.log"
    run = subprocess.Popen(command, cwd=cwd, stdout=log.open("wb"), stderr=subprocess.STDOUT, **popen)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        if client.indices.exists(index=index):
            stats = client.indices.stats(index=index, metric="indexing")
            if stats["_all"]["primaries"]["indexing"]["index_total"] > operations:
                break
        time.sleep(0.2)
    assert run.poll() is None, f"the run ended before it could be interrupted: {log.read_text()}"
    return run


@contextlib.contextmanager
def serving(service: Any) -> Iterator[str]:
    """``service`` behind uvicorn on a free loopback port, for as long as the block runs."""
    import uvicorn

    from biorank.cluster.local import free_port
    from biorank.service.app import create_app
    from biorank.service.server import server_config

    port = free_port()
    server = uvicorn.Server(server_config(create_app(service), "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def sample_corpus(folder: Path, n: int) -> Path:
    """The first ``n`` records of the packaged 300-abstract sample, as a JSON Lines file in ``folder``."""
    from biorank.demo import sample_path

    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(n)]
    path = folder / f"sample-{n}.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def fault_service(client: OpenSearch, index: str, encoder: Any, queries: list[str]) -> tuple[Any, list[dict]]:
    """A ``serve`` service over ``index`` (no query log) and what the fault tests ask it: each query first-stage
    (bm25, hybrid) and the first one reranked."""
    from biorank.retrieval.searcher import Searcher
    from biorank.service.app import SearchService, ServiceSettings

    service = SearchService(client, ServiceSettings(index=index, query_log=False), query_log_index="unused",
                            searcher=Searcher.open(client, index, encoder=encoder))
    requests = [{"q": q, "k": 10, "mode": mode} for q in queries for mode in ("bm25", "hybrid")]
    return service, [*requests, {"q": queries[0], "k": 5, "rerank": True}]


def ask_through(service: Any, requests: list[dict], fault: Callable[[], None],
                clients: int = 3) -> tuple[list[str], list[int]]:
    """``service`` behind ``serve``, asked ``requests`` over and over by ``clients`` threads while ``fault`` runs:
    every answer is compared with the fault-free one. Returns the problems seen and each client's answers."""
    from benchmarks.serve_faults import hit_ids

    problems: list[str] = []
    answered = [0] * clients
    stop = threading.Event()
    with serving(service) as url:
        expected = [hit_ids(url, r) for r in requests]

        def ask(worker: int) -> None:
            turn = worker
            while not stop.is_set():
                n, turn = turn % len(requests), turn + 1
                try:
                    if hit_ids(url, requests[n]) != expected[n]:
                        problems.append(f"other hits for {requests[n]}")
                except Exception as e:  # every failure is counted, none stops the others
                    problems.append(f"{requests[n]}: {e}")
                answered[worker] += 1

        workers = [threading.Thread(target=ask, args=(n,)) for n in range(clients)]
        for worker in workers:
            worker.start()
        try:
            fault()
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=300)
    return problems, answered
