"""What every grid search shares (λ of the hybrid, the reranker's weight): picking the best setting and
plotting the metric against the grid."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from biorank.evaluation.report import pyplot


def best_setting(table: Mapping[float, float]) -> float:
    """The setting with the best value; of equal values the smallest (the least BM25 that reaches it, the least
    weight on the reranker)."""
    return max(table, key=lambda x: (table[x], -x))


def plot_grid(table: Mapping[float, float], metric: str, path: Path, *, title: str, xlabel: str,
              log_x: bool = False) -> Path | None:
    """PNG of ``metric`` against the grid, the best setting marked; ``log_x`` a symmetric log scale, for grids
    that step finely near 0 (λ). Returns the path, or None without matplotlib."""
    if (plt := pyplot()) is None:
        return None
    settings = sorted(table)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(settings, [table[x] for x in settings], marker="o")
    best = best_setting(table)
    ax.axvline(best, color="grey", linestyle="--", linewidth=1)
    ax.annotate(f"{best:g}: {table[best]:.4f}", (best, table[best]), textcoords="offset points", xytext=(8, -14))
    if log_x and (settings[0] > 0 or len([x for x in settings if x > 0]) > 2):
        ax.set_xscale("symlog", linthresh=min(x for x in settings if x > 0))
        ax.set_xlim(min(settings), max(settings) * 1.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
