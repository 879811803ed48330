"""Commands that tune what an index remembers: the hybrid's λ, the reranker's weight and the snippet weights."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import echo, record_progress, say, stage_progress
from biorank.cli.screens import Expert
from biorank.config import ConnectionSettings
from biorank.tuning.lambda_grid import LAMBDA_GRID
from biorank.tuning.rerank_weight import WEIGHT_GRID
from biorank.types import Qrels

if TYPE_CHECKING:
    from biorank.retrieval.searcher import Searcher
    from biorank.tuning.lambda_grid import Variant

SPLIT_HELP = "Tune on the fixed 20% dev split of the judged queries, or on all of them."


@cli.command("tune-lambda")
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--qrels", "qrels_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR qrels TSV or TREC qrels.")
@options.index_option()
@click.option("--metric", default="ndcg@10", show_default=True, help="ndcg@10, map@10, recall@100, ...")
@click.option("--split", type=click.Choice(["dev", "all", "dev-unseen", "unseen"]), default="dev", show_default=True,
              help="The fixed 20% dev split, all judged queries, the dev queries sharing no relevant document with "
                   "the others (dev-unseen), or those sharing none with --seen (unseen).")
@click.option("--seen", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), cls=Expert,
              topic="modes", help="Judgements of queries trained on elsewhere, for --split unseen; repeatable.")
@click.option("--grid", default=",".join(map(str, LAMBDA_GRID)), show_default=True,
              help="λ values to try, comma-separated.")
@click.option("--feedback-grid", default="none", show_default=True, cls=Expert, topic="modes",
              help="Feedback to try with every λ, comma-separated: none, rm3, rocchio, rm3+rocchio.")
@click.option("--boost-grid", default="none", show_default=True, cls=Expert, topic="modes",
              help="Title and MeSH weights to try: none,title:0.5,title:0.5+mesh:0.2,...")
@click.option("--bm25-grid", default=None, metavar="K1:B,...", cls=Expert, topic="modes",
              help="BM25 k1:b pairs to try; each closes the index for a moment to set it (searches of it fail "
                   "then) [default: the index's own only].")
@click.option("--holdout/--no-holdout", default=True, show_default=True,
              help="Choose on half the queries (by a hash of each id) and report the choice on the other half.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("lambda.png"),
              show_default=True, help="PNG of the metric against λ.")
@click.option("--no-store", is_flag=True, help="Do not store the best λ (and the rest of the choice) with the index.")
@options.device_option
@click.pass_obj
def tune_lambda(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, metric: str,
                split: str, seen: tuple[Path, ...], grid: str, feedback_grid: str, boost_grid: str,
                bm25_grid: str | None, holdout: bool, plot: Path, no_store: bool, device: str) -> None:
    """Grid-search the hybrid's λ (and, with the grid options, its feedback, title and MeSH weights and BM25's
    k1/b) on a development set and store the best with the index.

    \b
    Example (on the dev queries no other query shares a document with; the choice reported on a held-out half):
      biorank tune-lambda --queries data/scifact/queries_train.jsonl --qrels data/scifact/qrels/train.tsv \\
          --index scifact --split dev-unseen --feedback-grid none,rm3 --boost-grid none,title:0.5
    """
    from biorank.evaluation.measures import parse_measure
    from biorank.evaluation.splits import halves
    from biorank.retrieval.boosts import BoostError
    from biorank.store.indices import bm25_parameters
    from biorank.tuning.grid import plot_grid
    from biorank.tuning.lambda_grid import Variant, best_first_stage, held_out, tune_first_stage

    parse_measure(metric)
    lambdas = _grid(grid, upper=float("inf"))
    variants = _variants(feedback_grid, boost_grid, bm25_grid)
    if (split == "unseen") != bool(seen):
        raise click.UsageError("--split unseen takes the judgements trained on elsewhere as --seen, and --seen "
                               "only that split")
    queries, qrels = _split_queries(queries_path, qrels_path, split, seen)
    choose, report = halves(queries) if holdout else (list(queries), [])
    if holdout and min(len(choose), len(report)) < 2:
        raise click.BadParameter(f"{len(queries)} queries are too few to hold half out; give more, or --no-holdout",
                                 param_hint="--holdout")
    searcher = options.searcher(settings, index_name, mode="hybrid", device=device)
    own_bm25 = bm25_parameters(searcher.client, searcher.index)
    # The index's own pair is no change: named as none, it wins a tie as the plain hybrid does.
    variants = list(dict.fromkeys(replace(v, bm25=None) if v.bm25 == own_bm25 else v for v in variants))
    current = Variant(searcher.feedback, searcher.boosts, own_bm25)
    try:
        for variant in variants:
            variant.boosts.check(searcher.settings.field_set, searchable_mesh=searcher.record.searchable_mesh)
    except BoostError as e:
        raise click.BadParameter(str(e), param_hint="--boost-grid") from None
    on = f"{len(choose)} queries ({split}{', one half' if holdout else ''})"
    echo(f"tuning λ{' with ' + str(len(variants)) + ' variants' if len(variants) > 1 else ''} on {on}, {metric}, "
         f"{len(lambdas) * len(variants)} settings")
    with record_progress("λ grid", len(lambdas) * len(variants) * len(choose), "queries") as advance:
        tables = tune_first_stage(searcher, {q: queries[q] for q in choose}, qrels, lambdas, metric, variants,
                                  progress=advance)
    best = best_first_stage(tables)
    for name, table in tables.items():
        for lam, value in table.items():
            shown = f"{name:<24} " if len(tables) > 1 else ""
            say(f"{shown}λ = {lam:<6g} {metric} = {value:.4f}{'  ← best' if (name, lam) == best else ''}")
    chosen_variant, lam = next(v for v in variants if v.name == best[0]), best[1]
    plotted = plot_grid(tables[best[0]], metric, plot, title=f"{index_name}: {metric} against λ ({on}, "
                        f"{best[0]})", xlabel="λ (weight of BM25 in λ·BM25 + ⟨q, p⟩)", log_x=True)
    _said_plot(plotted)
    if report:
        result = held_out(searcher, {q: queries[q] for q in report}, qrels, metric,
                          {"current": (current, searcher.lam), "chosen": (chosen_variant, lam)})
        chosen, kept = result.table["chosen"][metric], result.table["current"][metric]
        say(f"held-out half ({len(report)} queries): chosen ({best[0]}, λ = {lam:g}) {metric} = {chosen:.4f}; the "
            f"index's current ({current.name}, λ = {searcher.lam:g}) {kept:.4f} (p "
            f"{result.p_values['chosen'][metric]:.2g})")
        if chosen < kept and not no_store:
            # A choice that loses on the queries that did not choose it fitted its half, not the collection.
            say(f"not stored: the choice scored below the index's current setting on the held-out half, which "
                f"{index_name} keeps (--no-holdout stores the best of all the queries)")
            return
    if not no_store:
        _store_first_stage(searcher, chosen_variant, lam, variants, own_bm25,
                           {"metric": metric, "value": tables[best[0]][lam], "queries": len(choose), "split": split,
                            "half": holdout})


def _variants(feedback_grid: str, boost_grid: str, bm25_grid: str | None) -> list[Variant]:
    """Every combination of the grids' feedback, boosts and BM25 pairs (None: the index's own), each checked."""
    from biorank.retrieval.boosts import BoostError, Boosts
    from biorank.retrieval.feedback import Feedback, FeedbackError
    from biorank.tuning.lambda_grid import Variant

    try:
        feedbacks = list(map(Feedback.named, dict.fromkeys(options.comma_list(feedback_grid, "--feedback-grid"))))
    except FeedbackError as e:
        raise click.BadParameter(str(e), param_hint="--feedback-grid") from None
    try:
        boosts = list(dict.fromkeys(map(Boosts.parse, options.comma_list(boost_grid, "--boost-grid"))))
    except BoostError as e:
        raise click.BadParameter(str(e), param_hint="--boost-grid") from None
    pairs: list[tuple[float, float] | None] = [None]
    if bm25_grid is not None:
        try:
            pairs = [(float(k1), float(b)) for k1, b in (item.split(":") for item in
                                                         options.comma_list(bm25_grid, "--bm25-grid"))]
        except ValueError:
            raise click.BadParameter("give k1:b pairs such as 0.9:0.4,1.2:0.75", param_hint="--bm25-grid") from None
        if any(k1 < 0 or not 0 <= b <= 1 for k1, b in pairs):  # type: ignore[misc]
            raise click.BadParameter("BM25 needs k1 >= 0 and 0 <= b <= 1", param_hint="--bm25-grid")
    return [Variant(f, b, pair) for pair in dict.fromkeys(pairs) for b in boosts for f in feedbacks]


def _store_first_stage(searcher: Searcher, variant: Variant, lam: float, variants: list[Variant],
                       own_bm25: tuple[float, float], provenance: dict) -> None:
    """Stores λ and what else the grids tried with the index: feedback and boosts where a grid had them, BM25's
    pair where it differs from the index's own."""
    from biorank.store.indices import set_bm25_parameters
    from biorank.store.record import store_boosts, store_feedback, store_lambda

    client, index = searcher.client, searcher.index
    stored = [f"λ = {lam:g}"]
    store_lambda(client, index, lam, **provenance)
    if len({v.feedback for v in variants}) > 1 or variant.feedback:
        store_feedback(client, index, {**variant.feedback.to_record(), **provenance})
        stored.append(f"feedback {variant.feedback.name}")
    if len({v.boosts for v in variants}) > 1 or variant.boosts:
        store_boosts(client, index, {**variant.boosts.to_record(), **provenance})
        stored.append(f"boosts {variant.boosts.name}")
    if variant.bm25 is not None and variant.bm25 != own_bm25:
        set_bm25_parameters(client, index, *variant.bm25)
        stored.append(f"BM25 k1 {variant.bm25[0]:g} b {variant.bm25[1]:g}")
    say(f"stored {', '.join(stored)} with {index}: hybrid searches use {'them' if len(stored) > 1 else 'it'} "
        "from now on")


