"""An experiment: systems run over a judged query set (or run files read back), scored side by side.

What ``biorank eval`` does, as one library call: the judged queries of a split, one :class:`Pipeline` per
system (sharing the loaded encoder and cross-encoder), a TREC run per system (and the snippets of those that
make them, as JSON lines), BEIR measures, BioASQ and
SciFact snippet measures where gold is given, paired tests against the first system, the cost per stage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from biorank.errors import BiorankError
from biorank.evaluation.bioasq_official import read_evaluator_file
from biorank.evaluation.measures import BEIR_MEASURES, parse_measure, run_from_hits
from biorank.evaluation.phase_a import PhaseAScorer, read_submission
from biorank.evaluation.report import EvalReport, evaluate_runs, write_report
from biorank.evaluation.runs import read_trec, write_trec
from biorank.evaluation.splits import Split, seen_documents, split_judged
from biorank.evaluation.topics import read_qrels, read_queries, relevance_notion
from biorank.pipeline import Pipeline, PipelineSettings
from biorank.types import Run, Snippet, StageProgress, stage_counter

if TYPE_CHECKING:
    from biorank.evaluation.bioasq import APDenominator
    from biorank.retrieval.searcher import Searcher
    from biorank.store.query_log import QueryLog

NOTIONS = {"evidence": "evidence relevance (annotated evidence only)", "bioasq": "BioASQ gold documents",
           "qrels": "the qrels file's judgements"}


class ExperimentError(BiorankError):
    """An experiment that cannot run as described (no queries, runs and systems both or neither)."""


@dataclass(frozen=True)
class Experiment:
    """What to evaluate. ``pipeline`` holds the settings every system shares (reranker, depth, weight,
    precision); each system name sets its own stages on top of them."""

    qrels: Path
    queries: Path | None = None
    systems: tuple[str, ...] = ("bm25", "dense", "hybrid")
    split: Split = "all"
    seen: tuple[Path, ...] = ()
    """Judgements of the queries trained on elsewhere: their documents are not unseen (``dev-unseen``,
    ``unseen``)."""
    measures: tuple[str, ...] = BEIR_MEASURES
    snippet_gold: Path | None = None
    ap_denominator: APDenominator = "min_gold_cutoff"
    k: int = 1000
    out: Path = Path("biorank-eval")
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)

    def query_file(self) -> Path:
        """The queries to run: ``queries``, or the questions a BioASQ golden file carries."""
        if self.queries is not None:
            return self.queries
        if relevance_notion(self.qrels) == "bioasq":
            return self.qrels
        raise ExperimentError("give --queries to run --systems, or --runs to score existing runs")

    @property
    def notion(self) -> str:
        """What relevance means in the qrels file, in words."""
        return NOTIONS[relevance_notion(self.qrels)]


@dataclass
class ExperimentResult:
    report: EvalReport
    written: list[Path]
    notes: list[str] = field(default_factory=list)
    """What the user should know: judged queries without text, perspectives a system could not compute."""


def run_experiment(experiment: Experiment, searcher: Searcher | None = None, *,
                   run_files: Sequence[str | Path] = (), log: QueryLog | None = None,
                   progress: StageProgress | None = None) -> ExperimentResult:
    """Run ``experiment.systems`` over ``searcher``'s index, or score ``run_files`` (TREC runs, BioASQ
    submissions) instead; write runs, table and plots to ``experiment.out``. ``progress`` is told
    (system, queries done, total) for each system."""
    for name in experiment.measures:
        parse_measure(name)
    if (searcher is None) == (not run_files):
        raise ExperimentError("give a searcher to run systems, or run files to score, not both")
    qrels = read_qrels(experiment.qrels)
    keep = set(split_judged(qrels, experiment.split, seen_documents(read_qrels(p) for p in experiment.seen)))
    qrels = {q: docs for q, docs in qrels.items() if q in keep}
    scorer = PhaseAScorer(golden=experiment.qrels if relevance_notion(experiment.qrels) == "bioasq" else None,
                          evidence=experiment.snippet_gold, judged=qrels, ap_denominator=experiment.ap_denominator)
    experiment.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Run] = {}
    extra, aggregates, latencies = {}, {}, {}
    notes: list[str] = []
    if run_files:
        for path in map(str, run_files):
            name = Path(path).stem
            if path.endswith(".json"):
                run, snippets = read_submission(path)
                # The official measures read the file as the official evaluator does (documents as written).
                submitted = read_evaluator_file(path) if scorer.gold else None
                extra[name], aggregates[name] = scorer.score({q: list(d) for q, d in run.items()}, snippets,
                                                             submitted)
            else:
                run = read_trec(path)
            runs[name] = run
    else:
        queries = _judged_queries(experiment, qrels, notes)
        pipelines = build_pipelines(experiment.systems, searcher, experiment.pipeline)
        for name, pipeline in pipelines.items():
            advance = stage_counter(progress, name, len(queries) * len(pipeline.stages))
            answers = pipeline.run(queries, experiment.k, progress=advance, log=log)
            notes += [f"{name}: {note}" for note in pipeline.notes]
            hits = {q: a.hits for q, a in answers.items()}
            write_trec(experiment.out / f"{name}.trec", hits, tag=f"biorank-{name}")
            runs[name] = run_from_hits(hits)
            latencies[name] = {q: a.ms for q, a in answers.items()}
            snippets = {q: a.top_snippets() for q, a in answers.items()} if pipeline.snippets else None
            if snippets is not None:
                write_snippets(experiment.out / f"{name}.snippets.jsonl", snippets)
            extra[name], aggregates[name] = scorer.score({q: [h.id for h in h_] for q, h_ in hits.items()}, snippets)
    report = evaluate_runs(runs, qrels, list(experiment.measures), extra, aggregates, latencies)
    return ExperimentResult(report, write_report(report, experiment.out), notes)


def write_snippets(path: Path, snippets: Mapping[str, Sequence[Snippet]]) -> None:
    """A query's snippets per line (``query_id``, ``snippets`` with BioASQ's offsets), best first."""
    with path.open("w", encoding="utf-8") as f:
        for qid, found in snippets.items():
            f.write(json.dumps({"query_id": qid, "snippets": [s.to_dict() for s in found]}, ensure_ascii=False) + "\n")


def build_pipelines(systems: Sequence[str], searcher: Searcher, shared: PipelineSettings) -> dict[str, Pipeline]:
    """A pipeline per system name, sharing one encoder and one cross-encoder; unknown names fail before any
    model is loaded."""
    settings = {name: shared.with_system(name) for name in systems}
    if not settings:
        raise ExperimentError("name at least one system")
    if any(s.snippets is not None or searcher.with_search(s.search).needs_encoder
           for s in settings.values()):
        searcher.load()  # once here: every pipeline's searcher shares it
    pipelines: dict[str, Pipeline] = {}
    cross_encoder = None
    for name, system in settings.items():
        pipelines[name] = Pipeline.build(system, searcher, cross_encoder=cross_encoder)
        cross_encoder = cross_encoder or pipelines[name].cross_encoder
    return pipelines


def _judged_queries(experiment: Experiment, qrels: dict, notes: list[str]) -> dict[str, str]:
    path = experiment.query_file()
    queries = {q: t for q, t in read_queries(path).items() if q in qrels}
    missing = len(qrels.keys() - queries.keys())
    if missing:
        notes.append(f"{missing} judged queries have no text in {path} and count 0")
    return queries
