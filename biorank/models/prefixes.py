"""Texts an encoder puts before queries and passages, as its model was trained with.

e5 models were trained on ``query: …`` and ``passage: …``; bge models take an optional instruction before
queries only. A model's own prefixes come from the catalogue (:mod:`.catalogue`) or, for a
sentence-transformers folder, from the ``prompts`` of its ``config_sentence_transformers.json`` (the key
``query``, and ``passage`` or ``document``), which is also where a converted or fine-tuned model keeps them.
The index records the prefixes its vectors were made with, so its queries are encoded the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Role = Literal["query", "passage"]
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
"""bge-small-en-v1.5's optional query instruction: off by default, as it measured no better
(docs/measurements/retrieval.md, "Which encoder")."""
CONFIG_FILE = "config_sentence_transformers.json"


@dataclass(frozen=True)
class Prefixes:
    """What goes before a query and before a passage (sentences are passages)."""

    query: str = ""
    passage: str = ""

    def __bool__(self) -> bool:
        return bool(self.query or self.passage)

    def apply(self, texts: list[str], role: Role) -> list[str]:
        prefix = self.query if role == "query" else self.passage
        return [prefix + text for text in texts] if prefix else texts

    def as_prompts(self) -> dict[str, str]:
        """sentence-transformers' ``prompts``: only the prefixes there are."""
        return {role: text for role, text in asdict(self).items() if text}

    def but(self, *, query: str | None = None, passage: str | None = None) -> Prefixes:
        """These prefixes with those given (not None) in their place."""
        return Prefixes(query=self.query if query is None else query,
                        passage=self.passage if passage is None else passage)

    def describe(self) -> str:
        return ", ".join(f"{role} prefix {text!r}" for role, text in asdict(self).items() if text) or "no prefixes"

    @classmethod
    def from_mapping(cls, values: Mapping[str, str] | None) -> Prefixes:
        values = values or {}
        return cls(query=values.get("query", ""), passage=values.get("passage", values.get("document", "")))


def folder_prefixes(folder: Path) -> Prefixes:
    """The prompts a sentence-transformers folder declares, or none."""
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Prefixes()
    prompts = config.get("prompts") if isinstance(config, dict) else None
    return Prefixes.from_mapping(prompts) if isinstance(prompts, dict) else Prefixes()
