"""OpenSearch in containers, through testcontainers: one node, or a cluster of several on a network of its own.

The image is the official one where Docker has it or can pull it, else the one ``biorank cluster image`` builds
from the local node's own distribution (built here when missing: no registry is needed). Every published port is
on 127.0.0.1 only. Whatever a run creates is named ``biorank-tc-*`` and labelled with the creating process, so a
crashed run's containers and networks are removed by the next one (testcontainers' own reaper is an image from a
registry, and is not used).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from biorank.cluster.artifacts import engine
from biorank.cluster.image import REPOSITORY, build_image, docker_client, run_once
from biorank.cluster.layout import port_is_free
from biorank.errors import ContainerError

if TYPE_CHECKING:
    from testcontainers.community.opensearch import OpenSearchContainer
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network

Echo = Callable[[str], None]
C = TypeVar("C")

PREFIX = "biorank-tc-"
OWNER_LABEL = "org.biorank.pid"
"""The process that made a container or network: one whose process is gone is a crashed run's leftover."""
MAP_COUNT_NEEDED = 262144
"""OpenSearch's production check of ``vm.max_map_count`` (a node that sees other nodes must pass it)."""
OPEN_FILES_NEEDED = 65535
"""Its production check of the open-files limit, which no container can raise above the Docker daemon's own."""


def _configure_testcontainers() -> None:
    from testcontainers.core.config import ConnectionMode, testcontainers_config

    # Ryuk, testcontainers' reaper, is pulled from a registry; biorank removes what it makes itself.
    testcontainers_config.ryuk_disabled = True
    # Ports are published on loopback only, which is where to reach them, even from inside a container (where
    # testcontainers would otherwise try the Docker gateway's address).
    testcontainers_config.tc_host_override = "127.0.0.1"
    testcontainers_config.connection_mode_override = ConnectionMode.docker_host


def opensearch_image(version: str | None = None, echo: Echo = print) -> str:
    """The official image of ``version`` where Docker has it or can pull it, else biorank's own (built once)."""
    from docker.errors import DockerException

    wanted = engine(version).version
    client = docker_client()
    official = f"opensearchproject/opensearch:{wanted}"
    try:
        client.images.get(official)
        return official
    except DockerException:
        pass
    try:
        client.images.pull(official)
        return official
    except DockerException:
        echo(f"{official} cannot be pulled here; using {REPOSITORY}:{wanted}, built from biorank's own distribution")
    return build_image(wanted, echo=echo).tags[0]


def _labels() -> dict[str, str]:
    return {OWNER_LABEL: str(os.getpid())}


def remove_leftovers(echo: Echo = print) -> int:
    """Remove the ``biorank-tc-*`` containers and networks of runs whose process is gone; how many were removed."""
    client = docker_client()
    removed = 0

    def dead(labels: dict[str, str]) -> bool:
        # Only what this module made carries the label: another tool's biorank-tc-* (a compose project) is left.
        pid = labels.get(OWNER_LABEL, "")
        return pid.isdigit() and not Path(f"/proc/{pid}").exists()

    for container in client.containers.list(all=True, filters={"name": PREFIX}):
        if container.name.startswith(PREFIX) and dead(container.labels):
            container.remove(force=True, v=True)
            removed += 1
    for network in client.networks.list(filters={"name": PREFIX}):
        if network.name.startswith(PREFIX) and dead(network.attrs.get("Labels") or {}):
            network.remove()
            removed += 1
    if removed:
        echo(f"removed {removed} container(s) and network(s) a crashed run left behind")
    return removed


def _ours(container: C, name: str, published: dict[int, int | None], **run: Any) -> C:
    """``container`` named ``name`` and labelled with this process, ``published`` (its port: the host's, None for
    any free one) on 127.0.0.1 only, where testcontainers would bind every interface; ``run``: more ``docker run``
    arguments."""
    container.with_name(name).with_kwargs(labels=_labels(), **run)
    for port, host in published.items():
        container.ports[str(port)] = ("127.0.0.1", host)
    return container


def _image_for_run(version: str | None, echo: Echo) -> str:
    """Ready to start containers: testcontainers set up as biorank runs it, a crashed run's leftovers gone, and the
    image of ``version``."""
    _configure_testcontainers()
    remove_leftovers(echo)
    return opensearch_image(version, echo)


