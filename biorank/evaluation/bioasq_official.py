"""BioASQ Task B Phase A measures exactly as the organisers' evaluator computes them, quirks included.

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

biorank's kinder PMID reading of the same files is :mod:`biorank.evaluation.bioasq`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from biorank.errors import BiorankError

GMAP_EPSILON = 0.00001


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
