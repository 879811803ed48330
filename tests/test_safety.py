"""Careless and hostile input on a real node: names that are patterns, reserved names, markup in titles and
queries, credentials in URLs, numbers out of range. Each was a defect; each is now refused or shown as data."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.store.mappings.documents import IndexSettings, documents_index_body
from biorank.store.mappings.sentences import sentences_index_body
from biorank.store.names import IndexNameError, check_index_name

MARKUP_TITLE = "[Ca2+]i rises [/] after [link=http://example.org]stimulation[/link] [bold]"


def _run(*args: str, **env: str):
    return CliRunner().invoke(cli, list(args), env=env or None)


def _empty_biorank_index(opensearch: OpenSearch, name: str) -> None:
    """A documents index and its sentences index as biorank creates them, without documents."""
    settings = IndexSettings()
    opensearch.indices.create(index=name, body=documents_index_body(
        settings, model="m", dimension=4, block_tokens=254, sentences_index=f"{name}-sentences"))
    opensearch.indices.create(index=f"{name}-sentences", body=sentences_index_body(
        settings, model="m", dimension=4, documents_index=name))


@pytest.mark.parametrize("name", ["thr-*", "a,b", "*", "_all", "UPPER", "-x", ".", "biorank-queries",
                                  "biorank-queries-2026", "scifact-sentences", "a b", "x" * 256])
def test_names_that_are_patterns_lists_or_reserved_are_refused(name: str) -> None:
    with pytest.raises(IndexNameError):
        check_index_name(name)


def test_plain_names_are_accepted() -> None:
    for name in ("scifact", "pubmed-2026.01", "biorank-demo", "a_b+c", "biorank-queries2"):
        assert check_index_name(name) == name


@pytest.mark.engines
def test_delete_index_touches_only_the_index_it_names(opensearch_url: str, opensearch: OpenSearch,
                                                      index_name: str) -> None:
    _empty_biorank_index(opensearch, f"{index_name}-a")
    _empty_biorank_index(opensearch, f"{index_name}-b")
    for pattern in (f"{index_name}-*", f"{index_name}-a,{index_name}-b", "*", "_all"):
        refused = _run("--url", opensearch_url, "delete-index", pattern, "--yes")
        assert refused.exit_code == 2 and "not an index name biorank accepts" in refused.output, refused.output
    for name in ("a", "a-sentences", "b", "b-sentences"):
        assert opensearch.indices.exists(index=f"{index_name}-{name}")
    asked = CliRunner().invoke(cli, ["--url", opensearch_url, "delete-index", f"{index_name}-a"], input="n\n")
    assert f"delete {index_name}-a and {index_name}-a-sentences?" in asked.output and asked.exit_code == 1
    deleted = _run("--url", opensearch_url, "delete-index", f"{index_name}-a", "--yes")
    assert deleted.exit_code == 0 and deleted.output.strip() == (
        f"deleted {index_name}-a, {index_name}-a-sentences"), deleted.output
    assert not opensearch.indices.exists(index=f"{index_name}-a")
    assert not opensearch.indices.exists(index=f"{index_name}-a-sentences")
    assert opensearch.indices.exists(index=f"{index_name}-b") and opensearch.indices.exists(
        index=f"{index_name}-b-sentences")


def test_an_index_biorank_did_not_build_is_never_deleted(opensearch_url: str, opensearch: OpenSearch,
                                                         index_name: str) -> None:
    opensearch.indices.create(index=index_name, body={"mappings": {"properties": {"x": {"type": "keyword"}}}})
    refused = _run("--url", opensearch_url, "delete-index", index_name, "--yes")
    assert refused.exit_code == 1 and "was not created by biorank" in refused.output, refused.output
    assert opensearch.indices.exists(index=index_name)


def test_recreate_with_a_pattern_deletes_nothing(opensearch_url: str, opensearch: OpenSearch, index_name: str,
                                                 tmp_path: Path) -> None:
    _empty_biorank_index(opensearch, f"{index_name}-a")
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"id": "1", "title": "t", "text": "some text"}) + "\n")
    refused = _run("--url", opensearch_url, "index", str(corpus), "--format", "jsonl", "--index",
                   f"{index_name}-*", "--recreate")
    assert refused.exit_code == 2 and "StopIteration" not in refused.output, refused.output
    assert opensearch.indices.exists(index=f"{index_name}-a")


def test_the_query_log_is_not_an_index_to_search_or_recreate(opensearch_url: str) -> None:
    refused = _run("--url", opensearch_url, "query", "statins", "--index", "biorank-queries", "--no-log")
    assert refused.exit_code == 2 and "reserved for biorank's query log" in refused.output
    assert "--recreate" not in refused.output


def test_titles_and_queries_are_shown_as_written_never_as_markup(opensearch_url: str, opensearch: OpenSearch,
                                                                 index_name: str, query_log_index: str,
                                                                 tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"id": "m1", "title": MARKUP_TITLE, "text": "Calcium rises in cells."}) + "\n")
    built = _run("--url", opensearch_url, "index", str(corpus), "--format", "jsonl", "--index", index_name,
                 "--no-sentences", "--rejects", str(tmp_path / "rejects.tsv"))
    assert built.exit_code == 0, built.output
    query = "calcium [/x] [bold]rises"
    shown = _run("--url", opensearch_url, "query", query, "--index", index_name, "--mode", "bm25",
                 BIORANK_QUERY_LOG_INDEX=query_log_index)
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.split())
    for part in ("[Ca2+]i", "[/]", "[link=http://example.org]", "[bold]"):
        assert part in flat, shown.output
    log = _run("--url", opensearch_url, "log", "--last", "1", BIORANK_QUERY_LOG_INDEX=query_log_index)
    assert log.exit_code == 0, log.output
    assert "[/x]" in " ".join(log.output.split())


def test_credentials_in_a_url_never_appear_in_messages() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = _run("--url", f"http://reader:s3cret@127.0.0.1:{port}", "stats")
    assert result.exit_code == 1 and "s3cret" not in result.output and "reader" not in result.output
    assert f"***@127.0.0.1:{port}" in result.output
    # Several nodes of one cluster: each URL is redacted, and all are named.
    several = _run("--url", f"http://reader:s3cret@127.0.0.1:{port},https://admin:t0p@127.0.0.1:{port}", "stats")
    assert several.exit_code == 1 and "s3cret" not in several.output and "t0p" not in several.output
    flat = " ".join(several.output.split())
    assert f"http://***@127.0.0.1:{port}, https://***@127.0.0.1:{port}" in flat, several.output


@pytest.mark.parametrize("args", [["-k", "0"], ["-k", "-1"], ["--rerank-depth", "0"], ["--candidates", "0"]])
def test_numbers_out_of_range_are_usage_errors(args: list[str]) -> None:
    result = _run("query", "statins", *args)
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "-1"])
def test_lambda_must_be_a_finite_number_in_range(opensearch_url: str, sample_index: str, value: str) -> None:
    result = _run("--url", opensearch_url, "query", "statins", "--index", sample_index, "--lambda", value, "--no-log")
    assert result.exit_code == 1 and result.output.strip().startswith("Error: λ must be"), result.output


def test_an_empty_system_list_is_a_usage_error(shared_data: Path) -> None:
    result = _run("eval", "--qrels", str(shared_data / "scifact" / "qrels" / "train.tsv"), "--systems", " , ")
    assert result.exit_code == 2 and "give at least one name" in result.output


def _jsonl(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def _long_abstract() -> str:
    return " ".join(f"Sentence {i} reports that calcium signalling rises in stimulated cells." for i in range(60))


def test_an_id_ending_in_a_block_number_is_its_own_document(opensearch: OpenSearch, index_name: str,
                                                            default_encoder, tmp_path: Path) -> None:
    from biorank.indexer.indexer import Indexer, IndexOptions
    from biorank.stages.rerank import fetch_texts

    docs = [{"id": "X", "title": "A long one", "text": _long_abstract()},
            {"id": "X#1", "title": "The short one", "text": "It is short."},
            {"id": "50%#2", "title": "Odd characters", "text": "Percent and hash."}]
    corpus = _jsonl(tmp_path / "docs.jsonl", docs)
    options = IndexOptions(index=index_name, format="jsonl", rejects=tmp_path / "rejects.tsv")
    first = Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    assert first.indexed == 3 and first.blocks > 3
    opensearch.indices.refresh(index=index_name)
    titles = {h["_source"]["id"]: h["_source"]["title"] for h in opensearch.search(
        index=index_name, body={"size": 100, "query": {"term": {"block": 0}}})["hits"]["hits"]}
    assert titles == {d["id"]: d["title"] for d in docs}
    assert fetch_texts(opensearch, index_name, ["X#1", "50%#2"]) == {
        "X#1": "The short one It is short.", "50%#2": "Odd characters Percent and hash."}
    again = Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    assert (again.indexed, again.unchanged) == (0, 3)


def test_an_id_too_long_or_a_record_too_large_is_rejected_and_the_rest_goes_in(
        opensearch_url: str, opensearch: OpenSearch, index_name: str, tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "docs.jsonl", [
        {"id": "ok-1", "title": "Calcium", "text": "Calcium rises."},
        {"id": "é" * 300, "title": "Long id", "text": "Its id has 600 bytes."},
        {"id": "big", "title": "Too large", "text": _long_abstract()},
        {"id": "ok-2", "title": "Potassium", "text": "Potassium falls."},
    ])
    rejects = tmp_path / "rejects.tsv"
    result = _run("--url", opensearch_url, "index", str(corpus), "--format", "jsonl", "--index", index_name,
                  "--max-record-bytes", "2000", "--rejects", str(rejects))
    assert result.exit_code == 0, result.output
    assert "2 records rejected" in result.output
    rows = [line.split("\t") for line in rejects.read_text(encoding="utf-8").splitlines()[1:]]
    assert [(row[1], row[3].split(":")[0]) for row in rows] == [("2", "id too long"), ("3", "record too large")]
    opensearch.indices.refresh(index=index_name)
    assert opensearch.count(index=index_name)["count"] == 2


def test_a_bulk_request_refused_as_a_whole_is_split_until_only_the_bad_action_fails(
        opensearch: OpenSearch, index_name: str) -> None:
    from biorank.store.writer import BulkWriter

    opensearch.indices.create(index=index_name)
    bad_id = "x" * 600  # over OpenSearch's 512-byte _id: the whole bulk request is refused with a 400
    actions = [{"_index": index_name, "_id": i, "_source": {"n": n}}
               for n, i in enumerate(["a", "b", bad_id, "c", "d"])]
    failures = BulkWriter(opensearch, chunk_size=5).write(actions)
    assert [(f.id, f.reason.split(":")[0]) for f in failures] == [(bad_id, "OpenSearch refused it")]
    assert "400" in failures[0].reason
    opensearch.indices.refresh(index=index_name)
    assert opensearch.count(index=index_name)["count"] == 4


@pytest.mark.engines
def test_os_hybrid_creates_or_changes_no_search_pipeline(opensearch_url: str, opensearch: OpenSearch,
                                                        sample_index: str, neural_search: bool) -> None:
    if not neural_search:
        # Without the plugin there is no normalisation processor to put in a pipeline: one line, exit 1.
        result = _run("--url", opensearch_url, "query", "calcium signalling", "--index", sample_index,
                      "--mode", "os-hybrid", "--no-log")
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert "neural-search plugin" in result.output and "Traceback" not in result.output
        return
    # Someone's own pipeline under the name biorank once used for its own: it must stay as it is.
    theirs = {"description": "a user's own pipeline", "phase_results_processors": [{"normalization-processor": {
        "normalization": {"technique": "l2"}, "combination": {"technique": "arithmetic_mean"}}}]}
    opensearch.transport.perform_request("PUT", "/_search/pipeline/biorank-minmax", body=theirs)
    try:
        before = opensearch.transport.perform_request("GET", "/_search/pipeline")
        result = _run("--url", opensearch_url, "query", "calcium signalling", "--index", sample_index,
                      "--mode", "os-hybrid", "--no-log")
        assert result.exit_code == 0, result.output
        assert opensearch.transport.perform_request("GET", "/_search/pipeline") == before
    finally:
        opensearch.transport.perform_request("DELETE", "/_search/pipeline/biorank-minmax")


def test_a_repeated_id_is_reported_and_the_later_record_kept(opensearch: OpenSearch, index_name: str,
                                                             default_encoder, tmp_path: Path) -> None:
    from biorank.indexer.indexer import Indexer, IndexOptions

    rejects = tmp_path / "rejects.tsv"
    options = IndexOptions(index=index_name, format="jsonl", sentences=False, rejects=rejects)
    first = _jsonl(tmp_path / "first.jsonl", [{"id": "a", "title": "Old title", "text": "Calcium rises."},
                                              {"id": "b", "title": "Potassium", "text": "Potassium falls."},
                                              {"id": "a", "title": "New title", "text": "Calcium rises."}])
    report = Indexer(opensearch, options, encoder=default_encoder).run([first])
    assert (report.read, report.indexed, report.rejected["duplicate id"]) == (3, 2, 1)
    rows = [line.split("\t") for line in rejects.read_text(encoding="utf-8").splitlines()[1:]]
    assert [(row[1], row[2], row[3]) for row in rows] == [("1", "a", "duplicate id: replaced by the record at line 3")]
    opensearch.indices.refresh(index=index_name)
    titles = [h["_source"]["title"] for h in opensearch.search(index=index_name, body={
        "query": {"term": {"id": "a"}}})["hits"]["hits"]]
    assert titles == ["New title"]
    # In a later batch or run, the same id with other content replaces the stored one, and is counted.
    second = _jsonl(tmp_path / "second.jsonl", [{"id": "b", "title": "Potassium", "text": "Potassium rises."}])
    again = Indexer(opensearch, options, encoder=default_encoder).run([second])
    assert (again.indexed, again.replaced) == (1, 1)


def test_a_file_with_no_usable_record_is_an_error(opensearch_url: str, index_name: str, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.docs"
    garbage.write_text("no tab here\nnor here\n\x00\x01 binary\n", encoding="utf-8")
    refused = _run("--url", opensearch_url, "index", str(garbage), "--index", index_name,
                   "--rejects", str(tmp_path / "r.tsv"))
    assert refused.exit_code == 1 and "none of the 3 records could be used" in refused.output, refused.output
    empty = tmp_path / "empty.docs"
    empty.write_text("")
    nothing = _run("--url", opensearch_url, "index", str(empty), "--format", "nfcorpus", "--index", index_name)
    assert nothing.exit_code == 1 and "no records in" in nothing.output, nothing.output


def test_a_file_that_cannot_be_read_leaves_no_index_behind(opensearch_url: str, opensearch: OpenSearch,
                                                           index_name: str, tmp_path: Path) -> None:
    good = _jsonl(tmp_path / "good.jsonl", [{"id": "a", "title": "Calcium", "text": "Calcium rises."}])
    unknown = tmp_path / "notes.txt"
    unknown.write_text("plain text, neither JSON nor XML\n")
    result = _run("--url", opensearch_url, "index", str(good), str(unknown), "--index", index_name)
    assert result.exit_code == 1 and "cannot tell the format" in result.output, result.output
    assert not opensearch.indices.exists(index=index_name)
    assert not opensearch.indices.exists(index=f"{index_name}-sentences")


def test_searching_an_index_biorank_did_not_build_says_so(opensearch_url: str, opensearch: OpenSearch,
                                                          index_name: str) -> None:
    opensearch.indices.create(index=index_name)
    result = _run("--url", opensearch_url, "query", "calcium", "--index", index_name, "--no-log")
    assert result.exit_code == 1 and "was not created by biorank" in result.output, result.output


def test_the_help_keeps_passwords_out_of_the_command_line() -> None:
    shown = " ".join(_run("--help").output.split())
    assert "--password" in shown and "BIORANK_PASSWORD, which keeps it out of `ps`" in shown


def test_a_truncated_gzip_indexes_what_it_holds_and_says_where_it_broke(opensearch_url: str, opensearch: OpenSearch,
                                                                        index_name: str, tmp_path: Path) -> None:
    import gzip

    from biorank.demo import sample_path

    with gzip.open(sample_path(), "rb") as f:
        lines = [next(f) for _ in range(60)]
    whole = gzip.compress(b"".join(lines))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    rejects = tmp_path / "rejects.tsv"
    result = _run("--url", opensearch_url, "index", str(cut), "--index", index_name, "--no-sentences",
                  "--rejects", str(rejects))
    assert result.exit_code == 0, result.output
    indexed = int(result.output.split(f"{index_name}: ")[1].split()[0])
    assert 0 < indexed < 60 and "Aborted" not in result.output
    assert "file unreadable from here on" in rejects.read_text(encoding="utf-8")


def _write_blocked(opensearch: OpenSearch, name: str, blocked: bool) -> None:
    opensearch.indices.put_settings(index=name, body={"index.blocks.write": True if blocked else None})


def test_deleting_a_clone_leaves_the_original_and_its_sentences(opensearch_url: str, opensearch: OpenSearch,
                                                                index_name: str) -> None:
    """``_clone`` copies the record, which names the original's sentences index: the copy goes, they stay."""
    _empty_biorank_index(opensearch, index_name)
    copy = f"{index_name}-copy"
    _write_blocked(opensearch, index_name, True)  # what _clone asks of its source
    try:
        opensearch.indices.clone(index=index_name, target=copy)
    finally:
        _write_blocked(opensearch, index_name, False)
    deleted = _run("--url", opensearch_url, "delete-index", copy, "--yes")
    assert deleted.exit_code == 0, deleted.output
    lines = deleted.output.strip().splitlines()
    assert lines[-1] == f"deleted {copy}" and len(lines) == 2, deleted.output
    assert f"names '{index_name}-sentences' as its sentences index, not '{copy}-sentences'" in lines[0]
    assert not opensearch.indices.exists(index=copy)
    assert opensearch.indices.exists(index=index_name) and opensearch.indices.exists(index=f"{index_name}-sentences")


