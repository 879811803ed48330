"""Commands that evaluate: systems side by side, and a BioASQ Phase A submission."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import echo, record_progress, say, stage_progress
from biorank.cli.screens import Expert
from biorank.config import ConnectionSettings
from biorank.evaluation.measures import BEIR_MEASURES
from biorank.evaluation.splits import SPLITS

if TYPE_CHECKING:
    from biorank.experiment import Experiment
    from biorank.retrieval.filters import Filters


def _experiment_options(command):
    """What ``eval`` measures, given to the command as one ``experiment``
    (:class:`~biorank.experiment.Experiment`): the judged queries (``--qrels``, ``--queries``, ``--split``,
    ``--seen``), the systems, the measures (``--measures``, ``--snippet-gold``, ``--bioasq-map``), the depth and
    the folder; its ``pipeline`` is the command's to set from the rerank, filter and device options. The run files
    and ``--index`` stand among them, where ``--help`` has always shown them, and go on to the command as
    ``run_paths`` and ``index_name``; ``--runs`` only says that the arguments are run files, so it is checked here
    and goes no further."""

    @functools.wraps(command)
    def with_experiment(*args, qrels_path: Path, queries_path: Path | None, systems: str, score_runs: bool,
                        split: str, seen: tuple[Path, ...], measures: str, snippet_gold: Path | None,
                        ap_denominator: str, k: int, out: Path, **kwargs):
        from biorank.experiment import Experiment

        if score_runs != bool(kwargs["run_paths"]):
            raise click.UsageError("--runs takes the run files as arguments: biorank eval --runs a.trec b.trec "
                                   "--qrels R")
        experiment = Experiment(
            qrels=qrels_path, queries=queries_path, systems=options.comma_list(systems, "--systems"), split=split,
            seen=seen, measures=options.comma_list(measures, "--measures"), snippet_gold=snippet_gold,
            ap_denominator=ap_denominator, k=k, out=out)
        return command(*args, experiment=experiment, **kwargs)

    return options.apply(with_experiment, [
        click.option("--qrels", "qrels_path", required=True,
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="BEIR qrels TSV, TREC qrels, or SciFact claims_*.jsonl (evidence relevance)."),
        click.option("--queries", "queries_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="Queries to run (BEIR queries.jsonl, SciFact claims, ID<TAB>TEXT); needed with --systems."),
        click.option("--systems", default="bm25,dense,hybrid", show_default=True,
                     help="Comma-separated systems; the first is the baseline (`biorank help eval`)."),
        click.argument("run_paths", nargs=-1, type=click.Path(exists=True, dir_okay=False)),
        click.option("--runs", "score_runs", is_flag=True,
                     help="Score the run files given as arguments (TREC runs, BioASQ .json) instead of systems."),
        options.index_option(),
        click.option("--split", type=click.Choice(SPLITS), default="all", show_default=True,
                     metavar="SPLIT", help=f"Judged queries: {', '.join(SPLITS)} (`biorank help eval`)."),
        click.option("--seen", "seen", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     cls=Expert, topic="eval",
                     help="Judgements of queries trained on elsewhere, for dev-unseen and unseen; repeatable."),
        click.option("--measures", default=",".join(BEIR_MEASURES), show_default=True, cls=Expert, topic="eval",
                     help="Measures to report."),
        click.option("--snippet-gold", type=click.Path(exists=True, dir_okay=False, path_type=Path), cls=Expert,
                     topic="eval",
                     help="SciFact claims whose evidence sentences are the gold snippets of +snippets systems."),
        click.option("--bioasq-map", "ap_denominator", type=click.Choice(["min_gold_cutoff", "cutoff", "gold"]),
                     default="min_gold_cutoff", show_default=True, cls=Expert, topic="eval",
                     help="Denominator of BioASQ's AP: min(|gold|, 10) since BioASQ 8; 10 for BioASQ 3-7; |gold| "
                          "before."),
        click.option("-k", type=options.RUN_DEPTH, default=1000, show_default=True, help="Depth of each run."),
        click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("biorank-eval"),
                     show_default=True, help="Where runs, table.md and table.json go."),
    ])


@cli.command("eval")
@_experiment_options
@options.filter_options
@options.rerank_options
@options.device_option
@options.log_option
@click.pass_obj
def evaluate(settings: ConnectionSettings, experiment: Experiment, run_paths: tuple[str, ...], index_name: str,
             filters: Filters, no_log: bool, device: str, **rerank_options: object) -> None:
    """Run systems over a query set (or read runs) and report every measure side by side.

    \b
    Examples (BEIR's SciFact; plots need pip install 'biorank[plots]'):
      biorank eval --queries data/scifact/queries_train.jsonl --qrels data/scifact/qrels/train.tsv \\
          --index scifact --split dev
      biorank eval --runs bm25.trec hybrid.trec --qrels scifact/qrels/test.tsv
    """
    from biorank.evaluation.report import NO_PLOTS, pyplot
    from biorank.experiment import ExperimentError, run_experiment

    if run_paths and filters:
        raise click.UsageError("--year, --journal and --mesh filter the systems eval runs, not --runs files")
    experiment = replace(experiment, pipeline=options.pipeline_settings(filters=filters, device=device,
                                                                        **rerank_options))
    try:
        if not run_paths:
            experiment.query_file()  # a missing query file is a usage error, said before connecting
    except ExperimentError as e:
        raise click.UsageError(str(e)) from None
    searcher = None if run_paths else options.searcher(settings, index_name, device=device)
    log = options.query_log(settings, searcher.client, "eval", no_log) if searcher else None
    with stage_progress() as progress:
        result = run_experiment(experiment, searcher, run_files=run_paths, log=log, progress=progress)
    for note in result.notes:
        echo(f"note: {note}")
    say(f"{experiment.qrels.name}, {experiment.split} split: {result.report.queries} judged queries, "
        f"{experiment.notion}\n")
    say(result.report.markdown())
    say(f"\nwritten to {experiment.out}: " + ", ".join(p.name for p in result.written) +
               ("" if run_paths else ", and a .trec run per system"))
    if pyplot() is None:
        echo(f"note: {NO_PLOTS}")


@cli.command("export-bioasq")
@click.option("--questions", "questions_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="BioASQ questions JSON ({\"questions\": [{\"id\", \"body\", ...}]}), golden or test set.")
@click.option("--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The submission JSON to write.")
@options.index_option()
@click.option("--system", default="hybrid", show_default=True,
              help="The system for the documents (see biorank eval --help); snippets come from its top 10.")
@options.rerank_options
@options.device_option
@click.pass_obj
def export_bioasq(settings: ConnectionSettings, questions_path: str, output: Path, index_name: str,
                  system: str, device: str, **rerank_options: object) -> None:
    """Write a BioASQ Phase A submission: per question at most 10 documents and 10 snippets with offsets."""
    import json

    from biorank.evaluation.phase_a import submission
    from biorank.evaluation.topics import read_queries
    from biorank.pipeline import Pipeline, with_snippets

    questions = read_queries(questions_path)
    searcher = options.searcher(settings, index_name, device=device)
    system_settings = options.pipeline_settings(search=searcher.settings, device=device,
                                                **rerank_options).with_system(with_snippets(system))
    pipeline = Pipeline.build(system_settings, searcher)
    for note in pipeline.notes:
        echo(f"note: {note}")
    with record_progress(pipeline.name, len(questions) * len(pipeline.stages), "queries") as advance:
        answers = pipeline.run(questions, 10, progress=advance)
    body = submission(list(questions.items()), {q: [h.id for h in a.hits] for q, a in answers.items()},
                      {q: a.top_snippets() for q, a in answers.items()})
    output.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    snippets = sum(len(q["snippets"]) for q in body["questions"])
    say(f"{len(body['questions'])} questions, {snippets} snippets written to {output}")
