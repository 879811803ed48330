"""Sentences of a title + abstract, located by character offsets the way BioASQ locates its snippets.

Snippet scoring compares offsets (``offsetInBeginSection``/``offsetInEndSection``, end exclusive) into the
section text exactly as the index stores it, so every span here is an offset into the untouched text: nothing
is normalised, only surrounding whitespace is left out of a span.

The splitter is segtok (``benchmarks/studies/sentence_splitters.py`` has the measurement that chose it). It is
imported on first use so that importing the CLI does not pay for it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from functools import cache

from biorank.types import Abstract, Sentence

Span = tuple[int, int]

TITLE = "title"
ABSTRACT = "abstract"

# PubMed, and BioASQ after it, join a structured abstract's labelled sections with no separator at all
# ("...interaction data.RESULTS: An object..."), so no splitter sees a sentence boundary there: segtok wants
# a space after the full stop. A break is a label that starts right after the previous section's final
# punctuation (optionally closed by a quote or bracket) and is followed by ": ". Upper-case labels are
# open-ended: the first word has three or more characters and starts with a letter, which keeps "p.E.G",
# "U.S." and "pH 7.4" out; later words may be joined by spaces, slashes, ampersands or commas ("BACKGROUND &
# AIMS", "METHODOLOGY/PRINCIPAL FINDINGS", JAMA's "DESIGN, SETTING, AND PARTICIPANTS") and may carry hyphens
# or a closing apostrophe ("AUTHORS' CONCLUSIONS").
# Some journals (Bioinformatics, the Expert Review series) label in sentence case ("...in genomes.Results:
# We fill..."); a capitalised word glued to a full stop and followed by ": " is too common otherwise
# ("...were observed.No survival differences were observed: ..." in BioASQ), so those labels are a closed
# list, the ones that occur glued in the BioASQ 7B abstracts plus the standard NLM headings.
# The lookbehind also means offset 0 is never a break: there is no previous section to end.
# \u2019 and \u201d are the typographic apostrophe and closing quote, escaped because ruff flags them as ambiguous.
_WORD = r"[A-Z0-9]+(?:-[A-Z0-9]+)*['\u2019]?"
_UPPER_CASE_LABEL = rf"[A-Z][A-Z0-9]{{2,}}(?:-[A-Z0-9]+)*['\u2019]?(?:(?: ?[/&] ?|, ?| ){_WORD})*"
_SENTENCE_CASE_LABELS = (
    "Aim", "Aims", "Areas covered", "Availability", "Availability and implementation", "Background",
    "Conclusion", "Conclusions", "Contact", "Design", "Discussion", "Expert commentary", "Expert opinion",
    "Findings", "Funding", "Implementation", "Interpretation", "Interventions", "Introduction",
    "Materials and methods", "Method", "Methods", "Motivation", "Objective", "Objectives", "Participants",
    "Purpose", "Results", "Setting", "Significance", "Summary", "Supplementary information",
    "Trial registration",
)  # fmt: skip
_SECTION_LABEL = re.compile(
    r"(?:(?<=[.?!])|(?<=[.?!][\"'\u201d\u2019)\]]))"
    rf"(?:{_UPPER_CASE_LABEL}|{'|'.join(sorted(_SENTENCE_CASE_LABELS, key=len, reverse=True))})"
    r"(?=: )"
)


def section_breaks(text: str) -> list[int]:
    """Offsets where a structured-abstract section label follows the previous section with no separator."""
    return [match.start() for match in _SECTION_LABEL.finditer(text)]


def split_sentences(text: str) -> list[Span]:
    """Sentence spans ``(begin, end)``, end exclusive, stripped of whitespace, in order and gap-free.

    Every non-whitespace character of ``text`` is in exactly one span, and no span crosses a section break.
    """
    spans: list[Span] = []
    bounds = [0, *section_breaks(text), len(text)]
    for begin, end in itertools.pairwise(bounds):
        starts = [begin + start for start in _sentence_starts(text[begin:end])]
        # A sentence runs to the next one's start, so whatever the splitter left out of its sentences (it
        # never should, but it is third-party code) still lands in a span rather than vanishing.
        for start, stop in zip([begin, *starts], [*starts, end], strict=True):
            span = strip_span(text, start, stop)
            if span[0] < span[1]:
                spans.append(span)
    return spans


def sentences_of(record: Abstract) -> list[Sentence]:
    """The title as one ``"title"`` sentence, then the abstract's sentences as ``"abstract"``.

    ``number`` counts from 0 within each section. Where the source gave its own split (``record.sentences``,
    SciFact), that split is used exactly and ``number`` is the source's index, so SciFact evidence index
    ``i`` is abstract sentence ``i``; a source sentence that is blank yields no Sentence, and the numbers of
    the ones after it do not shift (SciFact itself has no blank sentence).
    """
    sentences: list[Sentence] = []
    begin, end = strip_span(record.title, 0, len(record.title))
    if begin < end:
        sentences.append(Sentence(record.id, TITLE, 0, begin, end, record.title[begin:end]))

    if record.sentences is not None:
        numbered: Iterator[tuple[int, Span]] = _source_spans(record)
    else:
        numbered = enumerate(split_sentences(record.abstract))
    for number, (begin, end) in numbered:
        sentences.append(Sentence(record.id, ABSTRACT, number, begin, end, record.abstract[begin:end]))
    return sentences


def _source_spans(record: Abstract) -> Iterator[tuple[int, Span]]:
    source: Sequence[str] = record.sentences or ()
    # The offsets are defined by the join; if a reader ever built the abstract differently, every offset
    # after the first difference would be silently wrong, so refuse instead.
    if " ".join(source) != record.abstract:
        raise ValueError(f"record {record.id}: abstract is not its sentences joined by single spaces")
    cursor = 0
    for number, sentence in enumerate(source):
        begin, end = strip_span(record.abstract, cursor, cursor + len(sentence))
        if begin < end:
            yield number, (begin, end)
        cursor += len(sentence) + 1


def strip_span(text: str, begin: int, end: int) -> Span:
    """``(begin, end)`` narrowed past the whitespace at either end (empty when there is only whitespace)."""
    while begin < end and text[begin].isspace():
        begin += 1
    while end > begin and text[end - 1].isspace():
        end -= 1
    return begin, end


def _sentence_starts(text: str) -> list[int]:
    """Offsets in ``text`` where a sentence other than the first starts, ascending."""
    return _splitter()(text)


@cache
def _splitter() -> Callable[[str], list[int]]:
    from segtok.segmenter import split_single

    def starts(text: str) -> list[int]:
        # segtok returns strings, not offsets; it does not rewrite text, so each sentence is found from the
        # previous one's end. A sentence that is somehow not found is skipped: its text stays in the
        # sentence before it, which is better than losing it.
        found: list[int] = []
        cursor = 0
        for piece in split_single(text):
            piece = piece.strip()
            if not piece:
                continue
            begin = text.find(piece, cursor)
            if begin < 0:
                continue
            found.append(begin)
            cursor = begin + len(piece)
        return found[1:]

    return starts