def opensearch_container(version: str | None = None, heap: str = "1g", echo: Echo = print) -> OpenSearchContainer:
    """A not-yet-started single-node container of ``version`` (default: the local node's) with security off, its
    HTTP port on 127.0.0.1; use it as a context manager.

    Example:
        >>> with opensearch_container() as node:  # doctest: +SKIP
        ...     url = f"http://127.0.0.1:{node.get_exposed_port(9200)}"
    """
    from testcontainers.community.opensearch import OpenSearchContainer

    image = _image_for_run(version, echo)
    # Images since 2.12 reject a weak initial admin password even with security off.
    container = OpenSearchContainer(image, security_enabled=False, initial_admin_password="Biorank-local-1")
    _ours(container, f"{PREFIX}{uuid.uuid4().hex[:8]}", {9200: None})
    return container.with_env("OPENSEARCH_JAVA_OPTS", f"-Xms{heap} -Xmx{heap}")


def node_container(image: str) -> DockerContainer:
    """A not-yet-started container of ``image`` run as the image says, its HTTP port on 127.0.0.1, named and
    labelled as this module's (a secured image, say, which the single-node helper's health wait cannot use)."""
    from testcontainers.core.container import DockerContainer

    _configure_testcontainers()
    return _ours(DockerContainer(image), f"{PREFIX}{uuid.uuid4().hex[:8]}", {9200: None})


def _max_map_count() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    return None