@cli.command("tune-rerank")
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--qrels", "qrels_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BEIR qrels TSV or TREC qrels.")
@options.index_option()
@click.option("--system", default="hybrid", show_default=True,
              help="The first stage whose hits are reranked: hybrid, bm25, dense, ... (see biorank eval --help).")
@options.reranker_options
@click.option("--metric", default="ndcg@10", show_default=True, help="ndcg@10, map@10, recall@20, ...")
@click.option("--split", type=click.Choice(["dev", "all"]), default="dev", show_default=True, help=SPLIT_HELP)
@click.option("--grid", default=",".join(f"{w:g}" for w in WEIGHT_GRID), show_default=True,
              help="Weights to try, comma-separated, each from 0 (the first stage alone) to 1 (the cross-encoder "
                   "alone).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("rerank-weight.png"),
              show_default=True, help="PNG of the metric against the weight.")
@click.option("--no-store", is_flag=True, help="Do not store the best weight (nor an ensemble) with the index.")
@options.device_option
@click.pass_obj
def tune_rerank(settings: ConnectionSettings, queries_path: str, qrels_path: str, index_name: str, system: str,
                reranker_model: str | None, rerank_depth: int, rerank_length: int, rerank_precision: str,
                metric: str, split: str,
                grid: str, plot: Path, no_store: bool, device: str) -> None:
    """Grid-search the reranker's weight on a development set and store the best with the index.

    \b
    The final score of a reranked hit is w·r + (1 - w)·f, the cross-encoder's score r and the first stage's f,
    each min-max normalised over the reranked hits. The best w depends on the collection, so it is tuned
    like λ: the cross-encoder scores each query's top --rerank-depth once, and every weight recombines those
    scores. From then on every --rerank, +rerank system and the service reranking with this cross-encoder
    use it (--rerank-weight still sets any; another cross-encoder gets the default). Tune λ first: the weight
    mixes the hybrid's scores. An ensemble (--reranker A,B: each member scores every pair, their scores min-max
    normalised per query and averaged) is tuned the same way and stored as the index's reranker with its weight.

    \b
    Example (BEIR's SciFact, the dev split eval and tune-lambda use):
      biorank tune-rerank --queries data/scifact/queries_train.jsonl --qrels data/scifact/qrels/train.tsv \\
          --index scifact
      biorank tune-rerank ... --reranker biorank-reranker,models/reranker-minilm
    """
    from biorank.evaluation.measures import parse_measure
    from biorank.models.ensemble import Ensemble
    from biorank.pipeline import Pipeline, PipelineError, PipelineSettings
    from biorank.stages.rerank import Reranker
    from biorank.store.record import store_rerank_weight, store_reranker
    from biorank.tuning.grid import best_setting, plot_grid
    from biorank.tuning.rerank_weight import tune_rerank_weight

    parse_measure(metric)
    weights = _grid(grid, upper=1.0)
    try:
        first_stage = PipelineSettings.parse(system)
    except PipelineError as e:
        raise click.BadParameter(str(e), param_hint="--system") from None
    if first_stage.rerank or first_stage.snippets is not None:
        raise click.BadParameter(f"name a first stage alone (hybrid, bm25, ...), not {system!r}",
                                 param_hint="--system")
    queries, qrels = _split_queries(queries_path, qrels_path, split)
    searcher = options.searcher(settings, index_name, device=device)
    reranker = Reranker.for_index(searcher, reranker_model, precision=rerank_precision,  # type: ignore[arg-type]
                                  depth=rerank_depth, weight=0.0, length=rerank_length, device=device)
    identity = reranker.cross_encoder.model_name
    echo(f"tuning the rerank weight of {identity} over {system}'s top {rerank_depth} on {len(queries)} queries "
         f"({split}), {metric}, {len(weights)} values")
    with stage_progress() as progress:
        table = tune_rerank_weight(Pipeline.build(first_stage, searcher), reranker, queries, qrels, weights, metric,
                                   progress=progress)
    best = best_setting(table)
    for weight, value in table.items():
        say(f"w = {weight:<4g} {metric} = {value:.4f}{'  ← best' if weight == best else ''}")
    _said_plot(plot_grid(table, metric, plot, title=f"{index_name}: {metric} against the rerank weight "
                         f"({len(queries)} {split} queries, {system})",
                         xlabel="w (the cross-encoder's share of the final score)"))
    if not no_store:
        store_rerank_weight(searcher.client, index_name, best, reranker=identity, metric=metric, value=table[best],
                            queries=len(queries), split=split, system=system, depth=rerank_depth,
                            length=rerank_length)
        say(f"stored w = {best:g} with {index_name}: reranking with {identity} uses it from now on")
        if isinstance(reranker.cross_encoder, Ensemble):
            # An ensemble has no train-reranker run to make it the index's: the tuning that chose it does.
            store_reranker(searcher.client, index_name, reranker.cross_encoder.source)
            say(f"stored the ensemble {reranker.cross_encoder.source} as {index_name}'s reranker")


