"""Pseudo-relevance feedback (RM3 on the BM25 leg, Rocchio on the vector) on a real node over the 300 bundled
SciFact abstracts: what it sends, and that each hit's score is still the sum of its parts."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from running import one_line

from biorank.cli import cli
from biorank.pipeline import Pipeline, PipelineError, PipelineSettings
from biorank.retrieval.clauses import KNN_SCORE
from biorank.retrieval.feedback import Feedback, FeedbackError, expansion, relevance_model, rocchio
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.store.record import check_record, store_feedback, update_record

QUERY = "Folic acid supplementation lowers homocysteine levels"
HOSTILE = 'homocysteine"); return 1e9; // \'} {"script": "Math.random()"} params.lam = 1000;'


def _searcher(opensearch, index, encoder, feedback: str, **settings) -> Searcher:
    return Searcher.open(opensearch, index, SearchSettings(feedback=Feedback.named(feedback), **settings),
                         encoder=encoder)


def _vectors(opensearch, index: str, entry_ids: list[str]) -> dict[str, np.ndarray]:
    """Each entry's stored vector, one search each (the plugin refills one array for every hit of a search)."""
    found = {}
    for entry in entry_ids:
        body = {"query": {"ids": {"values": [entry]}}, "_source": False,
                "script_fields": {"v": {"script": {"source": "doc['embedding'].value"}}}}
        hit = opensearch.search(index=index, body=body)["hits"]["hits"][0]
        found[entry] = np.array(hit["fields"]["v"], dtype=np.float64).ravel()
    return found


@pytest.mark.unit
def test_the_relevance_model_keeps_anserinis_terms_and_weights() -> None:
    entries = 100
    first = {"folat": {"term_freq": 3, "doc_freq": 4}, "the1": {"term_freq": 9, "doc_freq": 50},
             "b12": {"term_freq": 1, "doc_freq": 2}, "x": {"term_freq": 5, "doc_freq": 1},
             "2-oxo-glutar": {"term_freq": 5, "doc_freq": 1}}
    second = {"folat": {"term_freq": 1, "doc_freq": 4}, "homocystein": {"term_freq": 1, "doc_freq": 3}}
    model = relevance_model([(3.0, first, entries), (1.0, second, entries)], terms=10)
    # Too common (50 of 100 entries), one character, and not letters and digits: out.
    assert set(model) == {"folat", "b12", "homocystein"}
    assert model["folat"] == pytest.approx((3 * 3 / 4 + 1 * 1 / 2) / 4)
    assert sum(model.values()) == pytest.approx(1.0)
    assert list(relevance_model([(3.0, first, entries)], terms=1)) == ["folat"]
    own = {"folat": {"term_freq": 1}, "acid": {"term_freq": 1}}
    assert expansion(model, own, "passage", 1.0) == ()
    boosts = {c["term"]["passage"]["value"]: c["term"]["passage"]["boost"]
              for c in expansion(model, own, "passage", 0.5)}
    assert boosts["folat"] == pytest.approx(0.5 * 2 * model["folat"])
    q = rocchio([1.0, 0.0, 0.0], [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], 0.4, 0.6)
    assert np.linalg.norm(q) == pytest.approx(1.0) and q[1] == pytest.approx(q[2])


@pytest.mark.unit
def test_feedback_refuses_what_it_cannot_feed_back_into() -> None:
    for mode in ("rrf", "minmax", "os-hybrid"):
        with pytest.raises(FeedbackError, match="feedback runs with"):
            SearchSettings(mode=mode, feedback=Feedback(rm3=True))
    with pytest.raises(FeedbackError, match="BM25 leg"):
        SearchSettings(mode="dense", feedback=Feedback(rm3=True))
    with pytest.raises(FeedbackError, match="query vector"):
        SearchSettings(mode="bm25", feedback=Feedback(rocchio=True))
    with pytest.raises(FeedbackError, match="one field"):
        SearchSettings(mode="hybrid", fields="title+abstract", feedback=Feedback(rm3=True))
    with pytest.raises(FeedbackError, match="from 0 to 1"):
        Feedback(rm3=True, original_weight=1.5)
    assert PipelineSettings.parse("hybrid+rm3+rocchio+rerank").name == "hybrid+rm3+rocchio+rerank"
    assert PipelineSettings.parse("hybrid+rerank").search.feedback is None  # the index's, else none
    with pytest.raises(PipelineError, match="unknown system"):
        PipelineSettings.parse("hybrid+rm4")