def test_a_record_naming_other_indices_deletes_only_its_own(opensearch_url: str, opensearch: OpenSearch,
                                                            index_name: str) -> None:
    """Hand-made hostile records: a sentences index named as a pattern, a list, another documents index, another
    index's sentences, and a sentences index of the derived name whose own record points elsewhere or is none."""
    from biorank.store.indices import delete_indices

    other = f"{index_name}-other"
    _empty_biorank_index(opensearch, other)
    hostile, settings = f"{index_name}-h", IndexSettings()
    # Patterns narrow enough that a biorank deleting what a record names removes only this test's indices.
    for named in (f"{index_name}-o*", f"{other},{other}-sentences", other, f"{other}-sentences"):
        opensearch.indices.create(index=hostile, body=documents_index_body(
            settings, model="m", dimension=4, block_tokens=254, sentences_index=named))
        result = _run("--url", opensearch_url, "delete-index", hostile, "--yes")
        assert result.exit_code == 0 and result.output.strip().endswith(f"deleted {hostile}"), (named, result.output)
        assert "is left alone" in result.output and result.output.count("\n") == 2, result.output
        assert opensearch.indices.exists(index=other) and opensearch.indices.exists(index=f"{other}-sentences"), named
    # The derived name, but its own record says it holds another index's sentences, or it is not biorank's.
    for sentences_body in (sentences_index_body(settings, model="m", dimension=4, documents_index=other),
                           {"mappings": {"properties": {"x": {"type": "keyword"}}}}):
        opensearch.indices.create(index=hostile, body=documents_index_body(
            settings, model="m", dimension=4, block_tokens=254, sentences_index=f"{hostile}-sentences"))
        opensearch.indices.create(index=f"{hostile}-sentences", body=sentences_body)
        # What --recreate deletes first, through the same function.
        assert delete_indices(opensearch, hostile) == [hostile]
        assert opensearch.indices.exists(index=f"{hostile}-sentences")
        opensearch.indices.delete(index=f"{hostile}-sentences")


