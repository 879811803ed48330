"""Commands that train models from judgements: the cross-encoder reranker and the dense encoder."""

from __future__ import annotations

from pathlib import Path

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import echo, stage_progress
from biorank.config import ConnectionSettings
from biorank.models.encoder import DEFAULT_MODEL, PACKAGED_MODEL


@cli.command("train-reranker")
@options.training_options
@click.option("--base-model", default=PACKAGED_MODEL, show_default=True,
              help="A BERT-family checkpoint: local folder, hub name, or an encoder biorank fetches by name "
                   "(bge-small-en-v1.5, e5-small-v2); a fresh one-output head is added.")
@click.option("--negatives-per-positive", type=click.IntRange(1), default=20, show_default=True,
              help="Negatives drawn for each judged-relevant document.")
@click.option("--negatives-from-top", type=click.IntRange(1), default=500, show_default=True,
              help="Draw them from this BM25 depth (never a judged document).")
@click.option("--epochs", type=click.IntRange(1), default=1, show_default=True)
@click.option("--learning-rate", type=click.FloatRange(0, min_open=True), default=5e-5, show_default=True)
@click.option("--max-length", type=click.IntRange(8, 512), default=256, show_default=True,
              help="Word pieces of query + document.")
@click.option("--no-store", is_flag=True, help="Do not make this model the index's default reranker.")
@click.pass_obj
def train_reranker(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, out: Path,
                   max_steps: int | None, seed: int, no_store: bool, **recipe: object) -> None:
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
    from biorank.store.record import store_reranker
    from biorank.training.reranker import RerankerTraining, train_reranker

    searcher = options.searcher(settings, index_name, mode="bm25", fields="text")
    with stage_progress() as progress:
        report = train_reranker(searcher, read_queries(queries_path), read_qrels(qrels_path), out,
                                RerankerTraining(max_steps=max_steps, seed=seed, **recipe), progress=progress, log=echo)
    click.echo(f"trained in {report.seconds / 60:.1f} min ({report.steps} steps); dev nDCG@10 "
               f"{report.best:.4f} reranked against {report.baseline:.4f} for BM25; model and card in {out}")
    if not no_store:
        store_reranker(searcher.client, index_name, str(out.resolve()))
        click.echo(f"{index_name} now reranks with it by default (--rerank)")


@cli.command("train-encoder")
@options.training_options
@click.option("--base-model", default=DEFAULT_MODEL, show_default=True,
              help="The encoder to start from: a sentence-transformers folder, a hub name, or bge-small-en-v1.5 / "
                   "e5-small-v2 (from Maven Central); its prefixes are trained with.")
@click.option("--synthetic-ratio", type=click.FloatRange(0, 1, max_open=True), default=0.2, show_default=True,
              help="Share of every batch that is synthetic pairs from the collection (0: none).")
@click.option("--synthetic-kinds", default="ict,title", show_default=True,
              help="Synthetic pairs: ict (a sentence -> the rest of its abstract), title (title -> abstract).")
@click.option("--hard-negatives", type=click.IntRange(0), default=0, show_default=True,
              help="BM25 negatives per supervised pair, besides the in-batch ones (never a judged document).")
@click.option("--negatives-from-top", type=click.IntRange(1), default=100, show_default=True,
              help="Draw them from this BM25 depth.")
@click.option("--epochs", type=click.IntRange(1), default=3, show_default=True)
@click.option("--batch-size", type=click.IntRange(2), default=32, show_default=True,
              help="Pairs per batch: each other's negatives.")
@click.option("--learning-rate", type=click.FloatRange(0, min_open=True), default=2e-5, show_default=True)
@click.pass_obj
def train_encoder(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, out: Path,
                  max_steps: int | None, seed: int, synthetic_kinds: str, **recipe: object) -> None:
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

    config = EncoderTraining(max_steps=max_steps, seed=seed, **recipe,
                             synthetic_kinds=tuple(k.strip() for k in synthetic_kinds.split(",") if k.strip()))
    searcher = options.searcher(settings, index_name, mode="bm25", fields="text")
    with stage_progress() as progress:
        report = train_encoder(searcher, read_queries(queries_path), read_qrels(qrels_path), out, config,
                               progress=progress, log=echo)
    click.echo(f"trained in {report.seconds / 60:.1f} min ({report.steps} steps); dev nDCG@10 (dense) "
               f"{report.best:.4f} against {report.baseline:.4f} for the base encoder; model and card in {out}")
    click.echo(f"next: biorank reindex-vectors --index {index_name} --model {out}")
