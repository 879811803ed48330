"""Inspection without Dashboards, on real indices: a stored document read back whole, an index's facts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch

from biorank.cli import cli
from biorank.demo import sample_path
from biorank.store.mappings.sentences import DEFAULT_SENTENCE_VECTORS
from biorank.store.record import MAPPING_VERSION


def _invoke(opensearch_url: str, *args: str):
    return CliRunner().invoke(cli, ["--url", opensearch_url, *args])


def test_inspect_reads_back_every_block_and_sentence_with_offsets_and_unit_vectors(
    opensearch_url: str, opensearch: OpenSearch, sample_index: str
) -> None:
    [stored] = opensearch.search(index=sample_index, body={
        "size": 1, "query": {"bool": {"filter": [{"term": {"block": 0}}, {"range": {"n_blocks": {"gt": 1}}}]}},
    })["hits"]["hits"]
    doc_id, source = stored["_id"], stored["_source"]
    result = _invoke(opensearch_url, "inspect", doc_id, "--index", sample_index, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)

    fields = document["fields"]
    assert (document["id"], fields["title"], fields["abstract"]) == (doc_id, source["title"], source["abstract"])
    assert "passage" not in fields and "vector" not in fields
    blocks = document["blocks"]
    assert [b["block"] for b in blocks] == list(range(source["n_blocks"]))
    assert [b["_id"] for b in blocks] == [doc_id] + [f"{doc_id}#{n}" for n in range(1, source["n_blocks"])]
    sentences = document["sentences"]
    assert len(sentences) == source["n_title_sentences"] + source["n_abstract_sentences"]
    order = [(s["section"], s["number"]) for s in sentences]
    assert order == [("title", n) for n in range(source["n_title_sentences"])] + [
        ("abstract", n) for n in range(source["n_abstract_sentences"])]
    for s in sentences:
        # BioASQ offsets: the sentence is exactly that span of its section.
        assert fields[s["section"]][s["begin"]:s["end"]] == s["text"]
    for entry in blocks + sentences:
        assert entry["vector"]["dimension"] == 384
        # Unit vectors: ⟨q, p⟩ is a cosine; a sentence's, stored a byte a component, read back as nearly one.
        assert entry["vector"]["norm"] == pytest.approx(1.0, abs=1e-3 if entry in blocks else 5e-3)

    shown = _invoke(opensearch_url, "inspect", doc_id, "--index", sample_index)
    assert shown.exit_code == 0, shown.output
    assert f"{sample_index} / {doc_id}: {source['n_blocks']} block(s), {len(sentences)} sentence(s)" in shown.stdout
    assert "384" in shown.stdout and "1.0000" in shown.stdout and f"{doc_id}#1" in shown.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["inspect", "no-such-document"], "Error: no document 'no-such-document' in"),
    (["inspect", "1", "--index", "biorank-test-no-such-index"], "Error: no index 'biorank-test-no-such-index'"),
    (["stats", "--index", "biorank-test-no-such-index"], "Error: no index 'biorank-test-no-such-index'"),
])
def test_what_is_not_there_is_one_clear_line(
    opensearch_url: str, sample_index: str, args: list[str], message: str
) -> None:
    if args[0] == "inspect" and "--index" not in args:
        args = [*args, "--index", sample_index]
    result = _invoke(opensearch_url, *args)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith(message), result.output
    assert "Traceback" not in result.output


@pytest.fixture
def small_index(opensearch: OpenSearch, index_name: str, default_encoder, tmp_path: Path) -> str:
    """Five real SciFact abstracts indexed by biorank's pipeline into an index this test may change."""
    from biorank.indexer.indexer import Indexer, IndexOptions

    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(5)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(lines), encoding="utf-8")
    options = IndexOptions(index=index_name, format="scifact", rejects=tmp_path / "rejects.tsv")
    Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    return index_name


def test_stats_reports_counts_sizes_encoder_bm25_and_whatever_was_tuned(
    opensearch_url: str, opensearch: OpenSearch, small_index: str
) -> None:
    from biorank.store.record import store_lambda

    result = _invoke(opensearch_url, "stats", "--index", small_index, "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    sentences_index = f"{small_index}-sentences"
    opensearch.indices.refresh(index=f"{small_index}*")
    meta = opensearch.indices.get_mapping(index=small_index)[small_index]["mappings"]["_meta"]["biorank"]
    assert facts["documents"] == 5
    assert facts["blocks"] == opensearch.count(index=small_index)["count"] >= 5
    assert facts["sentences"] == opensearch.count(index=sentences_index)["count"] > 10
    assert set(facts["size_bytes"]) == {small_index, sentences_index} and all(facts["size_bytes"].values())
    assert (facts["model"], facts["dimension"], facts["mapping_version"]) == (meta["model"], 384, MAPPING_VERSION)
    assert (facts["settings"]["k1"], facts["settings"]["b"], facts["settings"]["analyzer"]) == (0.9, 0.4, "english")
    assert (facts["lam"], facts["lambda_tuned"], facts["tuned"]) == (0.03, False, {})
    # What an abstract costs, per index, and how the sentence vectors are stored.
    assert facts["bytes_per_document"] == {name: size / 5 for name, size in facts["size_bytes"].items()}
    assert facts["sentence_vectors"] == DEFAULT_SENTENCE_VECTORS

    # λ as tune-lambda stores it, and settings a later stage stores under a key of its own.
    store_lambda(opensearch, small_index, 0.07, metric="ndcg@10", value=0.5, queries=3, split="dev")
    mapping = opensearch.indices.get_mapping(index=small_index)[small_index]["mappings"]["_meta"]
    mapping["biorank"]["snippet_weights"] = {"bm25": 0.4, "dense": 0.6}
    opensearch.indices.put_mapping(index=small_index, body={"_meta": mapping})

    tuned = json.loads(_invoke(opensearch_url, "stats", "--index", small_index, "--json").stdout)
    assert (tuned["lam"], tuned["lambda_tuned"]) == (0.07, True)
    assert tuned["tuned"]["snippet_weights"] == {"bm25": 0.4, "dense": 0.6}
    assert tuned["tuned"]["lambda_tuning"]["metric"] == "ndcg@10"

    shown = _invoke(opensearch_url, "stats", "--index", small_index)
    assert shown.exit_code == 0, shown.output
    per_abstract = f"{facts['size_bytes'][sentences_index] / 5e3:.1f} KB"
    for text in ("0.07 (tuned)", "tuned: snippet_weights.dense", "k1 0.9, b 0.4", meta["model"], "5", "per abstract",
                 per_abstract):
        assert text in shown.stdout, text
    cells = [[c.strip() for c in line.split("│") if c.strip()] for line in shown.stdout.splitlines()]
    assert ["sentence vectors", DEFAULT_SENTENCE_VECTORS] in cells


def test_stats_refuses_a_sentences_index(opensearch_url: str, sample_index: str) -> None:
    # Refused by its name, before the cluster is asked: a sentences index belongs to its documents index.
    result = _invoke(opensearch_url, "stats", "--index", f"{sample_index}-sentences")
    assert result.exit_code == 2
    assert "is a sentences index name: name its documents index" in result.output
    assert repr(sample_index) in result.output
