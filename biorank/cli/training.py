"""Commands that train models from judgements: the cross-encoder reranker and the dense encoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import console, echo, say, stage_progress, table
from biorank.cli.screens import Expert
from biorank.config import ConnectionSettings
from biorank.models.cross_encoder import DEFAULT_MAX_LENGTH, LENGTHS
from biorank.models.encoder import DEFAULT_MODEL
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.types import stage_counter

if TYPE_CHECKING:
    from biorank.retrieval.searcher import Searcher
    from biorank.training.reranker import PreparedTraining, RerankerTraining, RerankerTrainingReport
    from biorank.training.supervision import Supervision


@cli.command("train-reranker")
@options.training_options(topics_required=False)
@click.option("--base-model", default=SHIPPED_RERANKER, show_default=True, metavar="MODEL",
              help="A cross-encoder, or an encoder (a fresh head), by folder or name.")
@click.option("--negatives-per-positive", type=click.IntRange(1), default=20, show_default=True, metavar="N",
              cls=Expert, topic="training",
              help="Negatives drawn for each judged-relevant document.")
@click.option("--negatives-from-top", type=click.IntRange(1), default=500, show_default=True, metavar="N",
              cls=Expert, topic="training",
              help="Draw them from this depth, never a judged document (--supervision: its own depth).")
@click.option("--supervision", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Train on `biorank gather-supervision`'s folder; --queries/--qrels only validate.")
@click.option("--positives-per-query", type=click.IntRange(1), default=2, show_default=True, metavar="N",
              cls=Expert, topic="training",
              help="With --supervision: relevant passages trained per query, of its best grade.")
@click.option("--negatives-stage", type=click.Choice(["bm25", "hybrid"]), default="bm25", show_default=True,
              cls=Expert, topic="training",
              help="Draw negatives from BM25's top, or the hybrid's (what the reranker meets at test time).")
@click.option("--synthetic", type=click.Path(exists=True, dir_okay=False), default=None, cls=Expert, topic="training",
              help="A corpus file whose abstracts give self-supervised groups (title, inverse cloze) each epoch.")
@click.option("--synthetic-kinds", default="ict,title", show_default=True, cls=Expert, topic="training",
              help="With --synthetic: ict (a sentence -> the rest of its abstract), title (title -> abstract).")
@click.option("--synthetic-limit", type=click.IntRange(1), default=None, metavar="N", cls=Expert, topic="training",
              help="With --synthetic: at most this many self-supervised groups [default: one per abstract].")
@click.option("--share", "shares", multiple=True, callback=options.parse_shares, metavar="SOURCE=FRACTION",
              cls=Expert, topic="training",
              help="With --supervision: train on this share of a source's queries (by a hash of the id); repeatable.")
@click.option("--epochs", type=click.IntRange(1), default=1, show_default=True, metavar="N")
@click.option("--keep", type=click.Choice(["best", "last"]), default="best", show_default=True,
              help="Which epoch --out holds: the best on the dev split, or the last.")
@click.option("--learning-rate", type=click.FloatRange(0, min_open=True), default=5e-5, show_default=True,
              cls=Expert, topic="training",
              metavar="RATE")
@click.option("--max-length", type=click.IntRange(*LENGTHS), default=DEFAULT_MAX_LENGTH, show_default=True,
              cls=Expert, topic="training",
              metavar="N", help="Word pieces of query + document.")
@click.option("--groups-per-step", type=click.IntRange(1), default=1, show_default=True, metavar="N",
              help="Positives (each with its negatives) a step: 1 on a CPU, 8 on a GPU.")
@click.option("--trim-groups", is_flag=True, cls=Expert, topic="training",
              help="Cut a step's groups to the fewest texts among them instead of padding (the shipped recipe).")
@click.option("--positive-repeats", type=click.IntRange(1), default=None, metavar="N", cls=Expert, topic="training",
              help="Each epoch, train a relevant text in at most this many of its groups [default: all].")
@click.option("--sentence-dropout", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              cls=Expert, topic="training",
              metavar="P", help="Each epoch, leave out each sentence of a training text with this probability.")
@options.device_option(help="Where to train: auto takes a GPU torch sees [env: BIORANK_DEVICE].")
@click.option("--no-store", is_flag=True, help="Do not make this model the index's default reranker.")
@click.option("--prepare-only", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Gather what training reads from the cluster into this file, and stop.")
@click.option("--prepared", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Train from a --prepare-only file, without a cluster.")
@click.pass_obj
def train_reranker(settings: ConnectionSettings, queries_path: str | None, qrels_path: str | None, index_name: str,
                   out: Path | None, max_steps: int | None, seed: int, no_store: bool, supervision: Path | None,
                   synthetic_kinds: str, prepare_only: Path | None, prepared: Path | None,
                   **recipe: object) -> None:
    """Train a cross-encoder reranker from judgements and BM25 negatives (Hofstätter et al.).

    Training starts from the cross-encoder shipped with biorank (--base-model); each epoch is validated on the dev
    split and its unseen part, which choose the epoch kept in --out with a model card. Interrupted? Run the same
    command again. Recipes (the shipped model's, a GPU's): `biorank help training`.

    \b
    Examples (BEIR's SciFact; the second on every source `biorank gather-supervision` gathered):
      biorank train-reranker --queries data/scifact/queries_train.jsonl --qrels data/scifact/qrels/train.tsv \\
          --index scifact --out models/reranker-scifact
      biorank train-reranker --supervision supervision --queries data/scifact/queries_train.jsonl ... \\
          --out models/reranker-all
    """
    from biorank.training.reranker import RerankerTraining

    if prepared is not None:
        given = [name for name, value in (("--queries", queries_path), ("--qrels", qrels_path),
                                          ("--supervision", supervision), ("--synthetic", recipe["synthetic"]),
                                          ("--prepare-only", prepare_only)) if value]
        if given:
            raise click.UsageError(f"--prepared brings its own groups and dev split: drop {', '.join(given)}")
    elif queries_path is None or qrels_path is None:
        raise click.UsageError("--queries and --qrels are required (or --prepared FILE)")
    if prepare_only is None and out is None:
        raise click.UsageError("--out is required (the folder for the model), unless --prepare-only")
    kinds = tuple(k.strip() for k in synthetic_kinds.split(",") if k.strip())
    config = RerankerTraining(max_steps=max_steps, seed=seed, synthetic_kinds=kinds, **recipe)
    # Each flow is one function: from a prepared file, into one, or both beside the cluster.
    if prepared is not None:
        _train_from_file(prepared, out, config)
    elif prepare_only is not None:
        _prepare(settings, (queries_path, qrels_path), index_name, supervision, prepare_only, config)
    else:
        _train_beside_the_cluster(settings, (queries_path, qrels_path), index_name, supervision, out, config,
                                  store=not no_store)


def _train_from_file(prepared: Path, out: Path, config: RerankerTraining) -> None:
    """``--prepared``: train from a file ``--prepare-only`` wrote, without a cluster."""
    from biorank.models.extras import require_torch
    from biorank.training.reranker import PreparedTraining, train_prepared

    require_torch("train-reranker")
    made = PreparedTraining.load(prepared)
    _refuse_other_preparation(made, config, prepared)
    with stage_progress() as progress:
        report = train_prepared(made, out, config, progress=progress, log=echo)
    _say_trained(report, out)
    say(f"trained apart from the cluster: rerank with --reranker {out}, or make it an index's default "
        "with `biorank tune-rerank --reranker` where the cluster is")


def _prepare(settings: ConnectionSettings, topic_paths: tuple, index_name: str, supervision: Path | None,
             prepare_only: Path, config: RerankerTraining) -> None:
    """``--prepare-only``: what training reads from the cluster, into one file (no torch needed here)."""
    from biorank.training.reranker import prepare_training

    searcher, topics, gathered = _cluster_inputs(settings, topic_paths, index_name, supervision)
    with stage_progress() as progress:
        made = prepare_training(searcher, *topics, config, supervision=gathered, progress=progress, log=echo)
    made.save(prepare_only)
    say(f"{len(made.groups)} groups ({made.synthetic} self-supervised) and {len(made.dev_queries)} dev queries' "
        f"candidates in {prepare_only} ({prepare_only.stat().st_size / 1e6:.1f} MB); train from it with "
        f"`biorank train-reranker --prepared {prepare_only} --out FOLDER`")


def _train_beside_the_cluster(settings: ConnectionSettings, topic_paths: tuple, index_name: str,
                              supervision: Path | None, out: Path, config: RerankerTraining, *, store: bool) -> None:
    """Prepare and train in one run, then make the model the index's default reranker unless ``store`` is off."""
    from biorank.models.extras import require_torch
    from biorank.store.record import store_reranker
    from biorank.training.reranker import train_reranker

    require_torch("train-reranker")  # before the cluster is asked anything
    searcher, topics, gathered = _cluster_inputs(settings, topic_paths, index_name, supervision)
    with stage_progress() as progress:
        report = train_reranker(searcher, *topics, out, config, supervision=gathered, progress=progress, log=echo)
    _say_trained(report, out)
    if store:
        store_reranker(searcher.client, index_name, str(out.resolve()))
        say(f"{index_name} now reranks with it by default (--rerank)")


def _cluster_inputs(settings: ConnectionSettings, topic_paths: tuple, index_name: str,
                    supervision: Path | None) -> tuple[Searcher, tuple[dict, dict], Supervision | None]:
    """What both flows beside the cluster read: the index's BM25 searcher, the topics, the gathered supervision."""
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.training.supervision import read

    searcher = options.searcher(settings, index_name, mode="bm25", fields="text")
    topics = read_queries(topic_paths[0]), read_qrels(topic_paths[1])
    return searcher, topics, read(supervision) if supervision else None


def _say_trained(report: RerankerTrainingReport, out: Path) -> None:
    say(f"trained in {report.seconds / 60:.1f} min ({report.steps} steps); dev nDCG@10 "
        f"{report.best:.4f} reranked against {report.baseline:.4f} for BM25"
        + (f"; unseen dev ({report.unseen_queries} queries) {report.best_unseen:.4f} against "
           f"{report.baseline_unseen:.4f}" if report.unseen_queries else "") + f"; model and card in {out}")


def _refuse_other_preparation(made: PreparedTraining, config: RerankerTraining, path: Path) -> None:
    """A negatives' setting typed with --prepared that differs from the file's is refused, not silently dropped:
    the groups were drawn with the file's, and only preparing again changes them."""
    from biorank.training.reranker import PREPARATION_FIELDS

    context = click.get_current_context()
    for name in PREPARATION_FIELDS:  # a field that is no option (validation_depth) has no source
        if context.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue
        wanted, found = json.loads(json.dumps(getattr(config, name))), made.settings[name]
        if wanted != found:
            option = next(p.opts[0] for p in context.command.params if p.name == name)
            raise click.UsageError(f"{path} was prepared with {option} {_shown(found)}, not {_shown(wanted)}: "
                                   f"the groups were drawn with it; drop {option}, or prepare again with yours")


def _shown(value: object) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


@cli.command("train-encoder")
@options.training_options
@click.option("--base-model", default=DEFAULT_MODEL, show_default=True,
              help="The encoder to start from: a sentence-transformers folder, a hub name, or bge-small-en-v1.5 / "
                   "e5-small-v2 (from Maven Central); its prefixes are trained with.")
@click.option("--synthetic-ratio", type=click.FloatRange(0, 1, max_open=True), default=0.2, show_default=True,
 cls=Expert, topic="encoder",
              help="Share of every batch that is synthetic pairs from the collection (0: none).")
@click.option("--synthetic-kinds", default="ict,title", show_default=True,
 cls=Expert, topic="encoder",
              help="Synthetic pairs: ict (a sentence -> the rest of its abstract), title (title -> abstract).")
@click.option("--hard-negatives", type=click.IntRange(0), default=0, show_default=True,
 cls=Expert, topic="encoder",
              help="BM25 negatives per supervised pair, besides the in-batch ones (never a judged document).")
@click.option("--negatives-from-top", type=click.IntRange(1), default=100, show_default=True,
              cls=Expert, topic="encoder",
              help="Draw them from this BM25 depth; with --supervision, from the depth it was gathered with.")
@click.option("--supervision", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Train on what `biorank gather-supervision` wrote; --queries/--qrels then only validate.")
@click.option("--positives-per-query", type=click.IntRange(1), default=2, show_default=True,
              cls=Expert, topic="encoder",
              help="With --supervision: relevant passages trained per query, of its best grade.")
@click.option("--max-seq-length", type=click.IntRange(8, 512), default=None, cls=Expert, topic="encoder",
              help="Word pieces read per text in training [default: the base model's window; memory grows with it].")
@click.option("--epochs", type=click.IntRange(1), default=3, show_default=True)
@click.option("--batch-size", type=click.IntRange(2), default=32, show_default=True,
              help="Pairs per batch: each other's negatives.")
@click.option("--learning-rate", type=click.FloatRange(0, min_open=True), default=2e-5, show_default=True,
              cls=Expert, topic="encoder",
              metavar="RATE")
@click.pass_obj
def train_encoder(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, out: Path,
                  max_steps: int | None, seed: int, synthetic_kinds: str, supervision: Path | None,
                  **recipe: object) -> None:
    """Fine-tune the dense encoder with in-batch negatives on judged pairs and synthetic pairs (Ma et al.).

    \b
    Supervised pairs are (training query, the relevant document's best block); synthetic pairs, made from the
    index's own abstracts, are a sentence -> the rest of its abstract (inverse cloze) and title -> abstract.
    The dev split is validated (dense nDCG@10) before training and after every epoch, and the best epoch is
    kept in --out with a model card. Interrupted? Run the same command again: it continues from its last
    checkpoint. Then give the index the new vectors with `biorank reindex-vectors`.

    \b
    Examples (BEIR's SciFact; the second on every source `biorank gather-supervision` gathered):
      biorank train-encoder --queries data/scifact/queries_train.jsonl --qrels data/scifact/qrels/train.tsv \\
          --index scifact --out models/encoder-scifact
      biorank train-encoder --supervision supervision --queries data/scifact/queries_train.jsonl ... \\
          --out models/encoder-all
    """
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.models.extras import require_torch
    from biorank.training.encoder import EncoderTraining, train_encoder
    from biorank.training.supervision import read

    require_torch("train-encoder")  # before the cluster is asked anything

    config = EncoderTraining(max_steps=max_steps, seed=seed, **recipe,
                             synthetic_kinds=tuple(k.strip() for k in synthetic_kinds.split(",") if k.strip()))
    searcher = options.searcher(settings, index_name, mode="bm25", fields="text")
    with stage_progress() as progress:
        report = train_encoder(searcher, read_queries(queries_path), read_qrels(qrels_path), out, config,
                               supervision=read(supervision) if supervision else None, progress=progress, log=echo)
    say(f"trained in {report.seconds / 60:.1f} min ({report.steps} steps); dev nDCG@10 (dense) "
               f"{report.best:.4f} against {report.baseline:.4f} for the base encoder; model and card in {out}")
    say(f"next: biorank reindex-vectors --index {index_name} --model {out}")


@cli.command("gather-supervision")
@click.argument("data", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for passages.jsonl (the pool) and queries.jsonl (judged queries with negatives).")
@click.option("--negatives-from-top", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Keep each query's BM25 top this deep over the pool, judged documents left out.")
@click.pass_obj
def gather_supervision(settings: ConnectionSettings, data: Path, out: Path, negatives_from_top: int) -> None:
    """Gather every judgement under DATA into training material with BM25 negatives.

    \b
    DATA holds a folder a source: scifact/ (claims -> cited abstracts and evidence sentences),
    bioasq/ (7B-9B questions -> gold snippets, and gold abstracts where bioasq/abstracts/ has them),
    nfcorpus/ (titles queries -> graded documents), pubmedqa/ (question -> its abstract); pubmed/ only adds
    texts to the pool. A missing source is skipped.

    \b
    Held out as "dev" (never trained on): SciFact's dev split, NFCorpus dev, BioASQ 7B; the other BioASQ and
    PubMedQA queries by a hash of their id (20%). Negatives are the BM25 top of the pool of every text (a working
    index on the cluster, deleted afterwards), never a text of a document judged for the query.

    \b
    Example:
      biorank gather-supervision data --out supervision    # data/scifact/, data/bioasq/, ...
    """
    from biorank.training.supervision import KINDS, bm25_negatives, gather, write

    supervision = gather(data, log=echo)
    echo(f"{len(supervision.queries)} judged queries, {len(supervision.passages)} texts in the pool"
         + (f"; {supervision.dropped} training queries left out as repeats of held-out ones" if supervision.dropped
            else ""))
    with stage_progress() as progress:
        bm25_negatives(options.client(settings), supervision, negatives_from_top,
                       progress=stage_counter(progress, "BM25 negatives", len(supervision.queries)))
    write(supervision, out)
    counted = ["queries", "unseen", *KINDS, "with negatives"]
    console().print(table("judged queries and their relevant texts", ["source", "split", *counted],
                          [[*key, *(count[c] for c in counted)] for key, count in supervision.counts().items()],
                          right=counted))
    say(f"written to {out}/passages.jsonl and {out}/queries.jsonl")


@cli.command("train-snippet-scorer")
@click.argument("data", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the scorer: model.onnx, vocabulary.npz, settings.json and its card.")
@click.option("--easy-epochs", type=click.IntRange(0), default=2, show_default=True,
              help="Epochs on easy negatives first (the embedding cosine calls them unlike the positives).")
@click.option("--hard-epochs", type=click.IntRange(0), default=4, show_default=True,
              help="Then epochs on hard ones (where the positives' cosine density is the larger).")
@click.option("--margin", type=click.FloatRange(0, min_open=True), default=0.3, show_default=True,
              help="The margin (alpha) of the triplet margin loss, between distances in (0, 1).")
@click.option("--learning-rate", type=click.FloatRange(0, min_open=True), default=1e-3, show_default=True)
@click.option("--max-queries", type=click.IntRange(1), default=None,
              help="Train on at most this many queries (a quick try).")
@click.option("--seed", type=int, default=0, show_default=True)
def train_snippet_scorer(data: Path, out: Path, max_queries: int | None, seed: int, **recipe: object) -> None:
    """Train the deep-metric sentence scorer (DMLPR, Rosso-Mateus et al.) of the `metric` snippet perspective.

    A small CNN reads three word-piece similarity channels of a (question, sentence) pair (input-embedding
    cosine, IDF-weighted exact match, IDF-weighted cosine) and gives a distance; it learns from the triplet
    margin loss on every sentence and snippet judgement of DATA (SciFact evidence sentences, BioASQ 7B-9B gold
    snippets), easy negatives first, then hard ones. The dev splits of gather-supervision are held out and
    give the loss each epoch. Interrupted? Run the same command again: it resumes from OUT/checkpoint. Needs
    torch (biorank[train]); no cluster. The scorer it writes runs in ONNX Runtime: give it to the snippet stage
    from Python (SnippetScorer(..., metric=MetricScorer.load(OUT))) or put its files in place of the shipped one
    (biorank/models/metric/, whose card has the command that made it).

    DATA is a folder of sources as `biorank gather-supervision` reads them (scifact/, bioasq/, nfcorpus/,
    pubmedqa/, pubmed/), gathered here, or a folder it wrote.

    \b
    Example:
      biorank train-snippet-scorer supervision --out models/metric
    """
    from biorank.models.catalogue import MAVEN_MODELS, materialise
    from biorank.models.extras import require_torch
    from biorank.training.metric import MetricTraining, train_snippet_scorer
    from biorank.training.supervision import gather, read

    require_torch("train-snippet-scorer")
    supervision = read(data) if (data / "queries.jsonl").is_file() else gather(data, log=echo)
    graph = materialise(MAVEN_MODELS[DEFAULT_MODEL]) / "model.onnx"
    report = train_snippet_scorer(supervision, graph, out,
                                  MetricTraining(max_queries=max_queries, seed=seed, **recipe),  # type: ignore[arg-type]
                                  log=echo)
    last = report.history[-1]
    say(f"trained in {report.seconds / 60:.1f} min on {report.queries.get('train', 0)} queries; dev "
               f"triplets ordered {last['dev triplets ordered']:.4f} (untrained: "
               f"{report.history[0]['dev triplets ordered']:.4f}); scorer and card in {out}")
