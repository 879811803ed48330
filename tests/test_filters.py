"""Year, journal and MeSH filters: parsed strictly, sent as filter clauses, and — on real MEDLINE records — the
filtered hits of every mode are the top k of the filtered set, not a filtered top k."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.cli.options import pipeline_settings
from biorank.indexer.readers import read_records
from biorank.retrieval.filters import FilterError, Filters, parse_years
from biorank.retrieval.fusion import min_max_fusion, rrf_fusion
from biorank.retrieval.modes import MODE_TABLE, Query
from biorank.retrieval.searcher import MODES, Searcher
from biorank.store.record import update_record
from biorank.types import Abstract, Hit

QUERIES = {
    "ivf": "pregnancy rates after embryo transfer in IVF",
    "cataract": "visual acuity after cataract surgery with intraocular lens",
    "malaria": "mosquito vector control and malaria transmission",
    "protein": "crystal structure of the enzyme binding site",
}
CASES = {
    "one year": Filters(years=(2014, 2014)),
    "a journal, in another case": Filters(journals=("FERTILITY AND STERILITY",)),
    "two journals": Filters(journals=("Acta tropica", "journal of cataract and refractive surgery")),
    "years and two headings": Filters(years=(2015, None), mesh=("humans", "Female")),
}


# ------------------------------------------------------------------------------------------------ offline


@pytest.mark.parametrize(("text", "years"), [
    ("2015", (2015, 2015)), ("2015-2020", (2015, 2020)), (" 2015 - 2020 ", (2015, 2020)), ("2015-", (2015, None)),
    ("-2020", (None, 2020)),
])
def test_year_ranges_parse(text: str, years: tuple) -> None:
    assert parse_years(text) == years


@pytest.mark.parametrize("text", ["", "-", "15", "2015-20", "20152020", "2015--2020", "2015-2020-2021", "last year"])
def test_malformed_year_ranges_are_refused(text: str) -> None:
    with pytest.raises(FilterError, match="a year filter is"):
        parse_years(text)


def test_empty_ranges_and_values_are_refused() -> None:
    with pytest.raises(FilterError, match="is empty"):
        Filters.parse("2020-2015")
    with pytest.raises(FilterError, match="cannot be empty"):
        Filters.parse(journals=(" ",))


def test_filters_become_term_clauses_and_leave_unfiltered_requests_alone() -> None:
    filters = Filters.parse("2015-", ("Fertility and sterility", "Acta tropica"), ("Humans", "Female"))
    clauses = filters.clauses()
    assert clauses[0] == {"range": {"year": {"gte": 2015}}}
    journals = clauses[1]["bool"]
    assert journals["minimum_should_match"] == 1 and len(journals["should"]) == 2
    assert clauses[2:] == [{"term": {"mesh": {"value": h, "case_insensitive": True}}} for h in ("Humans", "Female")]
    assert filters.describe() == "year 2015-, journal 'Fertility and sterility' or 'Acta tropica', MeSH 'Humans' and " \
                                 "'Female'"
    assert not Filters() and Filters().clauses() == []

    query = Query("q", "q", [1.0])
    for mode in ("bm25", "dense", "dense-exact", "hybrid"):
        plain = MODE_TABLE[mode](fields="passage", lam=0.1).body(query, 10)
        assert MODE_TABLE[mode](fields="passage", lam=0.1, filters=()).body(query, 10) == plain
        body = json.dumps(MODE_TABLE[mode](fields="passage", lam=0.1, filters=tuple(clauses)).body(query, 10))
        assert body.count('"case_insensitive": true') == 4 and '"gte": 2015' in body, mode
    knn = MODE_TABLE["dense"](fields="passage", lam=0.1, filters=tuple(clauses)).body(query, 10)["query"]["knn"]
    assert knn["embedding"]["filter"] == {"bool": {"filter": clauses}}


def test_eval_keeps_its_filters_in_every_system() -> None:
    filters = Filters(years=(2014, 2014))
    shared = pipeline_settings(filters=filters)
    for system in ("bm25", "dense", "hybrid+rerank", "rrf+snippets"):
        assert shared.with_system(system).search.filters == filters


# ------------------------------------------------------------------------------------------------ on a node


@pytest.fixture(scope="module")
def medline(shared_data: Path) -> dict[str, Abstract]:
    return {r.id: r for r in read_records(shared_data / "pubmed" / "medline16n0902.xml.gz") if isinstance(r, Abstract)}


def passes(record: Abstract, filters: Filters) -> bool:
    """The filter's meaning, written out on the reader's records."""
    if filters.years is not None:
        first, last = filters.years
        if record.year is None or (first is not None and record.year < first) or (
                last is not None and record.year > last):
            return False
    if filters.journals and (record.journal or "").lower() not in {j.lower() for j in filters.journals}:
        return False
    headings = {h.lower() for h in record.mesh}
    return all(h.lower() in headings for h in filters.mesh)


def same_ranking(got: list[Hit], expected: list[Hit], k: int) -> None:
    assert [h.id for h in got] == [h.id for h in expected[:k]]
    assert [h.score for h in got] == pytest.approx([h.score for h in expected[:k]], abs=1e-4)


def test_medline_records_carry_what_the_filters_need(medline: dict[str, Abstract]) -> None:
    for name, filters in CASES.items():
        selected = sum(passes(r, filters) for r in medline.values())
        assert 5 <= selected <= 500, (name, selected)  # fewer than k in one case: all of them come back


@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("case", list(CASES))
def test_every_mode_returns_the_top_k_of_the_filtered_set(
    opensearch: OpenSearch, medline_index: str, medline: dict[str, Abstract], default_encoder, neural_search: bool,
    case: str, query: str,
) -> None:
    filters, text, k = CASES[case], QUERIES[query], 10
    searcher = Searcher.open(opensearch, medline_index, encoder=default_encoder)
    keep = {doc_id for doc_id, r in medline.items() if passes(r, filters)}

    def filtered(mode: str) -> list[Hit]:
        hits = searcher.with_settings(mode=mode, filters=filters).search(text, k=k)
        assert {h.id for h in hits} <= keep, mode
        return hits

    def post_filtered(mode: str, **settings: object) -> list[Hit]:
        everything = searcher.with_settings(mode=mode, **settings).search(text, k=1000)
        return [h for h in everything if h.id in keep]

    # Modes that score each document on its own: the filtered top k is the post-filtered full ranking's.
    for mode in ("bm25", "dense-exact", "hybrid"):
        same_ranking(filtered(mode), post_filtered(mode), k)
    same_ranking(filtered("hybrid-approx"), post_filtered("hybrid"), k)
    # kNN searches the filtered blocks (exactly, when they are few), not the graph's top k filtered.
    assert [h.id for h in filtered("dense")] == [h.id for h in post_filtered("dense-exact")[:k]]
    # Fusions fuse the two filtered lists: ranks and min-max within the filtered set.
    bm25_side, dense_side = post_filtered("bm25", fields="passage"), post_filtered("dense-exact")
    assert [h.id for h in filtered("rrf")] == [h.id for h in rrf_fusion(bm25_side, dense_side, k=k)]
    assert [h.id for h in filtered("minmax")] == [h.id for h in min_max_fusion(bm25_side, dense_side, k=k)]
    if neural_search:
        assert len(filtered("os-hybrid")) == min(k, len(keep))


def test_documents_found_through_a_later_block_survive_a_filter(
    opensearch: OpenSearch, medline_index: str, medline: dict[str, Abstract], default_encoder,
) -> None:
    # Every block carries the metadata: asked for the text of a second block, the filtered hybrid finds its
    # document through that block.
    searcher = Searcher.open(opensearch, medline_index, encoder=default_encoder)
    second = opensearch.search(index=medline_index, body={"size": 5, "query": {"term": {"block": 1}},
                                                          "_source": ["id", "passage"]})["hits"]["hits"]
    assert second, "the MEDLINE file has no document of two blocks at this encoder's block size"
    for hit in second:
        record = medline[hit["_source"]["id"]]
        filters = Filters(years=(record.year, record.year), journals=(record.journal,))
        found = searcher.with_settings(mode="hybrid", filters=filters).search(hit["_source"]["passage"], k=3)
        assert (found[0].id, found[0].block) == (record.id, 1)


@pytest.mark.engines
def test_a_filter_that_matches_nothing_returns_nothing(opensearch: OpenSearch, medline_index: str,
                                                       default_encoder) -> None:
    searcher = Searcher.open(opensearch, medline_index, encoder=default_encoder)
    for mode in MODES:
        if mode == "os-hybrid":
            continue
        nothing = searcher.with_settings(mode=mode, filters=Filters(years=(1900, 1901))).search(QUERIES["ivf"])
        assert nothing == [], mode


@pytest.mark.engines
def test_cli_filters_and_an_index_built_before_filters(opensearch: OpenSearch, opensearch_url: str,
                                                        medline_index: str, medline: dict[str, Abstract]) -> None:
    runner = CliRunner()
    base = ["--url", opensearch_url, "query", QUERIES["cataract"], "--index", medline_index, "--no-log"]
    given = ["--year", "2014-2015", "--journal", "journal of cataract and refractive surgery", "--mesh", "humans"]
    result = runner.invoke(cli, [*base, "--json", *given])
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    wanted = Filters(years=(2014, 2015), journals=("Journal of cataract and refractive surgery",), mesh=("Humans",))
    expected = sorted(doc_id for doc_id, r in medline.items() if passes(r, wanted))
    assert len(expected) == 4 and sorted(h["id"] for h in hits) == expected

    shown = runner.invoke(cli, [*base, "--mode", "bm25", "--year", "2014"], terminal_width=200)
    assert shown.exit_code == 0 and "only year 2014" in shown.output, shown.output

    # Indices built before filters have the metadata on block 0 only: filtering them is refused in one line.
    update_record(opensearch, medline_index, remove=("filterable",))
    try:
        refused = runner.invoke(cli, [*base, *given])
        assert refused.exit_code == 1, refused.output
        assert "cannot be filtered" in refused.output and "--recreate" in refused.output
        assert runner.invoke(cli, [*base, "--mode", "bm25"]).exit_code == 0  # unfiltered searches go on as before
    finally:
        update_record(opensearch, medline_index, filterable=True)
