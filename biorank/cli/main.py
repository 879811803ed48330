"""The command group: global connection options, and every error a user can act on as one line."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from biorank.cli.logs import route_library_logs
from biorank.cli.render import inert
from biorank.cli.screens import HELP_WIDTH, Screen, format_sections
from biorank.config import ConnectionSettings
from biorank.errors import BiorankError
from biorank.store.failures import describe


class _Group(click.Group):
    """Turns the errors a user can act on into one line and exit status 1, never a traceback; every message
    printed inert, as it may quote names, records and answers from the cluster or the user's own input."""

    command_class = Screen
    group_class = type("_Subgroup", (click.Group,), {"command_class": Screen})
    format_commands = format_sections

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return self._invoke(ctx)
        except click.ClickException as e:
            e.message = inert(e.message)
            raise

    def _invoke(self, ctx: click.Context):  # type: ignore[no-untyped-def]
        try:
            return super().invoke(ctx)
        except BiorankError as e:
            raise click.ClickException(str(e)) from None
        except Exception as e:
            # opensearch-py is imported only by commands that reach a cluster.
            opensearch = sys.modules.get("opensearchpy.exceptions")
            if opensearch is None or not isinstance(e, opensearch.TransportError):
                raise
            if isinstance(e, opensearch.NotFoundError) and e.error == "index_not_found_exception":
                raise click.ClickException(f"no such index: {e.info.get('error', {}).get('index', e)}; "
                                           "`biorank indices` lists them") from None
            raise click.ClickException(describe(e) or str(e)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH})
@click.option("--url", help="An existing cluster, e.g. https://search.example.org:9200 [env: BIORANK_URL]. "
              "Without it, biorank uses its local node and starts it when needed.")
@click.option("--user", help="User name for a secured cluster [env: BIORANK_USER].")
@click.option("--password", help="Password for a secured cluster [env: BIORANK_PASSWORD, which keeps it out of "
              "`ps` and the shell history].")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False),
              help="CA certificate to verify the cluster's TLS certificate [env: BIORANK_CA_FILE].")
@click.option("--verify/--no-verify", default=None,
              help="Verify TLS certificates (default on) [env: BIORANK_VERIFY=false turns it off].")
@click.option("--verbose", "-v", count=True,
              help="Show the libraries' log records (opensearch-py, urllib3, transformers, ONNX Runtime) on standard "
              "error: -v from INFO, -vv from DEBUG. Without it they never reach the terminal.")
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path), envvar="BIORANK_LOG_FILE",
              help="Append the libraries' log records to this file [env: BIORANK_LOG_FILE].")
@click.version_option(package_name="biorank")
@click.pass_context
def cli(ctx: click.Context, url: str | None, user: str | None, password: str | None,
        ca_file: str | None, verify: bool | None, verbose: int, log_file: Path | None) -> None:
    """biorank: hybrid BM25 + dense search, reranking and snippets for biomedical abstracts.

    \b
    First steps:
      biorank demo                                start the local node, index 300 SciFact abstracts, search them
      biorank datasets get scifact                the public data the examples use, into ./data (verified)
      biorank index corpus.jsonl --index scifact  index a collection (PubMed XML, JSON Lines, ...)
      biorank query "..." --index scifact         search it (hybrid by default; --mode to choose)
      biorank tune-lambda --queries Q --qrels R   tune the hybrid's λ on the dev split
      biorank eval --queries Q --qrels R          bm25, dense and hybrid side by side
      biorank cluster status                      where the local node is and whether it runs
    """
    route_library_logs(verbose, log_file)
    ctx.obj = ConnectionSettings.from_env().with_overrides(
        url=url, user=user, password=password, ca_file=ca_file, verify=verify
    )


def main() -> None:
    cli(prog_name="biorank")
