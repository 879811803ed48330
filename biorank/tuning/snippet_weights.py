"""Tuning the snippet weights by alternating Bayesian optimisation (Rawal & Baral §4).

All weights start equal. A phase fixes one group and lets Optuna's TPE sampler search the other (each weight in
[0, 1]) for the mean sentence AP@10 on a development set; the first trial of a phase is the current weights,
so a phase never makes things worse. Document weights first, then sentence weights: that is a round. Rounds
repeat until one gains less than ``min_gain`` or ``rounds`` are done.

The cluster and the models are asked once: each query's candidate sentences with their raw perspective values
(:class:`~biorank.stages.snippets.SentenceCandidates`) are cached, and every trial only recombines them, so a
trial costs milliseconds and a run with a seed is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.config import SEED
from biorank.evaluation.report import pyplot
from biorank.models.extras import require
from biorank.models.placement import AskedPlacement
from biorank.stages.snippets import (
    DOCUMENT_PARTS,
    SNIPPETS_PER_QUERY,
    SentenceCandidates,
    SnippetError,
    SnippetWeights,
)
from biorank.store.record import store_snippet_weights
from biorank.types import PERSPECTIVES, StageProgress, stage_counter

if TYPE_CHECKING:
    import numpy as np
    from opensearchpy import OpenSearch

    from biorank.evaluation.splits import Split
    from biorank.retrieval.searcher import Searcher
    from biorank.store.record import IndexRecord

GROUPS = {"document": DOCUMENT_PARTS, "sentence": PERSPECTIVES}
"""Each phase's weight names; a round optimises them in this order."""
METRIC = "sentence-map@10"
GOLD_SECTION = "abstract"
"""SciFact evidence is abstract sentences; like the evaluation, a title sentence in the top 10 is left out."""


@dataclass(frozen=True)
class Phase:
    """One phase of the alternation: which group was searched, what it found and every trial's value."""

    round: int
    group: str
    weights: SnippetWeights
    value: float
    trials: tuple[float, ...]


@dataclass
class TuningResult:
    initial: float
    """The dev value of equal weights."""
    phases: list[Phase] = field(default_factory=list)
    start: SnippetWeights = field(default_factory=SnippetWeights)

    @property
    def weights(self) -> SnippetWeights:
        return self.phases[-1].weights if self.phases else self.start

    @property
    def value(self) -> float:
        return self.phases[-1].value if self.phases else self.initial


class TuningSet:
    """Cached candidates and gold sentences of a query set, scored for any weights without the cluster.

    The measure is the evaluation's sentence AP@10 (:func:`biorank.evaluation.phase_a.sentence_scores`): the
    system's top ``k`` sentences, the non-gold sections left out, AP over at most 10 of them with the number of
    gold sentences as denominator. A query without candidates counts 0.
    """

    def __init__(self, candidates: Mapping[str, SentenceCandidates], gold: Mapping[str, set[tuple[str, int]]],
                 k: int = SNIPPETS_PER_QUERY) -> None:
        import numpy as np

        self.k = k
        self.queries = sorted(gold)
        self.candidates = {q: candidates[q] for q in self.queries if q in candidates}
        self._eligible: dict[str, np.ndarray] = {}
        self._relevant: dict[str, np.ndarray] = {}
        self._gold = {q: len(gold[q]) for q in self.queries}
        for q, c in self.candidates.items():
            self._eligible[q] = np.array([s.section == GOLD_SECTION for s in c.sentences], dtype=bool)
            self._relevant[q] = np.array([s.section == GOLD_SECTION and (s.doc_id, s.number) in gold[q]
                                          for s in c.sentences], dtype=bool)

    def per_query(self, weights: SnippetWeights) -> dict[str, float]:
        """AP@10 of each query."""
        import numpy as np

        values = dict.fromkeys(self.queries, 0.0)
        for q, c in self.candidates.items():
            if not self._gold[q] or not c.sentences:
                continue
            top = c.ranking(weights)[0][: self.k]
            relevant = self._relevant[q][top][self._eligible[q][top]][:10]
            if relevant.any():
                precision = np.cumsum(relevant) / np.arange(1, len(relevant) + 1)
                values[q] = float(precision[relevant].sum() / self._gold[q])
        return values

    def value(self, weights: SnippetWeights) -> float:
        """Mean AP@10 over the queries."""
        values = self.per_query(weights)
        return sum(values.values()) / len(values) if values else 0.0


