"""Commands that tune what an index remembers: the hybrid's λ and the snippet weights."""

from __future__ import annotations

from pathlib import Path

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import echo, record_progress, stage_progress
from biorank.config import ConnectionSettings
from biorank.tuning.lambda_grid import LAMBDA_GRID

SPLIT_HELP = "Tune on the fixed 20% dev split of the judged queries, or on all of them."


@cli.command("tune-lambda")
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--qrels", "qrels_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR qrels TSV or TREC qrels.")
@options.index_option()
@click.option("--metric", default="ndcg@10", show_default=True, help="ndcg@10, map@10, recall@100, ...")
@click.option("--split", type=click.Choice(["dev", "all"]), default="dev", show_default=True, help=SPLIT_HELP)
@click.option("--grid", default=",".join(map(str, LAMBDA_GRID)), show_default=True,
              help="λ values to try, comma-separated.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("lambda.png"),
              show_default=True, help="PNG of the metric against λ.")
@click.option("--no-store", is_flag=True, help="Do not store the best λ with the index.")
@click.pass_obj
def tune_lambda(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, metric: str,
                split: str, grid: str, plot: Path, no_store: bool) -> None:
    """Grid-search the hybrid's λ on a development set (Ma et al.) and store the best with the index."""
    from biorank.evaluation.measures import parse_measure
    from biorank.evaluation.splits import split_judged
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.store.record import store_lambda
    from biorank.tuning.lambda_grid import best_lambda, plot_lambda, tune_lambda_grid

    parse_measure(metric)
    try:
        lambdas = [float(x) for x in options.comma_list(grid, "--grid")]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {grid!r}", param_hint="--grid") from None
    if not all(0 <= lam < float("inf") for lam in lambdas):
        raise click.BadParameter("λ values are finite numbers >= 0", param_hint="--grid")
    qrels = read_qrels(qrels_path)
    wanted = set(split_judged(qrels, split))
    queries = {q: t for q, t in read_queries(queries_path).items() if q in wanted}
    searcher = options.searcher(settings, index_name, mode="hybrid")
    echo(f"tuning λ on {len(queries)} queries ({split}), {metric}, {len(lambdas)} values")
    with record_progress("λ grid", len(lambdas) * len(queries), "queries") as advance:
        table = tune_lambda_grid(searcher, queries, qrels, lambdas, metric, progress=advance)
    best = best_lambda(table)
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
@click.option("--snippet-gold", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="SciFact claims_*.jsonl whose evidence sentences are the gold snippets.")
@click.option("--qrels", "qrels_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Judgements whose judged queries are split, as `biorank eval --qrels` splits them: the dev "
                   "split depends on the set of judged queries, so give eval's --qrels file to tune on the queries "
                   "eval reports as dev [default: the --snippet-gold file, i.e. the claims with evidence].")
@options.index_option()
@click.option("--system", default="hybrid+rerank", show_default=True,
              help="The system whose top 10 documents give the sentences (see biorank eval --help).")
@click.option("--reranker", "reranker_model", default=None,
              help="Cross-encoder for +rerank and the relevance perspective: a folder or hub name "
                   "[default: the index's, from train-reranker, else biorank-reranker, shipped with biorank].")
@click.option("--split", type=click.Choice(["dev", "all"]), default="dev", show_default=True, help=SPLIT_HELP)
@click.option("--perspectives", default="relevance,similarity,lexical,document", show_default=True,
              help="Sentence perspectives the weights may use; the others stay 0. Leave out relevance and the "
                   "snippet stage runs no cross-encoder over sentences, nearly all of its cost (see the README).")
@click.option("--rounds", type=click.IntRange(1), default=5, show_default=True,
              help="At most this many rounds (document, then sentence weights).")
@click.option("--trials", type=click.IntRange(1), default=60, show_default=True, help="Optuna trials per phase.")
@click.option("--min-gain", type=click.FloatRange(0), default=0.001, show_default=True,
              help="Stop after a round that gains less.")
@options.seed_option("Seed of the TPE sampler.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("snippet-tuning.png"),
              show_default=True, help="PNG of every trial and the best so far.")
@click.option("--no-store", is_flag=True, help="Do not store the weights with the index.")
@click.pass_obj
def tune_snippets(settings: ConnectionSettings, queries_path: str, snippet_gold: Path, qrels_path: Path | None,
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
    from biorank.stages.snippets import SnippetError
    from biorank.tuning.snippet_weights import METRIC, SnippetTuning, plot_tuning, tune_snippet_weights

    try:
        tuning = SnippetTuning(queries=Path(queries_path), gold=snippet_gold, qrels=qrels_path, system=system,
                               reranker=reranker_model, split=split,
                               perspectives=options.comma_list(perspectives, "--perspectives"), rounds=rounds,
                               trials=trials, min_gain=min_gain, seed=seed, store=not no_store)
    except SnippetError as e:
        raise click.BadParameter(str(e), param_hint="--perspectives") from None
    searcher = options.searcher(settings, index_name)
    with stage_progress() as progress:
        outcome = tune_snippet_weights(searcher, tuning, progress=progress, report=click.echo)
    click.echo(f"tuned: {METRIC} {outcome.result.value:.4f} against {outcome.result.initial:.4f} for equal weights")
    plot_tuning(outcome.result, plot, title=f"{index_name}: {METRIC} while tuning the snippet weights "
                f"({outcome.queries} {split} queries, {system})")
    click.echo(f"plot written to {plot}")
    if tuning.store:
        click.echo(f"stored the weights with {index_name}: +snippets systems and query --snippets use them")
