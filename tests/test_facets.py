"""Facets: counts of years, journals, MeSH headings and publication types over the first stage's top documents,
checked against a count made here from the same documents' stored fields, and each value a filter that narrows."""

from __future__ import annotations

import html
import json
import re
import urllib.request
from collections import Counter

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch
from running import serving

from biorank.cli import cli
from biorank.pipeline import Pipeline, PipelineSettings
from biorank.retrieval.filters import FilterError, Filters
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.service.app import SearchService, ServiceSettings
from biorank.stages.facets import FACET_CANDIDATES, FACETS, TOP_VALUES, FacetError, parse_facets
from biorank.store.inspection import first_blocks
from biorank.types import Answer

QUERY = "visual acuity after cataract surgery"


def _counted(opensearch: OpenSearch, index: str, ids: list[str]) -> dict[str, Counter]:
    """Each facet's values over ``ids``, counted here from their stored fields (one per document)."""
    stored = first_blocks(opensearch, index, ids, list(FACETS.values()))
    counts: dict[str, Counter] = {name: Counter() for name in FACETS}
    for doc in stored.values():
        for name, field in FACETS.items():
            value = doc.get(field)
            for v in value if isinstance(value, list) else [] if value is None else [value]:
                counts[name][v] += 1
    return counts


def test_facet_names_and_publication_type_filters_are_one_line_errors() -> None:
    assert parse_facets("pt, year") == ("year", "pt") and parse_facets("all") == tuple(FACETS)
    with pytest.raises(FacetError, match="unknown facet 'authors'; choose from year, journal, mesh, pt"):
        parse_facets("year,authors")
    with pytest.raises(FacetError, match="1 to 10,000 candidate documents, not 0"):
        PipelineSettings(facets=("year",), facet_candidates=0)
    with pytest.raises(FilterError, match="publication type filter cannot be empty"):
        Filters(publication_types=(" ",))
    either = Filters.parse(publication_types=("Review", "Meta-Analysis"))
    assert either.describe() == "publication type 'Review' or 'Meta-Analysis'"
    assert either.clauses()[0]["bool"]["minimum_should_match"] == 1


def test_facets_count_the_first_stages_top_documents_as_their_stored_fields_do(opensearch, medline_index,
                                                                                default_encoder) -> None:
    searcher = Searcher.open(opensearch, medline_index, encoder=default_encoder)
    pipeline = Pipeline.build("hybrid", searcher, facets=tuple(FACETS))
    answer = pipeline.search(QUERY, 10)
    assert len(answer.hits) == 10 and answer.facets is not None
    # The candidates, found independently: the same first stage asked for its top 200 documents.
    ids = [h.id for h in pipeline.searcher.search(QUERY, FACET_CANDIDATES)]
    assert [h.id for h in answer.hits] == ids[:10] and answer.facets.candidates == len(ids) == FACET_CANDIDATES
    counted = _counted(opensearch, medline_index, ids)
    assert counted["journal"] and counted["mesh"] and counted["year"] and counted["pt"], "the facets count nothing"
    assert dict(answer.facets.counts["year"]) == counted["year"]
    assert [y for y, _ in answer.facets.counts["year"]] == sorted(counted["year"])
    for name in ("journal", "mesh", "pt"):
        shown = answer.facets.counts[name]
        assert len(shown) == min(TOP_VALUES, len(counted[name])), name
        assert all(count == counted[name][value] for value, count in shown), name
        # The most frequent values: none left out is counted more often than the least of those shown.
        left_out = [c for v, c in counted[name].items() if v not in dict(shown)]
        assert not left_out or max(left_out) <= shown[-1][1], name
        assert [c for _, c in shown] == sorted((c for _, c in shown), reverse=True), name
    # The route of the modes that rank in the client (rrf, minmax): the same top 200, counted by a request of its own.
    other = Answer("q", QUERY, hits=pipeline.searcher.search(QUERY, FACET_CANDIDATES))
    pipeline.first.facets.count([other], 10)
    assert other.facets == answer.facets and len(other.hits) == 10


