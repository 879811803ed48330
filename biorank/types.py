"""The data shapes that flow through every layer: what a reader yields, what a search finds, what a stage adds,
what evaluation reads. A leaf module: it imports nothing of biorank, so every layer can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Run = Mapping[str, Mapping[str, float]]
"""query id -> document id -> score."""
Qrels = Mapping[str, Mapping[str, int]]
"""query id -> document id -> relevance grade."""
Advance = Callable[[int], None]
"""Progress of one piece of work: called with how many more items (records, queries) are done."""
StageProgress = Callable[[str, int, int], None]
"""Progress of work in named stages: called with (stage, done, total)."""
Echo = Callable[[str], None]
"""Tells the user one line (a note, a warning): ``print`` to stderr in the CLI, a logger or nothing elsewhere."""

def stage_counter(progress: StageProgress | None, stage: str, total: int) -> Advance:
    """An advance-by-n callback that reports one stage of a (stage, done, total) progress function."""
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(stage, done, total)

    return advance


SCORE_PARTS = ("score", "bm25", "dense", "hybrid", "rerank")
"""A :class:`Hit`'s scores: the final one, then the parts a stage sets where they apply (the page shows them,
the query log maps them, ``query`` prints them)."""
PERSPECTIVES = ("relevance", "similarity", "lexical", "metric", "document")
"""The perspectives a snippet is scored from (Rawal & Baral, with the deep-metric scorer of Rosso-Mateus et al. as
``metric``), in the order of their weights a1 … a5; the document's score is always last."""


@dataclass(frozen=True, slots=True)
class Abstract:
    """A title + abstract as the index stores it.

    ``sentences`` holds the source's own sentence split when it has one (SciFact does); then
    ``abstract`` is those sentences joined by single spaces, so character offsets into ``abstract``
    are defined by that join.

    The fields after ``line`` are what MEDLINE carries beside the text (only the PubMed XML reader sets them;
    they stay empty for every other source): exports cite with them and searches filter on them.
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
    authors: tuple[str, ...] = field(default_factory=tuple)
    """"LastName Initials" ("Smith JA"), or a group's CollectiveName as written, in the citation's order."""
    doi: str | None = None
    publication_types: tuple[str, ...] = field(default_factory=tuple)
    """MEDLINE's PublicationType texts ("Journal Article", "Review", "Randomized Controlled Trial")."""
    mesh_major: tuple[str, ...] = field(default_factory=tuple)
    """The MeSH descriptors marked major topics, on the descriptor itself or on any of its qualifiers."""
    journal_abbrev: str | None = None
    """The journal's NLM title abbreviation (MedlineTA, "N Engl J Med"), else its ISO abbreviation."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """An input record that was not indexed, and why; written to the rejects file, never dropped silently."""

    source: str
    line: int
    id: str | None
    reason: str
    rest_skipped: bool = False
    """Reading stopped here: the rest of the file (a truncated download, XML past repair) was not read. A sync
    never records such a file as applied."""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}"
        who = f" id={self.id}" if self.id else ""
        return f"{where}{who}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Deletion:
    """A record the source withdraws: a PMID in a PubMed update file's ``<DeleteCitation>``. The indexer removes
    that document (its blocks and sentences) from the index; a reader never yields it for other formats."""

    source: str
    line: int
    id: str


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


@dataclass(frozen=True)
class Hit:
    """One document found; the score parts that apply to how it was found are set, the others are None."""

    id: str
    title: str
    rank: int
    score: float
    """What the ranking used: the final score of the last stage."""
    bm25: float | None = None
    dense: float | None = None
    """⟨q, p⟩ of the document's best block (cosine: vectors are unit length)."""
    hybrid: float | None = None
    """λ·bm25 + dense."""
    rerank: float | None = None
    """The cross-encoder's score, for hits a reranker reordered (then also ``score``)."""
    rerank_members: tuple[float, ...] | None = None
    """Each member's score where an ensemble reranked (``--reranker A,B``), in the order they were named;
    ``rerank`` combines them."""
    block: int = 0
    explanation: dict | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict:
        """The hit as JSON-ready data, without the parts that do not apply and without the explanation."""
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "explanation"}


