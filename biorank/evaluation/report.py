"""From runs to a report: one table (systems by measures), paired significance against the first system, plots.

Measures come from ir-measures (pytrec_eval underneath); the paired test is scipy's two-sided paired t-test
over the per-query values, as the BEIR and Anserini reports do. Plots: each system's per-query difference
from the baseline on the first measure, and recall against depth for every system.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biorank.evaluation.measures import Qrels, Run, parse_measure

RECALL_DEPTHS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
SIGNIFICANCE_LEVEL = 0.05


@dataclass
class EvalReport:
    measures: list[str]
    systems: list[str]
    queries: int
    table: dict[str, dict[str, float]] = field(default_factory=dict)
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """system -> measure -> query -> value."""
    p_values: dict[str, dict[str, float]] = field(default_factory=dict)
    """system -> measure -> p of the paired t-test against the first system (absent for the first)."""
    recall_at_depth: dict[str, dict[int, float]] = field(default_factory=dict)
    cost_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    """system -> stage (``first_stage``, ``rerank``, ``snippets``, ``total``) -> mean milliseconds per query."""

    def markdown(self) -> str:
        baseline = self.systems[0]
        lines = [f"| system ({self.queries} queries) | " + " | ".join(self.measures) + " |",
                 "|---|" + "---:|" * len(self.measures)]
        for system in self.systems:
            cells = []
            for m in self.measures:
                p = self.p_values.get(system, {}).get(m)
                mark = "†" if p is not None and p < SIGNIFICANCE_LEVEL else ""
                value = self.table[system].get(m)
                cells.append("" if value is None else f"{value:.4f}{mark}")
            lines.append(f"| {system} | " + " | ".join(cells) + " |")
        lines.append(f"\n† p < {SIGNIFICANCE_LEVEL} in a two-sided paired t-test against {baseline}.")
        if self.cost_ms:
            stages = list(dict.fromkeys(s for by_stage in self.cost_ms.values() for s in by_stage))
            lines += ["", "| cost, ms per query (mean) | " + " | ".join(stages) + " |",
                      "|---|" + "---:|" * len(stages)]
            for system, by_stage in self.cost_ms.items():
                cells = ["" if s not in by_stage else f"{by_stage[s]:.1f}" for s in stages]
                lines.append(f"| {system} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"queries": self.queries, "measures": self.measures, "systems": self.systems, "table": self.table,
                "p_values": self.p_values, "recall_at_depth": self.recall_at_depth, "cost_ms": self.cost_ms}


def evaluate_runs(runs: Mapping[str, Run], qrels: Qrels, measures: Sequence[str],
                  extra: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                  aggregates: Mapping[str, Mapping[str, float]] | None = None,
                 latencies: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None) -> EvalReport:
    """Score every run on the judged queries; a judged query a run lacks counts 0 for it.

    ``extra`` adds measures computed elsewhere (BioASQ's, snippet measures) as system -> measure -> query ->
    value: they get a column, a mean and a significance test like the others. ``aggregates`` adds values
    that are not means of per-query values (GMAP) as system -> measure -> value, without a test.
    ``latencies`` (system -> query -> stage -> ms, as the query log records them) become ``cost_ms``.
    """
    import ir_measures
    from scipy import stats

    judged = {q: dict(docs) for q, docs in qrels.items() if any(g > 0 for g in docs.values())}
    report = EvalReport(list(measures), list(runs), len(judged))
    parsed = {m: parse_measure(m) for m in measures}
    recall = {d: ir_measures.parse_measure(f"R@{d}") for d in RECALL_DEPTHS}
    for system, run in runs.items():
        complete = {q: dict(run.get(q, {})) or {"__none__": 0.0} for q in judged}
        values: dict[str, dict[str, float]] = {m: dict.fromkeys(judged, 0.0) for m in measures}
        by_measure = {v: m for m, v in parsed.items()}
        for metric in ir_measures.iter_calc(list(parsed.values()), judged, complete):
            values[by_measure[metric.measure]][metric.query_id] = float(metric.value)
        report.per_query[system] = values
        report.table[system] = {m: sum(v.values()) / len(v) if v else 0.0 for m, v in values.items()}
        aggregate = ir_measures.calc_aggregate(list(recall.values()), judged, complete)
        report.recall_at_depth[system] = {d: float(aggregate[r]) for d, r in recall.items()}
    for system, by_measure in (extra or {}).items():
        for m, values in by_measure.items():
            if m not in report.measures:
                report.measures.append(m)
            # The caller chose the queries a measure is over (those with gold snippets, say).
            report.per_query[system][m] = dict(values)
            report.table[system][m] = sum(values.values()) / len(values) if values else 0.0
    for system, by_measure in (aggregates or {}).items():
        for m, value in by_measure.items():
            if m not in report.measures:
                report.measures.append(m)
            report.table[system][m] = value
    for system, by_query in (latencies or {}).items():
        stages = list(dict.fromkeys(s for by_stage in by_query.values() for s in by_stage))
        report.cost_ms[system] = {s: sum(q.get(s, 0.0) for q in by_query.values()) / len(by_query)
                                  for s in stages}
    baseline = report.systems[0]
    for system in report.systems[1:]:
        report.p_values[system] = {}
        for m in report.per_query[system].keys() & report.per_query[baseline].keys():
            common = report.per_query[baseline][m].keys() & report.per_query[system][m].keys()
            a = [report.per_query[baseline][m][q] for q in sorted(common)]
            b = [report.per_query[system][m][q] for q in sorted(common)]
            # Identical per-query values have no variance to test: no difference, p = 1.
            p = 1.0 if a == b else float(stats.ttest_rel(b, a).pvalue)
            report.p_values[system][m] = p
    return report


def write_report(report: EvalReport, out: Path) -> list[Path]:
    """table.md, table.json and the PNG plots into ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "table.md", out / "table.json"]
    written[0].write_text(report.markdown() + "\n", encoding="utf-8")
    written[1].write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    if pyplot() is not None:
        written += _plot_differences(report, out / "per-query-difference.png")
        written += _plot_recall(report, out / "recall-depth.png")
    return written


