"""BioASQ Phase A and SciFact snippets: turning biorank's documents and snippets into scores and submissions.

- BioASQ documents and snippets are scored twice (:mod:`biorank.evaluation.bioasq`): ``bioasq-*`` exactly as
  the official evaluator scores the submission ``export-bioasq`` would write (or the submission file given),
  ``-e 9`` unless told; ``bioasq-*-pmid`` by biorank's reading (documents matched by PMID, at most 10);
- SciFact's gold snippets are the evidence sentences of ``claims_*.jsonl``; sentence-level MAP@10 and
  recall@10 are computed by ir-measures over (document, sentence number) pairs;
- a Phase A submission is the JSON BioASQ accepts: per question at most 10 documents (PubMed URLs) and at
  most 10 snippets with their sections and offsets.
"""

from __future__ import annotations

import json
import math
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
from biorank.evaluation.bioasq_official import (
    EVALUATOR_VERSION,
    EvaluatorQuestion,
    evaluator_questions,
    official_phase_a,
)
from biorank.types import Snippet

PUBMED_URL = "http://www.ncbi.nlm.nih.gov/pubmed/{}"
PerQuery = dict[str, dict[str, float]]  # measure -> query -> value


def bioasq_scores(gold: Sequence[GoldQuestion], documents: Mapping[str, Sequence[str]],
                  snippets: Mapping[str, Sequence[Snippet]] | None = None, *,
                  ap_denominator: APDenominator = "min_gold_cutoff",
                  submitted: Sequence[EvaluatorQuestion] | None = None) -> tuple[PerQuery, dict[str, float]]:
    """Per-question BioASQ measures (for the table and its tests) and the aggregates, both readings.

    Args:
        gold: the golden questions to score (``read_golden``), in file order.
        documents: question -> ranked PMIDs; snippets: question -> ranked snippets, or None for a system that
            makes none (then no snippet measures).
        ap_denominator: the ``--bioasq-map`` choice; the official measures run the evaluator version
            ``EVALUATOR_VERSION`` names for it.
        submitted: a submission file's questions as the evaluator reads them, scored officially as they are;
            without it the official measures score the submission ``submission()`` makes of ``documents``
            and ``snippets``, what ``export-bioasq`` would send.

    Returns:
        ``bioasq-{doc,snippet}-{precision,recall,f1,ap}`` per question over the questions the official
        evaluator averages (its NaNs as the 0 its means count them as) and the same with ``-pmid`` over every
        gold question (snippets: those with gold snippets); the aggregates: ``bioasq-*-gmap`` and
        ``bioasq-*-gmap-pmid``, and the official means exactly as the evaluator prints them.

    Example:
        >>> per_query, aggregates = bioasq_scores(read_golden("7B1_golden.json"), run)  # doctest: +SKIP
        >>> aggregates["bioasq-doc-gmap"], aggregates["bioasq-doc-gmap-pmid"]  # doctest: +SKIP
    """
    per_query: PerQuery = {}
    aggregates: dict[str, float] = {}
    official_gold = [q.evaluator for q in gold if q.evaluator is not None]
    if submitted is None:
        made = submission([(q.id, q.body) for q in gold], documents, snippets or {})
        submitted = evaluator_questions(made, "the submission")
    official = official_phase_a(official_gold, submitted, EVALUATOR_VERSION[ap_denominator])
    parts = [("doc", official.documents)] + ([("snippet", official.snippets)] if snippets is not None else [])
    for part, rows in parts:
        if not rows:
            continue
        for qid, row in rows.items():
            for name, value in row.items():
                # The means count a NaN as 0; so does the table, which averages these values.
                per_query.setdefault(f"bioasq-{part}-{name}", {})[qid] = 0.0 if math.isnan(value) else value
        # The evaluator's own means, so that the table shows its figures to the last bit.
        for name, mean in (("precision", "precision"), ("recall", "recall"), ("f1", "f1"), ("ap", "map"),
                           ("gmap", "gmap")):
            aggregates[f"bioasq-{part}-{name}"] = official.means[f"{part}-{mean}"]

    doc_rows, snippet_rows = [], []
    for question in gold:
        row = document_measures(documents.get(question.id, ()), question.documents, ap_denominator=ap_denominator)
        doc_rows.append(row)
        for name in ("precision", "recall", "f1", "ap"):
            per_query.setdefault(f"bioasq-doc-{name}-pmid", {})[question.id] = row[name]
        if snippets is not None and question.snippets:
            spans = [SnippetSpan(s.doc_id, s.section, s.begin, s.end) for s in snippets.get(question.id, ())]
            srow = snippet_measures(spans, question.spans, ap_denominator=ap_denominator)
            snippet_rows.append(srow)
            for name in ("precision", "recall", "f1", "ap"):
                per_query.setdefault(f"bioasq-snippet-{name}-pmid", {})[question.id] = srow[name]
    if doc_rows:
        aggregates["bioasq-doc-gmap-pmid"] = mean_measures(doc_rows)["gmap"]
    if snippet_rows:
        aggregates["bioasq-snippet-gmap-pmid"] = mean_measures(snippet_rows)["gmap"]

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

    def score(self, documents: Mapping[str, Sequence[str]], snippets: Mapping[str, Sequence[Snippet]] | None,
              submitted: Sequence[EvaluatorQuestion] | None = None) -> tuple[PerQuery, dict[str, float]]:
        """Per-query measures (measure -> query -> value) and aggregate values (GMAP, the official means) of one
        system, or of a submission file whose questions, as the evaluator reads them, are ``submitted``."""
        per_query: PerQuery = {}
        aggregates: dict[str, float] = {}
        if self.gold:
            per_query, aggregates = bioasq_scores(self.gold, documents, snippets, ap_denominator=self.ap_denominator,
                                                  submitted=submitted)
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
            Snippet(pmid(s["document"]), _section(s["beginSection"]), i, int(s["offsetInBeginSection"]),
                    int(s["offsetInEndSection"]), s.get("text", ""), float(-i))
            for i, s in enumerate(q.get("snippets", []))
        ]
    return run, snippets


def _section(name: str) -> str:
    # Early BioASQ submissions name sections "sections.0" (the abstract), which the official evaluator still
    # reads; biorank's reading knows "title" and "abstract".
    name = name[name.find(".") + 1:]
    return "abstract" if name == "0" else name
