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
from biorank.indexer.blocks import block_budget
from biorank.indexer.indexer import Indexer, IndexOptions, content_hash
from biorank.indexer.readers import read_records
from biorank.indexer.shards import MANIFEST, ShardMismatch, ShardReader, encode_corpus
from biorank.models.encoder import Encoder
from biorank.store.indices import sentences_index_name
from biorank.store.record import IndexMismatch, read_record
from biorank.types import Abstract

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

    # An index built with this encoder takes no vectors of another, nor blocks cut to another budget. The folders
    # are made whole as encode would have written them (content hashes of the other name, the block budget of the
    # other window): a manifest edited alone is refused by the folder's own checks first.
    Indexer(opensearch, IndexOptions(index=index_name, batch_size=BATCH), encoder=default_encoder).run([corpus])
    other_name = "bge-small-en-v1.5@other"
    hashes = {r.id: content_hash(r, model=other_name, with_sentences=True)
              for r in read_records(corpus, "auto") if isinstance(r, Abstract)}
    for key, value, expected in (("name", other_name, "built with the encoder"),
                                 ("max_seq_length", 128, "blocks of 254 word pieces")):
        other = tmp_path / f"other-{key}"
        shutil.copytree(vectors, other)
        manifest = _manifest(other)
        manifest["model"][key] = value
        manifest["block_tokens"] = block_budget(manifest["model"]["max_seq_length"])
        _save_manifest(other, manifest)
        if key == "name":
            for shard in range(len(manifest["shards"])):
                _rewrite(other, shard, "blocks", lambda t: _column(t, "content_hash", [
                    hashes[i] for i in t.column("doc_id").to_pylist()]))
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


# --- Damaged and edited folders (issue 57: `--vectors` checks everything before it changes anything) ---------------

@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory, default_encoder: Encoder) -> tuple[Path, Path]:
    """24 documents in 3 shards of 8, encoded once for the module: (the input, the folder). Tests tamper with
    copies of the folder."""
    root = tmp_path_factory.mktemp("encoded")
    corpus = _corpus(root, 24)
    encode_corpus([corpus], root / "vectors", default_encoder, IndexOptions(batch_size=BATCH), shard_documents=8)
    return corpus, root / "vectors"


def _copy(encoded: tuple[Path, Path], tmp_path: Path, name: str = "copy") -> Path:
    folder = tmp_path / name
    shutil.copytree(encoded[1], folder)
    return folder


def _manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))


def _save_manifest(folder: Path, manifest: dict) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def _rewrite(folder: Path, shard: int, kind: str, change) -> None:
    """Shard ``shard``'s ``kind`` file made ``change(table)``, its manifest entry's size and SHA-256 made to match,
    as a careful forger would: what refuses it then is the check of its content, not of its hash."""
    import pyarrow.parquet as pq

    from biorank.downloads import sha256_of

    path = folder / f"shard-{shard:05d}.{kind}.parquet"
    pq.write_table(change(pq.read_table(path)), path)
    manifest = _manifest(folder)
    manifest["shards"][shard]["files"][kind] = {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
    _save_manifest(folder, manifest)


def _column(table, name: str, values):
    import pyarrow as pa

    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, table.schema.field(name).type))


def _vectors(table, matrix: np.ndarray):
    import pyarrow as pa

    column = pa.FixedSizeListArray.from_arrays(pa.array(matrix.astype(np.float32).ravel()), matrix.shape[1])
    return table.set_column(table.schema.get_field_index("embedding"), "embedding", column)


def _load(url: str, corpus: Path, folder: Path, index: str, *extra: str):
    return CliRunner().invoke(cli, ["--url", url, "index", str(corpus), "--index", index, "--vectors", str(folder),
                                    *extra])


def _refused(result, *expected: str) -> str:
    """The one line a refused load printed: exit status 1 through the CLI's own error path (an uncaught exception
    also ends in status 1 under CliRunner, so its type is checked), no traceback, no raw control character."""
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.exception, result.output)
    assert "Traceback" not in result.output and "\x1b" not in result.output and "\x00" not in result.output
    line = result.output.splitlines()[-1]
    assert line.startswith("Error: ") and all(e in line for e in expected), result.output
    return line


