"""A real three-node local cluster: one command starts it, it survives a lost node, and a lost node rejoins.

The nodes are biorank's own (``NodeSettings(nodes=3)``), on loopback, each in its own JVM; faults are real
``kill -9``s of a node's JVM while biorank indexes or answers queries.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch, helpers
from running import ask_through, fault_service, index_until, node_of_its_own, sample_corpus

from biorank.cli import cli
from biorank.cluster.local import LocalNode, port_is_free
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.models.encoder import Encoder
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.store.client import connect
from biorank.store.mappings.documents import IndexSettings

pytestmark = pytest.mark.cluster

QUERIES = [
    "vitamin D deficiency and bone fractures",
    "statins lower the risk of cardiovascular events",
    "stem cells repair damaged heart tissue",
    "obesity raises the risk of type 2 diabetes",
    "antibiotic resistance spreads between bacteria",
    "sleep deprivation impairs memory",
]


def _free_ports(count: int) -> int:
    for base in range(19310, 19400, count):
        if all(port_is_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports in 19310-19399 for the test cluster")


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[LocalNode]:
    with node_of_its_own("biorank-test-cluster-", nodes=3, port=_free_ports(3), heap="512m",
                         start_timeout=300) as node:
        yield node


@pytest.fixture(scope="module")
def client(three_nodes: LocalNode) -> OpenSearch:
    return connect(",".join(three_nodes.status().urls))


def _index(client: OpenSearch, name: str, corpus: Path, encoder: Encoder, replicas: int) -> None:
    options = IndexOptions(index=name, sentences=False, settings=IndexSettings(shards=3, replicas=replicas))
    report = Indexer(client, options, encoder=encoder).run([corpus])
    assert report.failed == 0 and not report.rejected


def _green(client: OpenSearch, index: str | None = None) -> None:
    health = client.cluster.health(index=index, params={"wait_for_status": "green", "wait_for_nodes": "3",
                                                        "timeout": "120s"}, request_timeout=130)
    assert health["status"] == "green", health


def _answers(searcher: Searcher) -> dict[str, list[tuple[str, float]]]:
    return {q: [(h.id, round(h.score, 4)) for h in searcher.search(q, 10)] for q in QUERIES}


def _rejoin(node: LocalNode, client: OpenSearch) -> None:
    node.start()
    status = node.status()
    assert len(status.urls) == 3 and all(m.running for m in status.members)
    _green(client)


def _env(node: LocalNode) -> dict[str, str]:
    return {"BIORANK_HOME": str(node.settings.home), "BIORANK_QUERY_LOG": "0"}


def test_three_nodes_start_with_one_command_and_elect_one_cluster_manager(three_nodes: LocalNode,
                                                                            client: OpenSearch) -> None:
    status = three_nodes.status()
    assert [m.name for m in status.members] == ["node-1", "node-2", "node-3"]
    assert len(set(status.urls)) == 3 and status.health == "green"
    nodes = client.cat.nodes(format="json", h="name,cluster_manager")
    assert sorted(n["name"] for n in nodes) == ["node-1", "node-2", "node-3"]
    assert sum(n["cluster_manager"] == "*" for n in nodes) == 1
    shown = CliRunner().invoke(cli, ["cluster", "status"], env=_env(three_nodes))
    assert shown.exit_code == 0, shown.output
    assert "3 of 3 node(s), health green" in shown.output
    assert all(re.search(rf"node-{n} .* pid \d+", shown.output) for n in (1, 2, 3)), shown.output
    assert "node(s) in the cluster" in shown.output
    # The nodes keep their own data and logs.
    assert all((three_nodes.member_dir(n) / "data").is_dir() for n in (1, 2, 3))
    assert all(three_nodes.log_path(n).is_file() for n in (1, 2, 3))


def test_with_replicas_a_killed_node_costs_no_answer_and_rejoins(
        three_nodes: LocalNode, client: OpenSearch, default_encoder: Encoder, tmp_path: Path) -> None:
    name = "faults-replicated"
    _index(client, name, sample_corpus(tmp_path, 60), default_encoder, replicas=1)
    _green(client, name)
    searchers = {mode: Searcher.open(client, name, settings=SearchSettings(mode=mode)) for mode in ("bm25", "hybrid")}
    before = {mode: _answers(s) for mode, s in searchers.items()}
    # node-1 is the client's first host: its requests must fail over to the others.
    victim = three_nodes.status().members[0]
    os.kill(victim.pid, signal.SIGKILL)
    try:
        for mode, searcher in searchers.items():
            # While the cluster notices the loss and after: every query answers, and answers the same.
            for _ in range(3):
                assert _answers(searcher) == before[mode], mode
                time.sleep(1)
        assert not three_nodes.status().members[0].running
    finally:
        _rejoin(three_nodes, client)
    assert all(_answers(s) == before[mode] for mode, s in searchers.items())
    client.indices.delete(index=name)


def test_a_node_killed_while_indexing_leaves_an_index_that_resumes_to_exact_counts(
        three_nodes: LocalNode, client: OpenSearch, default_encoder: Encoder, tmp_path: Path) -> None:
    name, reference = "faults-indexing", "faults-indexing-reference"
    corpus = sample_corpus(tmp_path, 120)
    urls = ",".join(three_nodes.status().urls)
    command = [sys.executable, "-m", "biorank.cli", "--url", urls, "index", str(corpus), "--index", name,
               "--no-sentences", "--shards", "3", "--replicas", "1", "--batch-size", "8",
               "--model", default_encoder.source]
    run = index_until(command, tmp_path, client, name, 40, env={**os.environ, "BIORANK_QUERY_LOG": "0"})
    victim = three_nodes.status().members[1]
    os.kill(victim.pid, signal.SIGKILL)
    try:
        code = run.wait(600)
        output = (tmp_path / "index.log").read_text()
        if code != 0:
            # Allowed to stop, with one line and nothing lost: running it again resumes.
            assert "Traceback" not in output, output
            again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                                   env={**os.environ, "BIORANK_QUERY_LOG": "0"})
            assert again.returncode == 0, again.stdout + again.stderr
    finally:
        _rejoin(three_nodes, client)
    _index(client, reference, corpus, default_encoder, replicas=0)
    client.indices.refresh(index=f"{name},{reference}")

    def entries(index: str) -> list[tuple[str, int]]:
        return sorted((h["_source"]["id"], h["_source"]["block"])
                      for h in helpers.scan(client, index=index, query={"_source": ["id", "block"]}))

    got = entries(name)
    assert len(got) == len(set(got)), "no block is in twice"
    assert got == entries(reference)
    assert len({doc for doc, _ in got}) == 120
    _green(client, name)
    client.indices.delete(index=f"{name},{reference}")


def test_without_replicas_a_lost_node_is_one_line_naming_the_missing_shards(
        three_nodes: LocalNode, client: OpenSearch, default_encoder: Encoder, tmp_path: Path) -> None:
    name = "faults-unreplicated"
    _index(client, name, sample_corpus(tmp_path, 30), default_encoder, replicas=0)
    _green(client, name)
    shards = client.cat.shards(index=name, format="json", h="shard,prirep,node")
    holder = next(s["node"] for s in shards if s["prirep"] == "p")
    lost = sorted(int(s["shard"]) for s in shards if s["node"] == holder)
    victim = next(m for m in three_nodes.status().members if m.name == holder)
    # Ask a node that stays up, so the answer comes from the cluster and not from a dead connection.
    url = next(m.url for m in three_nodes.status().members if m.name != holder)
    os.kill(victim.pid, signal.SIGKILL)
    try:
        for mode in ("bm25", "hybrid", "dense"):
            result = CliRunner().invoke(cli, ["--url", url, "query", QUERIES[0], "--index", name, "--mode", mode],
                                        env=_env(three_nodes))
            assert result.exit_code == 1, result.output
            line = result.output.strip()
            assert "\n" not in line and "Traceback" not in line, line
            assert "no live copy" in line and "--replicas 1" in line, line
            if "missing shards" in line or "shards [[" in line:
                assert all(f"[{name}][{n}]" in line for n in lost), (lost, line)
    finally:
        _rejoin(three_nodes, client)
    assert len(Searcher.open(client, name).search(QUERIES[0], 10)) == 10
    client.indices.delete(index=name)


def test_serve_answers_every_request_while_a_node_is_killed(
        three_nodes: LocalNode, client: OpenSearch, default_encoder: Encoder, tmp_path: Path) -> None:
    """Issue 45's fault under load, short (``benchmarks/serve_faults.py`` runs it for a minute, with figures):
    clients ask ``serve`` for first-stage and reranked hits while node-1, the client's first host, is killed with
    ``kill -9``. Every request is answered, each with the hits of the fault-free run."""
    name = "faults-serve"
    _index(client, name, sample_corpus(tmp_path, 60), default_encoder, replicas=1)
    _green(client, name)
    service, requests = fault_service(client, name, default_encoder, QUERIES)

    def fault() -> None:
        time.sleep(2)
        try:
            os.kill(three_nodes.status().members[0].pid, signal.SIGKILL)
            time.sleep(5)
        finally:
            _rejoin(three_nodes, client)

    problems, answered = ask_through(service, requests, fault)
    assert problems == [] and all(n > 3 for n in answered), (problems[:5], answered)
    client.indices.delete(index=name)