def test_feedback_sends_index_terms_never_user_text(opensearch, sample_index, default_encoder) -> None:
    searcher = _searcher(opensearch, sample_index, default_encoder, "rm3+rocchio")
    sent = searcher.sent_requests(HOSTILE, k=5)
    methods = [m.split("?")[0] for m, _ in sent]
    assert methods == [f"GET {sample_index}/_search", f"GET {sample_index}/_mtermvectors",
                       f"GET {sample_index}/_search"]
    # The user's text reaches the term vectors only as an artificial document's field value.
    assert sent[1][1]["docs"][-1]["doc"] == {"passage": HOSTILE}
    final = sent[-1][1]["query"]
    (exact,) = final["bool"]["must"]
    script = exact["script_score"]["script"]
    assert script["source"] == KNN_SCORE and set(script["params"]) == {"field", "query_value", "space_type"}
    leg = final["bool"]["should"][-1]["bool"]["should"][0]["bool"]["should"]
    original, *terms = leg
    assert original == {"bool": {"should": [{"match": {"passage": HOSTILE}}], "boost": 0.5}}
    assert terms and all(set(t) == {"term"} and " " not in t["term"]["passage"]["value"] for t in terms)
    assert HOSTILE not in json.dumps(terms) and HOSTILE not in json.dumps(script)
    hits = searcher.search(HOSTILE, k=5)
    assert hits and max(h.score for h in hits) < 10


def test_each_hit_is_the_sum_of_its_fed_back_parts(opensearch, sample_index, default_encoder) -> None:
    lam = 0.05
    searcher = _searcher(opensearch, sample_index, default_encoder, "rm3+rocchio", lam=lam)
    first, _, final = searcher.sent_requests(QUERY, k=10)
    hits = searcher.search(QUERY, k=10)
    # q' recomputed here: 0.4·q + 0.6·mean of the first pass's top 5 blocks, renormalised.
    plain = Searcher.open(opensearch, sample_index, SearchSettings(lam=lam), encoder=default_encoder)
    top = plain.search(QUERY, k=5)
    ids = [h.id if h.block == 0 else f"{h.id}#{h.block}" for h in top]
    stored = _vectors(opensearch, sample_index, ids)
    q = default_encoder.encode([QUERY])[0].astype(np.float64)
    moved = 0.4 * q + 0.6 * np.mean([stored[i] for i in ids], axis=0)
    moved /= np.linalg.norm(moved)
    bm25_leg = final[1]["query"]["bool"]["should"][-1]["bool"]["should"][0]
    entries = [h.id if h.block == 0 else f"{h.id}#{h.block}" for h in hits]
    vectors = _vectors(opensearch, sample_index, entries)
    for hit, entry in zip(hits, entries, strict=True):
        explained = opensearch.explain(index=sample_index, id=entry, body={"query": bm25_leg})
        bm25 = explained["explanation"]["value"] if explained["matched"] else 0.0
        dense = float(moved @ vectors[entry])
        assert hit.dense == pytest.approx(dense, abs=1e-3)
        assert hit.bm25 == pytest.approx(bm25, abs=1e-2)
        assert hit.score == pytest.approx(lam * bm25 + dense, abs=1e-3)
    assert first[1]["size"] == 10


