"""Similar articles (``biorank similar``), and the options that reorder a query's hits and page through them
(``--dedupe``, ``--mmr``, ``--sort``, ``--page``), which ``query`` takes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import console, echo, hits_table, json_text
from biorank.config import ConnectionSettings
from biorank.retrieval.similar import SIMILAR_DEFAULT, SIMILAR_MODES


def reorder_options(command: Callable) -> Callable:
    """``--dedupe [COSINE]``, ``--mmr LAMBDA``, ``--sort relevance|date`` and ``--page N``: the command gets
    ``reorder`` (the :class:`~biorank.pipeline.PipelineSettings` fields ``dedupe``, ``mmr``, ``sort``) and
    ``page``."""
    from biorank.pipeline import MAX_DEPTH
    from biorank.stages.diversity import DEDUPE_THRESHOLD, SORTS

    @functools.wraps(command)
    def with_reorder(*args: Any, dedupe: float | None, mmr: float | None, sort: str, page: int,
                     **kwargs: Any) -> Any:
        return command(*args, reorder={"dedupe": dedupe, "mmr": mmr, "sort": sort}, page=page, **kwargs)

    return options.apply(with_reorder, [
        click.option("--dedupe", type=click.FloatRange(0, 1, min_open=True), is_flag=False,
                     flag_value=DEDUPE_THRESHOLD, default=None, metavar="[COSINE]",
                     help=f"Drop hits this close (cosine) to a better one [{DEDUPE_THRESHOLD:g}]."),
        click.option("--mmr", type=click.FloatRange(0, 1), default=None, metavar="LAMBDA",
                     help=f"Reorder the top {MAX_DEPTH} by maximal marginal relevance."),
        click.option("--sort", type=click.Choice(SORTS), default="relevance", show_default=True,
                     help=f"By score, or newest first in the top {MAX_DEPTH}."),
        click.option("--page", type=click.IntRange(1), default=1, show_default=True, metavar="N",
                     help=f"Page N of -k hits (pages end at hit {MAX_DEPTH})."),
    ])


@cli.command()
@click.argument("doc_id", metavar="ID")
@options.index_option()
@click.option("-k", type=options.SHOWN, default=10, show_default=True, help="How many similar documents.")
@click.option("--mode", type=click.Choice(SIMILAR_MODES), default=SIMILAR_DEFAULT, show_default=True,
              help="dense: the vector alone; hybrid: λ·BM25 + ⟨v, p⟩ with the index's λ; bm25: the terms alone.")
@options.filter_options
@click.option("--json", "as_json", is_flag=True, help="Hits as JSON lines (id, title, rank, score parts).")
@click.pass_obj
def similar(settings: ConnectionSettings, doc_id: str, index_name: str, k: int, mode: str, filters: Any,
            as_json: bool) -> None:
    """Show the documents most similar to stored document ID (a PMID, a SciFact id): its own block-0 vector and
    its title and abstract's most distinctive terms (more_like_this) as the query, the document left out.

    \b
    Examples:
      biorank similar 4983 --index scifact
      biorank similar 26903374 --index pubmed --mode dense --year 2015-
    """
    from biorank.retrieval.searcher import SearchSettings
    from biorank.retrieval.similar import similar_articles

    searcher = options.searcher(settings, index_name, SearchSettings(mode=mode, filters=filters))
    found = similar_articles(searcher, doc_id, k)
    if as_json:
        for hit in found.hits:
            click.echo(json_text(hit.to_dict()))
        return
    lam = f"; λ = {found.lam:g}" if found.lam is not None else ""
    console().print(hits_table(found.hits, f"{found.mode} top {k} similar to {doc_id} in {index_name}{lam}: "
                                           f"{found.title}"))
    if not found.hits:
        echo("no similar documents found")
