"""BioASQ Task B Phase A measures, for documents and for snippets: the official evaluator's, and biorank's PMID reading.

**The official measures** (``official_phase_a``, the ``bioasq-*`` measures of ``biorank eval``) are a line-by-line
port of the organisers' evaluator, github.com/BioASQ/Evaluation-Measures, ``flat/BioASQEvaluation/src/`` at
commit ``8c8e689068a41c1370fec55260e5fbfe3a6a6016`` (its ``dist/BioASQEvaluation.jar`` is built from it), run
as ``java -cp BioASQEvaluation.jar evaluation.EvaluatorTask1b -phaseA -e VERSION golden.json submission.json``.
They give the jar's figures to the last bit (``tests/test_bioasq.py`` keeps the jar's output on hand-made files
that exercise every quirk below), quirks included:

- documents are compared as whole strings (``listGolden.contains``): ``https://pubmed.ncbi.nlm.nih.gov/1/``
  never matches ``http://www.ncbi.nlm.nih.gov/pubmed/1``, and a PMID given in both forms counts twice; a
  string repeated within one list is read once (``Task1bData.readDocuments``);
- nothing is cut at 10: an 11th document or snippet counts, so AP can exceed 1;
- AP divides by |gold| (``-e 2``, BioASQ 1-2), 10 (``-e 3``/``-e 5``, BioASQ 3-7) or min(|gold|, 10)
  (``-e 8``/``-e 9``, BioASQ 8 on); document AP is 0 when nothing retrieved is gold;
- GMAP = exp(mean(log(AP + 0.00001))); for snippets a NaN AP adds 0 to the sum of logs, and a sum of 0 gives 0;
- snippets: ``beginSection``/``endSection`` keep what follows their first ``.``; sizes and overlaps count
  ``end - begin + 1`` characters; each list's overlapping snippets of one document and section are merged by the
  official loop (``concatenateSnippets``, which skips and misplaces some merges), once for each of the two
  passes the evaluator makes; precision, recall and F1 match documents by the text after the last ``/``
  (``getDocumentOnlyID``), AP by the whole string, and a snippet is "relevant" in AP whenever its document
  has any gold snippet (a stray semicolon in ``relevanceSnippet``), which is why snippet AP can exceed 1;
- a question the submission does not mention is left out of the means; ``-e 9`` also leaves out, for
  documents, questions without gold documents and, for snippets, questions without gold snippets.

``--bioasq-map`` picks the version: ``gold`` is ``-e 2``, ``cutoff`` ``-e 5``, ``min_gold_cutoff`` ``-e 9``
(``EVALUATOR_VERSION``; on Task B golden files, where every question has gold documents and snippets, ``-e 8``
and ``-e 9`` agree).

**biorank's PMID reading** (``document_measures``, ``snippet_measures``, ``mean_measures``; the ``bioasq-*-pmid``
measures) is kinder and never called official: a document given as a URL is matched by its PMID, so both URL
forms match each other and the bare PMID; lists are cut at 10 (the BioASQ submission system accepts no more);
overlapping snippets are merged into their union at the rank of the first of them, without the official loop's
slips. Other sources: the BioASQ FAQ (participants-area.bioasq.org/faq, mirrored at bioasq.lip6.fr/faq/), on
the AP denominators: "Since BioASQ3, the denominator of equation 2.7 for AP calculation was set to 10 [...].
Since BioASQ8 the number of relevant items considered for AP calculation is set to the minimum between the
actual number of relevant items (|LR|) and 10"; "since BioASQ9 the official measure for snippet retrieval is
the mean F-measure", because snippet AP can exceed 1.
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

APDenominator = Literal["min_gold_cutoff", "cutoff", "gold"]

OFFICIAL_CUTOFF = 10
GMAP_EPSILON = 0.00001
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


# ---------------------------------------------------------------- the official evaluator, ported

EvaluatorVersion = Literal[2, 3, 5, 8, 9]
EVALUATOR_VERSIONS: tuple[int, ...] = (2, 3, 5, 8, 9)
EVALUATOR_VERSION: dict[str, EvaluatorVersion] = {"gold": 2, "cutoff": 5, "min_gold_cutoff": 9}
"""The ``-e`` version of the official evaluator that each ``--bioasq-map`` choice runs."""


@dataclass(frozen=True)
class EvaluatorSnippet:
    """A snippet as the official ``Task1bData`` reads it: sections after their first ``.``, offsets as given."""

    document: str
    begin_section: str
    end_section: str
    begin: int
    end: int

    @property
    def document_only_id(self) -> str:
        """``Snippet.getDocumentOnlyID``: the last part of ``document`` split at ``/`` as Java's ``split``
        does (trailing empty parts dropped), so both PubMed URL forms give the PMID."""
        if not self.document:
            return ""
        parts = self.document.split("/")
        while parts and parts[-1] == "":
            parts.pop()
        if not parts:
            raise OfficialEvaluatorError(f"the official evaluator fails on the snippet document {self.document!r}")
        return parts[-1]

    @property
    def size(self) -> int:
        return self.end - self.begin + 1

    def _comparable(self, other: EvaluatorSnippet) -> bool:
        return (self.begin_section == other.begin_section and self.end_section == other.end_section) or (
            self.begin_section == "0" and other.begin_section == "abstract")

    def overlap(self, other: EvaluatorSnippet) -> int:
        """``Snippet.overlap``: shared characters, ends inclusive, within the same sections."""
        if not self._comparable(other) or self.begin > other.end or self.end < other.begin:
            return 0
        return min(self.end, other.end) - max(self.begin, other.begin) + 1

    def overlaps(self, other: EvaluatorSnippet) -> bool:
        """``Snippet.itOverlaps``."""
        return self._comparable(other) and not (self.begin > other.end or self.end < other.begin)

    def merge(self, other: EvaluatorSnippet) -> EvaluatorSnippet:
        """``Snippet.merge``: this snippet's document and sections, the span of both."""
        return EvaluatorSnippet(self.document, self.begin_section, self.end_section,
                                min(self.begin, other.begin), max(self.end, other.end))