def test_a_facet_value_applied_as_a_filter_narrows_to_it(opensearch, medline_index, default_encoder) -> None:
    searcher = Searcher.open(opensearch, medline_index, encoder=default_encoder)
    wide = Pipeline.build("hybrid", searcher, facets=("journal", "pt")).search(QUERY, 10)
    journal, count = wide.facets.counts["journal"][0]
    narrow_search = SearchSettings(filters=Filters(journals=(journal,)))
    narrow_settings = PipelineSettings(search=narrow_search, facets=("journal", "pt"))
    narrow = Pipeline.build(narrow_settings, searcher).search(QUERY, 10)
    # Every candidate now is of that journal: at least the documents of it the wide top 200 held.
    assert narrow.facets.counts["journal"] == ((journal, narrow.facets.candidates),)
    assert count <= narrow.facets.candidates < wide.facets.candidates
    stored = first_blocks(opensearch, medline_index, [h.id for h in narrow.hits], ["journal"])
    assert {doc["journal"] for doc in stored.values()} == {journal}
    kind, kind_count = next((v, c) for v, c in wide.facets.counts["pt"] if c < wide.facets.candidates)
    typed_search = SearchSettings(filters=Filters(publication_types=(kind.upper(),)))
    typed = Pipeline.build(PipelineSettings(search=typed_search, facets=("pt",)), searcher).search(QUERY, 10)
    assert kind_count <= typed.facets.candidates == dict(typed.facets.counts["pt"])[kind]
    stored = first_blocks(opensearch, medline_index, [h.id for h in typed.hits], ["publication_types"])
    assert stored and all(kind in doc["publication_types"] for doc in stored.values())


def test_the_cli_prints_facets_and_refuses_an_unknown_one(opensearch_url, medline_index) -> None:
    base = ["--url", opensearch_url, "query", QUERY, "--index", medline_index, "--mode", "bm25", "--no-log"]
    shown = CliRunner().invoke(cli, [*base, "--facets", "year,pt", "--json", "-k", "3"])
    assert shown.exit_code == 0, shown.output
    lines = [json.loads(line) for line in shown.output.splitlines() if line.startswith("{")]
    assert len(lines) == 4 and set(lines[-1]["facets"]) == {"candidates", "year", "pt"}
    # BM25 ranks only the documents with a query term: here fewer than 200, every one of them counted.
    assert 0 < lines[-1]["facets"]["candidates"] <= FACET_CANDIDATES and lines[-1]["facets"]["year"][0]["count"] > 0
    refused = CliRunner().invoke(cli, [*base, "--facets", "colour"])
    assert refused.exit_code != 0 and "unknown facet 'colour'" in refused.output
    assert "Traceback" not in refused.output and len(refused.output.strip().splitlines()) == 1


def test_the_page_shows_facets_whose_links_narrow_the_results(opensearch, medline_index, default_encoder) -> None:
    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index="unused", searcher=Searcher.open(opensearch, medline_index,
                                                                        encoder=default_encoder))
    with serving(service) as url:
        with urllib.request.urlopen(f"{url}/?q=" + urllib.request.quote(QUERY), timeout=120) as response:
            page = response.read().decode()
        facets = re.search(r'<aside class="facets".*?</aside>', page, re.S)
        assert facets and "Publication type" in facets[0] and "<script" not in page
        # The first journal's link, followed as a person would click it.
        journal_line = re.search(r"<strong>Journal</strong>(.*?)</p>", facets[0], re.S)[1]
        link, journal = re.search(r'<a href="([^"]+)">([^<]+)</a>', journal_line).groups()
        journal = html.unescape(journal)
        with urllib.request.urlopen(url + html.unescape(link), timeout=120) as response:
            narrowed = response.read().decode()
        assert f"only journal {html.escape(repr(journal))}" in narrowed
        metas = re.findall(r'<li class="hit">.*?<p class="meta">(.*?)</p>', narrowed, re.S)
        assert metas and all(m.startswith(html.escape(journal)) for m in metas)
        status, answer = _post(f"{url}/api/search", {"q": QUERY, "k": 5, "facets": False})
        assert status == 200 and "facets" not in answer and "facets" not in answer["ms"]


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.status, json.loads(response.read())
