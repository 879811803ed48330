"""Similar articles, near-duplicates, MMR, sorting by date and pages: on the real node, through the library, the
CLI and the service."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch
from opensearchpy.exceptions import TransportError
from running import serving
from test_service import call

from biorank.cli import cli
from biorank.pipeline import Pipeline, PipelineError, PipelineSettings
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.retrieval.similar import SimilarError, like_text, similar_articles
from biorank.service.app import SearchService, ServiceSettings
from biorank.stages.diversity import CANDIDATES, ReorderError, similarities
from biorank.store.inspection import NotFound, block_vectors, inspect_document

QUERY = "surgery outcomes in patients"


@pytest.fixture(scope="module")
def medline_service(opensearch: OpenSearch, medline_index: str, default_encoder) -> Iterator[str]:
    service = SearchService(opensearch, ServiceSettings(index=medline_index, query_log=False),
                            query_log_index=os.environ["BIORANK_QUERY_LOG_INDEX"],
                            searcher=Searcher.open(opensearch, medline_index, encoder=default_encoder))
    with serving(service) as url:
        yield url


def _first_id(opensearch: OpenSearch, index: str) -> str:
    found = opensearch.search(index=index, body={"size": 1, "query": {"term": {"block": 0}}, "sort": ["id"]})
    return found["hits"]["hits"][0]["_source"]["id"]


def test_similar_articles_leave_the_document_out_and_score_as_the_mode_does(opensearch, sample_index) -> None:
    doc_id = _first_id(opensearch, sample_index)
    (fields, vector) = block_vectors(opensearch, sample_index, [doc_id], ["title"])[doc_id]
    stored = inspect_document(opensearch, sample_index, doc_id)
    # The vector read back is the stored one: its dimension and norm are what inspection reports of block 0.
    assert vector is not None and len(vector) == stored.blocks[0]["vector"]["dimension"]
    assert sum(x * x for x in vector) ** 0.5 == pytest.approx(stored.blocks[0]["vector"]["norm"], abs=1e-5)

    hybrid = Searcher.open(opensearch, sample_index)
    found = similar_articles(hybrid, doc_id, 10)
    assert found.title == fields["title"] and found.mode == "hybrid" and found.lam == hybrid.lam
    assert len(found.hits) == 10 and doc_id not in {h.id for h in found.hits}
    assert [h.rank for h in found.hits] == list(range(1, 11))
    assert all(h.bm25 is not None and h.dense is not None for h in found.hits)
    assert [h.score for h in found.hits] == sorted((h.score for h in found.hits), reverse=True)

    # dense: the best block's cosine with the document's vector, so at least block 0's, and the exact value for
    # a document of one block.
    dense = similar_articles(hybrid.with_settings(mode="dense"), doc_id, 10)
    others = block_vectors(opensearch, sample_index, [h.id for h in dense.hits])
    # Read many at once, each vector is its own document's (not one array shared by every hit).
    for hit in dense.hits[:3]:
        assert others[hit.id][1] == block_vectors(opensearch, sample_index, [hit.id])[hit.id][1]
    assert len({tuple(v) for _, v in others.values()}) == len(others)
    for hit in dense.hits:
        cosine = sum(a * b for a, b in zip(vector, others[hit.id][1], strict=True))
        assert hit.dense >= cosine - 1e-4
        if len(inspect_document(opensearch, sample_index, hit.id).blocks) == 1:
            assert hit.dense == pytest.approx(cosine, abs=1e-4)
    assert doc_id not in {h.id for h in dense.hits} and dense.lam is None

    bm25 = similar_articles(hybrid.with_settings(mode="bm25"), doc_id, 5)
    assert bm25.hits and all(h.dense is None and h.bm25 > 0 for h in bm25.hits)
    assert doc_id not in {h.id for h in bm25.hits}

    with pytest.raises(NotFound, match="no document 'no-such-id'"):
        similar_articles(hybrid, "no-such-id")
    with pytest.raises(SimilarError, match="rrf"):
        similar_articles(hybrid.with_settings(mode="rrf"), doc_id)


def test_a_long_abstract_stays_under_the_clause_limit(opensearch, sample_index, index_name, default_encoder,
                                                      tmp_path: Path) -> None:
    from biorank.indexer.indexer import Indexer, IndexOptions

    texts = opensearch.search(index=sample_index, body={"size": 60, "query": {"term": {"block": 0}},
                                                        "_source": ["id", "title", "abstract"]})["hits"]["hits"]
    records = [{"_id": h["_source"]["id"], "title": h["_source"]["title"], "text": h["_source"]["abstract"]}
               for h in texts[:12]]
    # One document of about 4,000 words: many abstracts in one, far more distinct terms than a query may have.
    long = " ".join(h["_source"]["abstract"] for h in texts)
    records.append({"_id": "long", "title": "Many abstracts in one", "text": long})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    Indexer(opensearch, IndexOptions(index=index_name, sentences=False, rejects=tmp_path / "rejects.tsv"),
            encoder=default_encoder).run([corpus])
    assert len(long.split()) > 3000

    # The whole text as a plain match is refused: this is what the bound avoids.
    with pytest.raises(TransportError, match=r"maxClauseCount|too_many_clauses|TooManyClauses"):
        opensearch.search(index=index_name, body={"query": {"match": {"passage": long}}})
    found = similar_articles(Searcher.open(opensearch, index_name), "long", 5)
    assert len(found.hits) == 5 and "long" not in {h.id for h in found.hits}
    assert like_text("passage", long)["more_like_this"]["max_query_terms"] == 25


def test_the_cli_finds_similar_articles_and_refuses_an_unknown_id(opensearch_url, sample_index, opensearch) -> None:
    doc_id = _first_id(opensearch, sample_index)
    result = CliRunner().invoke(cli, ["--url", opensearch_url, "similar", doc_id, "--index", sample_index, "-k", "4",
                                      "--json"])
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(hits) == 4 and doc_id not in {h["id"] for h in hits}
    missing = CliRunner().invoke(cli, ["--url", opensearch_url, "similar", "no-such-id", "--index", sample_index])
    assert missing.exit_code != 0 and missing.output.strip().splitlines() == [
        f"Error: no document 'no-such-id' in '{sample_index}'"]


def test_dedupe_mmr_and_date_reorder_the_candidates(opensearch, medline_index, default_encoder) -> None:
    searcher = Searcher.open(opensearch, medline_index, SearchSettings(), encoder=default_encoder)
    plain = Pipeline.build("hybrid", searcher).search(QUERY, CANDIDATES)
    ids = [h.id for h in plain.hits]
    stored = block_vectors(opensearch, medline_index, ids, ["year"])
    vectors = {i: v for i, (_, v) in stored.items()}

    # A low threshold makes many duplicates: none is kept beside a better one, and each dropped hit has one.
    loose = 0.8
    deduped = Pipeline.build(PipelineSettings(dedupe=loose), searcher).search(QUERY, CANDIDATES)
    kept = [h.id for h in deduped.hits]
    assert 0 < len(kept) < len(ids) and kept == [i for i in ids if i in set(kept)]
    cos = similarities(plain.hits, vectors)
    position = {i: n for n, i in enumerate(ids)}
    for a in kept:
        assert all(cos[position[a], position[b]] < loose for b in kept if b != a)
    for dropped in set(ids) - set(kept):
        better = [position[b] for b in kept if position[b] < position[dropped]]
        assert max(cos[position[dropped], better]) >= loose
    assert [h.rank for h in deduped.hits] == list(range(1, len(kept) + 1))

    # MMR: λ = 1 is the relevance order; a lower λ keeps the best hit first and brings variety up.
    same = Pipeline.build(PipelineSettings(mmr=1.0), searcher).search(QUERY, 10)
    assert [h.id for h in same.hits] == ids[:10]
    varied = Pipeline.build(PipelineSettings(mmr=0.3), searcher).search(QUERY, 10)
    assert varied.hits[0].id == ids[0] and [h.id for h in varied.hits] != ids[:10]
    assert set(h.id for h in varied.hits) <= set(ids)

    def mean_cosine(chosen: list[str]) -> float:
        at = [position[i] for i in chosen]
        sub = cos[at][:, at]
        return float((sub.sum() - sub.trace()) / (len(at) * (len(at) - 1)))

    assert mean_cosine([h.id for h in varied.hits]) < mean_cosine(ids[:10])

    # Date: newest year first among the same candidates, equal years in their order by score.
    dated = Pipeline.build(PipelineSettings(sort="date"), searcher).search(QUERY, CANDIDATES)
    assert sorted(h.id for h in dated.hits) == sorted(ids)
    years = [stored[h.id][0]["year"] for h in dated.hits]
    assert years == sorted(years, reverse=True) and len(set(years)) > 1
    for a, b in zip(dated.hits, dated.hits[1:], strict=False):
        if stored[a.id][0]["year"] == stored[b.id][0]["year"]:
            assert a.score >= b.score

    with pytest.raises(ReorderError, match="threshold"):
        PipelineSettings(dedupe=1.5)
    with pytest.raises(ReorderError, match="unknown sort"):
        PipelineSettings(sort="title")
    with pytest.raises(PipelineError, match="choose one"):
        PipelineSettings(snippets="tuned", rescore=True, sort="date")


def test_the_cli_sorts_and_pages(opensearch_url, medline_index) -> None:
    def run(*extra: str) -> list[dict]:
        result = CliRunner().invoke(cli, ["--url", opensearch_url, "query", QUERY, "--index", medline_index,
                                          "--mode", "bm25", "--json", "--no-log", *extra])
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines()]  # notes go to stderr

    first, second = run("-k", "10", "--sort", "date"), run("-k", "5", "--page", "2", "--sort", "date")
    assert [h["id"] for h in second] == [h["id"] for h in first[5:10]]
    assert [h["rank"] for h in second] == list(range(6, 11))
    too_deep = CliRunner().invoke(cli, ["--url", opensearch_url, "query", QUERY, "--index", medline_index,
                                        "-k", "60", "--page", "2", "--no-log"])
    assert too_deep.exit_code != 0 and "page times k may be 100 at most" in too_deep.output
    assert len(too_deep.output.strip().splitlines()) == 1


def test_the_api_and_page_find_similar_articles_and_reorder(medline_service, opensearch, medline_index) -> None:
    url = medline_service
    doc_id = _first_id(opensearch, medline_index)
    status, similar = call(f"{url}/api/documents/{doc_id}/similar?k=5")
    assert status == 200, similar
    assert len(similar["hits"]) == 5 and doc_id not in {h["id"] for h in similar["hits"]}
    assert similar["mode"] == "dense" and all("year" in h and "url" in h for h in similar["hits"])
    assert similar["lambda"] is None
    status, hybrid = call(f"{url}/api/documents/{doc_id}/similar?k=3&mode=hybrid")
    assert status == 200 and hybrid["mode"] == "hybrid" and hybrid["lambda"] is not None
    assert call(f"{url}/api/documents/99999999999/similar") == (
        404, {"error": f"no document '99999999999' in '{medline_index}'"})
    assert call(f"{url}/api/documents/{doc_id}/similar?mode=rrf")[0] == 422

    status, dated = call(f"{url}/api/search", {"q": QUERY, "k": 10, "sort": "date", "dedupe": True, "mmr": 0.7})
    assert status == 200, dated
    years = [h["year"] for h in dated["hits"]]
    assert years == sorted(years, reverse=True)
    assert any("dedupe" in note and "mmr 0.7" in note for note in dated["notes"])
    _, second = call(f"{url}/api/search", {"q": QUERY, "k": 5, "page": 2, "sort": "date", "dedupe": True,
                                           "mmr": 0.7})
    assert [h["id"] for h in second["hits"]] == [h["id"] for h in dated["hits"][5:10]]
    assert call(f"{url}/api/search", {"q": QUERY, "dedupe": 1.5})[0] == 422
    assert call(f"{url}/api/search", {"q": QUERY, "sort": "title"})[0] == 422

    status, page = call(f"{url}/?q=surgery&sort=date&dedupe=1&mmr=0.5")
    assert status == 200 and 'href="/?similar=' in page and '<option value="date" selected>' in page
    assert "sort=date&amp;dedupe=1&amp;mmr=0.5" in page  # the next page keeps the order
    status, page = call(f"{url}/?similar={doc_id}")
    assert status == 200 and "similar articles (dense)" in page and page.count('class="hit"') == 10
    assert f"the articles most like {doc_id}" in page
    status, page = call(f"{url}/?similar=99999999999")
    assert status == 404 and f"no document &#x27;99999999999&#x27; in &#x27;{medline_index}&#x27;" in page
