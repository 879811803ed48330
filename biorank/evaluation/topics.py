"""Queries and relevance judgements in the formats of the field: BEIR, SciFact, NFCorpus/TREC.

- queries: BEIR ``queries.jsonl`` (``_id``, ``text``), SciFact ``claims_*.jsonl`` (``id``, ``claim``), or a
  tab-separated ``ID<TAB>TEXT`` file (NFCorpus ``*.queries``);
- qrels: BEIR TSV (``query-id<TAB>corpus-id<TAB>score`` with a header line) or TREC
  (``query 0 doc level``, whitespace-separated).
"""

from __future__ import annotations

import json
from pathlib import Path

from biorank.errors import BiorankError

Qrels = dict[str, dict[str, int]]


class TopicsError(BiorankError):
    """A queries or qrels file that cannot be read; the message names the file and line."""


def read_queries(path: str | Path) -> dict[str, str]:
    """Query id -> text, in file order."""
    path = Path(path)
    queries: dict[str, str] = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                try:
                    obj = json.loads(line)
                    key, text = ("_id", "text") if "_id" in obj else ("id", "claim")
                    queries[str(obj[key])] = str(obj[text])
                except (ValueError, KeyError) as e:
                    raise TopicsError(f"{path}:{number}: not a BEIR query or SciFact claim ({e})") from None
            else:
                qid, sep, text = line.rstrip("\n").partition("\t")
                if not sep:
                    raise TopicsError(f"{path}:{number}: expected ID<TAB>TEXT")
                queries[qid] = text
    return queries


def read_qrels(path: str | Path) -> Qrels:
    """Query id -> {document id: grade}; BEIR's header line is recognised and skipped."""
    path = Path(path)
    qrels: Qrels = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if not parts or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) == 3:
                qid, doc, grade = parts
            elif len(parts) == 4:
                qid, _, doc, grade = parts
            else:
                raise TopicsError(f"{path}:{number}: expected 3 (BEIR) or 4 (TREC) columns, got {len(parts)}")
            try:
                qrels.setdefault(qid, {})[doc] = int(grade)
            except ValueError:
                raise TopicsError(f"{path}:{number}: relevance {grade!r} is not a whole number") from None
    return qrels