@dataclass(frozen=True)
class EvaluatorQuestion:
    """A question of a golden file or a submission as the official evaluator reads it: documents literal, a
    string repeated in the list read once."""

    id: str
    documents: tuple[str, ...]
    snippets: tuple[EvaluatorSnippet, ...]


class OfficialEvaluatorError(BiorankError):
    """Input the official evaluator cannot read or fails on; the message names the file or the question."""


def _json_string(value: object, what: str) -> str:
    # gson's nextString gives a number's text as well as a string.
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{what} must be a string, not {value!r}")


def _json_int(value: object, what: str) -> int:
    # gson's nextInt takes an integral number (or its text); anything else fails.
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"{what} must be an integer, not {value!r}")


def _after_first_dot(section: str) -> str:
    return section[section.find(".") + 1:]


def evaluator_question(record: Mapping) -> EvaluatorQuestion:
    """One question of a golden file or submission (a JSON object) as ``Task1bData.readData`` reads it.

    Args:
        record: the question's JSON object; ``id`` is needed, ``documents`` and ``snippets`` may be absent.

    Returns:
        The question with its documents as given (repeats dropped) and its snippets' sections cut after the
        first ``.`` (``sections.0`` -> ``0``), missing snippet fields read as ``""`` and 0 as the evaluator does.

    Example:
        >>> evaluator_question({"id": "q", "documents": ["1", "1", "2"]}).documents
        ('1', '2')
    """
    if "id" not in record:
        raise ValueError("a question without an id")
    qid = _json_string(record["id"], "id")
    documents = tuple(dict.fromkeys(_json_string(d, "a document") for d in record.get("documents") or ()))
    snippets = []
    for s in record.get("snippets") or ():
        snippets.append(EvaluatorSnippet(
            _json_string(s.get("document", ""), "a snippet's document"),
            _after_first_dot(_json_string(s.get("beginSection", ""), "beginSection")),
            _after_first_dot(_json_string(s.get("endSection", ""), "endSection")),
            _json_int(s.get("offsetInBeginSection", 0), "offsetInBeginSection"),
            _json_int(s.get("offsetInEndSection", 0), "offsetInEndSection"),
        ))
    return EvaluatorQuestion(qid, documents, tuple(snippets))


