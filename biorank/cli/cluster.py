"""``biorank cluster``: the local OpenSearch node biorank assembles and runs itself."""

from __future__ import annotations

import sys

import click

from biorank.cli.main import cli
from biorank.cli.render import echo


@cli.group()
def cluster() -> None:
    """Manage the local OpenSearch node (single node, 127.0.0.1, k-NN with the Lucene engine).

    \b
    Files: downloads in ~/.cache/biorank (BIORANK_CACHE); install, data and logs in
    ~/.local/share/biorank, or /var/lib/biorank for root (BIORANK_HOME).
    """


@cluster.command("start")
@click.option("--port", type=click.IntRange(1, 65535), help="HTTP port (default 9200, or a free one if 9200 is taken).")
@click.option("--heap", default=None, help="JVM heap, e.g. 1g or 512m [env: BIORANK_HEAP; default 1g].")
def cluster_start(port: int | None, heap: str | None) -> None:
    """Download (once), assemble and start the node; waits until it answers."""
    from dataclasses import replace

    from biorank.cluster.local import LocalNode, NodeSettings

    settings = NodeSettings(port=port)
    node = LocalNode(replace(settings, heap=heap) if heap else settings, echo=echo)
    status = node.status()
    if status.running:
        click.echo(f"already running at {status.url} (pid {status.pid}, {status.health})")
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
    click.echo(f"installed: {'yes' if s.installed else 'no (biorank cluster start installs it)'}")
    if s.running:
        click.echo(f"running:   yes, pid {s.pid}, {s.url}, health {s.health}")
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
