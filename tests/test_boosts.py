"""The title's and MeSH's weights in the BM25 leg, and BM25's k1/b tuned per index, on a real node: each hit's score
is the sum of its parts, an index without searchable MeSH refuses the boost, and the tuner leaves the index's
BM25 as it chose."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from running import one_line

from biorank.cli import cli
from biorank.indexer.readers import read_records
from biorank.retrieval.boosts import BoostError, Boosts
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.store.indices import bm25_parameters, set_bm25_parameters
from biorank.store.record import check_record, update_record
from biorank.types import Abstract

QUERY = "Folic acid supplementation lowers homocysteine levels"


def _bm25(opensearch, index: str, entry: str, field: str, text: str) -> float:
    """BM25 of ``text`` in one field of one entry, as the node explains it (0 where it does not match)."""
    explained = opensearch.explain(index=index, id=entry, body={"query": {"match": {field: text}}})
    return explained["explanation"]["value"] if explained["matched"] else 0.0


@pytest.mark.unit
def test_boosts_parse_name_and_refuse_in_one_line(tmp_path) -> None:
    assert Boosts.parse("title:0.5+mesh:0.2") == Boosts(title=0.5, mesh=0.2)
    assert Boosts.parse("none") == Boosts() and not Boosts() and Boosts().name == "none"
    assert Boosts.from_record(Boosts(title=0.25).to_record()) == Boosts(title=0.25)
    for bad in ("title", "abstract:1", "title:x", "title:-1"):
        with pytest.raises(BoostError):
            Boosts.parse(bad)
    with pytest.raises(BoostError, match="field set"):
        SearchSettings(fields="wordpieces", boosts=Boosts(title=1))
    # A JSON Lines record's MeSH headings and year reach the index like PubMed XML's.
    path = tmp_path / "records.jsonl"
    records = [{"id": "1", "text": "Aspirin.", "mesh": ["Aspirin", " Humans "], "year": "2001-03"},
               {"id": "2", "text": "x", "metadata": {"mesh": "Aspirin"}}]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    first, second = read_records(path, "jsonl")
    assert isinstance(first, Abstract) and first.mesh == ("Aspirin", "Humans") and first.year == 2001
    assert not isinstance(second, Abstract) and "list of MeSH headings" in second.reason


def test_a_title_boost_adds_the_titles_bm25_to_each_hits_parts(opensearch, sample_index, default_encoder) -> None:
    lam, weight = 0.05, 0.5
    searcher = Searcher.open(opensearch, sample_index, SearchSettings(lam=lam, boosts=Boosts(title=weight)),
                             encoder=default_encoder)
    hits = searcher.search(QUERY, k=10)
    plain = Searcher.open(opensearch, sample_index, SearchSettings(lam=lam, boosts=Boosts()), encoder=default_encoder)
    assert [h.score for h in plain.search(QUERY, k=10)] != [h.score for h in hits]
    for hit in hits:
        entry = hit.id if hit.block == 0 else f"{hit.id}#{hit.block}"
        parts = (_bm25(opensearch, sample_index, entry, "passage", QUERY),
                 _bm25(opensearch, sample_index, entry, "title", QUERY))
        assert hit.bm25 == pytest.approx(parts[0] + weight * parts[1], abs=1e-2)
        assert hit.score == pytest.approx(lam * hit.bm25 + hit.dense, abs=1e-3)
    # Weight 0 sends the request of a search without boosts, byte for byte.
    assert searcher.with_settings(boosts=Boosts(title=0)).sent_requests(QUERY) == plain.sent_requests(QUERY)


def test_mesh_headings_are_searchable_and_an_older_index_refuses_them(opensearch, opensearch_url, medline_index,
                                                                      sample_index) -> None:
    query = "gene expression in aged mice"
    searcher = Searcher.open(opensearch, medline_index, SearchSettings(mode="bm25", boosts=Boosts(mesh=1.0)))
    hits = searcher.search(query, k=10)
    from_mesh = [_bm25(opensearch, medline_index, h.id, "mesh.text", query) for h in hits]
    assert any(from_mesh)
    for hit, mesh in zip(hits, from_mesh, strict=True):
        assert hit.score == pytest.approx(_bm25(opensearch, medline_index, hit.id, "text", query) + mesh, abs=1e-3)
    # An index built before MeSH had its text field: refused by the constructor, in one line from the command.
    older = dataclasses.replace(check_record(opensearch, sample_index), searchable_mesh=False)
    with pytest.raises(BoostError, match="rebuild"):
        Searcher(opensearch, older, SearchSettings(boosts=Boosts(mesh=0.5)))
    assert Searcher(opensearch, older, SearchSettings(boosts=Boosts(title=0.5))).boosts == Boosts(title=0.5)
    refused = CliRunner().invoke(cli, ["--url", opensearch_url, "query", query, "--index", medline_index,
                                       "--fields", "wordpieces", "--title-boost", "1", "--no-log"])
    assert "field set" in one_line(refused)


def test_tune_lambda_tries_boosts_and_bm25_and_the_index_keeps_its_choice(opensearch, sample_index,
                                                                          tune_sample) -> None:
    before = check_record(opensearch, sample_index).raw
    own = bm25_parameters(opensearch, sample_index)
    try:
        result = tune_sample("--no-holdout", "--grid", "0.05", "--boost-grid", "none,title:0.5",
                             "--bm25-grid", "0.9:0.4,1.2:0.75")
        assert result.exit_code == 0, result.output
        rows = [line for line in result.output.splitlines() if "λ = 0.05" in line and "ndcg@10 =" in line]
        assert len(rows) == 4 and sum("← best" in line for line in rows) == 1
        best = next(line for line in rows if "← best" in line)
        record = check_record(opensearch, sample_index)
        assert Boosts.from_record(record.boosts) == (Boosts(title=0.5) if "title 0.5" in best else Boosts())
        chosen = (1.2, 0.75) if "k1 1.2 b 0.75" in best else own
        # The index's BM25 is its choice, in the similarity searches use and in the record stats shows.
        assert bm25_parameters(opensearch, sample_index) == chosen
        assert (record.settings["k1"], record.settings["b"]) == chosen
        assert Searcher.open(opensearch, sample_index).boosts == Boosts.from_record(record.boosts)
        assert Searcher.open(opensearch, sample_index, SearchSettings(fields="wordpieces")).boosts == Boosts()
    finally:
        set_bm25_parameters(opensearch, sample_index, *own)
        update_record(opensearch, sample_index, remove=("boosts", "lambda", "lambda_tuning"),
                      **{k: before[k] for k in ("lambda", "lambda_tuning", "settings") if k in before})
    assert check_record(opensearch, sample_index).raw == before