@pytest.mark.parametrize("name", ["*", "biorank-q*", "biorank-queries,biorank-demo", "_all", "Queries", ".kibana"])
def test_a_query_log_name_that_is_not_one_index_is_refused(opensearch_url: str, opensearch: OpenSearch,
                                                           sample_index: str, name: str) -> None:
    """``biorank log`` refuses it in one line; a query is answered and says once that it was not logged (the log
    never costs a query its answer). Either way the name never reaches the cluster."""
    refused = _run("--url", opensearch_url, "log", BIORANK_QUERY_LOG_INDEX=name)
    assert refused.exit_code == 1 and refused.output.count("\n") == 1, refused.output
    assert "(BIORANK_QUERY_LOG_INDEX) is not one index name" in refused.output, refused.output
    before = sorted(opensearch.indices.get_alias(index="*", expand_wildcards="all"))
    answered = _run("--url", opensearch_url, "query", "calcium", "--index", sample_index, "--mode", "bm25", "--json",
                    BIORANK_QUERY_LOG_INDEX=name)
    hits = answered.stdout.splitlines()
    assert answered.exit_code == 0 and hits and all(json.loads(hit)["id"] for hit in hits), answered.output
    warnings = [line for line in answered.stderr.splitlines() if "BIORANK_QUERY_LOG_INDEX" in line]
    assert len(warnings) == 1 and "not logged" in warnings[0], answered.stderr
    assert sorted(opensearch.indices.get_alias(index="*", expand_wildcards="all")) == before