def test_rm3_at_weight_one_is_the_plain_hybrid(opensearch, sample_index, default_encoder) -> None:
    plain = Searcher.open(opensearch, sample_index, SearchSettings(), encoder=default_encoder).search(QUERY, k=10)
    unchanged = Searcher.open(opensearch, sample_index,
                              SearchSettings(feedback=Feedback(rm3=True, original_weight=1.0)),
                              encoder=default_encoder).search(QUERY, k=10)
    assert [(h.id, round(h.score, 5)) for h in unchanged] == [(h.id, round(h.score, 5)) for h in plain]
    fed = _searcher(opensearch, sample_index, default_encoder, "rm3").search(QUERY, k=10)
    assert [h.score for h in fed] != [h.score for h in plain]


def test_query_feedback_from_the_command_line(opensearch_url, sample_index) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["--url", opensearch_url, "query", QUERY, "--index", sample_index,
                                "--feedback", "rm3", "--show-query", "-k", "3", "--no-log"])
    assert shown.exit_code == 0, shown.output
    assert "_mtermvectors" in shown.output
    refused = runner.invoke(cli, ["--url", opensearch_url, "query", QUERY, "--index", sample_index,
                                  "--mode", "rrf", "--feedback", "rm3", "--no-log"])
    assert "feedback runs with" in one_line(refused)


def test_tune_lambda_chooses_feedback_on_one_half_and_the_index_keeps_it(
        opensearch, sample_index, sample_claims, tune_sample) -> None:
    queries, _ = sample_claims
    before = check_record(opensearch, sample_index).raw
    try:
        result = tune_sample("--grid", "0.01,0.05", "--feedback-grid", "none,rm3")
        assert result.exit_code == 0, result.output
        grid_lines = [line for line in result.output.splitlines() if line.startswith(("none ", "rm3 "))]
        assert len(grid_lines) == 4 and sum("← best" in line for line in grid_lines) == 1
        chosen = int(result.output.split("tuning λ with 2 variants on ")[1].split()[0])
        held = int(result.output.split("held-out half (")[1].split()[0])
        assert chosen + held == len(queries.read_text().splitlines()) and min(chosen, held) >= 2
        chosen_value, current_value = map(float, re.search(
            r"ndcg@10 = ([\d.]+); the index's current \([^)]*\) ([\d.]+)", result.output).groups())
        record = check_record(opensearch, sample_index)
        if chosen_value < current_value:
            # A choice that lost on the half that did not choose it is not stored.
            assert "not stored" in result.output and record.raw == before
        else:
            name = result.output.split(", feedback ")[-1].split()[0]
            assert record.feedback["name"] == name and record.feedback["half"] is True
            assert record.feedback["queries"] == chosen
        # What the index stores is what a search takes by default, where its mode can run it.
        store_feedback(opensearch, sample_index, {**Feedback.named("rm3", terms=5).to_record(), "metric": "x"})
        assert Searcher.open(opensearch, sample_index).feedback == Feedback.named("rm3", terms=5)
        assert Pipeline.build("bm25", Searcher.open(opensearch, sample_index)).name == "bm25+rm3"
        assert Searcher.open(opensearch, sample_index, SearchSettings(mode="dense")).feedback.name == "none"
        explicit = SearchSettings(feedback=Feedback())
        assert Searcher.open(opensearch, sample_index, explicit).feedback.name == "none"
    finally:
        update_record(opensearch, sample_index, remove=("feedback", "lambda", "lambda_tuning"),
                      **{k: before[k] for k in ("lambda", "lambda_tuning") if k in before})
    assert check_record(opensearch, sample_index).feedback is None


def test_feedback_at_scale_equals_the_exact_when_k_covers_the_collection(opensearch, sample_index,
                                                                         default_encoder) -> None:
    exact = _searcher(opensearch, sample_index, default_encoder, "rm3+rocchio").search(QUERY, k=20)
    approx = _searcher(opensearch, sample_index, default_encoder, "rm3+rocchio", mode="hybrid-approx",
                       candidates=1000)
    assert [(h.id, round(h.score, 4)) for h in approx.search(QUERY, k=20)] == [
        (h.id, round(h.score, 4)) for h in exact]
    # Each pass: the BM25 and kNN lists, then the union scored; the term vectors between the passes.
    assert len(approx.sent_requests(QUERY, k=5)) == 3 + 1 + 3
