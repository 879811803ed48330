"""``biorank cluster``: the local OpenSearch node biorank assembles and runs itself."""

from __future__ import annotations

import sys

import click

from biorank.cli.main import cli
from biorank.cli.render import echo

ENGINE_VERSIONS = ("2.19.1", "3.4.0")
"""The keys of ``artifacts.ENGINES``, here so that ``--help`` builds without importing the node's code."""


@cli.group()
def cluster() -> None:
    """Manage the local OpenSearch node (single node, 127.0.0.1, k-NN with the Lucene engine).

    \b
    Engine versions: 2.19.1 (default; with neural-search, so os-hybrid works) or 3.4.0
    (Lucene 10; no neural-search build exists for 3.x). Each keeps its own data.
    Java: 11-21 for 2.19.1, 21-25 for 3.4.0 (BIORANK_JAVA_HOME, JAVA_HOME, PATH, /usr/lib/jvm).
    Files: downloads in ~/.cache/biorank (BIORANK_CACHE); install, data and logs in
    ~/.local/share/biorank, or /var/lib/biorank for root (BIORANK_HOME).
    """


@cluster.command("start")
@click.option("--port", type=click.IntRange(1, 65535), help="HTTP port (default 9200, or a free one if 9200 is taken).")
@click.option("--heap", default=None, help="JVM heap, e.g. 1g or 512m [env: BIORANK_HEAP; default 1g].")
@click.option("--engine-version", type=click.Choice(ENGINE_VERSIONS), envvar="BIORANK_ENGINE_VERSION",
              help="OpenSearch version to run [env: BIORANK_ENGINE_VERSION; default 2.19.1]. Commands that "
                   "start the node themselves start this version when the variable is set.")
def cluster_start(port: int | None, heap: str | None, engine_version: str | None) -> None:
    """Download (once), assemble and start the node; waits until it answers."""
    from dataclasses import replace

    from biorank.cluster.local import LocalNode, NodeSettings

    settings = NodeSettings(port=port, engine_version=engine_version)
    node = LocalNode(replace(settings, heap=heap) if heap else settings, echo=echo)
    status = node.status()
    if status.running and (engine_version is None or status.engine_version == engine_version):
        click.echo(f"OpenSearch {status.engine_version} already running at {status.url} "
                   f"(pid {status.pid}, {status.health})")
        return
    click.echo(node.start())


@cluster.command("stop")
def cluster_stop() -> None:
    """Stop the node (its data stays)."""
    from biorank.cluster.local import LocalNode

    click.echo("stopped" if LocalNode(echo=echo).stop() else "not running")


@cluster.command("status")
def cluster_status() -> None:
    """Whether the node runs, where, and its health."""
    from biorank.cluster.local import LocalNode

    node = LocalNode(echo=echo)
    s = node.status()
    click.echo(f"home:      {node.settings.home}")
    installed = ", ".join(f"OpenSearch {v}" for v in s.installed)
    click.echo(f"installed: {installed or 'no (biorank cluster start installs it)'}")
    if s.running:
        click.echo(f"running:   yes, OpenSearch {s.engine_version}, pid {s.pid}, {s.url}, health {s.health}")
        click.echo(f"java:      {s.java or 'unknown (started by an older biorank)'}")
        click.echo(f"vector SIMD: {s.vector_simd or 'unknown (started by an older biorank)'}")
    else:
        click.echo("running:   no")
        sys.exit(3)


@cluster.command("logs")
@click.option("-n", "--lines", type=click.IntRange(1), default=50, show_default=True,
              help="How many of the last lines.")
@click.option("--console", is_flag=True, help="The JVM's console output (start-up errors) instead of the log.")
def cluster_logs(lines: int, console: bool) -> None:
    """The last lines of the node's log."""
    from biorank.cluster.local import LocalNode

    node = LocalNode(echo=echo)
    click.echo(node.log_tail(lines, node.console_log if console else None))