# ESC sequences (a hidden hyperlink, a screen clear, a colour), an 8-bit CSI and a right-to-left override.
HOSTILE_TEXT = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 \x1b[2J\x1b[31mred\x9b0m \u202egnihton"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_control_sequences_from_an_index_or_the_log_never_reach_the_terminal(
        opensearch_url: str, index_name: str, query_log_index: str, tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "docs.jsonl", [{"id": "esc\x1b[2J1", "title": f"Calcium {HOSTILE_TEXT}",
                                               "text": "Calcium rises in stimulated cells."}])
    built = _run("--url", opensearch_url, "index", str(corpus), "--format", "jsonl", "--index", index_name,
                 "--no-sentences", "--rejects", str(tmp_path / "rejects.tsv"))
    assert built.exit_code == 0 and "1 documents indexed" in built.output, built.output
    query = f"calcium {HOSTILE_TEXT}"
    outputs = []
    for args in (["query", query, "--index", index_name, "--mode", "bm25"],
                 ["query", query, "--index", index_name, "--mode", "bm25", "--json"],
                 ["log", "--last", "1"], ["log", "--last", "1", "--json"],
                 ["inspect", "esc\x1b[2J1", "--index", index_name]):
        # Wide enough that no cell is folded, so the escapes can be read back whole.
        shown = _run("--url", opensearch_url, *args, BIORANK_QUERY_LOG_INDEX=query_log_index, COLUMNS="1000")
        assert shown.exit_code == 0, (args, shown.output)
        assert not RAW_CONTROL.search(shown.output), (args, shown.output)
        outputs.append(shown.output)
    table, _, log, _, inspected = ("".join(o.split()) for o in outputs)
    for flat in (table, log, inspected):
        # Shown escaped, so the operator sees what was there.
        assert "\\x1b]8;;http://evil.example/\\x07click" in flat and "\\x9b0m" in flat and "\\u202e" in flat, flat
    assert "esc\\x1b[2J1" in table
    # JSON stays JSON: the same strings, read back.
    first_json = [json.loads(next(line for line in o.splitlines() if line.startswith("{"))) for o in outputs[1:4:2]]
    assert first_json[0]["title"] == f"Calcium {HOSTILE_TEXT}" and first_json[1]["query"] == query


def test_ctrl_c_while_indexing_says_what_was_kept_and_that_a_rerun_resumes(
        opensearch_url: str, opensearch: OpenSearch, index_name: str, default_encoder, tmp_path: Path) -> None:
    import gzip
    import os
    import signal
    import subprocess
    import sys

    from running import index_until

    from biorank.demo import sample_path

    with gzip.open(sample_path(), "rb") as f:
        (tmp_path / "docs.jsonl").write_bytes(b"".join(next(f) for _ in range(80)))
    command = [sys.executable, "-m", "biorank.cli", "--url", opensearch_url, "index", str(tmp_path / "docs.jsonl"),
               "--index", index_name, "--no-sentences", "--batch-size", "8", "--model", default_encoder.source]
    env = {**os.environ, "BIORANK_QUERY_LOG": "0"}
    run = index_until(command, tmp_path, opensearch, index_name, 16, env=env)
    run.send_signal(signal.SIGINT)
    assert run.wait(120) == 130
    said = (tmp_path / "index.log").read_text()
    assert "Aborted!" not in said and "Traceback" not in said, said
    assert re.search(r"interrupted after \d+ records: what was written is kept; run the same command again to "
                     r"resume", said), said
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    opensearch.indices.refresh(index=index_name)
    assert opensearch.count(index=index_name, body={"query": {"term": {"block": 0}}})["count"] == 80


def _meta(opensearch: OpenSearch, name: str, **changes: object) -> None:
    """Change fields of ``name``'s record by hand, as anyone who can write a mapping on the cluster can."""
    meta = opensearch.indices.get_mapping(index=name)[name]["mappings"]["_meta"]
    opensearch.indices.put_mapping(index=name, body={"_meta": {**meta, "biorank": {**meta["biorank"], **changes}}})


@pytest.mark.engines
def test_an_alias_is_never_written_through_or_deleted_as_if_it_were_an_index(
        opensearch_url: str, opensearch: OpenSearch, index_name: str, tmp_path: Path) -> None:
    """The blue/green set-up (probes 6.1, 6.2): ``pub`` an alias of ``keep``. Writing or deleting through it is
    refused in one line unless --follow-alias, and --recreate never goes through it."""
    from biorank.store.record import IndexMismatch, store_lambda

    keep, alias = f"{index_name}-keep", f"{index_name}-pub"
    _empty_biorank_index(opensearch, keep)
    opensearch.indices.put_alias(index=keep, name=alias)
    corpus = _jsonl(tmp_path / "docs.jsonl", [{"id": "1", "title": "t", "text": "some text"}])
    for extra in (["--recreate"], ["--recreate", "--follow-alias"], []):
        refused = _run("--url", opensearch_url, "index", str(corpus), "--format", "jsonl", "--index", alias, *extra)
        assert refused.exit_code == 1 and refused.output.count("\n") == 1, (extra, refused.output)
        assert refused.output.startswith(f"Error: '{alias}' is an alias of {keep}: "), refused.output
        reason = "--recreate rebuilds an index named by its own name" if extra else "--follow-alias acts on the one"
        assert reason in refused.output, (extra, refused.output)
    assert opensearch.count(index=keep)["count"] == 0 and not opensearch.indices.exists(index=f"{alias}-sentences")
    with pytest.raises(IndexMismatch, match="is an alias of"):
        store_lambda(opensearch, alias, 0.1)

    refused = _run("--url", opensearch_url, "delete-index", alias, "--yes")
    assert refused.exit_code == 1 and "--follow-alias acts on the one behind the alias" in refused.output
    assert opensearch.indices.exists(index=keep)
    followed = _run("--url", opensearch_url, "delete-index", alias, "--yes", "--follow-alias")
    assert followed.exit_code == 0 and followed.output.strip() == f"deleted {keep}, {keep}-sentences", followed.output
    assert not opensearch.indices.exists(index=keep) and not opensearch.indices.exists(index=alias)


def test_a_record_naming_an_index_that_does_not_exist_sends_no_delete_for_it(
        opensearch_url: str, opensearch: OpenSearch, index_name: str) -> None:
    """Probe 6.3: a foreign name in the record is not asked about, not deleted, not reported deleted."""
    ghost = f"{index_name}-ghost"
    opensearch.indices.create(index=index_name, body=documents_index_body(
        IndexSettings(), model="m", dimension=4, block_tokens=254, sentences_index=ghost))
    asked = CliRunner().invoke(cli, ["--url", opensearch_url, "delete-index", index_name], input="n\n")
    assert f"delete {index_name}?" in asked.output and ghost not in asked.output, asked.output
    deleted = _run("--url", opensearch_url, "delete-index", index_name, "--yes")
    assert deleted.exit_code == 0 and deleted.output.strip() == f"deleted {index_name}", deleted.output


def test_control_sequences_in_an_index_record_or_a_node_log_never_reach_the_terminal(
        opensearch_url: str, opensearch: OpenSearch, index_name: str, shared_data: Path, tmp_path: Path) -> None:
    """Probes 6.5 and 6.6: a record's kind, mapping version and applied files, and a node's log lines, are data:
    every command that quotes them prints them escaped — in errors, statuses and tables alike."""
    from biorank.cluster.local import LocalNode
    from biorank.downloads import sha256_of

    baseline = shared_data / "pubmed" / "medline16n0902.xml.gz"
    outputs = {}
    _empty_biorank_index(opensearch, index_name)
    _meta(opensearch, index_name, applied_files=[
        {"name": baseline.name, "sha256": "0" * 64, "applied": HOSTILE_TEXT},
        {"name": f"pubmed{HOSTILE_TEXT}", "sha256": "0" * 64, "applied": HOSTILE_TEXT}])
    outputs["sync, changed file"] = _run("--url", opensearch_url, "sync", str(baseline), "--index", index_name)
    _meta(opensearch, index_name, applied_files=[
        {"name": baseline.name, "sha256": sha256_of(baseline), "applied": "2026-01-01"},
        {"name": f"pubmed{HOSTILE_TEXT}", "sha256": "0" * 64, "applied": HOSTILE_TEXT}])
    outputs["sync, current"] = _run("--url", opensearch_url, "sync", str(baseline), "--index", index_name)
    _meta(opensearch, index_name, mapping_version=HOSTILE_TEXT)
    for args in (["stats", "--index", index_name], ["query", "calcium", "--index", index_name, "--no-log"]):
        outputs[args[0]] = _run("--url", opensearch_url, *args)
    _meta(opensearch, index_name, kind=HOSTILE_TEXT)
    for args in (["stats", "--index", index_name], ["delete-index", index_name, "--yes"], ["indices"]):
        outputs[f"{args[0]}, kind"] = _run("--url", opensearch_url, *args, COLUMNS="1000")

    home = tmp_path / "home"
    log = LocalNode().log_path()
    log = home / log.relative_to(LocalNode().settings.home)
    log.parent.mkdir(parents=True)
    log.write_text(f"[INFO] created index [{HOSTILE_TEXT}]\n")
    outputs["cluster logs"] = _run("cluster", "logs", BIORANK_HOME=str(home))

    for what, shown in outputs.items():
        assert not RAW_CONTROL.search(shown.output), (what, shown.output)
    for what in ("sync, changed file", "sync, current", "stats", "query", "stats, kind", "delete-index, kind",
                 "cluster logs"):
        assert "\\x1b]8;;http://evil.example/\\x07click" in outputs[what].output, (what, outputs[what].output)
    assert outputs["sync, current"].exit_code == 0 and "is current" in outputs["sync, current"].output
    assert opensearch.indices.exists(index=index_name)


def test_a_query_of_too_many_distinct_terms_says_to_shorten_it(opensearch_url: str, sample_index: str) -> None:
    """1,250 distinct terms in under 4,000 characters pass biorank's length check but not OpenSearch's clause
    limit: the one line says what to do, not only what OpenSearch said."""
    import itertools
    import string

    terms = ["".join(p) for p in itertools.product(string.ascii_lowercase + string.digits, repeat=2)]
    refused = _run("--url", opensearch_url, "query", " ".join(terms[:1250]), "--index", sample_index, "--no-log")
    assert refused.exit_code == 1 and refused.output.count("\n") == 1, refused.output
    assert "more distinct terms than OpenSearch takes in one query" in refused.output and "shorten it" in refused.output