def test_vectors_shard_names_leading_outside_the_folder_are_refused(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, encoded: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus = encoded[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    for kind in ("blocks", "sentences"):
        # Real shard files out there: the old reader read them and indexed them.
        shutil.copy(encoded[1] / f"shard-00000.{kind}.parquet", outside / f"evil.{kind}.parquet")
    folder = _copy(encoded, tmp_path)
    for kind in ("blocks", "sentences"):
        (folder / f"link.{kind}.parquet").symlink_to(outside / f"evil.{kind}.parquet")
    for name, expected in (("../outside/evil", "is not a plain file name"),
                           (str(outside / "evil"), "is not a plain file name"),
                           ("../../../../../../etc/passwd", "is not a plain file name"),
                           ("..", "is not a plain file name"),
                           ("shard-00000\x00x", "is not a plain file name"),
                           ("link", "leads outside the folder")):
        manifest = _manifest(folder)
        manifest["shards"][0]["name"] = name
        _save_manifest(folder, manifest)
        _refused(_load(opensearch_url, corpus, folder, index_name), "shards[0].name ", expected)
    assert not opensearch.indices.exists(index=index_name), "refused before any index is made"


def _claiming_dimension(encoded: tuple[Path, Path], tmp_path: Path, dimension: int) -> Path:
    """A copy of the folder whose manifest gives another dimension than its vectors have."""
    folder = _copy(encoded, tmp_path, f"dimension-{dimension}")
    manifest = _manifest(folder)
    manifest["model"]["dimension"] = dimension
    _save_manifest(folder, manifest)
    return folder


def test_vectors_of_another_dimension_or_not_finite_are_refused(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, encoded: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus = encoded[0]
    wide = _claiming_dimension(encoded, tmp_path, 768)
    _refused(_load(opensearch_url, corpus, wide, index_name), "holds vectors of 384 dimensions, its manifest says 768")

    narrow = _copy(encoded, tmp_path, "383")
    _rewrite(narrow, 1, "blocks", lambda t: _vectors(t, t.column("embedding").combine_chunks().flatten()
                                                      .to_numpy().reshape(-1, 384)[:, :383]))
    _refused(_load(opensearch_url, corpus, narrow, index_name), "shard-00001.blocks.parquet in",
             "holds vectors of 383 dimensions, its manifest says 384")

    for value in (np.nan, np.inf):
        broken = _copy(encoded, tmp_path, f"not-finite-{value}")

        def spoil(table, value=value):
            matrix = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, 384).copy()
            matrix[3, 7] = value
            return _vectors(table, matrix)

        _rewrite(broken, 2, "sentences", spoil)
        line = _refused(_load(opensearch_url, corpus, broken, index_name), "that is not finite (NaN or infinity)")
        assert "again to retry" not in line
    assert not opensearch.indices.exists(index=index_name), "refused before any index is made"


def test_vectors_of_half_the_dimension_are_refused(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, encoded: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus = encoded[0]
    half = _claiming_dimension(encoded, tmp_path, 192)
    # Read as 192 wide, every shard would have given twice its rows, each half a real vector.
    _refused(_load(opensearch_url, corpus, half, index_name), "holds vectors of 384 dimensions, its manifest says 192")
    assert not opensearch.indices.exists(index=index_name)

    # Shards cut to 192 throughout, manifest and hashes to match: an existing index of 384 refuses them at once.
    Indexer(opensearch, IndexOptions(index=index_name, batch_size=BATCH),
            vectors=ShardReader(encoded[1])).run([corpus])
    blocks = _count(opensearch, index_name)
    for shard in range(3):
        for kind in ("blocks", "sentences"):
            _rewrite(half, shard, kind, lambda t: _vectors(t, t.column("embedding").combine_chunks().flatten()
                                                            .to_numpy().reshape(-1, 384)[:, :192]))
    _refused(_load(opensearch_url, corpus, half, index_name), "holds 384-dimensional vectors, those in")
    assert _count(opensearch, index_name) == blocks


def test_vectors_truncated_or_missing_shards_are_refused_before_anything_is_written(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, encoded: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus = encoded[0]
    for shard, kind in ((1, "blocks"), (0, "blocks"), (2, "sentences")):
        folder = _copy(encoded, tmp_path, f"cut-{shard}-{kind}")
        path = folder / f"shard-{shard:05d}.{kind}.parquet"
        size = path.stat().st_size
        path.write_bytes(path.read_bytes()[: size // 2])
        _refused(_load(opensearch_url, corpus, folder, index_name),
                 f"{path.name} in {folder} is {size // 2} bytes, its manifest says {size}")
    missing = _copy(encoded, tmp_path, "missing")
    (missing / "shard-00001.sentences.parquet").unlink()
    _refused(_load(opensearch_url, corpus, missing, index_name), "shard-00001.sentences.parquet in",
             "is missing; copy the whole folder again")

    # A manifest of a biorank that recorded no SHA-256: the Parquet reader's own refusal, in one line.
    older = _copy(encoded, tmp_path, "older")
    manifest = _manifest(older)
    for shard in manifest["shards"]:
        del shard["files"]
    _save_manifest(older, manifest)
    path = older / "shard-00001.blocks.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = _load(opensearch_url, corpus, older, index_name)
    _refused(result, "shard-00001.blocks.parquet in", "is not a readable Parquet file")
    assert "3 shards in" in result.output and "record no size and SHA-256" in result.output
    assert not opensearch.indices.exists(index=index_name), "refused before any index is made"


def _set(path: str, value):
    def edit(manifest: dict) -> None:
        *parents, key = path.split(".")
        for parent in parents:
            manifest = manifest[int(parent)] if parent.isdigit() else manifest[parent]
        if value is KeyError:
            del manifest[key]
        else:
            manifest[key] = value
    return edit


def _both(*edits):
    def edit(manifest: dict) -> None:
        for e in edits:
            e(manifest)
    return edit


@pytest.mark.parametrize(("edit", "expected"), [
    (_set("counts", KeyError), "counts is missing"),
    (_set("inputs", KeyError), "inputs is missing"),
    (_set("reader", KeyError), "reader is missing"),
    (_set("model.evil", 1), 'model has a field "evil" that `biorank encode` does not write'),
    (_set("shards", None), "shards is null, not a list"),
    (_set("reader.batch_size", "x"), 'reader.batch_size is "x", not a whole number >= 1'),
    (_set("model.dimension", True), "model.dimension is true, not a whole number >= 1"),
    (_set("shards.0.files.blocks.sha256", "0" * 63), "shards[0].files.blocks.sha256 is"),
    (_set("shards.0.documents", 99), "counts.documents is 24, its shards hold 115"),
    (_both(_set("shards.0.documents", 99), _set("counts.documents", 115)), "holds no block of its document 8"),
    (_set("shards.0.name", "shard-00000\x00"), 'shards[0].name "shard-00000\\u0000" is not a plain file name'),
    (_set("shards.1.name", "../../../../../../etc/passwd"), "is not a plain file name"),
    (_set("shards.1.name", "shard-00000"), 'shards[1].name "shard-00000" is given twice'),
    (_set("block_tokens", 300), "block_tokens is 300, the window of 256 word pieces gives 254"),
    (_set("layout", 2), "is not of layout 1"),
    (_set("layout", True), "is not of layout 1"),
    ("[1, 2]", "is not of layout 1"),
    ("{not json", "cannot be read"),
    (_set("complete", False), "is not finished (3 shards so far)"),
    (_set("reader.sentences", False), "were made with sentences False"),
], ids=lambda v: None if callable(v) or "{" in str(v) else str(v)[:30])
def test_vectors_broken_manifest_fields_are_refused_in_one_line(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, encoded: tuple[Path, Path], tmp_path: Path,
    edit, expected: str
) -> None:
    folder = _copy(encoded, tmp_path)
    if isinstance(edit, str):
        (folder / MANIFEST).write_text(edit, encoding="utf-8")
    else:
        manifest = _manifest(folder)
        edit(manifest)
        _save_manifest(folder, manifest)
    _refused(_load(opensearch_url, encoded[0], folder, index_name), expected)
    assert not opensearch.indices.exists(index=index_name), "refused before any index is made"


INJECTED = "INJECTED SNIPPET \x1b]8;;http://evil.example\x07click\x1b]8;;\x07"


def test_vectors_edited_shard_texts_and_block_numbers_are_refused(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, encoded: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus = encoded[0]
    # The last shard: its documents would come last, so a check made as they were written would let 16 in.
    cases = {
        "block text": ("blocks", lambda t: _column(t, "text", [INJECTED, *t.column("text").to_pylist()[1:]]),
                       "are not its title and abstract as the input gives them"),
        "sentence text": ("sentences", lambda t: _column(t, "text", [INJECTED, *t.column("text").to_pylist()[1:]]),
                          "are not those of its input"),
        "sentence offsets": ("sentences", lambda t: _column(t, "end", [0, *t.column("end").to_pylist()[1:]]),
                             "are not those of its input"),
        "block numbers": ("blocks", lambda t: _column(t, "number", [0] * t.num_rows), "are not numbered 0 to"),
    }
    for case, (kind, change, expected) in cases.items():
        folder = _copy(encoded, tmp_path, case.replace(" ", "-"))
        _rewrite(folder, 2, kind, change)
        _refused(_load(opensearch_url, corpus, folder, index_name), expected)
    # Edited with the manifest's size made to match, not its SHA-256: refused by the SHA-256.
    folder = _copy(encoded, tmp_path, "unhashed-edit")
    hashed = _manifest(folder)
    _rewrite(folder, 2, "blocks", cases["block text"][1])
    hashed["shards"][2]["files"]["blocks"]["bytes"] = _manifest(folder)["shards"][2]["files"]["blocks"]["bytes"]
    _save_manifest(folder, hashed)
    _refused(_load(opensearch_url, corpus, folder, index_name), "its SHA-256 differs from its manifest's")
    assert not opensearch.indices.exists(index=index_name), "refused before any index is made"


def test_vectors_recreate_with_a_damaged_folder_keeps_the_index(
    opensearch: OpenSearch, opensearch_url: str, index_name: str, encoded: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus, intact = encoded
    reader = ShardReader(intact)
    result = _load(opensearch_url, corpus, intact, index_name)
    assert result.exit_code == 0, result.output
    sentences = sentences_index_name(index_name)
    stored = (_count(opensearch, index_name), _count(opensearch, sentences))
    assert stored == (reader.counts["blocks"], reader.counts["sentences"])
    # The summary counts what was stored.
    assert f"({stored[0]} blocks, {stored[1]} sentences)" in result.output

    cut = _copy(encoded, tmp_path, "cut")
    (cut / "shard-00001.blocks.parquet").write_bytes((cut / "shard-00001.blocks.parquet").read_bytes()[:1000])
    swapped = _copy(encoded, tmp_path, "swapped-files")
    for kind in ("blocks", "sentences"):
        a, b = (swapped / f"shard-0000{n}.{kind}.parquet" for n in (0, 1))
        a.rename(swapped / "x")
        b.rename(a)
        (swapped / "x").rename(b)
    reordered = _copy(encoded, tmp_path, "swapped-entries")
    manifest = _manifest(reordered)
    manifest["shards"][:2] = manifest["shards"][1::-1]
    _save_manifest(reordered, manifest)
    edited = _copy(encoded, tmp_path, "edited")
    _rewrite(edited, 2, "sentences", lambda t: _column(t, "text", [INJECTED, *t.column("text").to_pylist()[1:]]))
    for folder, expected in ((cut, "is 1000 bytes"), (swapped, "it was cut short or changed"),
                             (reordered, "hold no document"), (edited, "are not those of its input")):
        _refused(_load(opensearch_url, corpus, folder, index_name, "--recreate"), expected)
        assert (_count(opensearch, index_name), _count(opensearch, sentences)) == stored, folder.name
