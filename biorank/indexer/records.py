"""The typed records every reader yields: one abstract, or one input record that could not be used."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Abstract:
    """A title + abstract as the index stores it.

    ``sentences`` holds the source's own sentence split when it has one (SciFact does); then
    ``abstract`` is those sentences joined by single spaces, so character offsets into ``abstract``
    are defined by that join.
    """

    id: str
    title: str
    abstract: str
    sentences: tuple[str, ...] | None = None
    journal: str | None = None
    year: int | None = None
    mesh: tuple[str, ...] = field(default_factory=tuple)
    source: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class Rejected:
    """An input record that was not indexed, and why; written to the rejects file, never dropped silently."""

    source: str
    line: int
    id: str | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}"
        who = f" id={self.id}" if self.id else ""
        return f"{where}{who}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence of a document, located the way BioASQ locates snippets.

    ``section`` is ``"title"`` or ``"abstract"``; ``begin``/``end`` are character offsets into that section's
    text (end exclusive), so ``section_text[begin:end] == text`` — BioASQ's ``offsetInBeginSection`` and
    ``offsetInEndSection``. ``number`` counts the sentences of the section from 0, so a SciFact evidence index
    ``i`` is the abstract sentence with ``number == i``.
    """

    doc_id: str
    section: str
    number: int
    begin: int
    end: int
    text: str
