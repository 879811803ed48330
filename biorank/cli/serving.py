"""``biorank serve``: the search page and the JSON API, in one long-lived process."""

from __future__ import annotations

import ipaddress

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import echo
from biorank.config import ConnectionSettings


@cli.command()
@options.index_option("The documents index to serve.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback opens the index to the network: set --api-key.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--api-key", envvar="BIORANK_API_KEY", default=None,
              help="Answer only requests that carry this key (X-API-Key header, or ?key=), /api/health aside "
                   "[env: BIORANK_API_KEY, which keeps it out of `ps`].")
@options.precision_option
@options.rerank_options
@options.device_option
@options.log_option
@click.pass_obj
def serve(settings: ConnectionSettings, index_name: str, host: str, port: int, api_key: str | None,
          precision: str, no_log: bool, device: str, **rerank_options: object) -> None:
    """Serve a search page and a JSON API over one index, the models loaded once.

    \b
    /                      the search page: mode, rerank, snippets, year/journal/MeSH filters, pages
    /api/search            POST {"q": ..., "mode", "rerank", "snippets", "year", "journal", "mesh", "k", "page"}
    /api/documents/ID      one stored document
    /api/health            the cluster's and the index's health
    /docs, /openapi.json   the API described (OpenAPI)

    Read-only: nothing but the query log is written. Every query goes to the query log, as the CLI's do.

    \b
    Examples:
      biorank serve --index biorank-demo
      curl -s localhost:8000/api/search -H 'content-type: application/json' -d '{"q": "vitamin D and falls"}'
    """
    import uvicorn

    from biorank.service.app import SearchService, ServiceSettings, create_app
    from biorank.service.server import server_config

    source = click.get_current_context().get_parameter_source("api_key")
    if api_key and source == click.core.ParameterSource.COMMANDLINE:
        echo("warning: --api-key on the command line is visible to every user of this machine (ps, the shell "
             "history); set BIORANK_API_KEY instead")
    if not _loopback(host) and not api_key:
        echo(f"warning: serving on {host} without --api-key: anyone who can reach this address can search "
             f"{index_name}")
    searcher = options.searcher(settings, index_name, precision=precision, device=device)
    served = ServiceSettings(index=index_name, api_key=api_key, placement=searcher.settings.placement,
                             pipeline=options.pipeline_settings(device=device, **rerank_options),
                             query_log=settings.query_log and not no_log)
    service = SearchService(searcher.client, served, query_log_index=settings.query_log_index, searcher=searcher)
    service.load()  # the encoder loads before the first request, not during it
    shown = f"[{host}]" if ":" in host else host
    echo(f"serving {index_name} at http://{shown}:{port}/ (API at /api/search, described at /docs); Ctrl-C stops")
    uvicorn.Server(server_config(create_app(service), host, port, log_level="warning")).run()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
