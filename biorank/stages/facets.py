"""Facets: how many of a query's candidate documents carry each year, journal, MeSH heading and publication type
— PubMed's sidebar counts, each value a filter a person can apply next (:class:`~biorank.retrieval.filters.Filters`).

What is counted is the first stage's candidate set, not the index: the exact hybrid scores every block, so "the
documents that match" would be all of them, and their counts the index's. The candidates are the first stage's
top :data:`FACET_CANDIDATES` documents, ranked by the same mode, λ and filters as the hits: twice the deepest
page the search service shows (``MAX_DEPTH``, 100), so the counts describe more than a person could page through.
A filtered search counts its filtered candidates.

They are counted inside OpenSearch by the request that ranks them (:meth:`~biorank.retrieval.searcher.Searcher.
search_counted`): a ``diversified_sampler`` keeps the top :data:`FACET_CANDIDATES` entries by the query's own score,
at most one per document (its best block, the one collapsing keeps: the same documents as the first stage's top
200), and under it ``terms`` of the top :data:`TOP_VALUES` values per facet and a year histogram. Every block carries
its document's metadata (``biorank/store/mappings/documents.py``), so each document counts once, through whichever
block scored best. Fetching 200 hits and asking a second request to count their first blocks cost several times
more (``benchmarks/records/facets_cost.json``). Where no single request ranks a query's documents (``rrf``,
``minmax``, ``os-hybrid``) or the index has several shards (the sampler keeps the top of each), the first stage
ranks its top 200 and one aggregation request counts their first blocks (``block: 0``) instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from biorank.config import RESULT_WINDOW
from biorank.errors import BiorankError
from biorank.store.failures import reason
from biorank.store.msearch import msearch
from biorank.types import Answer, Facets

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from biorank.retrieval.searcher import Searcher

FACETS = {"year": "year", "journal": "journal", "mesh": "mesh", "pt": "publication_types"}
"""Each facet's name and the field it counts (``pt``: PubMed's tag for publication types)."""
FACET_CANDIDATES = 200
"""How many of the first stage's top documents the facets count (see the module's docstring)."""
TOP_VALUES = 10
"""Values per facet, the most frequent first (years: every year among the candidates)."""


class FacetError(BiorankError):
    """Facets that cannot be counted as asked (an unknown name, a candidate count out of range)."""


def parse_facets(text: str | Sequence[str]) -> tuple[str, ...]:
    """Facet names from a comma-separated list (``year,journal,mesh,pt``) or a sequence, in :data:`FACETS`' order.

    Args:
        text: the names a person typed; ``all`` names every facet.

    Returns:
        The names, each once.

    Raises:
        FacetError: a name that is not a facet (one line naming the facets).

    Example:
        >>> parse_facets("pt, year")
        ('year', 'pt')
    """
    names = [n.strip().lower() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if names == ["all"]:
        return tuple(FACETS)
    unknown = [n for n in names if n not in FACETS]
    if unknown or not names:
        raise FacetError(f"unknown facet {unknown[0]!r}; choose from {', '.join(FACETS)} (comma-separated) or all"
                         if unknown else f"name at least one facet: {', '.join(FACETS)}")
    return tuple(n for n in FACETS if n in names)


def check_candidates(candidates: int) -> None:
    """Raise :class:`FacetError` where ``candidates`` is not a count one search can rank."""
    if not 1 <= candidates <= RESULT_WINDOW:
        raise FacetError(f"facets count 1 to {RESULT_WINDOW:,} candidate documents, not {candidates}")


def facet_aggregations(names: Sequence[str], top: int = TOP_VALUES) -> dict:
    """The aggregations that count ``names`` over the entries a search selects: ``terms`` of the ``top`` values,
    years as a histogram.

    Example:
        >>> facet_aggregations(["year", "pt"])["pt"]
        {'terms': {'field': 'publication_types', 'size': 10}}
    """
    return {name: {"histogram": {"field": FACETS[name], "interval": 1, "min_doc_count": 1}} if name == "year"
            else {"terms": {"field": FACETS[name], "size": top}} for name in names}


def facets_request(doc_ids: Sequence[str], names: Sequence[str], top: int = TOP_VALUES) -> dict:
    """The aggregation request that counts ``names`` over the first blocks of ``doc_ids`` (the route of the modes
    that rank in the client).

    Args:
        doc_ids: the candidate documents.
        names: facet names (:data:`FACETS`).
        top: values per ``terms`` facet.

    Returns:
        A search body that returns no hits, only counts (each document once, through its block 0).

    Example:
        >>> facets_request(["1", "2"], ["year"])["query"]["bool"]["filter"][1]
        {'term': {'block': 0}}
    """
    return {"size": 0, "track_total_hits": True,
            "query": {"bool": {"filter": [{"terms": {"id": list(doc_ids)}}, {"term": {"block": 0}}]}},
            "aggs": facet_aggregations(names, top)}


def read_facets(aggregations: dict, names: Sequence[str], candidates: int) -> Facets:
    """The :class:`~biorank.types.Facets` of ``candidates`` documents from the answer's ``aggregations``."""
    counts: dict[str, tuple[tuple[str | int, int], ...]] = {}
    for name in names:
        buckets = aggregations.get(name, {}).get("buckets", [])
        counts[name] = tuple((int(b["key"]) if name == "year" else b["key"], int(b["doc_count"])) for b in buckets)
    return Facets(candidates=candidates, counts=counts)


