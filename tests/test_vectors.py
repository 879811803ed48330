"""Vectors made apart from the cluster: `biorank encode` into Parquet shards, `biorank index --vectors` from them."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from opensearchpy import OpenSearch, helpers
from running import index_until

from biorank.cli import cli
from biorank.demo import sample_path
from biorank.indexer.indexer import Indexer, IndexOptions
from biorank.indexer.shards import MANIFEST, ShardMismatch, ShardReader, encode_corpus
from biorank.models.encoder import Encoder
from biorank.store.indices import sentences_index_name
from biorank.store.record import IndexMismatch, read_record

BATCH = 8


def _corpus(folder: Path, n: int) -> Path:
    with gzip.open(sample_path(), "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(n)]
    path = folder / "sample.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


# A copy: the k-NN plugin hands every hit of a segment the same reused array, so ``doc['embedding'].value`` itself
# would give all of a response's hits the vector read last.
VECTOR = ("def v = doc['embedding'].value; List copy = new ArrayList(); "
          "for (int i = 0; i < v.length; i++) { copy.add(v[i]); } return copy;")


def _entries(client: OpenSearch, index: str) -> dict[str, tuple[dict, list[float]]]:
    """Every entry's source and stored vector (not in _source: read by a script, as the engine holds it)."""
    client.indices.refresh(index=index)
    body = {"query": {"match_all": {}}, "_source": True, "script_fields": {"vector": {"script": {"source": VECTOR}}}}
    return {h["_id"]: (h["_source"], h["fields"]["vector"])
            for h in helpers.scan(client, index=index, query=body, size=500)}


def _count(client: OpenSearch, index: str) -> int:
    client.indices.refresh(index=index)
    return client.count(index=index)["count"]


def _knn(client: OpenSearch, index: str, vector: list[float]) -> list[tuple[str, float]]:
    body = {"size": 10, "query": {"knn": {"embedding": {"vector": vector, "k": 10}}}, "_source": False}
    return [(h["_id"], h["_score"]) for h in client.search(index=index, body=body)["hits"]["hits"]]


def test_encode_then_index_vectors_equals_a_direct_index(
    opensearch: OpenSearch, index_name: str, default_encoder: Encoder, tmp_path: Path
) -> None:
    corpus = _corpus(tmp_path, 24)
    options = IndexOptions(batch_size=BATCH, rejects=tmp_path / "rejects.tsv")
    encoded = encode_corpus([corpus], tmp_path / "vectors", default_encoder, options, shard_documents=10)
    assert (encoded.indexed, encoded.shards, encoded.unchanged) == (24, 2, 0)

    loaded, direct = f"{index_name}-loaded", f"{index_name}-direct"
    reader = ShardReader(tmp_path / "vectors")
    report = Indexer(opensearch, IndexOptions(index=loaded, batch_size=BATCH), vectors=reader).run([corpus])
    assert reader.counts == {"documents": 24, "blocks": report.blocks, "sentences": report.sentences}
    Indexer(opensearch, IndexOptions(index=direct, batch_size=BATCH), encoder=default_encoder).run([corpus])

    for a, b in ((loaded, direct), (sentences_index_name(loaded), sentences_index_name(direct))):
        mine, theirs = _entries(opensearch, a), _entries(opensearch, b)
        assert mine.keys() == theirs.keys() and mine
        for key, (source, vector) in mine.items():
            assert source == theirs[key][0], key
            np.testing.assert_allclose(vector, theirs[key][1], atol=1e-6)
    # The same record: encoder, prefixes, block budget; and the same answers to a vector query.
    mine, theirs = read_record(opensearch, loaded), read_record(opensearch, direct)
    assert (mine.model, mine.model_source, mine.block_tokens, mine.prefixes) == \
        (theirs.model, theirs.model_source, theirs.block_tokens, theirs.prefixes)
    query = default_encoder.encode(["vitamin D and bone density"], role="query")[0].tolist()
    hits = _knn(opensearch, loaded, query)
    assert hits and [h[0] for h in hits] == [h[0] for h in _knn(opensearch, direct, query)]
    assert [h[1] for h in hits] == pytest.approx([h[1] for h in _knn(opensearch, direct, query)], abs=1e-6)