def _split_queries(queries_path: str, qrels_path: str, split: str,
                   seen: tuple[Path, ...] = ()) -> tuple[dict[str, str], Qrels]:
    """The queries of the judged ``split`` (``seen``: judgements trained on elsewhere, for ``unseen``) and every
    judgement; none is a clear error, not an empty tuning."""
    from biorank.evaluation.splits import seen_documents, split_judged
    from biorank.evaluation.topics import read_qrels, read_queries

    qrels = read_qrels(qrels_path)
    wanted = set(split_judged(qrels, split, seen_documents(read_qrels(path) for path in seen)))
    queries = {q: t for q, t in read_queries(queries_path).items() if q in wanted}
    if not queries:
        raise click.BadParameter(f"no query of {queries_path} is among the judged queries of the {split} split "
                                 f"of {qrels_path}", param_hint="--queries")
    return queries, qrels


def _grid(grid: str, *, upper: float) -> list[float]:
    """The numbers of a --grid option, each from 0 to ``upper``."""
    try:
        values = [float(x) for x in options.comma_list(grid, "--grid")]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {grid!r}", param_hint="--grid") from None
    if not all(0 <= x <= upper and x < float("inf") for x in values):
        bound = "finite numbers >= 0" if upper == float("inf") else f"numbers from 0 to {upper:g}"
        raise click.BadParameter(f"the grid's values are {bound}", param_hint="--grid")
    return values