def tune_weights(tuning: TuningSet, *, rounds: int = 5, trials: int = 60, seed: int = SEED,
                 min_gain: float = 1e-3, perspectives: Sequence[str] = PERSPECTIVES,
                 report: Callable[[Phase], None] | None = None) -> TuningResult:
    """Alternate document and sentence phases from equal weights and return every phase.

    Sentence perspectives not in ``perspectives`` stay at weight 0, so the scores never need them: without
    relevance, the snippet stage runs no cross-encoder.
    """
    require("optuna", "tune", "tuning the snippet weights")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    weights = equal_weights(perspectives)
    result = TuningResult(initial=tuning.value(weights), start=weights)
    current = result.initial
    for number in range(1, rounds + 1):
        before = current
        for group, names in GROUPS.items():
            # A seed per phase: phases differ, and the same command gives the same weights.
            sampler = optuna.samplers.TPESampler(seed=seed + len(result.phases))
            study = optuna.create_study(direction="maximize", sampler=sampler)
            free = tuple(n for n in names if group != "sentence" or n in perspectives)
            current_values = dict(zip(names, getattr(weights, group), strict=True))
            study.enqueue_trial({n: current_values[n] for n in free})

            def objective(trial: optuna.Trial, fixed: SnippetWeights = weights, group: str = group,
                          names: tuple[str, ...] = names, free: tuple[str, ...] = free) -> float:
                values = [trial.suggest_float(name, 0.0, 1.0) if name in free else 0.0 for name in names]
                return tuning.value(fixed.with_group(group, values))

            study.optimize(objective, n_trials=trials)
            values = [t.value for t in study.trials]
            # The first best trial: the current weights win ties, so a phase changes nothing it cannot improve.
            best = max(range(len(values)), key=lambda i: (values[i], -i))
            weights = weights.with_group(group, [study.trials[best].params.get(n, 0.0) for n in names])
            current = values[best]
            phase = Phase(number, group, weights, current, tuple(values))
            result.phases.append(phase)
            if report is not None:
                report(phase)
        if current - before < min_gain:
            break
    return result


def equal_weights(perspectives: Sequence[str] = PERSPECTIVES) -> SnippetWeights:
    """Where tuning starts: every document weight and the sentence weights of ``perspectives`` 1, the rest 0."""
    unknown = set(perspectives) - set(PERSPECTIVES)
    if unknown or not perspectives:
        raise SnippetError(f"perspectives are some of {', '.join(PERSPECTIVES)}, not {', '.join(perspectives)!r}")
    return SnippetWeights(sentence=tuple(float(p in perspectives) for p in PERSPECTIVES))  # type: ignore[arg-type]


def single_perspectives(tuning: TuningSet, perspectives: Sequence[str] = PERSPECTIVES) -> dict[str, float]:
    """The dev value of each of ``perspectives`` alone, and of equal weights over them."""
    values = {p: tuning.value(SnippetWeights.single(p)) for p in perspectives}
    return values | {"equal": tuning.value(equal_weights(perspectives))}


def plot_tuning(result: TuningResult, path: Path, title: str) -> Path | None:
    """Every trial's value and the best so far, phase by phase, as a PNG; None without matplotlib."""
    if (plt := pyplot()) is None:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    offset = 0
    best = result.initial
    ax.axhline(result.initial, color="grey", linestyle=":", linewidth=1, label=f"equal weights {result.initial:.4f}")
    for phase in result.phases:
        xs = list(range(offset, offset + len(phase.trials)))
        colour = "tab:blue" if phase.group == "document" else "tab:orange"
        ax.scatter(xs, phase.trials, s=6, color=colour, alpha=0.5)
        running = []
        for value in phase.trials:
            best = max(best, value)
            running.append(best)
        ax.plot(xs, running, color="black", linewidth=1.2)
        ax.axvline(offset, color="grey", linewidth=0.5)
        ax.text(offset + 1, 0.01, f"r{phase.round} {phase.group[:3]}", fontsize=7, va="bottom",
                transform=ax.get_xaxis_transform())
        offset += len(phase.trials)
    ax.scatter([], [], s=12, color="tab:blue", label="trials: document weights")
    ax.scatter([], [], s=12, color="tab:orange", label="trials: sentence weights")
    ax.plot([], [], color="black", label=f"best so far (final {result.value:.4f})")
    ax.set_xlabel("trial")
    ax.set_ylabel(METRIC)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def store_weights(client: OpenSearch, index: str, result: TuningResult, **facts: Any) -> IndexRecord:
    """Save the tuned weights in the index's record, with how they were found."""
    return store_snippet_weights(client, index, {
        **result.weights.to_dict(),
        "tuning": {"metric": METRIC, "value": result.value, "equal_weights": result.initial,
                   "rounds": max((p.round for p in result.phases), default=0), **facts}})