def evaluator_questions(data: object, source: str) -> list[EvaluatorQuestion]:
    """The questions of a golden file's or submission's JSON (``{"questions": [...]}``), in file order.

    Args:
        data: the parsed JSON.
        source: the file's name, for the error message.

    Returns:
        One :class:`EvaluatorQuestion` per question.

    Example:
        >>> [q.id for q in evaluator_questions({"questions": [{"id": "a"}, {"id": "b"}]}, "x.json")]
        ['a', 'b']
    """
    try:
        questions = data["questions"]  # type: ignore[index]
        if not isinstance(questions, list):
            raise TypeError("questions is not a list")
    except (KeyError, TypeError) as e:
        raise OfficialEvaluatorError(f"{source}: not a BioASQ questions file ({e})") from None
    out = []
    for i, record in enumerate(questions):
        try:
            out.append(evaluator_question(record))
        except (ValueError, TypeError, AttributeError) as e:
            qid = record.get("id", f"#{i + 1}") if isinstance(record, dict) else f"#{i + 1}"
            raise OfficialEvaluatorError(f"{source}: question {qid!r}: {e}") from None
    return out


def read_evaluator_file(path: str | Path) -> list[EvaluatorQuestion]:
    """A BioASQ golden file or Phase A submission read as the official evaluator reads it.

    Args:
        path: the JSON file.

    Returns:
        Its questions, in file order (see :func:`evaluator_question`).

    Example:
        >>> read_evaluator_file("submission.json")[0].documents  # doctest: +SKIP
        ('http://www.ncbi.nlm.nih.gov/pubmed/23028361', ...)
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise OfficialEvaluatorError(f"{path}: not a BioASQ questions file ({e})") from None
    return evaluator_questions(data, str(path))


def _jdiv(a: float, b: float) -> float:
    """``a / b`` with Java's double semantics: no exception for a zero divisor."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _jlog(x: float) -> float:
    """``Math.log``: NaN below 0, -Infinity at 0."""
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    return math.log(x)


