"""Vectors made apart from the cluster: ``biorank encode`` writes them as Parquet shards, ``biorank index --vectors``
loads them without an encoder.

A folder of vectors holds ``manifest.json`` and, per shard, ``shard-NNNNN.blocks.parquet`` and
``shard-NNNNN.sentences.parquet``: every block (its text, word pieces and vector) and every sentence (its section,
number, BioASQ offsets, text and vector) of the documents of a run of consecutive input batches. The input is read,
split and blocked by the indexer's own functions (:func:`~biorank.indexer.indexer.read_batches`,
:func:`~biorank.indexer.indexer.encode_records`), so the shards hold exactly what ``biorank index`` would write.

The manifest says what the vectors are valid for — the encoder's identity as the index records it, its window
(hence the block budget), the reader settings, the SHA-256 of every input file in order — and which shards are
finished. A shard is written to a temporary name and renamed, then recorded in the manifest (itself replaced
whole), so ``encode`` killed at any point resumes at the first unrecorded shard and never writes a document
twice. ``index --vectors`` reads the same input files again (their records, rejects and PubMed withdrawals are
the indexer's as ever) and takes each document's blocks and sentences from the shards in input order, checking
its content hash; files, settings or an encoder other than the manifest's are refused in one line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.config import biorank_version
from biorank.downloads import sha256_of
from biorank.errors import BiorankError
from biorank.indexer.blocks import Block
from biorank.indexer.indexer import (
    EncodedDocument,
    IndexOptions,
    IndexReport,
    ModelIdentity,
    RejectsFile,
    content_hash,
    encode_records,
    read_batches,
)
from biorank.indexer.readers import read_records
from biorank.types import Abstract, Advance, Sentence

if TYPE_CHECKING:
    import numpy as np

    from biorank.models.encoder import Encoder

MANIFEST = "manifest.json"
LAYOUT = 1
"""The version of this folder layout: a reader refuses another."""
DEFAULT_SHARD_DOCUMENTS = 4096
"""Documents per shard (rounded up to whole batches): ~60 MB with sentences at 384 dimensions."""


class ShardMismatch(BiorankError):
    """Vectors that do not belong to this input, these settings or this index; or a folder that is not one."""


@dataclass
class EncodeReport(IndexReport):
    """The counts of an ``encode`` run, as an index run counts them: ``indexed`` the documents this run encoded,
    ``unchanged`` those of the shards an interrupted run had finished (skipped), and the shards this run wrote."""

    shards: int = 0


def reader_settings(options: IndexOptions) -> dict[str, Any]:
    """What decides which records are read and how they are batched: equal settings read the same batches."""
    return {"format": options.format, "id_field": options.id_field, "title_field": options.title_field,
            "text_field": options.text_field, "max_record_bytes": options.max_record_bytes,
            "sentences": options.sentences, "batch_size": options.batch_size}


def _inputs(paths: list[Path]) -> list[dict[str, Any]]:
    return [{"name": p.name, "bytes": p.stat().st_size, "sha256": sha256_of(p)} for p in paths]


def _write_json(path: Path, value: dict) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(value, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(partial, path)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a folder of vectors, refused in one line when it is missing, unreadable or of another
    layout."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardMismatch(f"{folder} holds no {MANIFEST}: it is not a folder written by `biorank encode`") from None
    except (OSError, ValueError) as e:
        raise ShardMismatch(f"{folder / MANIFEST} cannot be read ({e}); encode again into a new folder") from None
    if not isinstance(manifest, dict) or manifest.get("layout") != LAYOUT:
        raise ShardMismatch(f"{folder / MANIFEST} is not of layout {LAYOUT}, which this biorank reads; encode again "
                            "with this version")
    return manifest


def encode_corpus(paths: Iterable[str | Path], out: str | Path, encoder: Encoder, options: IndexOptions | None = None,
                  *, shard_documents: int = DEFAULT_SHARD_DOCUMENTS, progress: Advance | None = None) -> EncodeReport:
    """Read, split, block and encode ``paths`` as ``biorank index`` would, and write the result into ``out`` as
    Parquet shards with a manifest; no cluster is needed.

    Args:
        paths: the input files, in order.
        out: the folder of shards (created; a folder of an interrupted run of the same input is resumed).
        encoder: the passage encoder.
        options: the reader settings, ``sentences`` and ``batch_size`` (the index name is not used);
            ``rejects`` defaults to ``out/rejects.tsv``.
        shard_documents: documents per shard, rounded up to whole batches.
        progress: called with the number of records done since its last call.

    Returns:
        The counts of the run.

    Example:
        >>> encode_corpus(["corpus.jsonl"], "vectors/", Encoder()).indexed  # doctest: +SKIP
        5183
    """
    started = time.monotonic()
    options = options or IndexOptions()
    paths, out = [Path(p) for p in paths], Path(out)
    # A missing or unreadable file, or an unknown format, stops the run before anything is written.
    readers = [(p, read_records(p, options.format, id_field=options.id_field, title_field=options.title_field,
                                text_field=options.text_field)) for p in paths]
    identity = ModelIdentity.of(encoder)
    manifest = {
        "layout": LAYOUT, "biorank": biorank_version(), "model": asdict(identity),
        "block_tokens": identity.block_tokens, "reader": reader_settings(options), "inputs": _inputs(paths),
        "shard_batches": max(1, -(-shard_documents // options.batch_size)), "shards": [], "complete": False,
    }
    out.mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST).exists():
        earlier = read_manifest(out)
        for key in ("model", "block_tokens", "reader", "inputs", "shard_batches"):
            if earlier.get(key) != manifest[key]:
                # The input files' list can be long: name what differs, not the values.
                values = "" if key == "inputs" else f": {earlier.get(key)} there, {manifest[key]} here"
                raise ShardMismatch(f"{out} holds vectors of another run (the {key.replace('_', ' ')} differ"
                                    f"{values}); choose another --out or delete it")
        manifest["shards"] = earlier["shards"]
    finished = sum(s["batches"] for s in manifest["shards"])
    report = EncodeReport(unchanged=sum(s["documents"] for s in manifest["shards"]))
    rejects = RejectsFile(options.rejects or out / "rejects.tsv")
    pending: list[tuple[list[Abstract], list[EncodedDocument]]] = []
    number = 0  # batches with documents: a file's last batch may have none, a batch of withdrawals has none
    try:
        for batch in read_batches(readers, options, report, rejects):
            if batch.records and number >= finished:
                pending.append((batch.records, encode_records(encoder, batch.records,
                                                              with_sentences=options.sentences)))
                if len(pending) == manifest["shard_batches"]:
                    _finish_shard(out, manifest, pending, identity, report)
                    pending = []
            number += bool(batch.records)
            if progress is not None:
                progress(len(batch.records) + len(batch.deletions))
        if pending:
            _finish_shard(out, manifest, pending, identity, report)
    finally:
        rejects.close()
    manifest["complete"] = True
    manifest["counts"] = {key: sum(s[key] for s in manifest["shards"])
                          for key in ("documents", "blocks", "sentences")}
    _write_json(out / MANIFEST, manifest)
    report.seconds = time.monotonic() - started
    report.rejects_file = rejects.path if rejects.used else None
    return report


def _finish_shard(out: Path, manifest: dict, batches: list[tuple[list[Abstract], list[EncodedDocument]]],
                  identity: ModelIdentity, report: EncodeReport) -> None:
    """Write one shard (each file under a temporary name, then renamed) and record it in the manifest."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    with_sentences = manifest["reader"]["sentences"]
    blocks: dict[str, list] = {k: [] for k in ("doc", "doc_id", "content_hash", "number", "text", "wordpieces")}
    sentences: dict[str, list] = {k: [] for k in ("doc", "doc_id", "section", "number", "begin", "end", "text")}
    block_vectors, sentence_vectors = [], []
    documents = [(r, d) for records, encoded in batches for r, d in zip(records, encoded, strict=True)]
    for ordinal, (record, doc) in enumerate(documents):
        digest = content_hash(record, model=identity.name, with_sentences=with_sentences)
        for b in doc.blocks:
            for key, value in zip(blocks, (ordinal, doc.id, digest, b.number, b.text, list(b.wordpieces)),
                                  strict=True):
                blocks[key].append(value)
        for s in doc.sentences:
            for key, value in zip(sentences, (ordinal, s.doc_id, s.section, s.number, s.begin, s.end, s.text),
                                  strict=True):
                sentences[key].append(value)
        block_vectors.append(doc.block_vectors)
        sentence_vectors.append(doc.sentence_vectors)

    def vectors(parts: list[np.ndarray]) -> pa.Array:
        flat = np.concatenate([np.asarray(p, dtype=np.float32).reshape(-1) for p in parts]) if parts else \
            np.zeros(0, dtype=np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), identity.dimension)

    name = f"shard-{len(manifest['shards']):05d}"
    for kind, columns, parts in (("blocks", blocks, block_vectors), ("sentences", sentences, sentence_vectors)):
        table = pa.table({**columns, "embedding": vectors(parts)}, schema=_schema(kind, identity.dimension))
        path = out / f"{name}.{kind}.parquet"
        partial = path.with_name(path.name + ".tmp")
        pq.write_table(table, partial)
        os.replace(partial, path)
    counts = {"documents": len(documents), "blocks": len(blocks["doc"]), "sentences": len(sentences["doc"])}
    manifest["shards"].append({"name": name, "batches": len(batches), **counts})
    _write_json(out / MANIFEST, manifest)
    report.shards += 1
    report.indexed += counts["documents"]
    report.blocks += counts["blocks"]
    report.sentences += counts["sentences"]


