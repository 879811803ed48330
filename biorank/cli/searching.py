"""Commands that search: the demo, one query, a query set into a TREC run, the articles similar to one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import (
    console,
    echo,
    explanation_text,
    facets_table,
    hits_table,
    json_text,
    print_snippets,
    record_progress,
    say,
)
from biorank.config import ConnectionSettings
from biorank.export import FILE_FORMATS, FORMATS
from biorank.retrieval.similar import SIMILAR_DEFAULT, SIMILAR_MODES

if TYPE_CHECKING:
    from biorank.pipeline import PipelineSettings
    from biorank.retrieval.searcher import SearchSettings


@cli.command()
@click.option("--query", "-q", default=None, help="What to ask (default: a question about vitamin B12).")
@click.option("-k", type=options.SHOWN, default=5, show_default=True, help="How many hits to show.")
@click.option("--rerank", is_flag=True, help="Reorder the top 20 with the cross-encoder (the index's own, else the one "
              "shipped with biorank).")
@click.option("--snippets", is_flag=True, help="Show each hit's best sentences.")
@options.device_option
@options.log_option
@click.pass_obj
def demo(settings: ConnectionSettings, query: str | None, k: int, rerank: bool, snippets: bool, no_log: bool,
         device: str) -> None:
    """Index 300 real SciFact abstracts on the local node (or --url) and search them with the exact hybrid
    (--rerank: then the shipped cross-encoder; --snippets: the best sentences too)."""
    from biorank.demo import DEMO_INDEX, DEMO_QUERY, SAMPLE_SIZE, index_sample
    from biorank.models.encoder import DEFAULT_MODEL, Encoder
    from biorank.models.placement import AskedPlacement
    from biorank.pipeline import Pipeline
    from biorank.retrieval.searcher import Searcher

    client = options.client(settings)
    options.fetch_model(DEFAULT_MODEL)
    encoder = Encoder(DEFAULT_MODEL, device=device)
    with record_progress("indexing the sample", SAMPLE_SIZE) as advance:
        report = index_sample(client, encoder=encoder, progress=advance)
    echo(f"{DEMO_INDEX}: {SAMPLE_SIZE} SciFact abstracts ready ({report.indexed} indexed now, "
         f"{report.unchanged} already in)")
    system = "hybrid" + ("+rerank" if rerank else "") + ("+snippets" if snippets else "")
    pipeline = Pipeline.build(system, Searcher.open(client, DEMO_INDEX, encoder=encoder), highlight=True,
                              placement=AskedPlacement(device=device))
    answer = pipeline.search(query or DEMO_QUERY, k, log=options.query_log(settings, client, "demo", no_log))
    console().print(hits_table(answer.hits, f"{system} top {k} (λ = {pipeline.searcher.lam:g}) for: {answer.query}"))
    if answer.snippets is not None:
        print_snippets(answer)
    echo(f"next: biorank query \"...\" --index {DEMO_INDEX} [--mode bm25|dense|hybrid|...] [--rerank] [--snippets] "
         "[--show-query]")


@cli.command()
@click.argument("text")
@options.search_options
@click.option("-k", type=options.SHOWN, default=10, show_default=True, help="How many documents.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, metavar="FORMAT",
              help=f"How hits are printed: {', '.join(FORMATS)}.")
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--show-query", is_flag=True, help="Print every request body sent, for Dashboards Dev Tools.")
@click.option("--explain", is_flag=True, help="Ask OpenSearch how each score was made and print it.")
@options.pipeline_options
@options.log_option
@click.pass_obj
def query(settings: ConnectionSettings, text: str, index_name: str, k: int, fmt: str, as_json: bool,
          show_query: bool, explain: bool, system: PipelineSettings, page: int, no_log: bool) -> None:
    """Search the index for TEXT and show the documents with every part of their score.

    \b
    Examples:
      biorank query "vitamin B12 deficiency and homocysteine" --index scifact
      biorank query "vitamin D and tuberculosis" --index scifact --rerank --snippets --year 2015-
      biorank query '(metformin OR biguanide*) AND "gestational diabetes" NOT review[pt]' --index pubmed
    """
    import json

    from biorank.pipeline import Pipeline, page_depth

    if as_json and fmt not in ("table", "json"):
        raise click.UsageError(f"--json is --format json; give --json or --format {fmt}, not both")
    depth = page_depth(page, k)
    search = system.search
    searcher = options.searcher(settings, index_name, search)
    pipeline = Pipeline.build(replace(system, highlight=True, explain=explain), searcher)
    parsed = pipeline.searcher.parse(text)
    notes = pipeline.notes + list(parsed.notes if parsed else ())
    if show_query:
        if parsed is not None:
            say(f"# parsed as PubMed syntax: {parsed.describe()}")
        if pipeline.searcher.route_note:
            # Dev Tools reads a line starting with # as a comment, so the printed requests stay pasteable.
            say(f"# {pipeline.searcher.route_note}")
            notes.remove(pipeline.searcher.route_note)
        for request, body in pipeline.sent_requests(text, depth):
            say(f"{request}\n{json.dumps(body, indent=2)}\n")
    for note in notes:
        echo(f"note: {note}")
    answer = pipeline.search(text, depth, log=options.query_log(settings, searcher.client, "query", no_log))
    answer.hits = answer.hits[depth - k:]  # the page: a slice of one ranking, as the server's pages are
    if as_json or fmt == "json":
        for line in answer.to_dicts():
            click.echo(json_text(line))
        if answer.facets is not None:
            click.echo(json_text({"facets": answer.facets.to_dict()}))
    elif fmt != "table":
        from biorank.export import SINGLE_QUERY, cited_rows, render

        rows = cited_rows(searcher.client, searcher.index, {SINGLE_QUERY: answer.to_dicts()})
        click.echo(render(fmt, rows, tag=f"biorank-{search.mode}"), nl=False)
    else:
        parts = [f"λ = {pipeline.searcher.lam:g}"] if pipeline.searcher.settings.mode_class.weighs_lambda else []
        if pipeline.searcher.boosts:
            parts.append(f"boosts {pipeline.searcher.boosts.name}")
        if searcher.needs_encoder:
            parts.append(f"encoder {searcher.record.model}")
        if search.filters:
            parts.append(f"only {search.filters.describe()}")
        console().print(hits_table(answer.hits, f"{pipeline.name} top {k} in {index_name}" + (
            f" ({'; '.join(parts)})" if parts else "")))
        if answer.snippets is not None:
            print_snippets(answer)
        if answer.facets is not None:
            console().print(facets_table(answer.facets))
    if explain:
        for hit in answer.hits:
            say(f"\n#{hit.rank} {hit.id}\n{explanation_text(hit.explanation)}")


@cli.command()
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR queries.jsonl, SciFact claims_*.jsonl, or ID<TAB>TEXT lines.")
@click.option("--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The file to write (a TREC run by default).")
@click.option("--format", "fmt", type=click.Choice(FILE_FORMATS), default="trec", show_default=True,
              help="The file's format: a TREC run, JSON lines, CSV, RIS, BibTeX, or the PMIDs found.")
@options.search_options
@click.option("-k", type=options.RUN_DEPTH, default=1000, show_default=True, help="Documents per query.")
@options.device_option
@options.log_option
@click.pass_obj
def search(settings: ConnectionSettings, queries_path: str, output: Path, fmt: str, index_name: str,
           search: SearchSettings, k: int, no_log: bool, device: str) -> None:
    """Run every query of a set and write a TREC run file, or --format another (queries go in batches, with a
    progress bar)."""
    from biorank.evaluation.runs import write_trec
    from biorank.evaluation.topics import read_queries
    from biorank.pipeline import Pipeline

    queries = read_queries(queries_path)
    searcher = options.searcher(settings, index_name, search)
    pipeline = Pipeline.build(options.pipeline_settings(search=searcher.settings, device=device), searcher)
    for note in pipeline.notes:
        echo(f"note: {note}")
    with record_progress(pipeline.name, len(queries), "queries") as advance:
        answers = pipeline.run(queries, k, progress=advance,
                               log=options.query_log(settings, searcher.client, "search", no_log))
    if fmt == "trec":
        lines = write_trec(output, {q: a.hits for q, a in answers.items()}, tag=f"biorank-{search.mode}")
        say(f"{len(answers)} queries, {lines} lines written to {output}")
        return
    from biorank.export import cited_rows, render

    rows = cited_rows(searcher.client, searcher.index, {q: a.to_dicts() for q, a in answers.items()})
    # newline="": the text's own line ends (CRLF in RIS and CSV) are written as they are.
    with output.open("w", encoding="utf-8", newline="") as f:
        f.write(render(fmt, rows, tag=f"biorank-{search.mode}"))
    say(f"{len(answers)} queries, {len(rows)} hits written to {output} as {fmt}")


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