class FacetCounter:
    """Counts facets over each query's top :attr:`candidates` documents, for the first stage
    (:class:`~biorank.pipeline.FirstStage`): in the request that ranks them where the mode has one
    (:meth:`in_request`, :meth:`aggregations`, :meth:`read`), else with one request of its own (:meth:`count`).

    Example:
        >>> counter = FacetCounter(client, "pubmed", ("year", "journal"))  # doctest: +SKIP
        >>> hits, counted = searcher.search_counted({"q": "statins"}, 10, counter.aggregations())  # doctest: +SKIP
        >>> counter.read(counted["q"]).counts["year"]  # doctest: +SKIP
    """

    SAMPLE = "candidates"
    """The sampler's name among a request's aggregations."""

    def __init__(self, client: OpenSearch, index: str, names: Sequence[str], *,
                 candidates: int = FACET_CANDIDATES) -> None:
        """A counter of facets ``names`` over each query's top ``candidates`` documents in ``index``.

        Args:
            client: the cluster's client.
            index: the documents index.
            names: facet names (:func:`parse_facets` checks them).
            candidates: how many top documents are counted.
        """
        check_candidates(candidates)
        self.client = client
        self.index = index
        self.names = parse_facets(names)
        self.candidates = candidates
        self._shards: int | None = None

    def in_request(self, searcher: Searcher) -> bool:
        """Whether ``searcher``'s queries are counted by the request that ranks them: one request scores each
        query's documents (not ``rrf``, ``minmax``, ``os-hybrid``) on one shard (asked once)."""
        from biorank.retrieval.modes import MODE_TABLE, Fusion, OsHybrid

        if issubclass(MODE_TABLE[searcher.route], (Fusion, OsHybrid)):
            return False
        if self._shards is None:
            settings = self.client.indices.get_settings(index=self.index, name="index.number_of_shards")
            self._shards = max(int(s["settings"]["index"]["number_of_shards"]) for s in settings.values())
        return self._shards == 1

    def aggregations(self) -> dict:
        """The aggregations to add to a query's ranking request: the top :attr:`candidates` entries by the query's
        score, one per document, and the facets over them."""
        return {self.SAMPLE: {"diversified_sampler": {"shard_size": self.candidates, "field": "id",
                                                      "max_docs_per_value": 1},
                              "aggs": facet_aggregations(self.names)}}

    def read(self, aggregations: dict) -> Facets:
        """The facets of one answer to a request that carried :meth:`aggregations`."""
        sample = aggregations[self.SAMPLE]
        return read_facets(sample, self.names, int(sample["doc_count"]))

    def count(self, answers: Sequence[Answer], depth: int) -> None:
        """The other route: each answer's hits (its top :attr:`candidates`, which the first stage ranked) counted
        by one aggregation request each, all in one ``_msearch``; then its hits are cut to ``depth``."""
        asked = [a for a in answers if a.hits]
        lines: list[dict] = []
        for answer in asked:
            lines += [{"index": self.index, "allow_partial_search_results": False},
                      facets_request([h.id for h in answer.hits[: self.candidates]], self.names)]
        responses = msearch(self.client, lines, refused=lambda _, error: FacetError(
            f"OpenSearch refused to count facets: {reason(error)}"))
        for answer, response in zip(asked, responses, strict=True):
            answer.facets = read_facets(response.get("aggregations", {}), self.names,
                                        int(response["hits"]["total"]["value"]))
        for answer in answers:
            if answer.facets is None:
                answer.facets = Facets(candidates=0, counts={name: () for name in self.names})
            answer.hits = answer.hits[:depth]