def _jexp(x: float) -> float:
    """``Math.exp``: Infinity on overflow."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _zero_if_nan(x: float) -> float:
    return 0.0 if math.isnan(x) else x


class _Measures:
    """``CalculatedMeasures``: every value starts at 0."""

    __slots__ = ("ap", "f1", "precision", "recall")

    def __init__(self) -> None:
        self.precision = self.recall = self.f1 = self.ap = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1, "ap": self.ap}


class _Question:
    """A ``data.Question``: the evaluator changes its lists in place, and the second pass sees the changes."""

    def __init__(self, question: EvaluatorQuestion) -> None:
        self.id = question.id
        self.documents = list(question.documents)
        self.snippets = list(question.snippets)


def _ap_denominator(version: int, n_gold: int) -> float | None:
    if version == 2:
        return float(n_gold)
    if version in (3, 5):
        return 10.0
    if version in (8, 9):
        return min(10.0, float(n_gold))
    return None


def _document_prf(golden: list[str], responses: list[str], cm: _Measures) -> None:
    # QuestionAnswerEvaluator.calculatePRF
    if not responses:
        return
    tp = fp = fn = 0.0
    for item in responses:
        if item in golden:
            tp += 1
        else:
            fp += 1
    for item in golden:
        if item not in responses:
            fn += 1
    cm.precision = _jdiv(tp, tp + fp)
    if fn + tp != 0:
        cm.recall = _jdiv(tp, tp + fn)
    if cm.precision != 0 and cm.recall != 0:
        cm.f1 = _jdiv(2 * cm.precision * cm.recall, cm.precision + cm.recall)


def _document_ap(golden: list[str], responses: list[str], cm: _Measures, version: int) -> None:
    # QuestionAnswerEvaluator.calculateAveragePrecision, precisionAtRfirstItems and relevance
    ap = 0.0
    hits = 0.0
    for rank, item in enumerate(responses, 1):
        relevant = item in golden
        hits += relevant
        ap += _jdiv(hits, float(rank)) * (1 if relevant else 0)
    responses[:] = [item for item in responses if item in golden]  # listResponses.retainAll(listGolden)
    if not responses:
        cm.ap = 0.0
        return
    denominator = _ap_denominator(version, len(golden))
    if denominator is not None:
        cm.ap = _jdiv(ap, denominator)


def _concatenate(snippets: list[EvaluatorSnippet]) -> None:
    # QuestionAnswerEvaluator.concatenateSnippets, loop slips and all: after a merge j restarts at 1, not 0,
    # and removing a snippet before i shifts the one being merged into.
    try:
        i = 0
        while i < len(snippets):
            j = 0
            while j < len(snippets):
                if j != i:
                    a, b = snippets[i], snippets[j]
                    if (a.document == b.document and a.begin_section == b.begin_section
                            and a.end_section == b.end_section and a.overlaps(b)):
                        snippets[i] = a.merge(b)
                        del snippets[j]
                        j = 0
                j += 1
            i += 1
    except IndexError:
        raise OfficialEvaluatorError(
            "the official evaluator fails (IndexOutOfBoundsException) merging these overlapping snippets") from None


def _snippet_prf(golden: list[EvaluatorSnippet], responses: list[EvaluatorSnippet], cm: _Measures) -> None:
    # QuestionAnswerEvaluator.calculatePRForSnippets: documents matched by the id after the last "/"
    if not responses:
        return
    resp_size = total_overlap = g_size = 0
    for sn in responses:
        resp_size += sn.size
        for g in golden:
            if sn.document_only_id == g.document_only_id:
                total_overlap += sn.overlap(g)
    for g in golden:
        g_size += g.size
    if resp_size != 0:
        cm.precision = _jdiv(float(total_overlap), float(resp_size))
    if g_size != 0:
        cm.recall = _jdiv(float(total_overlap), float(g_size))
    if cm.precision != 0 or cm.recall != 0:
        cm.f1 = _jdiv(2 * cm.precision * cm.recall, cm.precision + cm.recall)


def _snippet_ap(golden: list[EvaluatorSnippet], responses: list[EvaluatorSnippet], cm: _Measures,
                version: int) -> None:
    # calculateAveragePrecisionSnippets, precisionAtRSnippet and relevanceSnippet: documents matched as whole
    # strings; relevant = the document has any gold snippet.
    gold_documents = {g.document for g in golden}
    ap = 0.0
    resp_size = total_overlap = 0
    for sn in responses:
        resp_size += sn.size
        for g in golden:
            if sn.document == g.document:
                total_overlap += sn.overlap(g)
        ap += _jdiv(float(total_overlap), float(resp_size)) * (1 if sn.document in gold_documents else 0)
    denominator = _ap_denominator(version, len(golden))
    if denominator is not None:
        cm.ap = _jdiv(ap, denominator)


def _measure_pair(gold: _Question, resp: _Question, version: int) -> tuple[_Measures, _Measures]:
    # QuestionAnswerEvaluator.calculateMeasuresForPair, its document and snippet parts in its order.
    articles, snippets = _Measures(), _Measures()
    _document_prf(gold.documents, resp.documents, articles)
    _concatenate(gold.snippets)
    _concatenate(resp.snippets)
    _snippet_prf(gold.snippets, resp.snippets, snippets)
    _document_ap(gold.documents, resp.documents, articles, version)
    _snippet_ap(gold.snippets, resp.snippets, snippets, version)
    return articles, snippets


@dataclass(frozen=True)
class OfficialResult:
    """What the official evaluator computes for documents and snippets.

    ``documents`` and ``snippets`` hold the per-question measures (precision, recall, f1, ap) of the questions
    each mean is taken over, in golden-file order, as computed (a NaN stays NaN; the means count it as 0).
    ``means`` holds the ten figures the jar prints for them, under ``doc-precision`` ... ``snippet-gmap``.
    """

    documents: dict[str, dict[str, float]]
    snippets: dict[str, dict[str, float]]
    means: dict[str, float]


def _mean(values: list[float], *, zero_if_empty: bool = False) -> float:
    total = 0.0
    for v in values:
        total += _zero_if_nan(v)  # summed in order, as Java does
    if not values:
        return 0.0 if zero_if_empty else math.nan
    return total / len(values)


def official_phase_a(golden: Sequence[EvaluatorQuestion], submitted: Sequence[EvaluatorQuestion],
                     version: EvaluatorVersion = 9) -> OfficialResult:
    """Phase A document and snippet measures exactly as ``EvaluatorTask1b -phaseA -e VERSION`` computes them.

    Args:
        golden: the golden questions (:func:`read_evaluator_file`), in file order.
        submitted: the submission's questions; a golden question the submission lacks is left out of the
            means, as the jar leaves it out; of questions with one id, the first counts.
        version: the jar's ``-e``: 2 (BioASQ 1-2), 3 or 5 (BioASQ 3-7), 8 (BioASQ 8), 9 (since BioASQ 9).

    Returns:
        The per-question measures and the jar's means (see :class:`OfficialResult`).

    Example:
        >>> gold = [EvaluatorQuestion("q", ("http://www.ncbi.nlm.nih.gov/pubmed/1",), ())]
        >>> run = [EvaluatorQuestion("q", ("https://pubmed.ncbi.nlm.nih.gov/1/",), ())]
        >>> official_phase_a(gold, run).means["doc-map"]  # the two URL forms never match
        0.0
    """
    if version not in EVALUATOR_VERSIONS:
        raise ValueError(f"the official evaluator's versions are {EVALUATOR_VERSIONS}, not {version}")
    gold_questions = [_Question(q) for q in golden]
    responses: dict[str, _Question] = {}
    for q in submitted:
        responses.setdefault(q.id, _Question(q))
    def one_pass(part: int) -> list[tuple[str, _Measures]]:
        # -e 9 leaves out the questions without gold items of the part (0: documents, 1: snippets).
        rows = []
        for gold in gold_questions:
            resp = responses.get(gold.id)
            if (version == 9 and not (gold.snippets if part else gold.documents)) or resp is None:
                continue
            rows.append((gold.id, _measure_pair(gold, resp, version)[part]))
        return rows

    # Two passes over the golden questions, as EvaluatePhaseA makes them: the first gives the document measures,
    # the second (on the lists the first changed) the snippet measures.
    doc_rows = one_pass(0)
    snippet_rows = one_pass(1)

    epsilon = GMAP_EPSILON
    doc_aps = [m.ap for _, m in doc_rows]
    log_sum = 0.0
    for ap in doc_aps:
        log_sum += _jlog(epsilon) if math.isnan(ap) else _jlog(ap + epsilon)
    doc_gmap = _jexp(_jdiv(log_sum, float(len(doc_aps))))
    snippet_aps = [m.ap for _, m in snippet_rows]
    log_sum = 0.0
    for ap in snippet_aps:
        log_sum += 0.0 if math.isnan(ap) else _jlog(ap + epsilon)
    snippet_gmap = 0.0 if math.isnan(log_sum) or log_sum == 0 else _jexp(log_sum / len(snippet_aps))

    def column(rows: list[tuple[str, _Measures]], name: str) -> list[float]:
        return [getattr(m, name) for _, m in rows]

    means = {
        "doc-precision": _mean(column(doc_rows, "precision"), zero_if_empty=True),
        "doc-recall": _mean(column(doc_rows, "recall"), zero_if_empty=True),
        "doc-f1": _mean(column(doc_rows, "f1")),
        "doc-map": _mean(doc_aps),
        "doc-gmap": doc_gmap,
        "snippet-precision": _mean(column(snippet_rows, "precision")),
        "snippet-recall": _mean(column(snippet_rows, "recall")),
        "snippet-f1": _mean(column(snippet_rows, "f1")),
        "snippet-map": _mean(snippet_aps),
        "snippet-gmap": snippet_gmap,
    }
    return OfficialResult({q: m.as_dict() for q, m in doc_rows}, {q: m.as_dict() for q, m in snippet_rows}, means)
