"""Careless and hostile input on a real node: names that are patterns, reserved names, markup in titles and
queries, credentials in URLs, numbers out of range. Each was a defect; each is now refused or shown as data."""

from __future__ import annotations

import json
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
