"""BioASQ Phase A and SciFact snippets: turning biorank's documents and snippets into scores and submissions.

- BioASQ documents and snippets are scored with the official measures of :mod:`biorank.evaluation.bioasq`
  (at most 10 of each per question; MAP with the BioASQ 8+ denominator ``min(|gold|, 10)`` unless told);
- SciFact's gold snippets are the evidence sentences of ``claims_*.jsonl``; sentence-level MAP@10 and
  recall@10 are computed by ir-measures over (document, sentence number) pairs;
- a Phase A submission is the JSON BioASQ accepts: per question at most 10 documents (PubMed URLs) and at
  most 10 snippets with their sections and offsets.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from biorank.evaluation.bioasq import (
    OFFICIAL_CUTOFF,
    APDenominator,
    GoldQuestion,
    SnippetSpan,
    document_measures,
    mean_measures,
    pmid,
    read_golden,
    snippet_measures,
)
from biorank.types import Snippet

PUBMED_URL = "http://www.ncbi.nlm.nih.gov/pubmed/{}"
PerQuery = dict[str, dict[str, float]]  # measure -> query -> value


def bioasq_scores(gold: Sequence[GoldQuestion], documents: Mapping[str, Sequence[str]],
                  snippets: Mapping[str, Sequence[Snippet]] | None = None, *,
                  ap_denominator: APDenominator = "min_gold_cutoff") -> tuple[PerQuery, dict[str, float]]:
    """Per-question BioASQ measures (for the table and its tests) and the GMAPs (aggregates only)."""
    per_query: PerQuery = {}
    doc_rows, snippet_rows = [], []
    for question in gold:
        row = document_measures(documents.get(question.id, ()), question.documents, ap_denominator=ap_denominator)
        doc_rows.append(row)
        for name in ("precision", "recall", "f1", "ap"):
            per_query.setdefault(f"bioasq-doc-{name}", {})[question.id] = row[name]
        if snippets is not None and question.snippets:
            spans = [SnippetSpan(s.doc_id, s.section, s.begin, s.end) for s in snippets.get(question.id, ())]
            srow = snippet_measures(spans, question.spans, ap_denominator=ap_denominator)
            snippet_rows.append(srow)
            for name in ("precision", "recall", "f1", "ap"):
                per_query.setdefault(f"bioasq-snippet-{name}", {})[question.id] = srow[name]
    aggregates = {"bioasq-doc-gmap": mean_measures(doc_rows)["gmap"]} if doc_rows else {}
    if snippet_rows:
        aggregates["bioasq-snippet-gmap"] = mean_measures(snippet_rows)["gmap"]
    return per_query, aggregates


class PhaseAScorer:
    """The gold that snippet and BioASQ measures need, read once for all the systems of an evaluation.

    ``golden`` is a BioASQ golden file (document and snippet measures), ``evidence`` a SciFact claims file
    (sentence measures); only the ``judged`` queries count.
    """

    def __init__(self, *, golden: str | Path | None = None, evidence: str | Path | None = None,
                 judged: Collection[str] = (), ap_denominator: APDenominator = "min_gold_cutoff") -> None:
        keep = set(judged)
        self.gold = [q for q in read_golden(golden) if q.id in keep] if golden else []
        self.evidence = {q: s for q, s in read_evidence_sentences(evidence).items() if q in keep} if evidence else {}
        self.ap_denominator = ap_denominator

    def score(self, documents: Mapping[str, Sequence[str]],
              snippets: Mapping[str, Sequence[Snippet]] | None) -> tuple[PerQuery, dict[str, float]]:
        """Per-query measures (measure -> query -> value) and aggregate-only values (GMAP) of one system."""
        per_query: PerQuery = {}
        aggregates: dict[str, float] = {}
        if self.gold:
            per_query, aggregates = bioasq_scores(self.gold, documents, snippets, ap_denominator=self.ap_denominator)
        if self.evidence and snippets is not None:
            per_query |= sentence_scores(self.evidence, snippets)
        return per_query, aggregates


def read_evidence_sentences(path: str | Path) -> dict[str, set[tuple[str, int]]]:
    """SciFact claim id -> its evidence sentences as (document id, abstract sentence number)."""
    gold: dict[str, set[tuple[str, int]]] = {}
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            claim = json.loads(line)
            sentences = {(str(doc), int(i)) for doc, sets in claim.get("evidence", {}).items()
                         for s in sets for i in s["sentences"]}
            if sentences:
                gold[str(claim["id"])] = sentences
    return gold


def sentence_scores(gold: Mapping[str, set[tuple[str, int]]],
                    snippets: Mapping[str, Sequence[Snippet]]) -> PerQuery:
    """Sentence MAP@10 and recall@10 per claim (abstract sentences; a title is never SciFact evidence)."""
    import ir_measures

    def key(doc: str, number: int) -> str:
        return f"{doc}#{number}"

    qrels = {q: {key(d, n): 1 for d, n in sentences} for q, sentences in gold.items()}
    run = {}
    for q in gold:
        ranked = [s for s in snippets.get(q, ()) if s.section == "abstract"][:OFFICIAL_CUTOFF]
        # Scores from ranks, so the measure library cannot reorder equal scores.
        run[q] = {key(s.doc_id, s.number): float(len(ranked) - i) for i, s in enumerate(ranked)} or {"-": 0.0}
    measures = {"sentence-map@10": ir_measures.parse_measure("AP@10"),
                "sentence-recall@10": ir_measures.parse_measure("R@10")}
    per_query: PerQuery = {name: dict.fromkeys(gold, 0.0) for name in measures}
    names = {m: name for name, m in measures.items()}
    for metric in ir_measures.iter_calc(list(measures.values()), qrels, run):
        per_query[names[metric.measure]][metric.query_id] = float(metric.value)
    return per_query


def submission(questions: Sequence[tuple[str, str]], documents: Mapping[str, Sequence[str]],
               snippets: Mapping[str, Sequence[Snippet]]) -> dict:
    """A Phase A submission: per (question id, body) at most 10 documents and 10 snippets, best first."""
    entries = []
    for qid, body in questions:
        entries.append({
            "id": qid,
            "body": body,
            "documents": [PUBMED_URL.format(d) for d in list(documents.get(qid, ()))[:OFFICIAL_CUTOFF]],
            "snippets": [{
                "document": PUBMED_URL.format(s.doc_id), "text": s.text,
                "beginSection": s.section, "endSection": s.section,
                "offsetInBeginSection": s.begin, "offsetInEndSection": s.end,
            } for s in list(snippets.get(qid, ()))[:OFFICIAL_CUTOFF]],
        })
    return {"questions": entries}


def read_submission(path: str | Path) -> tuple[dict[str, dict[str, float]], dict[str, list[Snippet]]]:
    """A BioASQ Phase A submission (anyone's) as a run (question -> PMID -> score) and its snippets."""
    with Path(path).open(encoding="utf-8") as f:
        questions = json.load(f)["questions"]
    run: dict[str, dict[str, float]] = {}
    snippets: dict[str, list[Snippet]] = {}
    for q in questions:
        documents = list(dict.fromkeys(pmid(d) for d in q.get("documents", [])))
        # Scores from ranks: a submission is an ordered list.
        run[str(q["id"])] = {d: float(len(documents) - i) for i, d in enumerate(documents)}
        snippets[str(q["id"])] = [
            Snippet(pmid(s["document"]), s["beginSection"], i, int(s["offsetInBeginSection"]),
                    int(s["offsetInEndSection"]), s.get("text", ""), float(-i))
            for i, s in enumerate(q.get("snippets", []))
        ]
    return run, snippets
