"""OpenSearch in real containers: the image ``biorank cluster image`` builds without a registry, a three-node
container cluster that loses a node while ``serve`` answers, and the compose file brought up and filled by
``biorank demo``. Needs a Docker daemon (CI starts one); run with ``pytest -m containers --cluster container``,
which also runs the integration subset (conftest's ``CONTAINER_SUBSET``) against a single-node container."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from running import ask_through, fault_service, sample_corpus

from biorank.cli import cli
from biorank.cluster.container import PREFIX, ContainerCluster, node_container
from biorank.cluster.image import (
    DEFAULT_MIRROR,
    RECIPE_LABEL,
    REPOSITORY,
    Base,
    build_image,
    docker_client,
    make_base,
    run_once,
)
from biorank.cluster.layout import free_port
from biorank.demo import DEMO_INDEX
from biorank.errors import ContainerError
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.store.client import connect
from biorank.store.mappings.documents import IndexSettings

pytestmark = [pytest.mark.docker, pytest.mark.containers]

COMPOSE_FILE = Path(__file__).resolve().parents[1] / "docker" / "docker-compose.yml"
QUERIES = ["vitamin D deficiency and bone fractures", "statins lower the risk of cardiovascular events",
           "obesity raises the risk of type 2 diabetes"]


def test_the_image_is_built_once_and_runs_as_a_user() -> None:
    runner = CliRunner()
    first = runner.invoke(cli, ["cluster", "image"])
    assert first.exit_code == 0, first.output
    again = runner.invoke(cli, ["cluster", "image"])
    assert again.exit_code == 0, again.output
    assert "is up to date" in again.output and "building" not in again.output, again.output
    image = docker_client().images.get(f"{REPOSITORY}:2.19.1")
    assert image.labels[RECIPE_LABEL][:12] in again.output
    config = image.attrs["Config"]
    assert config["User"] == "1000:1000" and config["Healthcheck"]["Test"][0] == "CMD-SHELL"
    assert set(config["ExposedPorts"]) == {"9200/tcp", "9300/tcp"}
    who = run_once(docker_client(), image.id, ["bash", "-c", "id -u; java -version 2>&1 | head -1"])
    assert who.splitlines()[0] == "1000" and 'version "17' in who, who



def test_each_way_docker_can_be_missing_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    refusing = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(refusing))  # a socket nobody listens on: a daemon that is not running
        for host, said in (("unix:///nonexistent/docker.sock", "no Docker daemon"),
                           (f"unix://{refusing}", "does not answer")):
            down = runner.invoke(cli, ["cluster", "image"], env={"DOCKER_HOST": host})
            assert down.exit_code == 1 and "Traceback" not in down.output, down.output
            assert down.output.strip().count("\n") == 0 and said in down.output, down.output
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ContainerError, match=r"apt-get install debootstrap"):
        make_base(docker_client(), Base("bookworm", 17, packages=("biorank-never-built",)), DEFAULT_MIRROR, print)


def test_a_secured_image_serves_https_to_its_users_only() -> None:
    """``cluster image --secure``: TLS with biorank's own CA and the users' passwords kept on this machine; a
    rebuild keeps them (clients keep working); a caller without the password is refused in one line."""
    built = build_image("2.19.1", secure=True, echo=lambda line: None)
    again = build_image("2.19.1", secure=True, echo=lambda line: None)
    assert not again.built and again.credentials == built.credentials and built.tags[0].endswith("-secure")
    users = built.credentials
    assert users is not None and oct(users.ca_file.parent.stat().st_mode & 0o777) == "0o700"
    with node_container(built.tags[0]) as node:
        url = f"https://127.0.0.1:{node.get_exposed_port(9200)}"
        base = ["--url", url, "--ca-file", str(users.ca_file)]
        runner = CliRunner()
        deadline = time.monotonic() + 180
        while True:
            asked = runner.invoke(cli, [*base, "--user", users.admin, "indices"],
                                  env={"BIORANK_PASSWORD": users.admin_password})
            if asked.exit_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert asked.exit_code == 0 and "no biorank indices" in asked.output, asked.output
        refused = runner.invoke(cli, [*base, "indices"])
        assert refused.exit_code == 1 and "refused the credentials" in refused.output, refused.output
        assert refused.output.strip().count("\n") == 0


@pytest.fixture(scope="module")
def container_cluster() -> Iterator[ContainerCluster]:
    with ContainerCluster(3, heap="512m") as cluster:
        yield cluster


def test_three_containers_serve_every_request_while_one_is_killed_and_restarted(
        container_cluster: ContainerCluster, default_encoder, tmp_path: Path) -> None:
    """The local three-node fault test, on containers: ``docker kill`` of node-1 (the client's first host) and
    ``docker start`` again while clients ask ``serve``; every request is answered with the fault-free hits."""
    client = connect(",".join(container_cluster.urls))
    nodes = client.cat.nodes(format="json", h="name")
    assert sorted(n["name"] for n in nodes) == ["node-1", "node-2", "node-3"]
    # Every published port is on loopback.
    for container in docker_client().containers.list(filters={"name": PREFIX}):
        for bindings in (container.attrs["HostConfig"]["PortBindings"] or {}).values():
            assert all(b["HostIp"] == "127.0.0.1" for b in bindings), container.name
    name = "containers-serve"
    options = IndexOptions(index=name, sentences=False, settings=IndexSettings(shards=3, replicas=1))
    report = Indexer(client, options, encoder=default_encoder).run([sample_corpus(tmp_path, 60)])
    assert report.failed == 0 and not report.rejected
    container_cluster.wait_green()
    service, requests = fault_service(client, name, default_encoder, QUERIES)

    def fault() -> None:
        time.sleep(2)
        container_cluster.kill(1)
        time.sleep(5)
        assert not container_cluster.running(1)
        container_cluster.restart(1)
        container_cluster.wait_green(180)
        time.sleep(2)

    problems, answered = ask_through(service, requests, fault)
    assert problems == [] and all(n > 3 for n in answered), (problems[:5], answered)
    assert container_cluster.running(1)
    client.indices.delete(index=name)


def _compose() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    pytest.fail("neither docker-compose nor the docker compose plugin is installed (`apt-get install docker-compose`)")


def _health(url: str, nodes: int, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    seen = "no answer"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_cat/nodes?h=name", timeout=5) as r:
                seen = r.read().decode()
            if len(seen.split()) == nodes:
                with urllib.request.urlopen(f"{url}/_cluster/health?wait_for_status=green&timeout=30s",
                                            timeout=40) as r:
                    return r.read().decode()
        except OSError as e:
            seen = str(e)
        time.sleep(2)
    raise AssertionError(f"compose's cluster of {nodes} did not come up: {seen}")


@pytest.mark.parametrize("profile,nodes", [("one", 1), ("three", 3)])
def test_compose_brings_up_a_cluster_that_biorank_demo_fills(profile: str, nodes: int, tmp_path: Path) -> None:
    """``docker/docker-compose.yml`` as its header says to use it, on free loopback ports; the single node is
    filled by ``biorank demo --url``, the three-node one must come up green; both are taken down with data."""
    ports = [free_port() for _ in range(3)]
    env = {**os.environ, "COMPOSE_PROFILES": profile, "BIORANK_PORT": str(ports[0]),
           "BIORANK_PORT_2": str(ports[1]), "BIORANK_PORT_3": str(ports[2])}
    project = ["-p", f"{PREFIX}{uuid.uuid4().hex[:8]}", "-f", str(COMPOSE_FILE)]
    up = subprocess.run([*_compose(), *project, "up", "-d"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        url = f"http://127.0.0.1:{ports[0]}"
        assert '"status":"green"' in _health(url, nodes)
        if nodes == 1:
            demo = subprocess.run([sys.executable, "-m", "biorank.cli", "--url", url, "demo", "--no-log", "-k", "3"],
                                  cwd=tmp_path, capture_output=True, text=True, timeout=900)
            assert demo.returncode == 0, demo.stdout + demo.stderr
            assert "Traceback" not in demo.stderr
            count = connect(url).count(index=DEMO_INDEX)["count"]
            assert count >= 300, count
    finally:
        down = subprocess.run([*_compose(), *project, "down", "-v"], env=env, capture_output=True, text=True,
                              timeout=300)
    assert down.returncode == 0, down.stderr
    assert not docker_client().containers.list(all=True, filters={"name": project[1]})

