"""Commands that build, list, re-encode and remove indices."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import console, echo, inert, record_progress, say, stage_progress, table
from biorank.cli.screens import Expert
from biorank.config import ConnectionSettings
from biorank.models.encoder import DEFAULT_MODEL

if TYPE_CHECKING:
    from biorank.indexer.batches import IndexOptions
    from biorank.models.encoder import Encoder
    from biorank.store.mappings.documents import IndexSettings


def _reading_options(command):
    """What ``index`` and ``encode`` share: how the input is read, split and encoded (equal settings, equal vectors).
    The command gets ``paths``, one ``reading`` (:func:`~biorank.cli.options.reading`), one ``encoder``
    (:class:`EncoderChoice`), and its own ``precision`` and ``device``."""
    return options.apply(options.reading(_encoder_choice(command)), [
        click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False)),
        options.reading_options,
        click.option("--model", default=DEFAULT_MODEL, show_default=True,
                     metavar="MODEL", help="Encoder: a name biorank knows, a sentence-transformers folder, a hub "
                     "name (`biorank help index`)."),
        options.prefix_options,
        options.batch_size_option,
        options.precision_option,
        options.device_option,
        options.no_sentences_option(),
        options.max_record_bytes_option,
    ])


@dataclass(frozen=True)
class EncoderChoice:
    """The encoder a command names (``--model``) and the prefixes it is told (None: the model's own), loaded only
    where the command needs it: not with ``--vectors``, and not before an alias is refused. ``--precision`` and
    ``--device`` are the command's own: they say where it runs, not which encoder it is."""

    model: str = DEFAULT_MODEL
    query_prefix: str | None = None
    passage_prefix: str | None = None

    def load(self, precision: str, device: str = "auto") -> Encoder:
        from biorank.models.encoder import Encoder
        from biorank.models.names import model_prefixes

        options.fetch_model(self.model)
        echo("loading the encoder (a model without an ONNX export yet is exported once, a few seconds) ...")
        prefixes = model_prefixes(self.model).but(query=self.query_prefix, passage=self.passage_prefix)
        encoder = Encoder(self.model, precision=precision, prefixes=prefixes, device=device)
        echo(f"encoder {encoder.model_name} ({encoder.dimension} dimensions, {encoder.precision}, {encoder.device}; "
             f"{encoder.prefixes.describe()})")
        return encoder


def _encoder_choice(command):
    """Hands the command one ``encoder`` (:class:`EncoderChoice`) made of its ``--model`` and, where it has them,
    the prefix options (:func:`~biorank.cli.options.prefix_options`), wherever its ``--help`` shows them."""

    @functools.wraps(command)
    def with_encoder(*args, **kwargs):
        given = {name: kwargs.pop(name) for name in ("model", "query_prefix", "passage_prefix") if name in kwargs}
        return command(*args, encoder=EncoderChoice(**given), **kwargs)

    return with_encoder


def _new_index_options(command):
    """How a new index is built: shards, replicas and BM25's parameters, given to the command as one
    ``index_settings`` (:class:`~biorank.store.mappings.documents.IndexSettings`, whose defaults they show)."""
    from biorank.store.mappings.documents import IndexSettings

    @functools.wraps(command)
    def with_index_settings(*args, shards: int, replicas: int, k1: float, b: float, **kwargs):
        return command(*args, index_settings=IndexSettings(shards=shards, replicas=replicas, k1=k1, b=b), **kwargs)

    def shown(name: str):
        return options.default(IndexSettings, name)

    return options.apply(with_index_settings, [
        click.option("--shards", type=click.IntRange(1), default=shown("shards"), show_default=True,
                     cls=Expert, topic="index", help="Primary shards of a new index."),
        click.option("--replicas", type=click.IntRange(0), default=shown("replicas"), show_default=True,
                     cls=Expert, topic="index", help="Replicas of a new index."),
        click.option("--k1", type=click.FloatRange(0), default=shown("k1"), show_default=True,
                     cls=Expert, topic="index", help="BM25 k1 of a new index."),
        click.option("--b", "b", type=click.FloatRange(0, 1), default=shown("b"), show_default=True,
                     cls=Expert, topic="index", help="BM25 b of a new index."),
    ])


@cli.command()
@_reading_options
@options.index_option()
@click.option("--recreate", is_flag=True,
              help="Delete the indices first and index everything anew (never through an alias: name the index).")
@_new_index_options
@options.rejects_option()
@click.option("--vectors", "vectors_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Take every block and sentence with its vector from this folder written by `biorank encode` "
                   "from the same PATHS, instead of encoding: no encoder is loaded; its batch size is used.")
@options.sentence_vectors_option
@options.follow_alias_option("write into")
@click.pass_obj
def index(settings: ConnectionSettings, paths: tuple[str, ...], reading: IndexOptions, encoder: EncoderChoice,
          precision: str, device: str, index_name: str, recreate: bool, index_settings: IndexSettings,
          vectors_dir: Path | None, sentence_vectors: str | None, follow_alias: bool) -> None:
    """Index abstracts from PATHS: PubMed XML (.xml, .xml.gz), SciFact, BEIR or BioASQ JSON Lines,
    NFCorpus .docs, or any JSON Lines with --format jsonl and the field options.

    Unusable records are listed in the rejects file and the rest goes in. Run the same command again to resume
    an interrupted run: nothing is duplicated. To keep a PubMed index current with NLM's files, use `biorank sync`.

    \b
    Examples:
      biorank index data/scifact/corpus.jsonl --index scifact
      biorank index pubmed25n0001.xml.gz pubmed25n0002.xml.gz --index pubmed
      biorank index docs.jsonl --format jsonl --id-field pmid --text-field body

    \b
    Vectors made elsewhere (`biorank encode` on a GPU box, the folder copied here), loaded without an encoder:
      biorank index pubmed25n0001.xml.gz --index pubmed --vectors vectors/
    """
    from biorank.indexer.indexer import Indexer
    from biorank.indexer.readers import estimate_records
    from biorank.store.indices import concrete_index

    vectors = loaded = None
    index_options = replace(reading, index=index_name, recreate=recreate, settings=index_settings,
                            sentence_vectors=sentence_vectors, follow_alias=follow_alias)
    if vectors_dir is not None:
        from biorank.indexer.shards import ShardMismatch, ShardReader

        vectors = ShardReader(vectors_dir)
        made_with = vectors.identity
        ctx = click.get_current_context()
        if ctx.get_parameter_source("model") is not click.core.ParameterSource.DEFAULT and \
                encoder.model not in (made_with.source, made_with.name):
            raise ShardMismatch(f"the vectors in {vectors_dir} were made with {made_with.name}, not {encoder.model}; "
                                "leave --model out, or encode again with it")
        if ctx.get_parameter_source("batch_size") is click.core.ParameterSource.DEFAULT:
            # The same batches as the encode run, so a repeated id is resolved the same way and no vector is missing.
            index_options = replace(index_options, batch_size=vectors.manifest["reader"]["batch_size"])
        echo(f"vectors from {vectors_dir}: {made_with.name}, {vectors.counts['documents']} documents, "
             f"{vectors.counts['blocks']} blocks, {vectors.counts['sentences']} sentences (no encoder is loaded)")
        if vectors.unhashed:
            echo(f"note: {vectors.unhashed} shards in {vectors_dir} record no size and SHA-256 (an earlier biorank "
                 "wrote them): they are checked in every other way; encode again to have them checked whole")
    client = options.client(settings)
    # Before an encoder is loaded: an alias is refused in a moment, not after a model's start-up.
    concrete_index(client, index_name, follow_alias=follow_alias, recreate=recreate)
    if vectors is not None and not recreate:
        vectors.check_index(client, index_name)
    if vectors is None:
        loaded = encoder.load(precision, device)
    done = [0]
    try:
        with record_progress("indexing", sum(estimate_records(p) for p in paths)) as advance:

            def counted(records: int) -> None:
                done[0] += records
                advance(records)

            indexer = Indexer(client, index_options, encoder=loaded, vectors=vectors)
            report = indexer.run(paths, progress=counted)
    except KeyboardInterrupt:
        # Not click's bare "Aborted!": the user should know that nothing is lost and how to go on.
        echo(f"\ninterrupted after {done[0]} records: what was written is kept; run the same command again to "
             "resume (what is in is skipped, nothing is duplicated)")
        raise SystemExit(130) from None
    _summarise(index_name, report)
    if not report.failed:
        _settle(client, [i for i in (indexer.options.index, indexer.sentences_index) if i], report)
    if not report.read:
        raise click.ClickException(f"no records in {', '.join(paths)}: nothing was indexed")
    if not report.indexed + report.unchanged + report.failed + report.deleted + report.absent:
        raise click.ClickException(f"none of the {report.read} records could be used (see {report.rejects_file}); "
                                   "is --format right?")
    if report.failed:
        raise click.ClickException(f"{report.failed} documents were refused by the cluster (see "
                                   f"{report.rejects_file}); run the same command again to retry them")


@cli.command()
@_reading_options
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The folder of shards and manifest (created; an interrupted run's folder is resumed).")
@click.option("--shard-size", type=click.IntRange(1), default=4096, show_default=True,
              help="Documents per shard (rounded up to whole batches): the unit of resuming.")
@options.rejects_option("OUT/rejects.tsv")
def encode(paths: tuple[str, ...], reading: IndexOptions, encoder: EncoderChoice, precision: str, device: str,
           out: Path, shard_size: int) -> None:
    """Encode abstracts from PATHS into a folder of Parquet shards, without a cluster: read, split into
    sentences and blocks exactly as `biorank index` does, with the same options.

    \b
    The folder's manifest records the encoder, the block budget, the reader settings, the SHA-256 of every
    input file and the size and SHA-256 of every shard; `biorank index PATHS --vectors OUT` loads the shards into
    a cluster without loading an encoder, and refuses, before it changes anything, shards of other files,
    settings or encoder, and shards damaged or edited since. Interrupted? Run the same command again: finished
    shards are kept, the rest is encoded, nothing twice.

    \b
    Examples:
      biorank encode data/scifact/corpus.jsonl --out scifact-vectors
      biorank encode pubmed25n000*.xml.gz --out pubmed-vectors --batch-size 256    # on a GPU box
      biorank index pubmed25n000*.xml.gz --index pubmed --vectors pubmed-vectors   # on the cluster's side
    """
    from biorank.indexer.readers import estimate_records
    from biorank.indexer.shards import encode_corpus
    from biorank.models.extras import require

    require("pyarrow", "vectors", "biorank encode")  # before the encoder loads
    loaded = encoder.load(precision, device)
    try:
        with record_progress("encoding", sum(estimate_records(p) for p in paths)) as advance:
            report = encode_corpus(paths, out, loaded, reading, shard_documents=shard_size, progress=advance)
    except KeyboardInterrupt:
        echo(f"\ninterrupted: the finished shards in {out} are kept; run the same command again to encode the rest")
        raise SystemExit(130) from None
    rate = report.indexed / report.seconds if report.seconds else 0.0
    say(f"{out}: {report.indexed} documents encoded ({report.blocks} blocks, {report.sentences} sentences, "
               f"{report.shards} shards) in {report.seconds:.1f} s, {rate:.1f} docs/s"
               + (f"; {report.unchanged} were encoded by an earlier run" if report.unchanged else ""))
    if report.rejected:
        reasons = ", ".join(f"{n} {reason}" for reason, n in report.rejected.most_common())
        say(f"{sum(report.rejected.values())} records rejected ({reasons}): see {report.rejects_file}")
    if not report.indexed + report.unchanged:
        raise click.ClickException(f"no usable records in {', '.join(paths)}: nothing was encoded; is --format right?")


@cli.command()
@options.reading
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@options.index_option()
@click.option("--model", default=None,
              help=f"Encoder of a new index (see `biorank index --help`) [default: the index's own, else "
                   f"{DEFAULT_MODEL}].")
@options.precision_option
@options.device_option
@options.no_sentences_option(
    "Build a new index without the sentences index; an existing index keeps what it was built with.")
@click.option("--allow-out-of-order", is_flag=True,
              help="Apply a file numbered before the last one applied (it may bring back older versions).")
@click.option("--allow-gaps", is_flag=True,
              help="Apply a file that does not follow the one before it: a number skipped, or another year's "
                   "series.")
@options.batch_size_option
@options.rejects_option()
@options.sentence_vectors_option
@options.follow_alias_option("apply the files to")
@click.pass_obj
def sync(settings: ConnectionSettings, paths: tuple[str, ...], index_name: str, reading: IndexOptions,
         model: str | None, precision: str, device: str, allow_out_of_order: bool, allow_gaps: bool,
         sentence_vectors: str | None, follow_alias: bool) -> None:
    """Keep a PubMed index current: apply NLM's baseline and update files in PATHS (files, or folders such as
    baseline/ and updatefiles/) in the order of their numbers, each once.

    \b
    Every file is read through before anything is written (a truncated or damaged file is refused), and one
    applied in full is recorded in the index with its SHA-256, so running the same command again applies only
    new files; a new version of a citation replaces the earlier one, and the PMIDs of an update file's
    DeleteCitation are removed. Refused: a file numbered before the last one applied (unless
    --allow-out-of-order), one past a gap in the numbering (unless --allow-gaps), and a file applied before
    whose content has changed; one number under two names (.xml and .xml.gz) is applied once. Interrupted? Run
    the same command again: the file that was cut short is applied again, nothing is duplicated.

    \b
    Examples:
      biorank sync pubmed/baseline pubmed/updatefiles --index pubmed
      biorank stats --index pubmed        # says the last file applied
    """
    from biorank.indexer.readers import estimate_records
    from biorank.indexer.updates import apply_files, find_pubmed_files, plan_sync
    from biorank.store.indices import concrete_index, sentences_index_name
    from biorank.store.record import read_record

    client = options.client(settings)
    index_name = concrete_index(client, index_name, follow_alias=follow_alias)
    files, ignored = find_pubmed_files(paths)
    if not files:
        raise click.ClickException(f"no PubMed files (named pubmedYYnNNNN.xml.gz) in {', '.join(paths)}")
    if ignored:
        echo(f"note: {len(ignored)} files not named as NLM names its files were left out (e.g. {ignored[0].name})")
    record = read_record(client, index_name) if client.indices.exists(index=index_name) else None
    echo(f"checking {len(files)} files (each read through once) ...")
    plan = plan_sync(files, record.applied_files if record else (), allow_out_of_order=allow_out_of_order,
                     allow_gaps=allow_gaps)
    for twin, other in plan.twins:
        echo(f"skipped {twin.path}: it has the number of {other}, which is applied (or applied first)")
    if not plan.apply:
        last = plan.last_applied
        say(f"{index_name} is current: all {len(plan.skipped) + len(plan.twins)} files are applied already"
             + (f" (last applied: {last.name})" if last else ""))
        return
    first, final = plan.apply[0][0].name, plan.apply[-1][0].name
    echo(f"{len(plan.apply)} files to apply ({first}" + (f" … {final})" if len(plan.apply) > 1 else ")")
         + (f"; {len(plan.skipped)} applied already, skipped" if plan.skipped else ""))
    sentences = record.sentences_index is not None if record else reading.sentences
    encoder = EncoderChoice(model or (record.encoder_source if record else DEFAULT_MODEL)).load(precision, device)
    index_options = replace(reading, index=index_name, format="pubmed", sentences=sentences,
                            sentence_vectors=sentence_vectors)

    def applied(done) -> None:
        r = done.report
        echo(f"applied {done.file.name}: {r.indexed} documents written, {r.unchanged} unchanged, {r.deleted} "
             f"deleted ({r.absent} deletions of PMIDs not in the index)")

    done = [0]
    try:
        with record_progress("applying", sum(estimate_records(f.path) for f, _ in plan.apply)) as advance:

            def counted(records: int) -> None:
                done[0] += records
                advance(records)

            report = apply_files(client, index_options, plan, encoder=encoder, progress=counted, applied=applied)
    except KeyboardInterrupt:
        echo(f"\ninterrupted after {done[0]} records: the files recorded as applied are in; run the same command "
             "again to apply the rest (what is in is skipped, nothing is duplicated)")
        raise SystemExit(130) from None
    _summarise(index_name, report)
    if not report.failed:
        _settle(client, [index_name] + ([sentences_index_name(index_name)] if sentences else []), report)


def _settle(client, names: list[str], report) -> None:
    """Merge what a run built once OpenSearch may drop the recovery copies of its vectors
    (:mod:`biorank.store.compaction`), so that ``biorank stats`` shows the size the index keeps."""
    from biorank.store.compaction import COMPACT_FROM, LEASE_WAIT_S, compact

    if report.indexed + report.replaced + report.deleted < COMPACT_FROM:
        return
    echo(f"finishing: merging once the index's retention leases pass the last write (within {LEASE_WAIT_S:.0f} s; "
         "interrupting loses nothing) ...")
    from opensearchpy.exceptions import TransportError

    try:
        done = compact(client, names)
    except KeyboardInterrupt:
        echo("\ninterrupted: everything is written; the index is only larger until OpenSearch merges it")
        raise SystemExit(130) from None
    except TransportError as error:
        # The build is complete; a user allowed to write but not to flush or merge keeps it as it is.
        say(f"not compacted (the cluster answered {error.status_code} {inert(str(error.error))}): everything is "
            "written; the index is only larger until OpenSearch merges it")
        return
    if done.merged:
        say(f"compacted: {done.before / 1e6:,.1f} MB → {done.after / 1e6:,.1f} MB (`biorank stats` shows the cost "
            "an abstract)")
    else:
        say(f"not compacted ({done.skipped}): {done.before / 1e6:,.1f} MB as stored now")


def _summarise(index_name: str, report) -> None:
    """The run's counts in two lines at most: what went in, what was withdrawn, what was rejected."""
    say(f"{index_name}: {report.indexed} documents indexed ({report.blocks} blocks, {report.sentences} "
               f"sentences) in {report.seconds:.1f} s, {report.docs_per_second:.1f} docs/s; {report.unchanged} "
               f"already in and unchanged; {report.replaced} replaced an earlier version")
    if report.deleted or report.absent:
        say(f"{report.deleted + report.absent} deleted citations: {report.deleted} documents removed, "
                   f"{report.absent} not in the index")
    if report.rejected:
        reasons = ", ".join(f"{n} {reason}" for reason, n in report.rejected.most_common())
        say(f"{sum(report.rejected.values())} records rejected ({reasons}): see {report.rejects_file}")
    if report.bibliographic_left_out:
        say(f"note: {report.bibliographic_left_out} documents were written without their authors, DOI, publication "
            f"types and major MeSH: {index_name} was built before it had fields for them; rebuild it with "
            "--recreate to store them")


@cli.command()
@click.pass_obj
def indices(settings: ConnectionSettings) -> None:
    """List biorank's indices: documents, sentences, size, encoder and mapping version."""
    from biorank.store.indices import list_indices

    rows = list_indices(options.client(settings))
    if not rows:
        say("no biorank indices; create one with `biorank index PATH`")
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
@options.follow_alias_option("delete", name="NAME")
@click.pass_obj
def delete_index(settings: ConnectionSettings, name: str, yes: bool, follow_alias: bool) -> None:
    """Delete the documents index NAME and its own sentences index (NAME-sentences, where its record points
    back): exactly those, never a pattern or an alias, and only an index biorank built as a documents index.
    Says deleted only what OpenSearch confirms is gone."""
    from biorank.store.indices import concrete_index, delete_indices, foreign_sentences, owned_indices

    client = options.client(settings)
    if client.indices.exists(index=name):
        name = concrete_index(client, name, follow_alias=follow_alias)
    owned = owned_indices(client, name)
    if not owned:
        say(f"no index {name!r}")
        return
    foreign = foreign_sentences(client, name)
    if foreign:
        echo(f"note: {foreign}")
    if not yes:
        click.confirm(inert(f"delete {' and '.join(owned)}?"), abort=True)
    deleted = delete_indices(client, name)
    if deleted:
        say(f"deleted {', '.join(deleted)}")
    if left := [index for index in owned if index not in deleted]:
        raise click.ClickException(f"{', '.join(left)} not deleted: OpenSearch did not confirm it; `biorank "
                                   "indices` shows what is there")


@cli.command()
@click.option("--kind", type=click.Choice(["documents", "sentences"]), default="documents", show_default=True)
@click.option("--dimension", type=click.IntRange(1), default=384, show_default=True,
              help="Vector dimension (the default encoder's).")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Encoder name to record.")
@options.sentence_vectors_option
def mappings(kind: str, dimension: int, model: str, sentence_vectors: str | None) -> None:
    """Print the settings and mappings biorank creates an index with (paste into Dev Tools: PUT NAME)."""
    import json

    from biorank.indexer.blocks import block_budget
    from biorank.store.mappings.documents import IndexSettings, documents_index_body
    from biorank.store.mappings.sentences import DEFAULT_SENTENCE_VECTORS, sentences_index_body

    settings = IndexSettings()
    vectors = sentence_vectors or DEFAULT_SENTENCE_VECTORS
    if kind == "documents":
        body = documents_index_body(settings, model=model, dimension=dimension, block_tokens=block_budget(256),
                                    sentences_index="NAME-sentences", sentence_vectors=vectors)
    else:
        body = sentences_index_body(settings, model=model, dimension=dimension, documents_index="NAME",
                                    vectors=vectors)
    click.echo(json.dumps(body, indent=2))


@cli.command("reindex-vectors")
@_encoder_choice
@options.index_option()
@click.option("--model", required=True, help="The new encoder: a sentence-transformers folder (e.g. from "
              "`biorank train-encoder`) or a hub name, with the index's tokenizer and dimension.")
@click.option("--batch-size", type=click.IntRange(1), default=256, show_default=True,
              help="Entries per encoder batch and bulk round.")
@options.precision_option
@options.device_option
@options.prefix_options
@click.pass_obj
def reindex_vectors(settings: ConnectionSettings, index_name: str, encoder: EncoderChoice, batch_size: int,
                    precision: str, device: str) -> None:
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
    loaded = encoder.load(precision, device)
    with stage_progress() as progress:
        report = reencode_index(client, index_name, loaded, batch_size=batch_size, progress=progress, log=echo)
    if report.already:
        say(f"{index_name} is encoded with {report.model} already; nothing to do")
        return
    if report.queries_only:
        say(f"{index_name}: only the query prefix changed, so no vector was re-encoded; it now uses "
                   f"{report.model} (was {report.previous_model})")
    else:
        say(f"{index_name}: {report.blocks} blocks and {report.sentences} sentences re-encoded in "
                   f"{report.seconds:.1f} s{' (resumed)' if report.resumed else ''}; it now uses {report.model} "
                   f"(was {report.previous_model})")
    if report.dropped_lambda is not None:
        say(f"the λ tuned for the old encoder ({report.dropped_lambda:g}) was set aside: run "
                   f"biorank tune-lambda --index {index_name} ... to tune it for this one")