class ContainerCluster:
    """``nodes`` OpenSearch containers on a user-defined Docker network, forming one cluster; node N's HTTP port
    is published on 127.0.0.1. Nodes can be killed (``docker kill``) and started again, and rejoin.

    Example:
        >>> with ContainerCluster(3) as cluster:  # doctest: +SKIP
        ...     urls = cluster.urls
    """

    def __init__(self, nodes: int = 3, *, version: str | None = None, heap: str = "512m",
                 start_timeout: float = 300.0, echo: Echo = print) -> None:
        self.size, self.version, self.heap, self.start_timeout = nodes, version, heap, start_timeout
        self._echo = echo
        self._network: Network | None = None
        self._nodes: list[DockerContainer] = []
        self._holder: DockerContainer | None = None
        self.ports: list[int] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def name(self, number: int) -> str:
        return f"node-{number}"

    def start(self) -> list[str]:
        """Create the network and every node, and wait until all have joined and the cluster is green."""
        from testcontainers.core.network import Network

        image = _image_for_run(self.version, self._echo)
        run = uuid.uuid4().hex[:8]
        self._network = Network(docker_network_kw={"labels": _labels()})
        self._network.name = f"{PREFIX}{run}"
        self._network.create()
        self.ports = _free_ports(self.size)
        settings = {"cluster.name": f"biorank-{run}", "OPENSEARCH_JAVA_OPTS": f"-Xms{self.heap} -Xmx{self.heap}"}
        if (_max_map_count() or 0) < MAP_COUNT_NEEDED:
            # Nodes that see each other over a network pass OpenSearch's production checks; without mmap they
            # need no vm.max_map_count.
            settings["node.store.allow_mmap"] = "false"
            self._echo(f"vm.max_map_count is below {MAP_COUNT_NEEDED} here: the nodes run without mmap (as root, "
                       f"`sysctl -w vm.max_map_count={MAP_COUNT_NEEDED}` lifts this)")
        try:
            limit = _open_files_limit(image)
            if limit >= OPEN_FILES_NEEDED:
                self._start_networked(image, run, settings)
            else:
                self._echo(f"containers may open at most {limit} files here (OpenSearch's production check wants "
                           f"{OPEN_FILES_NEEDED}): the nodes share one network namespace and talk over loopback, as "
                           "the local cluster does, and the namespace is on the network")
                self._start_shared(image, run, settings)
            self.wait_green()
        except BaseException:
            self.stop()
            raise
        return self.urls

    def _start_networked(self, image: str, run: str, settings: dict[str, str]) -> None:
        """Each node its own container on the network, known to the others by its alias (the usual deployment)."""
        from docker.types import Ulimit
        from testcontainers.core.container import DockerContainer

        names = [self.name(n) for n in range(1, self.size + 1)]
        settings = {**settings, "discovery.seed_hosts": ",".join(names),
                    "cluster.initial_cluster_manager_nodes": ",".join(names)}
        for name, port in zip(names, self.ports, strict=True):
            node = DockerContainer(image, env={**settings, "node.name": name}, network=self._network,
                                   network_aliases=[name])
            _ours(node, f"{PREFIX}{run}-{name}", {9200: port},
                  ulimits=[Ulimit(name="nofile", soft=OPEN_FILES_NEEDED + 1, hard=OPEN_FILES_NEEDED + 1)])
            self._nodes.append(node.start())

    def _start_shared(self, image: str, run: str, settings: dict[str, str]) -> None:
        """The nodes in one network namespace, held by a container on the network that publishes their HTTP
        ports: transport on loopback keeps OpenSearch in development mode, whatever the file limit."""
        from testcontainers.core.container import DockerContainer

        holder = DockerContainer(image, network=self._network, network_aliases=["opensearch"])
        _ours(holder, f"{PREFIX}{run}-net", {9200 + n: port for n, port in enumerate(self.ports)},
              entrypoint=["sleep", "infinity"])
        self._holder = holder.start()
        seeds = ",".join(f"127.0.0.1:{9300 + n}" for n in range(self.size))
        names = [self.name(n) for n in range(1, self.size + 1)]
        for n, name in enumerate(names):
            env = {**settings, "node.name": name, "http.port": str(9200 + n), "transport.port": str(9300 + n),
                   "transport.host": "127.0.0.1", "discovery.seed_hosts": seeds,
                   "cluster.initial_cluster_manager_nodes": ",".join(names)}
            node = _ours(DockerContainer(image, env=env), f"{PREFIX}{run}-{name}", {},
                         network_mode=f"container:{self._holder.get_wrapped_container().id}")
            self._nodes.append(node.start())

    def wait_green(self, timeout: float | None = None) -> None:
        """Until every node has joined and the cluster is green; a :class:`ContainerError` after ``timeout``."""
        from opensearchpy import OpenSearch
        from opensearchpy.exceptions import OpenSearchException

        deadline = time.monotonic() + (timeout or self.start_timeout)
        client = OpenSearch(self.urls, timeout=10, max_retries=0)
        seen = "no answer"
        while time.monotonic() < deadline:
            try:
                health = client.cluster.health(params={"wait_for_nodes": str(self.size), "wait_for_status": "green",
                                                       "timeout": "5s"}, request_timeout=10)
                if health["status"] == "green" and health["number_of_nodes"] == self.size:
                    return
                seen = f"{health['number_of_nodes']} node(s), {health['status']}"
            except OpenSearchException as e:
                seen = type(e).__name__
            time.sleep(1)
        raise ContainerError(f"the {self.size}-node container cluster is not green after "
                             f"{timeout or self.start_timeout:.0f} s ({seen}); `docker logs {self._nodes[0]._name}`")

    def kill(self, number: int) -> None:
        """``docker kill`` node ``number`` (SIGKILL to its JVM; the container and its data stay)."""
        self._nodes[number - 1].get_wrapped_container().kill()

    def restart(self, number: int) -> None:
        """Start node ``number`` again after :meth:`kill`; it keeps its port and rejoins."""
        self._nodes[number - 1].get_wrapped_container().start()

    def running(self, number: int) -> bool:
        container = self._nodes[number - 1].get_wrapped_container()
        container.reload()
        return container.status == "running"

    def stop(self) -> None:
        """Remove every node (with its volumes) and the network, whatever state they are in."""
        for node in [*self._nodes, *([self._holder] if self._holder else [])]:
            with contextlib.suppress(Exception):
                node.get_wrapped_container().remove(force=True, v=True)
        self._nodes, self._holder = [], None
        if self._network is not None:
            with contextlib.suppress(Exception):
                self._network.remove()
            self._network = None

    def __enter__(self) -> ContainerCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _open_files_limit(image: str) -> int:
    text = run_once(docker_client(), image, ["bash", "-c", "ulimit -Hn"]).strip()
    return 1 << 30 if text == "unlimited" else int(text)


def _free_ports(count: int) -> list[int]:
    # Fixed host ports: a node started again after a kill must come back where its clients know it.
    for base in range(19500, 19700, count):
        if all(port_is_free(base + i) for i in range(count)):
            return [base + i for i in range(count)]
    raise ContainerError(f"no {count} consecutive free ports in 19500-19699 on 127.0.0.1 for the container cluster")
