"""Model cards: what a model was trained on, how, and how well it did, written beside its weights."""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path

CARD = "README.md"
RECORD = "training.json"


def write_model_card(folder: Path, *, title: str, summary: str, data: Mapping[str, object],
                     recipe: Mapping[str, object], history: Sequence[Mapping[str, object]],
                     result: Mapping[str, object]) -> Path:
    """A README.md for people and a training.json for programs, both from the same facts."""
    record = {"title": title, "summary": summary, "data": dict(data), "recipe": dict(recipe),
              "history": [dict(h) for h in history], "result": dict(result),
              "machine": {"python": platform.python_version(), "platform": platform.platform()}}
    (folder / RECORD).write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    lines = [f"# {title}", "", summary, "", "## Data", ""]
    lines += [f"- **{key}**: {value}" for key, value in data.items()]
    lines += ["", "## Recipe", ""]
    lines += [f"- **{key}**: {value}" for key, value in recipe.items()]
    if history:
        columns = list(history[0])
        lines += ["", "## Validation on the development split", "", "| " + " | ".join(columns) + " |",
                  "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(h.get(c)) for c in columns) + " |" for h in history]
    lines += ["", "## Result", ""]
    lines += [f"- **{key}**: {_cell(value)}" for key, value in result.items()]
    lines += ["", f"Trained with biorank on {platform.platform()} (Python {platform.python_version()}).", ""]
    path = folder / CARD
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _cell(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
