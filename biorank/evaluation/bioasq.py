"""BioASQ Task B Phase A measures, for documents and for snippets, in biorank's PMID reading; golden files.

**biorank's PMID reading** (``document_measures``, ``snippet_measures``, ``mean_measures``; the ``bioasq-*-pmid``
measures) is kinder and never called official: a document given as a URL is matched by its PMID, so both URL
forms match each other and the bare PMID; lists are cut at 10 (the BioASQ submission system accepts no more);
overlapping snippets are merged into their union at the rank of the first of them, without the official loop's
slips. Other sources: the BioASQ FAQ (participants-area.bioasq.org/faq, mirrored at bioasq.lip6.fr/faq/), on
the AP denominators: "Since BioASQ3, the denominator of equation 2.7 for AP calculation was set to 10 [...].
Since BioASQ8 the number of relevant items considered for AP calculation is set to the minimum between the
actual number of relevant items (|LR|) and 10"; "since BioASQ9 the official measure for snippet retrieval is
the mean F-measure", because snippet AP can exceed 1.

The official evaluator's reading, ported line by line, is :mod:`biorank.evaluation.bioasq_official`;
``read_golden`` gives each question in both readings.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from biorank.errors import BiorankError
from biorank.evaluation.bioasq_official import GMAP_EPSILON, EvaluatorQuestion, evaluator_question

APDenominator = Literal["min_gold_cutoff", "cutoff", "gold"]

OFFICIAL_CUTOFF = 10
SECTIONS = ("title", "abstract")

_TRAILING_DIGITS = re.compile(r"(\d+)/?\s*$")


class GoldenFileError(BiorankError):
    """A BioASQ golden file that cannot be read; the message names the file and the question."""


def official_ap_denominator(challenge: int) -> APDenominator:
    """The AP denominator the organisers used in BioASQ challenge number ``challenge`` (7 for 7B, 2019)."""
    if challenge < 1:
        raise ValueError(f"BioASQ challenges are numbered from 1, not {challenge}")
    if challenge <= 2:
        return "gold"
    if challenge <= 7:
        return "cutoff"
    return "min_gold_cutoff"


def pmid(url_or_id: str) -> str:
    """The PMID of a PubMed URL in either BioASQ form, or of a bare PMID: its trailing digits."""
    match = _TRAILING_DIGITS.search(url_or_id)
    if not match:
        raise ValueError(f"no PubMed id at the end of {url_or_id!r}")
    return match[1]


def _document_key(document: str) -> str:
    # A URL is reduced to its PMID so that both BioASQ forms match; any other id is compared as given.
    return pmid(document) if "/" in document else document.strip()


@dataclass(frozen=True)
class SnippetSpan:
    """Characters ``begin`` to ``end`` (end exclusive, as BioASQ's offsets are) of a document's title or abstract.

    ``document`` may be given as a PubMed URL; it is kept as the PMID. A span lies in one section: BioASQ's
    format allows a snippet to begin in the title and end in the abstract, but no gold snippet of 7B-9B
    does, and character offsets in two different sections cannot be compared.
    """

    document: str
    section: str
    begin: int
    end: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "document", _document_key(self.document))
        if self.section not in SECTIONS:
            raise ValueError(f"section must be one of {SECTIONS}, not {self.section!r}")
        if not 0 <= self.begin <= self.end:
            raise ValueError(f"a span needs 0 <= begin <= end, not {self.begin}..{self.end}")


@dataclass(frozen=True)
class GoldSnippet:
    span: SnippetSpan
    text: str


@dataclass(frozen=True)
class GoldQuestion:
    """One question of a golden file: gold PMIDs deduplicated in file order, and the gold snippets (biorank's
    PMID reading), and the question as the official evaluator reads it."""

    id: str
    body: str
    type: str
    documents: tuple[str, ...]
    snippets: tuple[GoldSnippet, ...]
    evaluator: EvaluatorQuestion | None = None
    """The question as the official evaluator reads it (documents as written), for ``official_phase_a``."""

    @property
    def spans(self) -> list[SnippetSpan]:
        return [s.span for s in self.snippets]

    @property
    def snippet_documents_missing(self) -> tuple[str, ...]:
        """PMIDs that carry a gold snippet but are not in ``documents``.

        Their snippets stay gold snippets (the official code scores snippets against all gold snippets),
        but the PMIDs are not gold documents (the official code takes those from ``documents`` only).
        """
        listed = set(self.documents)
        return tuple(dict.fromkeys(s.span.document for s in self.snippets if s.span.document not in listed))


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def _denominator(kind: APDenominator, n_gold: int, cutoff: int | None) -> int:
    if kind == "gold":
        return n_gold
    if kind == "cutoff":
        if cutoff is None:
            raise ValueError('the "cutoff" AP denominator needs a cutoff')
        return cutoff
    if kind == "min_gold_cutoff":
        return n_gold if cutoff is None else min(n_gold, cutoff)
    raise ValueError(f"unknown AP denominator {kind!r}")


def document_measures(
    retrieved: Sequence[str],
    gold: Collection[str],
    *,
    cutoff: int | None = OFFICIAL_CUTOFF,
    ap_denominator: APDenominator = "min_gold_cutoff",
) -> dict[str, float]:
    """Precision, recall, F1 and average precision of one question's ranked documents, by PMID (biorank's
    reading, the ``bioasq-doc-*-pmid`` measures; :func:`official_phase_a` gives the official figures).

    Documents are matched by PMID whatever their URL form. The first ``cutoff`` retrieved items are kept, then
    repeats are dropped (the official reader keeps the first occurrence of a string), so a repeated document
    shortens the list rather than pulling in the 11th.
    AP = sum over relevant ranks r of precision@r, divided by the ``ap_denominator``; 0 when nothing
    retrieved is relevant. With no retrieved documents every measure is 0, as in the official code.
    """
    ranked = list(dict.fromkeys(_document_key(d) for d in list(retrieved)[:cutoff]))
    relevant = {_document_key(d) for d in gold}
    if not ranked:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0}
    hits = 0
    ap_sum = 0.0
    for rank, doc in enumerate(ranked, 1):
        if doc in relevant:
            hits += 1
            ap_sum += hits / rank
    precision = hits / len(ranked)
    recall = hits / len(relevant) if relevant else 0.0
    ap = ap_sum / _denominator(ap_denominator, len(relevant), cutoff) if hits else 0.0
    return {"precision": precision, "recall": recall, "f1": _f1(precision, recall), "ap": ap}


def _size(span: SnippetSpan, end_inclusive: bool) -> int:
    return span.end - span.begin + (1 if end_inclusive else 0)


def _overlap(a: SnippetSpan, b: SnippetSpan, end_inclusive: bool) -> int:
    if a.document != b.document or a.section != b.section:
        return 0
    shared = min(a.end, b.end) - max(a.begin, b.begin) + (1 if end_inclusive else 0)
    return max(shared, 0)


def merge_overlapping(spans: Sequence[SnippetSpan], *, end_inclusive: bool = True) -> list[SnippetSpan]:
    """Each group of overlapping spans (same document and section) as one span, at its first member's rank.

    The official code merges both lists before scoring (``concatenateSnippets``), so a character covered by
    two retrieved snippets is counted once, in the overlap and in the retrieved size alike.
    """
    merged: list[SnippetSpan] = []
    for span in spans:
        hits = [i for i, kept in enumerate(merged) if _overlap(kept, span, end_inclusive) > 0]
        if not hits:
            merged.append(span)
            continue
        group = [span, *(merged[i] for i in hits)]
        # Kept spans are pairwise disjoint and each one in the group meets ``span``, so the union is one span
        # that meets no other kept span: one pass suffices.
        merged[hits[0]] = SnippetSpan(
            span.document, span.section, min(s.begin for s in group), max(s.end for s in group)
        )
        for i in reversed(hits[1:]):
            del merged[i]
    return merged


def snippet_measures(
    retrieved: Sequence[SnippetSpan],
    gold: Sequence[SnippetSpan],
    *,
    cutoff: int | None = OFFICIAL_CUTOFF,
    ap_denominator: APDenominator = "min_gold_cutoff",
    end_inclusive: bool = True,
    strict_relevance: bool = False,
) -> dict[str, float]:
    """Character-overlap precision, recall, F1 and average precision of one question's ranked snippets, by
    PMID (biorank's reading, the ``bioasq-snippet-*-pmid`` measures; :func:`official_phase_a` gives the
    official figures).

    After cutting the retrieved list at ``cutoff`` and merging overlapping snippets within each list:
    precision = overlapping characters / retrieved characters, recall = overlapping characters / gold
    characters, where characters overlap only within the same document and the same section.

    ``end_inclusive=True`` counts as the official ``Snippet.getSize`` does, ``end - begin + 1``: it reads
    ``offsetInEndSection`` as inclusive although the gold offsets are end-exclusive, so every span has one
    character more, and spans that merely touch share one. It counts as the official code does; ``False``
    counts the characters of ``[begin, end)`` exactly.

    AP = sum over ranks r of precision@r (by characters, over the first r snippets) times rel(r), divided by
    the ``ap_denominator`` taken over the merged gold snippets. In the official ``relevanceSnippet`` a stray
    semicolon makes rel(r) = 1 whenever snippet r's document has any gold snippet, overlapping or not; that
    is the default, and why snippet AP can exceed 1. ``strict_relevance=True`` sets rel(r) = 1 only when
    snippet r overlaps a gold snippet. With no gold snippets AP is 0 (the official code divides by zero;
    since BioASQ9 it leaves such questions out of the means).
    """
    ranked = merge_overlapping(list(retrieved)[:cutoff], end_inclusive=end_inclusive)
    golden = merge_overlapping(gold, end_inclusive=end_inclusive)
    if not ranked:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ap": 0.0}
    overlaps = [sum(_overlap(r, g, end_inclusive) for g in golden) for r in ranked]
    sizes = [_size(r, end_inclusive) for r in ranked]
    retrieved_size = sum(sizes)
    gold_size = sum(_size(g, end_inclusive) for g in golden)
    precision = sum(overlaps) / retrieved_size if retrieved_size else 0.0
    recall = sum(overlaps) / gold_size if gold_size else 0.0

    gold_documents = {g.document for g in golden}
    ap_sum = 0.0
    overlap_so_far = size_so_far = 0
    for snippet, overlap, size in zip(ranked, overlaps, sizes, strict=True):
        overlap_so_far += overlap
        size_so_far += size
        relevant = overlap > 0 if strict_relevance else snippet.document in gold_documents
        if relevant and size_so_far:
            ap_sum += overlap_so_far / size_so_far
    denominator = _denominator(ap_denominator, len(golden), cutoff) if golden else 0
    ap = ap_sum / denominator if denominator else 0.0
    return {"precision": precision, "recall": recall, "f1": _f1(precision, recall), "ap": ap}


def mean_measures(per_question: Sequence[Mapping[str, float]], *, epsilon: float = GMAP_EPSILON) -> dict[str, float]:
    """Mean precision, recall and F1, MAP, and GMAP = exp(mean(log(AP + epsilon))), over the given questions
    (for biorank's PMID reading; :func:`official_phase_a` computes the official means itself).

    Which questions to pass is the caller's choice; the official evaluator (BioASQ9) averages documents over
    the questions with gold documents and snippets over those with gold snippets, and leaves out questions a
    submission does not mention at all (an empty list for a question counts, as zeros).
    """
    if not per_question:
        raise ValueError("no questions to average")
    n = len(per_question)
    return {
        "precision": sum(q["precision"] for q in per_question) / n,
        "recall": sum(q["recall"] for q in per_question) / n,
        "f1": sum(q["f1"] for q in per_question) / n,
        "map": sum(q["ap"] for q in per_question) / n,
        "gmap": math.exp(sum(math.log(q["ap"] + epsilon) for q in per_question) / n),
    }


def read_golden(path: str | Path) -> list[GoldQuestion]:
    """The questions of a BioASQ Task B golden JSON file (``{"questions": [...]}``).

    For biorank's PMID reading, document URLs of either form become PMIDs, repeats dropped; ``evaluator``
    keeps each question as the official evaluator reads it. A snippet whose document is missing from the
    question's ``documents`` is kept (see ``GoldQuestion.snippet_documents_missing``). A snippet that begins
    and ends in different sections is rejected with ``GoldenFileError``; the 7B-9B files have none. A
    negative begin offset (two 7B title snippets have -1) becomes 0.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        questions = data["questions"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise GoldenFileError(f"{path}: not a BioASQ golden file ({e})") from None
    out: list[GoldQuestion] = []
    for q in questions:
        qid = str(q.get("id", "?"))
        try:
            documents = tuple(dict.fromkeys(pmid(url) for url in q.get("documents", [])))
            snippets = []
            for s in q.get("snippets", []):
                if s["beginSection"] != s["endSection"]:
                    raise ValueError(
                        f"snippet in {s['document']} runs from {s['beginSection']} to {s['endSection']}; "
                        "cross-section snippets are not supported"
                    )
                # Two 7B title snippets begin at -1; a section has no character before its first.
                begin = max(s["offsetInBeginSection"], 0)
                span = SnippetSpan(s["document"], s["beginSection"], begin, s["offsetInEndSection"])
                snippets.append(GoldSnippet(span, s.get("text", "")))
            out.append(GoldQuestion(qid, q["body"], q["type"], documents, tuple(snippets), evaluator_question(q)))
        except (ValueError, KeyError, TypeError) as e:
            raise GoldenFileError(f"{path}: question {qid}: {e}") from None
    return out