@cli.command("tune-snippets")
@click.option("--queries", "queries_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The queries: SciFact claims_*.jsonl, BEIR queries.jsonl or ID<TAB>TEXT lines.")
@click.option("--snippet-gold", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="SciFact claims_*.jsonl whose evidence sentences are the gold snippets.")
@click.option("--qrels", "qrels_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Eval's --qrels file, whose judged queries give the dev split [default: --snippet-gold].")
@options.index_option()
@click.option("--system", default="hybrid+rerank", show_default=True,
              help="The system whose top 10 documents give the sentences (see biorank eval --help).")
@click.option("--reranker", "reranker_model", default=None,
 cls=Expert, topic="snippets",
              help="Cross-encoder of +rerank and the relevance perspective [default: the index's].")
@click.option("--split", type=click.Choice(["dev", "all"]), default="dev", show_default=True, help=SPLIT_HELP)
@click.option("--perspectives", default="relevance,similarity,lexical,metric,document", show_default=True,
              help="Perspectives the weights may use (without relevance: no cross-encoder over sentences).")
@click.option("--rounds", type=click.IntRange(1), default=5, show_default=True, cls=Expert, topic="snippets",
              help="At most this many rounds (document, then sentence weights).")
@click.option("--trials", type=click.IntRange(1), default=60, show_default=True, cls=Expert, topic="snippets",
              help="Optuna trials per phase.")