def _schema(kind: str, dimension: int) -> Any:
    import pyarrow as pa

    common = [("doc", pa.int64()), ("doc_id", pa.string())]
    if kind == "blocks":
        fields = [*common, ("content_hash", pa.string()), ("number", pa.int32()), ("text", pa.string()),
                  ("wordpieces", pa.list_(pa.string()))]
    else:
        fields = [*common, ("section", pa.string()), ("number", pa.int32()), ("begin", pa.int32()),
                  ("end", pa.int32()), ("text", pa.string())]
    return pa.schema([*fields, ("embedding", pa.list_(pa.float32(), dimension))])


class ShardReader:
    """The vectors of a folder ``biorank encode`` finished, read shard by shard in input order: an
    :class:`~biorank.indexer.indexer.Indexer`'s ``vectors`` in place of an encoder.

    Args:
        folder: the folder of shards.

    Example:
        >>> vectors = ShardReader(Path("vectors"))  # doctest: +SKIP
        >>> Indexer(client, IndexOptions(index="scifact"), vectors=vectors).run(["corpus.jsonl"])  # doctest: +SKIP
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        if not self.manifest.get("complete"):
            raise ShardMismatch(f"{self.folder} is not finished ({len(self.manifest['shards'])} shards so far): run "
                                "the same `biorank encode` again to finish it")
        self._cursor: Iterator[tuple[str, str, EncodedDocument]] = iter(())

    @property
    def identity(self) -> ModelIdentity:
        return ModelIdentity(**self.manifest["model"])

    @property
    def counts(self) -> dict[str, int]:
        """Documents, blocks and sentences in the shards."""
        return self.manifest["counts"]

    def check(self, paths: list[Path], options: IndexOptions) -> None:
        """Refuse (:class:`ShardMismatch`, one line) other input files than the vectors were made from — by
        SHA-256, in order — or other reader settings; and start reading from the first shard."""
        made = self.manifest["inputs"]
        if len(paths) != len(made):
            raise ShardMismatch(f"the vectors in {self.folder} were made from {len(made)} files "
                                f"({', '.join(m['name'] for m in made)}), not {len(paths)}; give the same files in "
                                "the same order")
        for path, entry in zip(paths, made, strict=True):
            if path.stat().st_size != entry["bytes"] or sha256_of(path) != entry["sha256"]:
                raise ShardMismatch(f"{path} is not the file the vectors in {self.folder} were made from "
                                    f"({entry['name']}: its SHA-256 differs); encode it again")
        for key, value in reader_settings(options).items():
            if self.manifest["reader"][key] != value:
                raise ShardMismatch(f"the vectors in {self.folder} were made with {key.replace('_', ' ')} "
                                    f"{self.manifest['reader'][key]!r}, this run reads with {value!r}; use the same "
                                    "settings, or encode again")
        self._cursor = self._documents()

    def documents(self, records: list[Abstract], hashes: dict[str, str]) -> list[EncodedDocument]:
        """Each of ``records`` (in input order) as the shards hold it; the documents between them (in the index
        already) are passed over."""
        found = []
        for record in records:
            entry = next((e for e in self._cursor if e[0] == record.id), None)
            if entry is None:
                raise ShardMismatch(f"the vectors in {self.folder} hold no document {record.id!r} at this point of "
                                    "the input; encode it again")
            _, digest, doc = entry
            if digest != hashes[record.id]:
                raise ShardMismatch(f"document {record.id!r} in {self.folder} was encoded from other content or "
                                    "settings; encode it again")
            found.append(doc)
        return found

    def _documents(self) -> Iterator[tuple[str, str, EncodedDocument]]:
        import pyarrow.parquet as pq

        dimension = self.identity.dimension
        for shard in self.manifest["shards"]:
            blocks = pq.read_table(self.folder / f"{shard['name']}.blocks.parquet")
            sentences = pq.read_table(self.folder / f"{shard['name']}.sentences.parquet")
            if (blocks.num_rows, sentences.num_rows) != (shard["blocks"], shard["sentences"]):
                raise ShardMismatch(f"{shard['name']} in {self.folder} holds {blocks.num_rows} blocks and "
                                    f"{sentences.num_rows} sentences, its manifest says {shard['blocks']} and "
                                    f"{shard['sentences']}; encode again")
            block_vectors, sentence_vectors = (_matrix(t, dimension) for t in (blocks, sentences))
            b_rows, s_rows = (t.drop(["embedding"]).to_pydict() for t in (blocks, sentences))
            b = s = 0
            for ordinal in range(shard["documents"]):
                b_start, s_start = b, s
                while b < len(b_rows["doc"]) and b_rows["doc"][b] == ordinal:
                    b += 1
                while s < len(s_rows["doc"]) and s_rows["doc"][s] == ordinal:
                    s += 1
                doc = EncodedDocument(
                    b_rows["doc_id"][b_start],
                    [Block(b_rows["number"][i], b_rows["text"][i], tuple(b_rows["wordpieces"][i]))
                     for i in range(b_start, b)],
                    block_vectors[b_start:b],
                    [Sentence(s_rows["doc_id"][i], s_rows["section"][i], s_rows["number"][i], s_rows["begin"][i],
                              s_rows["end"][i], s_rows["text"][i]) for i in range(s_start, s)],
                    sentence_vectors[s_start:s],
                )
                yield doc.id, b_rows["content_hash"][b_start], doc


def _matrix(table: Any, dimension: int) -> np.ndarray:
    column = table.column("embedding").combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False).reshape(-1, dimension)
