"""Queries and relevance judgements in the formats of the field: BEIR, SciFact, NFCorpus/TREC, BioASQ.

- queries: BEIR ``queries.jsonl`` (``_id``, ``text``), SciFact ``claims_*.jsonl`` (``id``, ``claim``), a
  tab-separated ``ID<TAB>TEXT`` file (NFCorpus ``*.queries``), or a BioASQ questions JSON (``id``, ``body``);
- qrels: BEIR TSV (``query-id<TAB>corpus-id<TAB>score`` with a header line), TREC (``query 0 doc level``),
  SciFact claims (evidence relevance) or a BioASQ golden JSON (its gold documents).
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
    if relevance_notion(path) == "bioasq":
        with path.open(encoding="utf-8") as f:
            return {str(q["id"]): str(q["body"]) for q in json.load(f)["questions"]}
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
    """Query id -> {document id: grade}; BEIR's header line is recognised and skipped.

    A SciFact ``claims_*.jsonl`` gives *evidence* relevance: only the abstracts annotated with evidence for a
    claim are relevant (grade 1), and claims without evidence have no judgements. BEIR's qrels for the same
    claims count every cited abstract instead; :func:`relevance_notion` names which one a file gives.
    """
    path = Path(path)
    notion = relevance_notion(path)
    if notion == "queries":
        raise TopicsError(f"{path} holds queries, not relevance judgements")
    if notion == "evidence":
        return _evidence_qrels(path)
    if notion == "bioasq":
        from biorank.evaluation.bioasq import read_golden

        return {q.id: dict.fromkeys(q.documents, 1) for q in read_golden(path) if q.documents}
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


def relevance_notion(path: str | Path) -> str:
    """``bioasq`` (a BioASQ JSON file), ``evidence`` (SciFact claims), ``qrels`` (BEIR/TREC judgements), or
    ``queries`` (JSON Lines of queries, which judge nothing)."""
    with Path(path).open(encoding="utf-8") as f:
        first = next((line for line in f if line.strip()), "").strip()
    if not first.startswith("{"):
        return "qrels"
    try:
        record = json.loads(first)
    except ValueError:
        # A pretty-printed JSON document, not JSON Lines: BioASQ's golden files are written that way.
        return "bioasq"
    # One JSON document on one line is BioASQ too; JSON Lines of claims give evidence relevance.
    return "bioasq" if "questions" in record else "evidence" if "evidence" in record else "queries"


def _evidence_qrels(path: Path) -> Qrels:
    qrels: Qrels = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                claim = json.loads(line)
                evidence = claim["evidence"]
                claim_id = str(claim["id"])
            except (ValueError, KeyError, TypeError) as e:
                raise TopicsError(f"{path}:{number}: not a SciFact claim with evidence ({e})") from None
            if evidence:
                qrels[claim_id] = dict.fromkeys(map(str, evidence), 1)
    return qrels
