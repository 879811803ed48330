"""Ensembles of cross-encoders (``--reranker A,B``): the shipped model (in the package) against a real node's sample
index, read short so each test takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biorank.models.cross_encoder import CrossEncoder
from biorank.models.ensemble import Ensemble, combine
from biorank.models.placement import AskedPlacement
from biorank.models.shipped import SHIPPED_RERANKER
from biorank.pipeline import Pipeline
from biorank.retrieval.searcher import Searcher
from biorank.stages.rerank import RerankerError, choose_cross_encoder, index_reranker
from biorank.store.record import IndexRecord

LENGTH = 64
"""Word pieces read: enough for real, distinct scores, short enough for seconds on 2 cores."""
QUERIES = {"1": "Vitamin D deficiency is associated with an increased risk of tuberculosis.",
           "2": "Statins reduce mortality in patients with sepsis."}
TEXTS = ["Vitamin D supplementation and the incidence of tuberculosis in a cohort of adults.",
         "Sepsis mortality fell in patients given statins before admission.",
         "A survey of dental hygiene among schoolchildren.",
         "Tuberculosis and vitamin D receptor polymorphisms."]
SELF_ENSEMBLE = f"{SHIPPED_RERANKER},{SHIPPED_RERANKER}"


@pytest.fixture(scope="module")
def shipped() -> CrossEncoder:
    return CrossEncoder(SHIPPED_RERANKER, precision="onnx", max_length=LENGTH)


def test_the_rule_combines_real_scores_as_computed_by_hand(shipped: CrossEncoder) -> None:
    assert combine([[2.0, 0.0, -1.0], [0.5, 1.5, 1.0]]) == pytest.approx([0.5, 2 / 3, 0.25])
    assert combine([[2.0, 0.0, -1.0], [0.5, 1.5, 1.0]], "mean-logit") == pytest.approx([1.25, 0.75, 0.0])
    # Two real score vectors of the same texts: the shipped model reading 64 and 16 word pieces.
    a = [float(v) for v in shipped.score(QUERIES["1"], TEXTS)]
    b = [float(v) for v in shipped.resized(max_length=16, batch_size=shipped.batch_size).score(QUERIES["1"], TEXTS)]
    assert a != b
    by_hand = [((x - min(a)) / (max(a) - min(a)) + (y - min(b)) / (max(b) - min(b))) / 2
               for x, y in zip(a, b, strict=True)]
    assert combine([a, b]) == pytest.approx(by_hand, abs=1e-12)
    assert combine([a, b], "mean-logit") == pytest.approx([(x + y) / 2 for x, y in zip(a, b, strict=True)], abs=1e-12)
    # score_pairs scales each query's pairs apart, whatever their order.
    ensemble = Ensemble([shipped, shipped.resized(max_length=16, batch_size=shipped.batch_size)])
    pairs = [(QUERIES[q], t) for t in TEXTS for q in QUERIES]
    mixed = ensemble.score_pairs(pairs)
    assert [float(v) for v in mixed[0::2]] == pytest.approx(by_hand, abs=1e-6)
    assert [float(v) for v in mixed[1::2]] == pytest.approx(ensemble.score(QUERIES["2"], TEXTS), abs=1e-6)
    with pytest.raises(ValueError, match="min-max, mean-logit"):
        combine([a, b], "max")


def test_an_ensemble_of_a_model_with_itself_ranks_as_the_model_alone(opensearch, sample_index: str,
                                                                   shipped: CrossEncoder) -> None:
    searcher = Searcher.open(opensearch, sample_index)
    itself = choose_cross_encoder(searcher.record, SELF_ENSEMBLE, precision="onnx", max_length=LENGTH)
    assert isinstance(itself, Ensemble) and itself.members[0] is itself.members[1]  # loaded once
    for weight in (0.3, 1.0):
        alone = Pipeline.build("hybrid+rerank", searcher, cross_encoder=shipped, rerank_weight=weight,
                               rerank_depth=10).run(QUERIES, 10)
        twice = Pipeline.build("hybrid+rerank", searcher, cross_encoder=itself, rerank_weight=weight,
                               rerank_depth=10).run(QUERIES, 10)
        for q in QUERIES:
            assert [h.id for h in twice[q].hits] == [h.id for h in alone[q].hits]
            assert all(h.rerank_members == (h2.rerank, h2.rerank) and h2.rerank_members is None
                       for h, h2 in zip(twice[q].hits, alone[q].hits, strict=True))


def test_an_ensemble_with_a_missing_member_is_one_line_before_any_search(opensearch_url: str, sample_index: str,
                                                                         tmp_path: Path) -> None:
    from click.testing import CliRunner

    from biorank.cli import cli

    (tmp_path / "empty").mkdir()
    args = ["--url", opensearch_url, "query", QUERIES["1"], "--index", sample_index, "--rerank", "--no-log"]
    for member, says in ((tmp_path / "gone", "does not exist"), (tmp_path / "empty", "not a model folder")):
        result = CliRunner().invoke(cli, [*args, "--reranker", f"{SHIPPED_RERANKER},{member}"])
        assert result.exit_code == 1
        assert result.output.strip().splitlines() == [result.output.strip()] and str(member) in result.output
        assert says in result.output
    shown = CliRunner().invoke(cli, [*args, "--reranker", SELF_ENSEMBLE, "--rerank-length", str(LENGTH),
                                     "--rerank-precision", "onnx", "--rerank-depth", "5", "-k", "3", "--json"])
    assert shown.exit_code == 0, shown.output
    hits = [json.loads(line) for line in shown.stdout.splitlines()]
    # Each member's logit beside the combined score: min-max over the reranked hits keeps the members' order.
    assert len(hits) == 3 and all(len(set(h["rerank_members"])) == 1 for h in hits)
    assert sorted(hits, key=lambda h: -h["rerank"]) == sorted(hits, key=lambda h: -h["rerank_members"][0])


def test_an_index_stores_an_ensemble_and_reranks_with_it(opensearch_url: str, opensearch, sample_index: str,
                                                         shared_data: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from biorank.cli import cli
    from biorank.store.record import check_record, update_record

    qrels = tmp_path / "qrels.tsv"
    body = {"size": len(QUERIES), "_source": False, "query": {"term": {"block": 0}}}
    docs = [h["_id"] for h in opensearch.search(index=sample_index, body=body)["hits"]["hits"]]
    judged = "".join(f"{q}\t{d}\t1\n" for q, d in zip(QUERIES, docs, strict=True))
    qrels.write_text("query-id\tcorpus-id\tscore\n" + judged, encoding="utf-8")
    queries = tmp_path / "queries.tsv"
    queries.write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES.items()), encoding="utf-8")
    try:
        result = CliRunner().invoke(cli, [
            "--url", opensearch_url, "tune-rerank", "--queries", str(queries), "--qrels", str(qrels),
            "--index", sample_index, "--split", "all", "--reranker", SELF_ENSEMBLE, "--rerank-depth", "5",
            "--rerank-length", str(LENGTH), "--rerank-precision", "onnx", "--grid", "0,1",
            "--plot", str(tmp_path / "w.png")])
        assert result.exit_code == 0, result.output
        record = check_record(opensearch, sample_index)
        assert record.reranker == SELF_ENSEMBLE and index_reranker(record) == SELF_ENSEMBLE
        searcher = Searcher.open(opensearch, sample_index)
        pipeline = Pipeline.build("hybrid+rerank", searcher, placement=AskedPlacement("onnx"), rerank_length=LENGTH)
        assert isinstance(pipeline.cross_encoder, Ensemble)
        assert record.rerank_tuning["reranker"] == pipeline.cross_encoder.model_name
        assert pipeline.reranker.weight == record.rerank_tuning["weight"]
    finally:
        update_record(opensearch, sample_index, remove=("reranker", "rerank_weight"))


def test_a_stored_ensemble_whose_member_is_gone_is_one_clear_error() -> None:
    record = IndexRecord.from_meta("scifact", {"reranker": {"model": f"{SHIPPED_RERANKER},/nonexistent/reranker"}})
    with pytest.raises(RerankerError, match="/nonexistent/reranker does not exist"):
        index_reranker(record)


def test_the_hits_table_shows_each_members_score() -> None:
    from rich.console import Console

    from biorank.cli.render import hits_table
    from biorank.types import Hit

    hits = [Hit(id="d1", title="first", rank=1, score=0.9, hybrid=0.5, rerank=0.75, rerank_members=(0.5, 1.0)),
            Hit(id="d2", title="second", rank=2, score=0.1, hybrid=0.4, rerank=0.25, rerank_members=(0.0, 0.5))]
    out = Console(width=200, record=True)
    out.print(hits_table(hits, "top 2"))
    text = out.export_text()
    rows = [[cell for cell in line.split() if cell != "│"] for line in text.splitlines() if line.startswith("│")]
    assert rows == [["1", "d1", "0.5000", "0.7500", "0.5000", "1.0000", "0.9000", "first"],
                    ["2", "d2", "0.4000", "0.2500", "0.0000", "0.5000", "0.1000", "second"]]
    assert text.index("rerank 1") < text.index("rerank 2") < text.index("score")
