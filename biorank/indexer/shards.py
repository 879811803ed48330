"""Vectors made apart from the cluster: ``biorank encode`` writes them as Parquet shards, ``biorank index --vectors``
loads them without an encoder.

A folder of vectors holds ``manifest.json`` and, per shard, ``shard-NNNNN.blocks.parquet`` and
``shard-NNNNN.sentences.parquet``: every block (its text, word pieces and vector) and every sentence (its section,
number, BioASQ offsets, text and vector) of the documents of a run of consecutive input batches. The input is read,
split and blocked by the indexer's own functions (:func:`~biorank.indexer.batches.read_batches`,
:func:`~biorank.indexer.indexer.encode_records`), so the shards hold exactly what ``biorank index`` would write.

The manifest says what the vectors are valid for — the encoder's identity as the index records it, its window
(hence the block budget), the reader settings, the SHA-256 of every input file in order — and which shards are
finished. A shard is written to a temporary name and renamed, then recorded in the manifest (itself replaced
whole), so ``encode`` killed at any point resumes at the first unrecorded shard and never writes a document
twice. ``index --vectors`` reads the same input files again (their records, rejects and PubMed withdrawals are
the indexer's as ever) and takes each document's blocks and sentences from the shards in input order, checking
its content hash; files, settings or an encoder other than the manifest's are refused in one line.

Nothing in the folder is taken on trust before the run changes anything (:meth:`ShardReader.check`, which the
indexer calls before it creates or deletes an index): the manifest is checked against the schema ``encode``
writes (every shard a plain file name inside the folder), every shard file against the size and SHA-256 its
manifest entry recorded, against this layout's columns at the manifest's dimension, its row counts and finite
vectors, and every document's block numbers, block texts and sentences against what the indexer itself derives
from the input files. Only what the indexer cannot derive without the encoder — the vectors and word pieces —
comes from the shards, guarded by their SHA-256 against damage on the way. Every refusal is one line
(:class:`~biorank.indexer.manifest.ShardMismatch`); the manifest's own check is :mod:`biorank.indexer.manifest`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biorank.config import biorank_version
from biorank.downloads import sha256_of
from biorank.indexer.batches import IndexOptions, IndexReport, RejectsFile, open_readers, read_batches
from biorank.indexer.blocks import Block
from biorank.indexer.indexer import EncodedDocument, ModelIdentity, content_hash, encode_records
from biorank.indexer.manifest import KINDS, LAYOUT, MANIFEST, ShardMismatch, read_manifest
from biorank.indexer.sentences import ABSTRACT, sentences_of
from biorank.models.extras import require
from biorank.types import Abstract, Advance, Sentence

if TYPE_CHECKING:
    import numpy as np
    from opensearchpy import OpenSearch

    from biorank.models.encoder import Encoder

DEFAULT_SHARD_DOCUMENTS = 4096
"""Documents per shard (rounded up to whole batches): ~60 MB with sentences at 384 dimensions."""
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
    require("pyarrow", "vectors", "writing vector shards (biorank encode)")
    started = time.monotonic()
    options = options or IndexOptions()
    paths, out = [Path(p) for p in paths], Path(out)
    # A missing or unreadable file, or an unknown format, stops the run before anything is written.
    readers = open_readers(paths, options)
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
    files = {}
    for kind, columns, parts in (("blocks", blocks, block_vectors), ("sentences", sentences, sentence_vectors)):
        table = pa.table({**columns, "embedding": vectors(parts)}, schema=_schema(kind, identity.dimension))
        path = out / f"{name}.{kind}.parquet"
        partial = path.with_name(path.name + ".tmp")
        pq.write_table(table, partial)
        # What a load checks first: a shard cut short or changed on its way to the cluster is refused by these.
        files[kind] = {"bytes": partial.stat().st_size, "sha256": sha256_of(partial)}
        os.replace(partial, path)
    counts = {"documents": len(documents), "blocks": len(blocks["doc"]), "sentences": len(sentences["doc"])}
    manifest["shards"].append({"name": name, "batches": len(batches), **counts, "files": files})
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
        folder: the folder of shards; its manifest is read and checked at once (:func:`read_manifest`).

    Example:
        >>> vectors = ShardReader(Path("vectors"))  # doctest: +SKIP
        >>> Indexer(client, IndexOptions(index="scifact"), vectors=vectors).run(["corpus.jsonl"])  # doctest: +SKIP
    """

    def __init__(self, folder: str | Path) -> None:
        require("pyarrow", "vectors", "reading vector shards (index --vectors)")
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        if not self.manifest["complete"]:
            raise ShardMismatch(f"{self.folder} is not finished ({len(self.manifest['shards'])} shards so far): run "
                                "the same `biorank encode` again to finish it")
        self._cursor: Iterator[tuple[str, str, str, EncodedDocument]] = iter(())

    @property
    def identity(self) -> ModelIdentity:
        return ModelIdentity(**self.manifest["model"])

    @property
    def counts(self) -> dict[str, int]:
        """Documents, blocks and sentences in the shards."""
        return self.manifest["counts"]

    @property
    def unhashed(self) -> int:
        """Shards whose manifest entry records no size and SHA-256 (written by a biorank that did not record
        them). They are accepted with every other check rather than refused: their structure, counts, dimension,
        finite values and texts are still checked (a truncated file fails to parse), so only damage to a vector
        that leaves all of that intact goes unseen, while refusing would ask for the encoding this folder exists
        to save."""
        return sum("files" not in shard for shard in self.manifest["shards"])

    def check(self, paths: list[Path], options: IndexOptions) -> None:
        """Refuse (:class:`ShardMismatch`, one line) other input files than the vectors were made from — by
        SHA-256, in order — or other reader settings; then read every shard through against the input (see
        :meth:`_check_input`), so a damaged or edited folder is refused before the run creates, deletes or writes
        anything; and start reading from the first shard."""
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
        self._check_input(paths, options)
        self._cursor = self._documents()

    def check_index(self, client: OpenSearch, index: str) -> None:
        """Refuse (one line) an existing ``index`` whose vectors have another dimension than the shards': the
        cluster would refuse every document. Where the index does not exist, or is recreated, nothing is read."""
        from biorank.store.record import read_record

        if client.indices.exists(index=index):
            stored = read_record(client, index).dimension
            if stored not in (None, self.identity.dimension):
                raise ShardMismatch(f"index {index!r} holds {stored}-dimensional vectors, those in {self.folder} "
                                    f"have {self.identity.dimension}; index them into another --index, or --recreate")

    def documents(self, records: list[Abstract], hashes: dict[str, str]) -> list[EncodedDocument]:
        """Each of ``records`` (in input order) as the shards hold it; the documents between them (in the index
        already) are passed over.

        Only ids and content hashes are checked here: :meth:`check` compared every document's texts with the input
        before the run, and each shard read again is checked against its SHA-256, so the segmenter is not run a
        second time per document on the load's hot path."""
        found = []
        for record in records:
            entry = next((e for e in self._cursor if e[1] == record.id), None)
            if entry is None:
                raise ShardMismatch(f"the vectors in {self.folder} hold no document {record.id!r} at this point of "
                                    "the input; encode it again")
            self._check_hash(entry[1], entry[2], hashes[record.id])
            found.append(entry[3])
        return found

    def _check_input(self, paths: list[Path], options: IndexOptions) -> None:
        """Read the input as the run will (the same readers, settings and batches) beside every shard, and refuse
        the first document that is not the input's next, whose content hash, block numbers, block texts or
        sentences are not those the indexer derives from the input, or a shard left over at the end.

        The input is streamed (one batch at a time) and the shards read one at a time, so this costs a second
        reading of both and no more memory than the run."""
        readers = open_readers(paths, options)
        model = self.identity.name
        documents = self._documents()
        for batch in read_batches(readers, options, IndexReport(), _Unrecorded()):
            for record in batch.records:
                entry = next(documents, None)
                if entry is None or entry[1] != record.id:
                    raise ShardMismatch(f"the vectors in {self.folder} hold no document {record.id!r} at this point "
                                        "of the input; encode it again")
                self._check_document(record, content_hash(record, model=model, with_sentences=options.sentences),
                                     *entry)
        extra = next(documents, None)
        if extra is not None:
            raise ShardMismatch(f"the vectors in {self.folder} hold documents the input does not give (from "
                                f"{extra[1]!r} in {extra[0]} on); encode again")

    def _check_document(self, record: Abstract, expected: str, shard: str, doc_id: str, digest: str,
                        doc: EncodedDocument) -> None:
        """Refuse ``doc`` unless it was encoded from ``record`` (its content hash ``expected``) and its blocks and
        sentences are those the indexer derives from it: texts, numbers and offsets, so an edited shard can put no
        text in the index that its input does not hold."""
        self._check_hash(doc_id, digest, expected)
        sentences = sentences_of(record)
        abstract = [s.text for s in sentences if s.section == ABSTRACT]
        if not _cut_from([b.text for b in doc.blocks], record.title.strip(), abstract):
            raise ShardMismatch(f"the blocks of document {doc_id!r} in {shard} of {self.folder} are not its title and "
                                "abstract as the input gives them (edited?); encode again")
        if doc.sentences != (sentences if self.manifest["reader"]["sentences"] else []):
            raise ShardMismatch(f"the sentences of document {doc_id!r} in {shard} of {self.folder} are not those of "
                                "its input (their text, numbers or offsets differ: edited?); encode again")

    def _check_hash(self, doc_id: str, digest: str, expected: str) -> None:
        if digest != expected:
            raise ShardMismatch(f"document {doc_id!r} in {self.folder} was encoded from other content or "
                                "settings; encode it again")

    def _documents(self) -> Iterator[tuple[str, str, str, EncodedDocument]]:
        """Every document of the shards in order: (shard, id, content hash, document), each shard refused first
        unless it is whole and well-formed (:meth:`_read_shard`) and its documents' blocks numbered 0, 1, …"""
        dimension = self.identity.dimension
        for shard in self.manifest["shards"]:
            name = shard["name"]
            blocks, sentences = self._read_shard(shard)
            block_vectors, sentence_vectors = (_matrix(t, dimension) for t in (blocks, sentences))
            b_rows, s_rows = (t.drop(["embedding"]).to_pydict() for t in (blocks, sentences))
            b = s = 0
            for ordinal in range(shard["documents"]):
                b_start, s_start = b, s
                while b < len(b_rows["doc"]) and b_rows["doc"][b] == ordinal:
                    b += 1
                while s < len(s_rows["doc"]) and s_rows["doc"][s] == ordinal:
                    s += 1
                if b == b_start:
                    raise ShardMismatch(f"{name} in {self.folder} holds no block of its document {ordinal} (its "
                                        f"manifest says {shard['documents']} documents, or its rows are out of "
                                        "order); encode again")
                doc_id, digest = b_rows["doc_id"][b_start], b_rows["content_hash"][b_start]
                if b_rows["number"][b_start:b] != list(range(b - b_start)) or \
                        any(b_rows["doc_id"][i] != doc_id or b_rows["content_hash"][i] != digest
                            for i in range(b_start, b)):
                    raise ShardMismatch(f"the blocks of document {doc_id!r} in {name} of {self.folder} are not "
                                        f"numbered 0 to {b - b_start - 1} in order under one id; encode again")
                doc = EncodedDocument(
                    doc_id,
                    [Block(b_rows["number"][i], b_rows["text"][i], tuple(b_rows["wordpieces"][i]))
                     for i in range(b_start, b)],
                    block_vectors[b_start:b],
                    [Sentence(s_rows["doc_id"][i], s_rows["section"][i], s_rows["number"][i], s_rows["begin"][i],
                              s_rows["end"][i], s_rows["text"][i]) for i in range(s_start, s)],
                    sentence_vectors[s_start:s],
                )
                yield name, doc_id, digest, doc
            if b < len(b_rows["doc"]) or s < len(s_rows["doc"]):
                raise ShardMismatch(f"{name} in {self.folder} holds rows past its {shard['documents']} documents, or "
                                    "out of order; encode again")

    def _read_shard(self, shard: dict[str, Any]) -> tuple[Any, Any]:
        """The blocks and sentences tables of ``shard``, each refused in one line unless its file is the one the
        manifest recorded (size and SHA-256, where recorded), a Parquet file of this layout's columns at the
        manifest's dimension, with the rows the manifest counts, no empty values, and finite vectors."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        dimension = self.identity.dimension
        tables = []
        for kind in KINDS:
            path = self.folder / f"{shard['name']}.{kind}.parquet"
            where = f"{path.name} in {self.folder}"
            try:
                # Read once: the bytes hashed are the bytes parsed.
                data = path.read_bytes()
            except FileNotFoundError:
                raise ShardMismatch(f"{where} is missing; copy the whole folder again, or encode again") from None
            except OSError as e:
                raise ShardMismatch(f"{where} cannot be read ({e.strerror or e}); copy the whole folder again, or "
                                    "encode again") from None
            recorded = shard.get("files", {}).get(kind)
            if recorded is not None and len(data) != recorded["bytes"]:
                raise ShardMismatch(f"{where} is {len(data)} bytes, its manifest says {recorded['bytes']}: it was cut "
                                    "short or changed; copy it again, or encode again")
            if recorded is not None and hashlib.sha256(data).hexdigest() != recorded["sha256"]:
                raise ShardMismatch(f"{where} is not the file `biorank encode` wrote (its SHA-256 differs from its "
                                    "manifest's): it was damaged or changed; copy it again, or encode again")
            try:
                table = pq.read_table(pa.BufferReader(data))
            except (pa.ArrowException, OSError, ValueError) as e:
                reason = (str(e).splitlines() or [type(e).__name__])[0][:120]
                raise ShardMismatch(f"{where} is not a readable Parquet file ({reason}); copy it again, or encode "
                                    "again") from None
            expected = _schema(kind, dimension)
            if not table.schema.equals(expected):
                vectors = table.schema.field("embedding").type if "embedding" in table.schema.names else None
                if vectors is not None and pa.types.is_fixed_size_list(vectors) and vectors.list_size != dimension:
                    raise ShardMismatch(f"{where} holds vectors of {vectors.list_size} dimensions, its manifest says "
                                        f"{dimension}; encode again")
                raise ShardMismatch(f"{where} does not have the columns `biorank encode` writes; encode again")
            if table.num_rows != shard[kind]:
                raise ShardMismatch(f"{shard['name']} in {self.folder} holds {table.num_rows} {kind}, its manifest "
                                    f"says {shard[kind]}; encode again")
            nested = [pc.list_flatten(table.column(c)) for c in ("wordpieces", "embedding") if c in table.schema.names]
            if any(column.null_count for column in [*table.columns, *nested]):
                raise ShardMismatch(f"{where} has empty values where `biorank encode` writes none; encode again")
            finite = np.isfinite(_matrix(table, dimension)).all(axis=1)
            if not finite.all():
                doc_id = table.column("doc_id")[int(np.argmin(finite))].as_py()
                raise ShardMismatch(f"{where} holds a vector of document {doc_id!r} that is not finite (NaN or "
                                    "infinity), which no index can take; encode again")
            tables.append(table)
        return tables[0], tables[1]


class _Unrecorded:
    """A rejects file that keeps nothing: the check reads the input as the run will, and the run reports the
    rejects."""

    def write(self, *_: object) -> None:
        return None


def _cut_from(texts: list[str], title: str, sentences: list[str]) -> bool:
    """Whether ``texts`` are blocks :func:`~biorank.indexer.blocks.make_blocks` can cut from ``title`` and the
    abstract's ``sentences``: each the title and the next one or more whole sentences, all of them used once, in
    order (a document without sentences is one block of its title). Where each block ends depends on the
    tokenizer, which a load has not, so any such grouping is accepted; no other text is."""
    if not sentences:
        return texts == [title]
    used = 0
    for text in texts:
        candidate, taken = title, 0
        # Each sentence makes the block longer, so the block ends where its length is reached.
        while used < len(sentences) and len(candidate.strip()) < len(text):
            candidate, used, taken = f"{candidate} {sentences[used]}", used + 1, taken + 1
        if not taken or candidate.strip() != text:
            return False
    return used == len(sentences)


def _matrix(table: Any, dimension: int) -> np.ndarray:
    column = table.column("embedding").combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False).reshape(-1, dimension)