@dataclass(frozen=True)
class SnippetTuning:
    """What ``biorank tune-snippets`` tunes on: the queries of a split that have gold sentences, the sentences of
    the top documents of ``system``, the weights of ``perspectives`` (the others stay 0)."""

    queries: Path
    gold: Path
    """SciFact claims whose evidence sentences are the gold snippets."""
    qrels: Path | None = None
    """Whose judged queries are split (eval's --qrels), so "dev" is the queries eval reports as dev; default
    ``gold``."""
    system: str = "hybrid+rerank"
    reranker: str | None = None
    split: Split = "dev"
    perspectives: tuple[str, ...] = PERSPECTIVES
    rounds: int = 5
    trials: int = 60
    min_gain: float = 1e-3
    seed: int = SEED
    store: bool = True
    depth: int = 100
    """First-stage depth: the reranker reorders the top of it, snippets come from the top 10."""
    device: str = "auto"
    """Where the encoder and the cross-encoder run (:mod:`biorank.models.placement`)."""

    def __post_init__(self) -> None:
        equal_weights(self.perspectives)  # unknown perspectives are refused before anything runs


@dataclass
class SnippetTuningOutcome:
    result: TuningResult
    queries: int
    sentences: int


def tune_snippet_weights(searcher: Searcher, tuning: SnippetTuning, *, progress: StageProgress | None = None,
                         report: Callable[[str], None] = print) -> SnippetTuningOutcome:
    """Collect the candidates once through the system's pipeline, tune the weights on them, and store the
    weights with the index (unless told not to); ``report`` is told each phase's result as a line."""
    from biorank.evaluation.phase_a import read_evidence_sentences
    from biorank.evaluation.splits import split_judged
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.pipeline import SNIPPETS, Pipeline, PipelineSettings

    if PipelineSettings.parse(tuning.system).snippets is not None:
        raise SnippetError(f"name the system without {SNIPPETS}: the weights are what is tuned")
    start = equal_weights(tuning.perspectives)
    gold = read_evidence_sentences(tuning.gold)
    wanted = set(split_judged(read_qrels(tuning.qrels or tuning.gold), tuning.split)) & gold.keys()
    queries = {q: t for q, t in read_queries(tuning.queries).items() if q in wanted}
    if not queries:
        raise SnippetError(f"no {tuning.split} query of {tuning.queries} has gold sentences in {tuning.gold}")
    pipeline = Pipeline.build(tuning.system, searcher, snippets="tuned", reranker=tuning.reranker,
                              snippet_weights=start, placement=AskedPlacement(device=tuning.device),
                              search=replace(searcher.settings, placement=replace(searcher.settings.placement,
                                                                                  device=tuning.device)))
    advance = stage_counter(progress, f"{tuning.system} + sentences", len(queries) * len(pipeline.stages))

    candidates = pipeline.candidates(queries, tuning.depth, perspectives=tuning.perspectives, progress=advance)
    tuning_set = TuningSet(candidates, {q: gold[q] for q in queries})
    sentences = sum(len(c.sentences) for c in candidates.values())
    report(f"{len(queries)} {tuning.split} queries with gold sentences, {sentences} candidate sentences from the top "
           f"{pipeline.snippets.depth} documents of {tuning.system}; {METRIC}:")
    for name, value in single_perspectives(tuning_set, tuning.perspectives).items():
        report(f"  {name + ' alone' if name != 'equal' else 'equal weights':<16} {value:.4f}")
    result = tune_weights(tuning_set, rounds=tuning.rounds, trials=tuning.trials, seed=tuning.seed,
                          min_gain=tuning.min_gain, perspectives=tuning.perspectives, report=lambda phase: report(
                              f"round {phase.round}, {phase.group} weights ({len(phase.trials)} trials): {METRIC} "
                              f"{phase.value:.4f}  [{phase.weights.describe()}]"))
    if tuning.store:
        cross_encoder = pipeline.snippets.reranker
        used = {"reranker": cross_encoder.model_name} if cross_encoder else {}
        store_weights(searcher.client, searcher.index, result, split=tuning.split, queries=len(queries),
                      system=tuning.system, trials=tuning.trials, seed=tuning.seed,
                      perspectives=list(tuning.perspectives), **used)
    return SnippetTuningOutcome(result, len(queries), sentences)