@dataclass(frozen=True, slots=True)
class Snippet(Sentence):
    """A sentence found for a query: its section and offsets are BioASQ's ``beginSection`` (= ``endSection``,
    a sentence never spans sections), ``offsetInBeginSection`` and ``offsetInEndSection`` (exclusive).

    ``score`` is S_sent; the perspectives are the normalised values it was made of (None where the system did
    not compute one); ``matches`` are the (begin, end) spans of query terms in ``text``, when asked for.
    """

    score: float = 0.0
    relevance: float | None = None
    similarity: float | None = None
    lexical: float | None = None
    metric: float | None = None
    document: float | None = None
    matches: tuple[tuple[int, int], ...] = ()

    def to_dict(self) -> dict:
        """The snippet as JSON-ready data, with BioASQ's names for the offsets."""
        data: dict[str, Any] = {"doc_id": self.doc_id, "section": self.section, "number": self.number,
                                "offsetInBeginSection": self.begin, "offsetInEndSection": self.end,
                                "text": self.text, "score": self.score}
        data |= {p: getattr(self, p) for p in PERSPECTIVES if getattr(self, p) is not None}
        if self.matches:
            data["matches"] = [list(m) for m in self.matches]
        return data


@dataclass(frozen=True)
class Facets:
    """How many of a query's candidate documents carry each metadata value: PubMed's sidebar counts, over the
    documents the first stage ranked highest (``candidates`` of them), not over the whole index.

    ``counts`` maps a facet's name (``year``, ``journal``, ``mesh``, ``pt``) to (value, documents) pairs: the most
    frequent values first, years in order.
    """

    candidates: int
    counts: dict[str, tuple[tuple[str | int, int], ...]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The counts as JSON-ready data: ``{"candidates": n, "year": [{"value": 2015, "count": 3}, ...], ...}``."""
        return {"candidates": self.candidates,
                **{name: [{"value": v, "count": c} for v, c in pairs] for name, pairs in self.counts.items()}}


@dataclass
class Answer:
    """One query as it passes through a pipeline: each stage replaces ``hits`` or adds ``snippets``, and the
    pipeline's clock adds the stage's milliseconds to ``ms``."""

    query_id: str
    query: str
    hits: list[Hit] = field(default_factory=list)
    snippets: list[Snippet] | None = None
    """Every candidate sentence of the top documents, best first; None where the pipeline has no snippets."""
    ms: dict[str, float] = field(default_factory=dict)
    """Stage -> milliseconds (``first_stage``, ``rerank``, ``snippets``) and their ``total``."""
    facets: Facets | None = None
    """Metadata counts over the first stage's candidates, where the pipeline counts them."""
    ranked_by: str | None = None
    """What the stages after the first read as the query, where it is not ``query`` itself: the words of a query in
    PubMed's syntax, without its operators and tags (a cross-encoder reads sentences, not Boolean expressions)."""

    @property
    def words(self) -> str:
        """The query as the reranker and the snippets read it: :attr:`ranked_by`, else the query itself."""
        return self.ranked_by or self.query

    def top_snippets(self, k: int = 10) -> list[Snippet]:
        """The ``k`` best sentences: what a BioASQ answer lists (at most 10)."""
        return list(self.snippets or ())[:k]

    def snippets_of(self, doc_id: str, n: int = 3) -> list[Snippet]:
        """The ``n`` best sentences of one document."""
        return [s for s in self.snippets or () if s.doc_id == doc_id][:n]

    def to_dicts(self) -> list[dict]:
        """One JSON-ready dict per hit, with its best sentences when the pipeline made snippets (``query --json``,
        ``/api/search``)."""
        return [hit.to_dict() | ({} if self.snippets is None else
                                 {"snippets": [s.to_dict() for s in self.snippets_of(hit.id)]})
                for hit in self.hits]
