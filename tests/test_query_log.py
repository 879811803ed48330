"""The query log on a real cluster: what a query writes, what turns it off, and failures that must not matter."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.pipeline import Pipeline
from biorank.retrieval.searcher import Searcher, SearchSettings
from biorank.store.mappings.query_log import query_log_index_body
from biorank.store.query_log import QueryLog, hit_parts

QUERY = "Does vitamin B12 deficiency raise homocysteine levels?"
WARNING = "query log could not be written"


def _records(opensearch: OpenSearch, index: str) -> list[dict]:
    opensearch.indices.refresh(index=index)
    hits = opensearch.search(index=index, body={"size": 100, "sort": [{"timestamp": "asc"}]})["hits"]["hits"]
    return [h["_source"] for h in hits]


def _run(args: list[str], log_index: str, **env: str):
    return CliRunner().invoke(cli, args, env={"BIORANK_QUERY_LOG_INDEX": log_index, **env})


@pytest.mark.engines
def test_a_query_writes_one_record_with_its_parameters_latencies_and_score_parts(
    opensearch_url: str, opensearch: OpenSearch, sample_index: str, query_log_index: str
) -> None:
    before = datetime.now(timezone.utc)
    result = _run(["--url", opensearch_url, "query", QUERY, "--index", sample_index, "-k", "5", "--json"],
                  query_log_index)
    assert result.exit_code == 0, result.output
    shown = [json.loads(line) for line in result.stdout.splitlines()]

    [record] = _records(opensearch, query_log_index)
    assert before - timedelta(seconds=1) <= datetime.fromisoformat(record["timestamp"]) <= datetime.now(timezone.utc)
    assert (record["command"], record["index"], record["query"], record["mode"], record["k"]) == (
        "query", sample_index, QUERY, "hybrid", 5)
    assert record["lambda"] == 0.03  # the sample index has no tuned λ
    assert record["bm25_fields"] == "passage" and record["batch"] == 1 and record["hits_returned"] == 5
    assert record["latency_ms"]["first_stage"] > 0
    assert record["latency_ms"]["total"] >= record["latency_ms"]["first_stage"]
    # The logged hits are the ones the user saw, with every part of their scores.
    assert [h["id"] for h in record["hits"]] == [h["id"] for h in shown]
    for logged, hit in zip(record["hits"], shown, strict=True):
        assert logged["rank"] == hit["rank"]
        for part in ("score", "bm25", "dense", "hybrid"):
            assert logged[part] == pytest.approx(hit[part])
        assert "title" not in logged

    meta = opensearch.indices.get_mapping(index=query_log_index)[query_log_index]["mappings"]
    assert meta["_meta"]["biorank"]["kind"] == "query_log"
    assert meta["properties"]["timestamp"]["type"] == "date"
    assert meta["properties"]["query"]["fields"]["keyword"]["type"] == "keyword"

    listed = _run(["--url", opensearch_url, "log", "--last", "5", "--json"], query_log_index)
    assert listed.exit_code == 0, listed.output
    assert [json.loads(line)["query"] for line in listed.stdout.splitlines()] == [QUERY]
    table = _run(["--url", opensearch_url, "log", "--index", sample_index], query_log_index)
    assert table.exit_code == 0 and "query" in table.stdout and shown[0]["id"] in table.stdout, table.output


@pytest.mark.engines
def test_search_logs_every_query_with_its_id_and_its_share_of_the_batch(
    opensearch_url: str, opensearch: OpenSearch, sample_index: str, query_log_index: str, tmp_path: Path
) -> None:
    queries = tmp_path / "queries.tsv"
    # Common words: every query matches more documents than the log keeps.
    queries.write_text("q1\tcancer patients and their treatment\nq2\tprotein expression in cells\n"
                       "q3\trisk of disease in children\n")
    result = _run(["--url", opensearch_url, "search", "--queries", str(queries), "--output", str(tmp_path / "run"),
                   "--index", sample_index, "--mode", "bm25", "-k", "50"], query_log_index)
    assert result.exit_code == 0, result.output

    records = _records(opensearch, query_log_index)
    assert sorted(r["query_id"] for r in records) == ["q1", "q2", "q3"]
    assert len({r["run"] for r in records}) == 1
    for r in records:
        assert (r["command"], r["mode"], r["bm25_fields"], r["k"], r["batch"]) == ("search", "bm25", "text", 50, 3)
        assert "lambda" not in r  # λ does not weigh a BM25 score
        assert len(r["hits"]) == 10 and r["hits_returned"] > 10  # the top 10 are kept, whatever the depth
        assert r["latency_ms"]["first_stage"] > 0
    # One batch: its time is shared equally.
    assert len({r["latency_ms"]["first_stage"] for r in records}) == 1


@pytest.mark.engines
def test_eval_logs_each_system_with_its_own_first_stage(
    opensearch_url: str, opensearch: OpenSearch, sample_index: str, query_log_index: str, tmp_path: Path
) -> None:
    ids = [h["_id"] for h in opensearch.search(index=sample_index, body={"size": 2, "query": {"term": {"block": 0}},
                                                                          "_source": False})["hits"]["hits"]]
    queries, qrels = tmp_path / "queries.tsv", tmp_path / "qrels.tsv"
    queries.write_text("a\tvitamin B12 and homocysteine\nb\tDNA methylation in blood cells\n")
    qrels.write_text(f"query-id\tcorpus-id\tscore\na\t{ids[0]}\t1\nb\t{ids[1]}\t1\n")
    result = _run(["--url", opensearch_url, "eval", "--queries", str(queries), "--qrels", str(qrels), "--index",
                   sample_index, "--systems", "bm25,dense", "-k", "20", "--out", str(tmp_path / "eval")],
                  query_log_index)
    assert result.exit_code == 0, result.output

    records = _records(opensearch, query_log_index)
    assert sorted((r["system"], r["mode"], r["query_id"]) for r in records) == [
        ("bm25", "bm25", "a"), ("bm25", "bm25", "b"), ("dense", "dense", "a"), ("dense", "dense", "b")]
    assert all(r["command"] == "eval" and r["latency_ms"]["first_stage"] > 0 for r in records)
    assert all("dense" in h and "bm25" not in h for r in records if r["mode"] == "dense" for h in r["hits"])


@pytest.mark.parametrize("off", [["--no-log"], []], ids=["--no-log", "BIORANK_QUERY_LOG=0"])
def test_the_flag_and_the_setting_turn_the_log_off(
    opensearch_url: str, opensearch: OpenSearch, sample_index: str, query_log_index: str, off: list[str]
) -> None:
    env = {} if off else {"BIORANK_QUERY_LOG": "0"}
    result = _run(["--url", opensearch_url, "query", QUERY, "--index", sample_index, "--mode", "bm25", *off],
                  query_log_index, **env)
    assert result.exit_code == 0, result.output
    assert not opensearch.indices.exists(index=query_log_index)


def test_an_invalid_log_index_warns_once_and_the_query_is_answered(
    opensearch_url: str, opensearch: OpenSearch, sample_index: str
) -> None:
    # Upper case is not allowed in index names: refused before the cluster is asked, said once, the query answered.
    result = _run(["--url", opensearch_url, "query", QUERY, "--index", sample_index, "--mode", "bm25", "--json"],
                  "Biorank-Queries-INVALID")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 10  # the hits
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, result.stderr
    assert "'Biorank-Queries-INVALID' (BIORANK_QUERY_LOG_INDEX) is not one index name" in warnings[0]
    assert "the queries are answered and not logged" in warnings[0]


@pytest.mark.parametrize("breakage", ["read-only", "closed"])
def test_a_log_index_that_refuses_writes_fails_no_query(
    opensearch_url: str, opensearch: OpenSearch, sample_index: str, query_log_index: str, tmp_path: Path,
    breakage: str,
) -> None:
    opensearch.indices.create(index=query_log_index, body=query_log_index_body())
    if breakage == "read-only":
        opensearch.indices.put_settings(index=query_log_index, body={"index.blocks.write": True})
    else:
        opensearch.indices.close(index=query_log_index)
    queries = tmp_path / "queries.tsv"
    # More queries than one bulk request holds: the first failed request must be the only one said.
    queries.write_text("".join(f"q{i}\tvitamin B{i} deficiency\n" for i in range(300)))
    result = _run(["--url", opensearch_url, "search", "--queries", str(queries), "--output", str(tmp_path / "run"),
                   "--index", sample_index, "--mode", "bm25", "-k", "10"], query_log_index)
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "run").read_text().splitlines()) == 3000
    warnings = [line for line in result.stderr.splitlines() if WARNING in line]
    assert len(warnings) == 1, result.stderr
    assert ("cluster_block_exception" if breakage == "read-only" else "index_closed_exception") in warnings[0]

    # In the library, the first failed flush turns the log off: later records neither go out nor warn again.
    said: list[str] = []
    log = QueryLog(opensearch, query_log_index, command="test", flush_every=2, warn=said.append)
    for i in range(7):
        log.add(index=sample_index, query=f"q{i}", mode="bm25", k=10, latency_ms={"first_stage": 1.0}, hits=[])
    log.close()
    assert len(said) == 1 and not log.enabled and log.written == 0


def test_a_pipeline_answers_as_search_many_and_logs_each_batch_as_it_is_done(
    opensearch: OpenSearch, sample_index: str, query_log_index: str
) -> None:
    searcher = Searcher.open(opensearch, sample_index, SearchSettings(mode="bm25"))
    queries = {f"q{i}": f"cells and protein {i}" for i in range(70)}
    ticks: list[int] = []
    with QueryLog(opensearch, query_log_index, command="test", flush_every=32) as log:
        answers = Pipeline.build("bm25", searcher).run(queries, 5, progress=ticks.append, log=log)
    assert {q: [h.id for h in a.hits] for q, a in answers.items()} == {
        q: [h.id for h in found] for q, found in searcher.search_many(queries, 5).items()}
    assert sum(ticks) == 70 and log.written == 70
    records = _records(opensearch, query_log_index)
    assert sorted(r["batch"] for r in records) == [6] * 6 + [32] * 64
    assert {r["system"] for r in records} == {"bm25"} and {r["query_id"] for r in records} == set(queries)


def test_new_stages_and_score_parts_are_logged_as_numbers(opensearch: OpenSearch, query_log_index: str) -> None:
    log = QueryLog(opensearch, query_log_index, command="test")
    hits = [{"id": 7, "rank": 1, "score": 2.5, "rerank": 0.75, "colbert": 3, "title": "words", "flag": True,
             "bad": float("nan")}]
    log.add(index="x", query="q", mode="hybrid", k=1, hits=hits,
            latency_ms={"first_stage": 10, "rerank": 40.5, "snippets": 3.25, "expansion": 1})
    log.close()
    assert log.written == 1 and log.failure is None

    [record] = _records(opensearch, query_log_index)
    assert record["hits"] == [{"id": "7", "rank": 1, "score": 2.5, "rerank": 0.75, "colbert": 3}]
    assert record["latency_ms"] == {"first_stage": 10, "rerank": 40.5, "snippets": 3.25, "expansion": 1}
    properties = opensearch.indices.get_mapping(index=query_log_index)[query_log_index]["mappings"]["properties"]
    assert properties["hits"]["properties"]["colbert"]["type"] == "float"
    assert properties["latency_ms"]["properties"]["expansion"]["type"] == "float"


class _Pause:
    """A stage that takes a known time per batch, so the pipeline's clock can be checked against it."""

    name = "pause"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def run(self, answers, depth: int) -> None:
        time.sleep(self.seconds)


def test_the_pipeline_clock_shares_each_stage_of_a_batch_among_its_queries(
    opensearch: OpenSearch, sample_index: str
) -> None:
    pipeline = Pipeline.build("bm25", Searcher.open(opensearch, sample_index))
    pipeline.stages.append(_Pause(0.06))
    ticks: list[int] = []
    answers = pipeline.run({"a": "cells", "b": "protein", "c": "cancer"}, 5, progress=ticks.append)
    assert ticks == [3, 3]  # each stage tells about the whole batch
    for answer in answers.values():
        assert answer.ms["pause"] == pytest.approx(20, abs=8)
        assert answer.ms["first_stage"] > 0
        assert answer.ms["total"] == pytest.approx(answer.ms["first_stage"] + answer.ms["pause"])


def test_hit_parts_keep_every_finite_number_and_the_id() -> None:
    assert hit_parts({"id": "x", "score": 1.0, "extra": 2, "text": "no", "ok": False, "inf": float("inf")}) == {
        "id": "x", "score": 1.0, "extra": 2}