@click.option("--min-gain", type=click.FloatRange(0), default=0.001, show_default=True, cls=Expert, topic="snippets",
              help="Stop after a round that gains less.")
@options.seed_option("Seed of the TPE sampler.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("snippet-tuning.png"),
              show_default=True, help="PNG of every trial and the best so far.")
@click.option("--no-store", is_flag=True, help="Do not store the weights with the index.")
@options.device_option
@click.pass_obj
def tune_snippets(settings: ConnectionSettings, queries_path: str, snippet_gold: Path, qrels_path: Path | None,
                  index_name: str, system: str, reranker_model: str | None, split: str, perspectives: str,
                  rounds: int, trials: int, min_gain: float, seed: int, plot: Path, no_store: bool,
                  device: str) -> None:
    """Tune the snippet weights by alternating Bayesian optimisation (Rawal & Baral) and store them.

    \b
    S_sent = a1·relevance + a2·similarity + a3·lexical + a4·metric + a5·S_doc and
    S_doc = b1·BM25 + b2·s(1) + b3·s(2) + b4·s(3). All weights start equal; each round fixes the sentence
    weights and searches the document weights with Optuna (TPE) for sentence MAP@10, then the other way round,
    until a round gains less than --min-gain. The cluster and the models are asked once per query; the trials
    recombine the cached values.

    \b
    Example (SciFact train evidence, the dev split of eval and tune-lambda with BEIR's qrels):
      biorank tune-snippets --queries data/scifact/claims_train.jsonl --snippet-gold data/scifact/claims_train.jsonl \\
          --qrels data/scifact/qrels/train.tsv --index scifact --perspectives similarity,lexical,document
    """
    from biorank.models.extras import require
    from biorank.stages.snippets import SnippetError
    from biorank.tuning.snippet_weights import METRIC, SnippetTuning, plot_tuning, tune_snippet_weights

    require("optuna", "tune", "biorank tune-snippets")  # before the cluster and the models are asked

    try:
        tuning = SnippetTuning(queries=Path(queries_path), gold=snippet_gold, qrels=qrels_path, system=system,
                               reranker=reranker_model, split=split,
                               perspectives=options.comma_list(perspectives, "--perspectives"), rounds=rounds,
                               trials=trials, min_gain=min_gain, seed=seed, store=not no_store, device=device)
    except SnippetError as e:
        raise click.BadParameter(str(e), param_hint="--perspectives") from None
    searcher = options.searcher(settings, index_name, device=device)
    with stage_progress() as progress:
        outcome = tune_snippet_weights(searcher, tuning, progress=progress, report=click.echo)
    say(f"tuned: {METRIC} {outcome.result.value:.4f} against {outcome.result.initial:.4f} for equal weights")
    _said_plot(plot_tuning(outcome.result, plot, title=f"{index_name}: {METRIC} while tuning the snippet weights "
                           f"({outcome.queries} {split} queries, {system})"))
    if tuning.store:
        say(f"stored the weights with {index_name}: +snippets systems and query --snippets use them")


def _said_plot(path: Path | None) -> None:
    """Where the plot went, or why there is none (the light install leaves matplotlib out)."""
    from biorank.evaluation.report import NO_PLOTS

    say(f"plot written to {path}" if path is not None else NO_PLOTS)
