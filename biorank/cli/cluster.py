"""``biorank cluster``: the local OpenSearch node biorank assembles and runs itself."""

from __future__ import annotations

import sys

import click

from biorank.cli.main import cli
from biorank.cli.render import echo, say

ENGINE_VERSIONS = ("2.19.1", "3.4.0")
"""The keys of ``artifacts.ENGINES``, here so that ``--help`` builds without importing the node's code."""


@cli.group()
def cluster() -> None:
    """Manage the local OpenSearch cluster: one node, or several (--nodes), on 127.0.0.1, with k-NN.

    \b
    Engine versions: 2.19.1 (default; with neural-search, so os-hybrid works) or 3.4.0
    (Lucene 10; no neural-search build exists for 3.x). Each keeps its own data.
    Java: 11-21 for 2.19.1, 21-25 for 3.4.0 (BIORANK_JAVA_HOME, JAVA_HOME, PATH, /usr/lib/jvm).
    Files: downloads in ~/.cache/biorank (BIORANK_CACHE); install, data and logs in
    ~/.local/share/biorank, or /var/lib/biorank for root (BIORANK_HOME). A cluster of N
    nodes keeps its data in cluster-<version>-<N>/ there, apart from the single node's.
    """


@cluster.command("start")
@click.option("--port", type=click.IntRange(1, 65535), help="HTTP port (default 9200, or a free one if 9200 is taken).")
@click.option("--heap", default=None, help="JVM heap, e.g. 1g or 512m [env: BIORANK_HEAP; default 1g].")
@click.option("--engine-version", type=click.Choice(ENGINE_VERSIONS), envvar="BIORANK_ENGINE_VERSION",
              help="OpenSearch version to run [env: BIORANK_ENGINE_VERSION; default 2.19.1]. Commands that "
                   "start the node themselves start this version when the variable is set.")
@click.option("--nodes", type=click.IntRange(1, 9), default=None,
              help="How many nodes [default: as many as the cluster last started here, else 1]. Each runs in "
                   "its own JVM with --heap; they elect a cluster manager among themselves. Build indices "
                   "with `index --shards N --replicas 1` to spread them and survive a lost node.")
def cluster_start(port: int | None, heap: str | None, engine_version: str | None, nodes: int | None) -> None:
    """Download (once), assemble and start the cluster; waits until every node has joined.

    \b
    With --port P the nodes listen on P, P+1, ...; without it on 9200, 9201, ... (or free
    ports where those are taken). When some nodes of a cluster were lost (killed, crashed),
    `start` restarts just those, on their own ports, and they rejoin.
    """
    from dataclasses import replace

    from biorank.cluster.local import LocalNode, NodeSettings

    settings = NodeSettings(port=port, engine_version=engine_version, nodes=nodes)
    node = LocalNode(replace(settings, heap=heap) if heap else settings, echo=echo)
    status = node.status()
    whole = status.running and len(status.urls) == len(status.members)
    if whole and (engine_version is None or status.engine_version == engine_version) and \
            (nodes is None or nodes == len(status.members)):
        say(f"OpenSearch {status.engine_version} already running at {', '.join(status.urls)} "
                   f"({status.health})")
        return
    say(node.start())


@cluster.command("stop")
def cluster_stop() -> None:
    """Stop every node (the data stays; the next start has as many nodes)."""
    from biorank.cluster.local import LocalNode

    say("stopped" if LocalNode(echo=echo).stop() else "not running")


@cluster.command("status")
def cluster_status() -> None:
    """Whether the nodes run, where, the cluster's health and its shards. Exits 3 when none runs."""
    from biorank.cluster.local import LocalNode

    node = LocalNode(echo=echo)
    s = node.status()
    say(f"home:      {node.settings.home}")
    installed = ", ".join(f"OpenSearch {v}" for v in s.installed)
    say(f"installed: {installed or 'no (biorank cluster start installs it)'}")
    if s.running:
        say(f"running:   yes, OpenSearch {s.engine_version}, {len(s.urls)} of {len(s.members)} node(s), "
                   f"health {s.health}")
        for m in s.members:
            say(f"  {m.name:<14} {m.url:<24} transport {m.transport_port:<6} "
                       f"{f'pid {m.pid}' if m.running else 'DOWN (`biorank cluster start` restarts it)'}")
        if s.shards:
            c = s.shards
            say(f"shards:    {c.get('active_shards', 0)} active ({c.get('active_primary_shards', 0)} primary), "
                       f"{c.get('initializing_shards', 0)} initializing, {c.get('relocating_shards', 0)} relocating, "
                       f"{c.get('unassigned_shards', 0)} unassigned; {c.get('number_of_nodes', '?')} node(s) "
                       "in the cluster")
        say(f"java:      {s.java or 'unknown (started by an older biorank)'}")
        say(f"vector SIMD: {s.vector_simd or 'unknown (started by an older biorank)'}")
    else:
        say("running:   no")
        sys.exit(3)


@cluster.command("logs")
@click.option("-n", "--lines", type=click.IntRange(1), default=50, show_default=True,
              help="How many of the last lines.")
@click.option("--console", is_flag=True, help="The JVM's console output (start-up errors) instead of the log.")
@click.option("--node", "number", type=click.IntRange(1), default=1, show_default=True,
              help="Which node of a cluster of several.")
def cluster_logs(lines: int, console: bool, number: int) -> None:
    """The last lines of a node's log."""
    from biorank.cluster.local import LocalNode

    say(LocalNode(echo=echo).log_tail(lines, number, console=console))


@cluster.command("image")
@click.option("--version", "engine_version", type=click.Choice(ENGINE_VERSIONS), default="2.19.1",
              show_default=True, help="OpenSearch version of the image.")
@click.option("--secure", is_flag=True,
              help="With the security plugin: HTTPS and users admin and reader, as `cluster start --secure` "
                   "makes them (2.19.1 only; tagged VERSION-secure). The passwords and the CA to trust are "
                   "kept locally, on the machine that builds, and reused by rebuilds.")
@click.option("--tag", default=None, help="Another name for the image, besides biorank/opensearch:VERSION.")
@click.option("--mirror", default=None, metavar="URL",
              help="Debian mirror for the base [default: the one apt uses here, else deb.debian.org].")
def cluster_image(engine_version: str, secure: bool, tag: str | None, mirror: str | None) -> None:
    """Build a Docker image of OpenSearch with the local node's distribution and plugins.

    \b
    The image runs as a non-root user with Debian's Java (17 on bookworm for 2.19.1,
    21 on trixie for 3.4.0), security off, a health check, and takes settings as the
    official image does (dotted environment variables; none about discovery: one node).
    With --secure it serves HTTPS with users; the command says where their passwords are.
    No registry is needed: the Debian base is made once with debootstrap (as root). A
    rebuild with nothing changed does nothing. Run it, for instance, with:
      docker run -d -p 127.0.0.1:9200:9200 biorank/opensearch:2.19.1
    or bring up docker/docker-compose.yml (one node, or three with --profile three).
    """
    from biorank.cluster.image import build_image

    built = build_image(engine_version, secure=secure, tag=tag, mirror=mirror, echo=echo)
    say(f"{', '.join(built.tags)} ({built.size_bytes / 1e6:.0f} MB, recipe {built.recipe[:12]})")
    if built.credentials is not None:
        users = built.credentials
        say(f"users {users.admin} and {users.reader}: passwords in {users.ca_file.parent / 'credentials.json'}; "
            f"connect with --url https://127.0.0.1:PORT --user {users.admin} --ca-file {users.ca_file} "
            "(password in BIORANK_PASSWORD)")