def test_vectors_of_another_corpus_model_block_size_or_settings_are_refused(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, default_encoder: Encoder, tmp_path: Path
) -> None:
    corpus = _corpus(tmp_path, 6)
    vectors = tmp_path / "vectors"
    encode_corpus([corpus], vectors, default_encoder, IndexOptions(batch_size=BATCH))
    # encode refuses to resume a folder of another run instead of mixing two.
    with pytest.raises(ShardMismatch, match="batch_size"):
        encode_corpus([corpus], vectors, default_encoder, IndexOptions(batch_size=4))

    changed = tmp_path / "changed.jsonl"
    changed.write_text(corpus.read_text(encoding="utf-8").replace("a", "e", 1), encoding="utf-8")
    runner = CliRunner()
    args = ["--url", opensearch_url, "index", "--index", index_name, "--vectors", str(vectors)]
    result = runner.invoke(cli, [*args, str(changed)])
    assert result.exit_code == 1 and "SHA-256 differs" in result.output.splitlines()[-1], result.output
    assert not opensearch.indices.exists(index=index_name), "refused before any index is made"
    result = runner.invoke(cli, [*args, str(corpus), "--no-sentences"])
    assert result.exit_code == 1 and "sentences True" in result.output, result.output
    result = runner.invoke(cli, [*args, str(corpus), "--model", "e5-small-v2"])
    assert result.exit_code == 1 and "not e5-small-v2" in result.output, result.output

    # An index built with this encoder takes no vectors of another, nor blocks cut to another budget.
    Indexer(opensearch, IndexOptions(index=index_name, batch_size=BATCH), encoder=default_encoder).run([corpus])
    for key, value, expected in (("name", "bge-small-en-v1.5@other", "built with the encoder"),
                                 ("max_seq_length", 128, "blocks of 254 word pieces")):
        other = tmp_path / f"other-{key}"
        shutil.copytree(vectors, other)
        manifest = json.loads((other / MANIFEST).read_text(encoding="utf-8"))
        manifest["model"][key] = value
        (other / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        with pytest.raises(IndexMismatch, match=expected):
            Indexer(opensearch, IndexOptions(index=index_name, batch_size=BATCH),
                    vectors=ShardReader(other)).run([corpus])


def test_encode_and_index_vectors_resume_after_kill_9(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, default_encoder: Encoder, tmp_path: Path
) -> None:
    corpus, vectors = _corpus(tmp_path, 40), tmp_path / "vectors"
    command = [sys.executable, "-m", "biorank.cli", "encode", str(corpus), "--out", str(vectors), "--batch-size", "4",
               "--shard-size", "4", "--model", default_encoder.source]
    victim = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and victim.poll() is None and \
            not (vectors / MANIFEST).exists():
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    before = json.loads((vectors / MANIFEST).read_text(encoding="utf-8"))
    assert before["shards"] and not before["complete"], "killed after its first shard, before its last"

    report = encode_corpus([corpus], vectors, default_encoder, IndexOptions(batch_size=4), shard_documents=4)
    assert report.unchanged >= 4 * len(before["shards"]) and report.unchanged + report.indexed == 40
    manifest = json.loads((vectors / MANIFEST).read_text(encoding="utf-8"))
    assert [s["name"] for s in manifest["shards"]] == [f"shard-{n:05d}" for n in range(10)]
    assert manifest["counts"]["documents"] == 40 and not list(vectors.glob("*.tmp"))

    command = [sys.executable, "-m", "biorank.cli", "--url", opensearch_url, "index", str(corpus), "--index",
               index_name, "--vectors", str(vectors)]
    sentences = sentences_index_name(index_name)
    victim = index_until(command, tmp_path, opensearch, sentences, 60)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    reader = ShardReader(vectors)
    report = Indexer(opensearch, IndexOptions(index=index_name, batch_size=4), vectors=reader).run([corpus])
    assert report.indexed + report.unchanged == 40 and report.unchanged > 0
    assert _count(opensearch, sentences) == reader.counts["sentences"]
    assert _count(opensearch, index_name) == reader.counts["blocks"]


def test_parallel_bulk_streams_write_everything_and_report_only_the_bad_action(
        opensearch: OpenSearch, index_name: str) -> None:
    from biorank.store.writer import BulkWriter, data_nodes

    assert data_nodes(opensearch) >= 1
    opensearch.indices.create(index=index_name)
    bad_id = "x" * 600  # over OpenSearch's 512-byte _id: its request is refused whole, then split down to it
    ids = [f"d{n}" for n in range(40)]
    ids[17] = bad_id
    actions = [{"_index": index_name, "_id": i, "_source": {"n": n}} for n, i in enumerate(ids)]
    failures = BulkWriter(opensearch, chunk_size=500, streams=3).write(iter(actions))
    assert [f.id for f in failures] == [bad_id]
    assert _count(opensearch, index_name) == 39