PLOTS_EXTRA = "pip install 'biorank[plots]'"
NO_PLOTS = f"no plots: matplotlib is not installed ({PLOTS_EXTRA})"
"""What a command says in place of a plot on the light install, which leaves matplotlib's 100 MB out."""


def pyplot() -> Any:
    """matplotlib's pyplot on its file backend (no display on servers and CI), or None where it is not installed.

    Returns:
        The ``matplotlib.pyplot`` module, or None.

    Example:
        >>> plt = pyplot()
    """
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_differences(report: EvalReport, path: Path) -> list[Path]:
    others = report.systems[1:]
    if not others:
        return []
    plt = pyplot()
    measure, baseline = report.measures[0], report.systems[0]
    fig, axes = plt.subplots(len(others), 1, figsize=(8, 2.6 * len(others)), squeeze=False)
    for ax, system in zip(axes[:, 0], others, strict=True):
        base, other = report.per_query[baseline][measure], report.per_query[system][measure]
        diffs = sorted((other[q] - base[q] for q in base), reverse=True)
        colours = ["tab:green" if d > 0 else "tab:red" for d in diffs]
        ax.bar(range(len(diffs)), diffs, width=1.0, color=colours)
        ax.axhline(0, color="black", linewidth=0.6)
        wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        ax.set_title(f"{system} minus {baseline}, {measure} per query: {wins} better, {losses} worse", fontsize=9)
        ax.set_xticks([])
        ax.set_ylabel(f"Δ {measure}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _plot_recall(report: EvalReport, path: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for system in report.systems:
        curve = report.recall_at_depth[system]
        ax.plot(list(curve), list(curve.values()), marker="o", markersize=3, label=system)
    ax.set_xscale("log")
    ax.set_xlabel("depth")
    ax.set_ylabel("recall")
    ax.set_title(f"Recall against depth ({report.queries} queries)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
