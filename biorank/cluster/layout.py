"""The layout of the local cluster, one node or several: each node's ports (the defaults, ``--port`` and the ports
after it, or free ones), its name, and the ``opensearch.yml`` that makes the nodes find each other through their
transport ports on loopback.

Nothing here starts a process: :class:`~biorank.cluster.local.LocalNode` writes what this module composes and
starts the nodes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from biorank.errors import NodeStartError

DEFAULT_HTTP_PORT = 9200
DEFAULT_TRANSPORT_PORT = 9300


def port_is_free(port: int) -> bool:
    """Whether a node could listen on ``port`` of 127.0.0.1 now.

    Example:
        >>> port_is_free(free_port())
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the JVM does: a port whose last connections linger in TIME_WAIT (a node just stopped) is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(port: int, what: str, advice: str = "") -> int:
    """``port`` itself if it is free; else a one-line refusal naming ``what`` uses it."""
    if not port_is_free(port):
        raise NodeStartError(f"{what} port {port} on 127.0.0.1 is taken by another process; {advice}stop "
                             "that process")
    return port


def default_or_free(default: int, what: str, echo: Callable[[str], None]) -> int:
    """``default`` if it is free, else a free port, said through ``echo``."""
    if port_is_free(default):
        return default
    port = free_port()
    echo(f"{what} port {default} is taken; the local node uses {port} instead")
    return port


def choose_ports(size: int, wanted: int | None, echo: Callable[[str], None]) -> list[tuple[int, int]]:
    """(HTTP, transport) port of each of ``size`` nodes: ``wanted`` (``--port``) and the ports after it, else
    9200/9300 and after, or free ones where those are taken."""
    ports = []
    for n in range(size):
        what = "" if size == 1 else f"node-{n + 1}'s "
        if wanted is not None:
            http = check_port_free(wanted + n, f"{what}HTTP", "choose another with --port or ")
        else:
            http = default_or_free(DEFAULT_HTTP_PORT + n, f"{what}HTTP", echo)
        ports.append((http, default_or_free(DEFAULT_TRANSPORT_PORT + n, f"{what}transport", echo)))
    return ports


def node_name(number: int, size: int) -> str:
    """The name of node ``number`` of a cluster of ``size`` (the single node keeps the name it always had)."""
    return "biorank-local" if size == 1 else f"node-{number}"


def node_configuration(*, cluster_name: str, number: int, ports: list[tuple[int, int]], data: Path,
                       logs: Path) -> str:
    """The ``opensearch.yml`` of node ``number`` of a cluster whose nodes listen on ``ports``: a single node
    discovers no one; several seed each other by their transport ports."""
    size = len(ports)
    if size == 1:
        discovery = "discovery.type: single-node\n"
    else:
        seeds = ", ".join(f'"127.0.0.1:{transport}"' for _, transport in ports)
        managers = ", ".join(f'"{node_name(n, size)}"' for n in range(1, size + 1))
        # The initial list matters only for the cluster's first election; later starts find the cluster.
        discovery = f"discovery.seed_hosts: [{seeds}]\ncluster.initial_cluster_manager_nodes: [{managers}]\n"
    http_port, transport_port = ports[number - 1]
    return (
        f"cluster.name: {cluster_name}\n"
        f"node.name: {node_name(number, size)}\n"
        "network.host: 127.0.0.1\n"
        f"http.port: {http_port}\n"
        f"transport.port: {transport_port}\n"
        + discovery +
        f"path.data: {data.resolve()}\n"
        f"path.logs: {logs.resolve()}\n"
        # A laptop's nearly full disk must not turn every index read-only.
        "cluster.routing.allocation.disk.threshold_enabled: false\n"
    )
