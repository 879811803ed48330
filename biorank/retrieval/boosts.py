"""Field boosts of the BM25 leg: a document's title and its MeSH headings weighed beside the passage.

A title says what an abstract is about in a few words, and MeSH headings name its subject in the vocabulary
biomedical readers search with; both are fields of their own in every block, so the BM25 part of a query can add
``w·BM25(q, title)`` and ``w·BM25(q, MeSH)`` to the field set's own ``BM25(q, passage)``. This is the
"most fields" sum of per-field BM25 scores (BM25F proper pools term frequencies before saturating them, which
needs ``combined_fields``, a query OpenSearch does not have). Weight 0, the default, sends the field set's request
unchanged; the weights are tuned with λ (``biorank tune-lambda --boost-grid``) and kept in the index record.

MeSH is searchable only in an index built with its ``mesh.text`` sub-field (the record's ``searchable_mesh``):
an older index refuses a MeSH boost in one line rather than scoring a field it does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from biorank.errors import BiorankError

BOOST_FIELDS = {"title": "title", "mesh": "mesh.text"}
"""Each boost's field: the title as the index's BM25 analyser reads it, and the MeSH headings' text sub-field."""
BOOSTABLE = ("text", "passage", "title+abstract")
"""The field sets a boost adds to: those the index's BM25 analyser reads (the word-piece sets read word pieces)."""
MAX_BOOST = 100.0


class BoostError(BiorankError):
    """Boosts that cannot run: a weight out of range, a field set they do not add to, MeSH an index cannot search."""


@dataclass(frozen=True)
class Boosts:
    """The weights of the title and MeSH fields beside the BM25 field set; both 0 sends the field set alone.

    Example:
        >>> Boosts(title=0.5).clauses("statins")
        ({'match': {'title': {'query': 'statins', 'boost': 0.5}}},)
    """

    title: float = 0.0
    mesh: float = 0.0

    def __post_init__(self) -> None:
        for name in BOOST_FIELDS:
            weight = getattr(self, name)
            if not 0 <= weight <= MAX_BOOST:
                raise BoostError(f"the {name} boost must be a number from 0 to {MAX_BOOST:g}, not {weight}")

    def __bool__(self) -> bool:
        return bool(self.title or self.mesh)

    @property
    def name(self) -> str:
        """``none``, or the weights that are not 0 (``title 0.5, mesh 0.2``): how tables and titles name them."""
        given = [f"{name} {getattr(self, name):g}" for name in BOOST_FIELDS if getattr(self, name)]
        return ", ".join(given) or "none"

    @classmethod
    def from_record(cls, stored: Mapping[str, Any] | None) -> Boosts:
        """The boosts an index record keeps (none where it keeps none)."""
        return cls(**{name: float(stored[name]) for name in BOOST_FIELDS if name in stored}) if stored else cls()

    def to_record(self) -> dict[str, float]:
        """The weights as the index record keeps them."""
        return {name: getattr(self, name) for name in BOOST_FIELDS}

    def check(self, field_set: str, *, searchable_mesh: bool = True) -> None:
        """Refuses, in one line, a field set these boosts cannot add to or a MeSH boost on an index without
        searchable MeSH."""
        if not self:
            return
        if field_set not in BOOSTABLE:
            raise BoostError(f"title and MeSH boosts add to a field set the index's analyser reads "
                             f"({', '.join(BOOSTABLE)}), not {field_set}")
        if self.mesh and not searchable_mesh:
            raise BoostError("this index was built before MeSH headings were searchable; rebuild it (biorank index "
                             "... --index NAME) to boost them")

    def fits(self, field_set: str, *, searchable_mesh: bool) -> bool:
        """Whether they run with that field set on that index (:meth:`check` without the error)."""
        try:
            self.check(field_set, searchable_mesh=searchable_mesh)
        except BoostError:
            return False
        return True

    def clauses(self, text: str) -> tuple[dict, ...]:
        """The clauses the boosts add beside the field set's match of ``text`` (user text as ``match`` text only)."""
        return tuple({"match": {BOOST_FIELDS[name]: {"query": text, "boost": getattr(self, name)}}}
                     for name in BOOST_FIELDS if getattr(self, name))

    @classmethod
    def parse(cls, value: str) -> Boosts:
        """Boosts from ``title:W+mesh:W`` (either part; ``none`` or ``0`` for none), as the tuner's grid names them.

        Example:
            >>> Boosts.parse("title:0.5").name
            'title 0.5'
        """
        if value.strip() in ("none", "0", ""):
            return cls()
        weights: dict[str, float] = {}
        for part in value.split("+"):
            name, sep, weight = part.partition(":")
            if not sep or name.strip() not in BOOST_FIELDS:
                raise BoostError(f"a boost is title:W or mesh:W (joined by +), not {part!r}")
            try:
                weights[name.strip()] = float(weight)
            except ValueError:
                raise BoostError(f"a boost's weight is a number, not {weight!r}") from None
        return cls(**weights)
