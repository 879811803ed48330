"""Filters on a document's year, journal, MeSH headings and publication types, applied inside OpenSearch by every
first-stage mode.

A filter is a ``filter`` clause of the query that selects the blocks, never a pass over the hits afterwards:
the hits of a filtered search are the top k of the filtered set, however few of them an unfiltered search
would have ranked high (what PubMed users expect of a year or journal restriction, and what a post-filtered
top k gets wrong). Every block carries its document's year, journal and headings, so the hybrid's script,
the kNN graph and BM25 all see the same set.

Journals, headings and publication types match whole values, ignoring case (``--journal "fertility and
sterility"``); several journals, or several publication types ("Review", "Meta-Analysis"), are alternatives,
several headings must all be present, as in PubMed's own search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from biorank.errors import BiorankError

YEARS = re.compile(r"^\s*(\d{4})?\s*(-)?\s*(\d{4})?\s*$")


class FilterError(BiorankError):
    """A filter that cannot be applied as given (a malformed year range, an index without filter fields)."""


@dataclass(frozen=True)
class Filters:
    """What a search is restricted to; empty, it restricts nothing.

    ``years`` is an inclusive (first, last) range, either end open (``None``); ``journals`` any of these
    journals; ``mesh`` every one of these MeSH headings; ``publication_types`` any of these MEDLINE publication
    types (an index built from other sources than PubMed XML holds none, so nothing matches them).
    """

    years: tuple[int | None, int | None] | None = None
    journals: tuple[str, ...] = ()
    mesh: tuple[str, ...] = ()
    publication_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.years is not None:
            first, last = self.years
            if first is None and last is None:
                raise FilterError("a year range needs at least one end")
            if first is not None and last is not None and first > last:
                raise FilterError(f"the year range {first}-{last} is empty: its first year is after its last")
        if any(not value.strip() for value in (*self.journals, *self.mesh, *self.publication_types)):
            raise FilterError("a journal, MeSH heading or publication type filter cannot be empty")

    @classmethod
    def parse(cls, years: str | None = None, journals: tuple[str, ...] = (), mesh: tuple[str, ...] = (),
              publication_types: tuple[str, ...] = ()) -> Filters:
        """Filters from the words a person types: ``years`` as ``2015``, ``2015-2020``, ``2015-`` or ``-2020``."""
        return cls(years=parse_years(years) if years else None, journals=tuple(journals), mesh=tuple(mesh),
                   publication_types=tuple(publication_types))

    def __bool__(self) -> bool:
        return self.years is not None or bool(self.journals) or bool(self.mesh) or bool(self.publication_types)

    def clauses(self) -> list[dict]:
        """The ``filter`` clauses of a bool query (each value is a term: user text never becomes query syntax)."""
        clauses: list[dict] = []
        if self.years is not None:
            first, last = self.years
            bounds = {key: year for key, year in (("gte", first), ("lte", last)) if year is not None}
            clauses.append({"range": {"year": bounds}})
        if self.journals:
            clauses.append({"bool": {"should": [_term("journal", j) for j in self.journals],
                                     "minimum_should_match": 1}})
        clauses += [_term("mesh", heading) for heading in self.mesh]
        if self.publication_types:
            clauses.append({"bool": {"should": [_term("publication_types", t) for t in self.publication_types],
                                     "minimum_should_match": 1}})
        return clauses

    def describe(self) -> str:
        """The filters in words, for messages and the search page."""
        parts = []
        if self.years is not None:
            first, last = self.years
            parts.append(f"year {first or ''}-{last or ''}" if first != last else f"year {first}")
        if self.journals:
            parts.append("journal " + " or ".join(repr(j) for j in self.journals))
        if self.mesh:
            parts.append("MeSH " + " and ".join(repr(h) for h in self.mesh))
        if self.publication_types:
            parts.append("publication type " + " or ".join(repr(t) for t in self.publication_types))
        return ", ".join(parts) or "none"


def parse_years(text: str) -> tuple[int | None, int | None]:
    """``2015`` → (2015, 2015), ``2015-2020`` → (2015, 2020), ``2015-`` → (2015, None), ``-2020`` → (None, 2020)."""
    match = YEARS.match(text)
    if not match or not (match[1] or match[3]) or (match[2] is None and match[3] is not None):
        raise FilterError(f"a year filter is YEAR, FIRST-LAST, FIRST- or -LAST (four digits each), not {text!r}")
    first = int(match[1]) if match[1] else None
    last = int(match[3]) if match[3] else (None if match[2] else first)
    return first, last


def _term(field: str, value: str) -> dict:
    return {"term": {field: {"value": value.strip(), "case_insensitive": True}}}
